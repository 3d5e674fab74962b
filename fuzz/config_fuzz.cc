// TOML config loading (core/config.h). The input up to the first NUL byte is
// a TOML document; each line after it is a --set override. Every key present
// is then read through every typed accessor (with and without ranges), every
// sub-table and array of tables is walked, and the resolved and document TOML
// must parse again. Only rlid::Error (not InternalError) may be thrown.
#include <toml++/toml.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "fuzz/fuzz_util.h"

namespace rlid::fuzz {
namespace {

// Runs `fn`; a user error is fine, a bug (InternalError, another exception) aborts.
template <class Fn>
void Allowing(Fn&& fn) {
  try {
    fn();
  } catch (const InternalError& e) {
    std::fprintf(stderr, "InternalError: %s\n", e.what());
    FUZZ_CHECK(!"InternalError");
  } catch (const Error&) {
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    FUZZ_CHECK(!"only rlid::Error may be thrown");
  }
}

void ReadEveryWay(ConfigNode node, const std::string& key) {
  Allowing([&] { bool v = false; node.Get(key, v, "doc"); });
  Allowing([&] { int v = 0; node.Get(key, v, "doc"); });
  Allowing([&] { int v = 1; node.Get(key, v, "doc", IntRange::Closed(1, 8)); });
  Allowing([&] { int64_t v = 0; node.Get(key, v, "doc", IntRange::NonNegative()); });
  Allowing([&] { uint64_t v = 0; node.Get(key, v, "doc"); });
  Allowing([&] { uint64_t v = 3; node.Get(key, v, "doc", IntRange::Closed(2, 5)); });
  Allowing([&] { double v = 0; node.Get(key, v, "doc"); });
  Allowing([&] { double v = 0.5; node.Get(key, v, "doc", Range::Unit().OpenHigh()); });
  Allowing([&] { double v = 0; node.Get(key, v, "doc", Range::GreaterThan(1).Or(0)); });
  Allowing([&] { double v = 1; node.Get(key, v, "doc", Range::Positive().AllowInf()); });
  Allowing([&] { std::string v; node.Get(key, v, "doc"); });
  Allowing([&] { std::vector<double> v; node.Get(key, v, "doc", Range::NonNegative()); });
  Allowing([&] { std::vector<int64_t> v; node.Get(key, v, "doc", IntRange::Positive()); });
  Allowing([&] { std::vector<std::string> v; node.Get(key, v, "doc"); });
  Allowing([&] {
    std::string v = "ppo";
    node.GetEnum(key, v, {"ppo", "grpo", "dapo"}, "doc");
  });
  Allowing([&] { (void)node.Has(key), (void)node.Where(key), (void)node.KeyPath(key); });
}

// Visits every key of `table` through `node`, recursing into sub-tables and
// arrays of tables (bounded, as deep documents are legal TOML).
void Walk(ConfigNode node, const toml::table& table, int depth) {
  if (depth > 32) return;
  Allowing([&] { (void)node.PresentKeys(), (void)node.Where(); });
  for (const auto& [k, v] : table) {
    const std::string key(k.str());
    // The re-parsed DocumentToml() must name the keys Config holds.
    if (!node.Has(key)) {
      std::fprintf(stderr, "DocumentToml() key '%s' under '%s' is not in the config\n", key.c_str(),
                   node.path().c_str());
      FUZZ_CHECK(!"DocumentToml() changed a key");
    }
    if (const toml::table* sub = v.as_table()) {
      Allowing([&] { Walk(node.Section(key), *sub, depth + 1); });
    } else if (const toml::array* arr = v.as_array(); arr && arr->is_array_of_tables()) {
      Allowing([&] {
        std::vector<ConfigNode> elems = node.TableArray(key);
        FUZZ_CHECK(elems.size() == arr->size());
        for (size_t i = 0; i < elems.size(); ++i) Walk(elems[i], *arr->get(i)->as_table(), depth + 1);
      });
    } else {
      // Not as a table too: no config struct reads one key both ways.
      ReadEveryWay(node, key);
    }
  }
}

void MustParse(const std::string& toml_text, const char* what) {
  try {
    (void)toml::parse(toml_text);
  } catch (const toml::parse_error& e) {
    std::fprintf(stderr, "%s does not parse: %s\n---\n%s\n---\n", what,
                 std::string(e.description()).c_str(), toml_text.c_str());
    FUZZ_CHECK(!"generated TOML must parse");
  }
}

}  // namespace
}  // namespace rlid::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rlid;
  using namespace rlid::fuzz;
  const std::string_view input = AsText(data, size);
  const size_t nul = input.find('\0');
  const std::string_view doc = input.substr(0, nul);
  std::vector<std::string> overrides;
  if (nul != std::string_view::npos) {
    std::string_view rest = input.substr(nul + 1);
    while (!rest.empty() && overrides.size() < 8) {
      const size_t nl = rest.find('\n');
      overrides.emplace_back(rest.substr(0, nl));
      rest = nl == std::string_view::npos ? std::string_view() : rest.substr(nl + 1);
    }
  }
  Config cfg;
  try {
    cfg = Config::FromString(doc, "fuzz.toml");
  } catch (const ConfigError&) {
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    FUZZ_CHECK(!"FromString may only throw ConfigError");
  }
  for (const auto& o : overrides) Allowing([&] { cfg.ApplyOverride(o); });
  // The document as the accessors see it: the TOML Config holds after overrides.
  const std::string document = cfg.DocumentToml();
  MustParse(document, "DocumentToml()");
  toml::table table;
  try {
    table = toml::parse(document);
  } catch (const toml::parse_error&) {
    return 0;  // reported by MustParse
  }
  Walk(cfg.Root(), table, 0);
  Allowing([&] { cfg.CheckAllUsed(); });
  Allowing([&] { cfg.CheckAllUsed("env"); });
  (void)cfg.UsedKeys();
  MustParse(cfg.ResolvedToml(), "ResolvedToml()");
  return 0;
}

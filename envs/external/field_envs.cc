// The field's benchmark environments: one registered env per adapter folder
// (its manifest read at start-up), built on the external-env client
// (envs/external/external.h). See field_envs.h.
#include "envs/external/field_envs.h"

#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <toml++/toml.h>

#include "core/error.h"
#include "core/registry.h"
#include "core/strings.h"
#include "envs/external/external.h"

#ifndef RLID_SOURCE_DIR
#define RLID_SOURCE_DIR "."
#endif

namespace rlid::envs {
namespace {

using Kind = AdapterKey::Kind;

// "string" | "int" | "double" | "table".
AdapterKey::Kind KeyKind(const std::string& kind, const std::string& key) {
  if (kind == "string") return Kind::kString;
  if (kind == "int") return Kind::kInt;
  if (kind == "double") return Kind::kDouble;
  if (kind == "table") return Kind::kTable;
  throw ConfigError(fmt::format("key '{}' has kind '{}'", key, kind),
                    "use string, int, double or table");
}

std::string RequiredString(const toml::node_view<const toml::node>& v, const std::string& what) {
  if (const auto s = v.value<std::string>()) return *s;
  throw ConfigError(fmt::format("'{}' must be a string", what), "see another adapter's manifest");
}

std::vector<std::string> Strings(const toml::node_view<const toml::node>& v,
                                 const std::string& what) {
  std::vector<std::string> out;
  if (!v) return out;
  const auto* arr = v.as_array();
  if (!arr) throw ConfigError(fmt::format("'{}' must be an array of strings", what), "");
  for (const auto& e : *arr) {
    const auto s = e.value<std::string>();
    if (!s) throw ConfigError(fmt::format("'{}' must be an array of strings", what), "");
    out.push_back(*s);
  }
  return out;
}

// The manifest's fields; ConfigError on anything missing or malformed.
void ParseManifest(const toml::table& m, FieldAdapter& a) {
  a.summary = RequiredString(m["summary"], "summary");
  a.packages = Strings(m["packages"], "packages");
  for (const auto& p : a.packages)
    if (p.find("==") == std::string::npos || p.find("==") == 0)
      throw ConfigError(fmt::format("packages entry '{}' is not package==version", p), "");
  a.one_of_required = Strings(m["one_of_required"], "one_of_required");
  if (const auto* keys = m["keys"].as_array()) {
    for (const auto& k : *keys) {
      const auto* t = k.as_table();
      if (!t) throw ConfigError("each [[keys]] entry must be a table", "");
      AdapterKey key;
      key.name = RequiredString((*t)["name"], "keys.name");
      key.kind = KeyKind(RequiredString((*t)["kind"], "keys.kind"), key.name);
      key.doc = RequiredString((*t)["doc"], "keys.doc");
      a.keys.push_back(std::move(key));
    }
  }
}

std::vector<FieldAdapter> ReadAdapters() {
  std::vector<FieldAdapter> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(AdapterDir(), ec))
    if (e.is_directory() && std::filesystem::exists(e.path() / "adapter.toml"))
      out.push_back(ReadAdapterManifest(e.path().string()));
  std::sort(out.begin(), out.end(),
            [](const FieldAdapter& x, const FieldAdapter& y) { return x.name < y.name; });
  return out;
}

// The adapter's own keys -> hello params (a key left out keeps the adapter's default).
nlohmann::json ReadAdapterKeys(ConfigNode c, const FieldAdapter& a) {
  nlohmann::json params = nlohmann::json::object();
  if (!a.one_of_required.empty() && std::none_of(a.one_of_required.begin(), a.one_of_required.end(),
                                                 [&](const std::string& k) { return c.Has(k); }))
    throw ConfigError(
        fmt::format("{}: [env] name = \"{}\" needs {}", c.Where(a.one_of_required[0]), a.name,
                    a.one_of_required.size() == 1
                        ? "'" + a.one_of_required[0] + "'"
                        : "one of '" + Join(a.one_of_required, "', '") + "'"),
        fmt::format("e.g. --set env.{}=... (docs/field_envs.md, {})", a.one_of_required[0],
                    a.name));
  for (const AdapterKey& k : a.keys) {
    if (!c.Has(k.name)) {
      c.Declare(k.name);  // listed among the valid keys of an unknown-key error
      continue;
    }
    switch (k.kind) {
      case Kind::kString: {
        std::string v;
        c.Get(k.name, v, k.doc);
        params[k.name] = v;
        break;
      }
      case Kind::kInt: {
        int64_t v = 0;
        c.Get(k.name, v, k.doc);
        params[k.name] = v;
        break;
      }
      case Kind::kDouble: {
        double v = 0;
        c.Get(k.name, v, k.doc);
        params[k.name] = v;
        break;
      }
      case Kind::kTable: {
        nlohmann::json v;
        c.GetTable(k.name, v, k.doc);
        params[k.name] = v;
        break;
      }
    }
  }
  return params;
}

std::unique_ptr<Env> MakeAdapterEnv(ConfigNode c, const FieldAdapter& a) {
  ExternalParams p;
  if (!a.error.empty())
    throw ConfigError(fmt::format("env '{}': {}", a.name, a.error),
                      "fix the adapter's manifest (docs/field_envs.md, \"Adding an adapter\")");
  const std::filesystem::path script = a.script;
  if (!std::filesystem::exists(script))
    throw ConfigError(
        fmt::format("env '{}': its adapter {} does not exist", a.name, script.string()),
        "set RLID_ADAPTERS_DIR to the rlid checkout's envs/external/adapters");
  p.command = {AdapterPython(), script.string()};
  // The adapter's own afterstates only: rlid's clone+step would show the outcome of the
  // other seats' and chance's next draws (an adapter sends none where it cannot know them).
  p.afterstates = AfterstateSource::kEnv;
  ReadProcessKeys(c, p);
  p.params = ReadAdapterKeys(c, a);
  return MakeExternalEnv(std::move(p));
}

// Registers every adapter folder at start-up (the registry is how `[env] name`
// finds envs); a broken manifest registers an env that reports it when made.
const bool kRegistered = [] {
  for (const FieldAdapter& a : FieldAdapters()) {
    const std::string summary =
        a.error.empty() ? fmt::format("{} (Python: {})", a.summary, Join(a.packages, ", "))
                        : fmt::format("broken adapter manifest: {}", a.error);
    EnvRegistry::Global().Add(a.name, summary, [a](ConfigNode c) { return MakeAdapterEnv(c, a); });
  }
  return true;
}();

}  // namespace

FieldAdapter ReadAdapterManifest(const std::string& folder) {
  FieldAdapter a;
  const std::filesystem::path dir(folder);
  a.name = dir.filename().string();
  a.script = (dir / "adapter.py").string();
  const std::string manifest = (dir / "adapter.toml").string();
  try {
    ParseManifest(toml::parse_file(manifest), a);
  } catch (const toml::parse_error& e) {
    a.error = fmt::format("{}: {} (line {})", manifest, e.description(), e.source().begin.line);
  } catch (const ConfigError& e) {
    a.error = fmt::format("{}: {}", manifest, e.what());
  }
  return a;
}

const std::vector<FieldAdapter>& FieldAdapters() {
  static const std::vector<FieldAdapter> adapters = ReadAdapters();
  return adapters;
}

std::string AdapterPython() {
  if (const char* p = std::getenv("RLID_ADAPTER_PYTHON"); p && *p) return p;
  const std::filesystem::path venv = std::filesystem::path(RLID_SOURCE_DIR) / ".venv/bin/python";
  if (std::filesystem::exists(venv)) return venv.string();
  return "python3";
}

std::string AdapterDir() {
  if (const char* d = std::getenv("RLID_ADAPTERS_DIR"); d && *d) return d;
  return (std::filesystem::path(RLID_SOURCE_DIR) / "envs/external/adapters").string();
}

}  // namespace rlid::envs

#include "core/config.h"

#include <cctype>

#include <fmt/format.h>
#include <toml++/toml.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/file_io.h"
#include "core/strings.h"
#include "core/utf8.h"

namespace rlid {

struct Config::Impl {
  toml::table doc;
  std::string source;
  std::set<std::string> used;          // full key paths read by a struct
  std::set<std::string> sections;      // declared section paths ("" = root)
  std::set<std::string> table_arrays;  // declared [[arrays]]
  std::set<std::string> wildcard;      // sections marked all-used
  std::set<std::string> overridden;    // paths set by --set
  bool positions = true;               // false: TOML line:column is meaningless
  struct Resolved {
    std::string section, key, value, doc;
  };
  std::vector<Resolved> resolved;
  std::map<std::string, size_t> resolved_index;
  // How ResolvedToml() writes a declared section's table header: its TOML
  // dotted key (components quoted where needed), and for an element of an
  // array of tables ("compare.arm[1]") the array's path and the index, written
  // as the index-th [[compare.arm]] header.
  struct Header {
    std::string key;
    std::string array;
    int index = -1;
    std::string parent;  // the enclosing section's path
  };
  std::map<std::string, Header> headers;
};

namespace {

// Tables and arrays nest at most kMaxNesting levels (dotted keys, [headers], inline values and
// --set paths alike) and a key is at most kMaxKeyBytes long: a ConfigError otherwise, before
// anything recurses that deep. rlid's own configs nest three levels.
constexpr int kMaxNesting = 64;
constexpr size_t kMaxKeyBytes = 1024;

std::string JoinPath(const std::string& a, std::string_view b) {
  return a.empty() ? std::string(b) : a + "." + std::string(b);
}

// A key as TOML writes it: bare when it may be, else a quoted basic string.
std::string TomlKey(std::string_view key) {
  const bool bare = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
           c == '_' || c == '-';
  });
  if (bare) return std::string(key);
  std::string out = "\"";
  for (char c : key) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20 || u == 0x7f) {
      out += fmt::format("\\u{:04X}", u);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// The TOML dotted key of a declared section ("" for the root).
std::string HeaderKey(const Config::Impl& impl, const std::string& section) {
  auto it = impl.headers.find(section);
  return it == impl.headers.end() ? section : it->second.key;
}

std::string JoinKey(const std::string& a, const std::string& b) {
  return a.empty() ? b : a + "." + b;
}

template <class T>
std::string TomlText(const T& v) {
  std::ostringstream os;
  if constexpr (std::is_same_v<T, std::string>) {
    os << toml::value<std::string>(v);
  } else if constexpr (std::is_same_v<T, double>) {
    // Shortest round-trip text ("0.0004", not "0.00040000000000000002"), kept a TOML float.
    std::string t = fmt::format("{}", v);
    if (std::isfinite(v) && t.find_first_of(".eE") == std::string::npos) t += ".0";
    if (std::isinf(v)) t = v > 0 ? "inf" : "-inf";
    if (std::isnan(v)) t = "nan";
    os << t;
  } else if constexpr (std::is_same_v<T, bool>) {
    os << toml::value<T>(v);
  } else {
    os << toml::value<int64_t>(static_cast<int64_t>(v));
  }
  return os.str();
}

template <class T>
std::string TomlArrayText(const std::vector<T>& v) {
  toml::array a;
  for (const auto& x : v) {
    if constexpr (std::is_same_v<T, std::string> || std::is_same_v<T, double>)
      a.push_back(x);  // arrays keep toml++'s formatting
    else
      a.push_back(static_cast<int64_t>(x));
  }
  std::ostringstream os;
  os << a;
  return os.str();
}

const char* TypeName(const toml::node& n) {
  switch (n.type()) {
    case toml::node_type::string:
      return "a string";
    case toml::node_type::integer:
      return "an integer";
    case toml::node_type::floating_point:
      return "a float";
    case toml::node_type::boolean:
      return "a boolean";
    case toml::node_type::array:
      return "an array";
    case toml::node_type::table:
      return "a table";
    default:
      return "a date/time";
  }
}

}  // namespace

Config::Config() : impl_(std::make_unique<Impl>()) { impl_->sections.insert(""); }
Config::~Config() = default;
Config::Config(Config&&) noexcept = default;
Config& Config::operator=(Config&&) noexcept = default;

namespace {

// toml++ writes some keys it reads as invalid TOML (an apostrophe or a tab
// without another special character: a'b = 1), so DocumentToml() could not be
// read back (found by fuzz/config_fuzz). No rlid key needs more than a plain
// name: refuse, on input, any key that does not survive a write and a read.
constexpr const char* kKeyHint =
    "rlid keys are plain names (letters, digits, '_', '-'); check the quoting";

bool KeyRoundTrips(std::string_view key) {
  if (!key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
        return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
      }))
    return true;
  toml::table t;
  t.insert(key, 0);
  std::ostringstream os;
  os << t;
  try {
    const toml::table back = toml::parse(os.str());
    return back.size() == 1 && back.contains(key);
  } catch (const toml::parse_error&) {
    return false;
  }
}

constexpr const char* kNestingHint =
    "rlid configs nest a few levels deep; is this file really a config?";

bool IsBareKeyChar(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '+';
}

// Refuses a dotted key (a.b."c") of more than kMaxNesting segments in TOML text,
// before toml++ builds (and recursively frees) a table per segment: 200k of them overflow
// the stack. Skips strings and comments; outside them a chain of dots is a dotted key, a
// float or a date (a few segments), or invalid TOML.
void RejectDeepDottedKeys(std::string_view text, const std::string& source) {
  size_t line = 1;
  int chain = 0;     // segments of the current dotted chain
  bool dot = false;  // a '.' followed its last segment
  auto segment = [&] {
    chain = dot ? chain + 1 : 1;
    dot = false;
    if (chain > kMaxNesting)
      throw ConfigError(fmt::format("{}:{}: a dotted key has more than {} parts", source, line,
                                    kMaxNesting),
                        kNestingHint);
  };
  const size_t n = text.size();
  for (size_t i = 0; i < n;) {
    const char c = text[i];
    if (c == '#') {
      while (i < n && text[i] != '\n') ++i;
    } else if (c == '"' || c == '\'') {
      const bool basic = c == '"';
      if (text.substr(i, 3) == (basic ? "\"\"\"" : "'''")) {  // multi-line string
        for (i += 3; i < n;) {
          if (basic && text[i] == '\\') {
            i += 2;
          } else if (text[i] == c && text.substr(i, 3) == std::string(3, c)) {
            while (i < n && text[i] == c) ++i;
            break;
          } else {
            line += text[i++] == '\n';
          }
        }
      } else {
        for (++i; i < n && text[i] != c && text[i] != '\n'; ++i) {
          if (basic && text[i] == '\\') ++i;
        }
        if (i < n && text[i] == c) ++i;
      }
      segment();
    } else if (IsBareKeyChar(c)) {
      while (i < n && IsBareKeyChar(text[i])) ++i;
      segment();
    } else if (c == '.') {
      dot = chain > 0;
      ++i;
    } else if (c == ' ' || c == '\t') {
      ++i;
    } else {
      line += c == '\n';
      chain = 0;
      dot = false;
      ++i;
    }
  }
}

// Refuses keys that would not survive a write and a read, keys over kMaxKeyBytes,
// and values nested deeper than kMaxNesting tables and arrays (`depth` is that of
// `node`), so no later recursion over the document runs deep.
void RejectUnwritableKeys(const toml::node& node, const std::string& source, int depth = 0) {
  if (depth > kMaxNesting) {
    throw ConfigError(fmt::format("{}:{}:{}: tables and arrays nest more than {} levels deep",
                                  source, node.source().begin.line, node.source().begin.column,
                                  kMaxNesting),
                      kNestingHint);
  }
  if (const toml::table* t = node.as_table()) {
    for (auto&& [k, v] : *t) {
      const auto& at = k.source().begin.line > 0 ? k.source() : v.source();
      if (k.str().size() > kMaxKeyBytes) {
        throw ConfigError(fmt::format("{}:{}:{}: a key is {} bytes long, more than the {} allowed",
                                      source, at.begin.line, at.begin.column, k.str().size(),
                                      kMaxKeyBytes),
                          kNestingHint);
      }
      if (!KeyRoundTrips(k.str())) {
        throw ConfigError(fmt::format("{}:{}:{}: key {} cannot be written back as TOML", source,
                                      at.begin.line, at.begin.column,
                                      TomlKey(k.str())),
                          kKeyHint);
      }
      RejectUnwritableKeys(v, source, depth + 1);
    }
  } else if (const toml::array* a = node.as_array()) {
    for (const toml::node& v : *a) RejectUnwritableKeys(v, source, depth + 1);
  }
}

}  // namespace

Config Config::FromString(std::string_view text, std::string source_name) {
  Config cfg;
  cfg.impl_->source = source_name;
  RejectDeepDottedKeys(text, source_name);
  try {
    cfg.impl_->doc = toml::parse(text, std::string_view(source_name));
  } catch (const toml::parse_error& e) {
    throw ConfigError(fmt::format("{}:{}:{}: {}", source_name, e.source().begin.line,
                                  e.source().begin.column, e.description()),
                      "fix the TOML syntax at that position");
  }
  RejectUnwritableKeys(cfg.impl_->doc, source_name);
  return cfg;
}

Config Config::FromConverted(std::string_view toml_text, std::string source_name) {
  Config cfg = FromString(toml_text, std::move(source_name));
  cfg.impl_->positions = false;
  return cfg;
}

Config Config::FromFile(const std::string& path) {
  return FromString(ReadRegularFile(path, kMaxConfigBytes, "config file"), path);
}

const std::string& Config::source_name() const { return impl_->source; }

void Config::ApplyOverride(std::string_view assignment) {
  size_t eq = assignment.find('=');
  if (eq == std::string_view::npos || eq == 0)
    throw ConfigError(fmt::format("bad override '{}': expected key.path=value", assignment),
                      "example: --set trainer.loss.clip_high=0.28");
  // TOML text is UTF-8: other bytes would make a key or string the resolved and
  // document TOML cannot write (found by fuzz/config_fuzz).
  if (!IsValidUtf8(assignment))
    throw ConfigError(fmt::format("bad override '{}': not valid UTF-8", assignment),
                      "write keys and values as UTF-8 text");
  std::string path(Trim(assignment.substr(0, eq)));
  std::string value(Trim(assignment.substr(eq + 1)));
  if (path.size() > kMaxKeyBytes * kMaxNesting ||
      std::count(path.begin(), path.end(), '.') >= kMaxNesting)
    throw ConfigError(
        fmt::format("bad override key '{}{}': more than {} parts", path.substr(0, 60),
                    path.size() > 60 ? "..." : "", kMaxNesting),
        "rlid keys nest a few levels deep: write the full path, e.g. trainer.loss.clip_high");
  for (const std::string& part : Split(path, '.'))
    if (!part.empty() && !KeyRoundTrips(part))
      throw ConfigError(
          fmt::format("bad override key {}: {} cannot be written back as TOML", TomlKey(path),
                      TomlKey(part)),
          kKeyHint);
  auto parts = Split(path, '.');
  // No key at all (" = 1") would assign the root itself (found by fuzz/config_fuzz).
  if (path.empty())
    throw ConfigError(fmt::format("bad override '{}': no key before '='", assignment),
                      "example: --set trainer.loss.clip_high=0.28");
  toml::table* t = &impl_->doc;
  std::string sofar;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    sofar = JoinPath(sofar, parts[i]);
    toml::node* n = t->get(parts[i]);
    if (!n) {
      t->insert(parts[i], toml::table{});
      n = t->get(parts[i]);
    }
    if (!n->is_table())
      throw ConfigError(
          fmt::format("override '{}': '{}' is {}, not a table", path, sofar, TypeName(*n)));
    t = n->as_table();
  }
  toml::node_view<toml::node> parsed;
  toml::table holder;
  const std::string text = "v = " + value;
  RejectDeepDottedKeys(text, "--set " + path);
  try {
    holder = toml::parse(std::string_view(text), std::string_view("--set"));
  } catch (const toml::parse_error&) {
    holder = toml::table{};
    holder.insert("v", value);  // not TOML: take the text as a string
  }
  RejectUnwritableKeys(*holder.get("v"), "--set " + path, static_cast<int>(parts.size()));
  t->insert_or_assign(parts.back(), *holder.get("v"));
  impl_->overridden.insert(path);
}

void Config::ApplyOverrides(const std::vector<std::string>& assignments) {
  for (const auto& a : assignments) ApplyOverride(a);
}

ConfigNode Config::Root() { return ConfigNode(impl_.get(), "", &impl_->doc); }

namespace {

// "file:line:col" of a node, "--set a.b" for an overridden path, else the source name.
std::string NodeWhere(const Config::Impl& impl, const toml::node& node, const std::string& full) {
  if (!full.empty() && impl.overridden.count(full)) return fmt::format("--set {}", full);
  if (impl.positions && node.source().begin.line > 0)
    return fmt::format("{}:{}:{}", node.source().path ? *node.source().path : impl.source,
                       node.source().begin.line, node.source().begin.column);
  return impl.source;
}

// A quoted key such as "trainer.lr" is one key whose name contains dots; no
// config struct declares such a name, even when its text equals a declared path.
[[noreturn]] void QuotedDottedKey(const Config::Impl& impl, const toml::node& node,
                                  const std::string& path, const std::string& key) {
  std::string section = path.empty() ? "at the top level" : "in [" + path + "]";
  const std::string full = JoinPath(path, key);
  const size_t dot = key.rfind('.');
  std::string fix;
  if (node.is_table()) {
    fix = fmt::format("write `[{}]` unquoted", full);
  } else if (node.is_array_of_tables()) {
    fix = fmt::format("write `[[{}]]` unquoted", full);
  } else {
    std::ostringstream os;
    node.visit([&](auto&& v) { os << v; });
    // Floats as their shortest round-trip text (0.3, not 0.29999999999999999).
    const std::string value = node.is_floating_point() ? TomlText(*node.value<double>()) : os.str();
    fix = fmt::format("write `[{}]` then `{} = {}`, or `{} = {}` unquoted",
                      JoinPath(path, key.substr(0, dot)), key.substr(dot + 1), value, key, value);
  }
  throw ConfigError(
      fmt::format("{}: unknown key \"{}\" {} (quoted, so its dots are part of the name)",
                  NodeWhere(impl, node, /*full=*/""), key, section),
      fmt::format("a quoted key with dots is one key named '{}'; {}", key, fix));
}

void CheckTable(const Config::Impl& impl, const toml::table& table, const std::string& path) {
  if (impl.wildcard.count(path)) return;
  for (auto&& [k, node] : table) {
    std::string key(k.str());
    std::string full = JoinPath(path, key);
    bool known = false;
    if (key.find('.') != std::string::npos) {  // overrides split at dots: never from --set
      QuotedDottedKey(impl, node, path, key);
    } else if (node.is_table()) {
      known = impl.sections.count(full) > 0;
      if (known) CheckTable(impl, *node.as_table(), full);
    } else if (node.is_array_of_tables() && impl.table_arrays.count(full)) {
      known = true;
      const toml::array& arr = *node.as_array();
      for (size_t i = 0; i < arr.size(); ++i)
        CheckTable(impl, *arr.get(i)->as_table(), fmt::format("{}[{}]", full, i));
    } else {
      known = impl.used.count(full) > 0;
    }
    if (known) continue;
    // Candidates: keys and sections declared directly under `path`.
    std::vector<std::string> candidates;
    auto add_child = [&](const std::string& p) {
      std::string prefix = path.empty() ? "" : path + ".";
      if (!StartsWith(p, prefix)) return;
      std::string rest = p.substr(prefix.size());
      if (rest.empty() || rest.find('.') != std::string::npos) return;
      candidates.push_back(rest);
    };
    for (const auto& p : impl.used) add_child(p);
    for (const auto& p : impl.sections) add_child(p);
    for (const auto& p : impl.table_arrays) add_child(p);
    // Array elements "a[0]" are declared through their base name "a".
    std::string base_path = path;
    std::string where = NodeWhere(impl, node, full);
    std::string section = path.empty() ? "the top level" : "[" + path + "]";
    std::sort(candidates.begin(), candidates.end());
    candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
    throw ConfigError(fmt::format("{}: unknown key '{}'{} in {}", where, full,
                                  DidYouMean(key, candidates), section),
                      candidates.empty()
                          ? "remove it; nothing is configurable there"
                          : fmt::format("valid keys there: {}", Join(candidates, ", ")));
  }
}

}  // namespace

void Config::CheckAllUsed(std::string_view section) const {
  const toml::table* t = &impl_->doc;
  for (const auto& part : section.empty() ? std::vector<std::string>{} : Split(section, '.')) {
    const toml::node* n = t->get(part);
    if (!n || !n->is_table()) return;
    t = n->as_table();
  }
  CheckTable(*impl_, *t, std::string(section));
}

std::vector<std::string> Config::UsedKeys(std::string_view prefix) const {
  std::vector<std::string> out;
  const std::string p = prefix.empty() ? "" : std::string(prefix) + ".";
  for (const auto& k : impl_->used)
    if (p.empty() || StartsWith(k, p)) out.push_back(k);
  return out;
}

std::string Config::ResolvedToml() const {
  // Group by section in order of first appearance.
  std::vector<std::string> order;
  std::map<std::string, std::vector<const Impl::Resolved*>> by_section;
  for (const auto& r : impl_->resolved) {
    if (!by_section.count(r.section)) order.push_back(r.section);
    by_section[r.section].push_back(&r);
  }
  // Root keys first: after a table header they would belong to that table.
  if (auto root = std::find(order.begin(), order.end(), ""); root != order.end())
    std::rotate(order.begin(), root, root + 1);
  std::string out;
  auto add_header = [&](const std::string& key, bool array) {
    out += fmt::format("{}{}{}{}\n", out.empty() ? "" : "\n", array ? "[[" : "[", key,
                       array ? "]]" : "]");
  };
  // Array elements are written in order, each as the next [[header]] (one whose
  // fields were never read as an empty one), before anything inside them. A
  // sub-table read after a later element of its array would attach to that element.
  std::map<std::string, int> array_elements;  // [[headers]] written per array
  std::function<void(const std::string&)> open_elements = [&](const std::string& s) {
    auto h = impl_->headers.find(s);
    if (h == impl_->headers.end()) return;
    open_elements(h->second.parent);
    if (h->second.index < 0) return;
    for (int& n = array_elements[h->second.array]; n <= h->second.index; ++n)
      add_header(h->second.key, true);
  };
  for (const auto& s : order) {
    auto header = impl_->headers.find(s);
    if (header != impl_->headers.end() && header->second.index >= 0) {
      open_elements(s);
    } else if (!s.empty()) {
      if (header != impl_->headers.end()) open_elements(header->second.parent);
      add_header(HeaderKey(*impl_, s), false);
    }
    size_t width = 0;
    for (const auto* r : by_section[s])
      width = std::max(width, TomlKey(r->key).size() + 3 + r->value.size());
    for (const auto* r : by_section[s]) {
      std::string line = fmt::format("{} = {}", TomlKey(r->key), r->value);
      if (!r->doc.empty()) line += std::string(width - line.size() + 2, ' ') + "# " + r->doc;
      out += line + "\n";
    }
  }
  return out;
}

std::map<std::string, std::string> Config::DocumentValues() const {
  std::map<std::string, std::string> out;
  std::function<void(const toml::table&, const std::string&)> walk = [&](const toml::table& t,
                                                                         const std::string& at) {
    for (const auto& [k, node] : t) {
      const std::string path = JoinPath(at, k.str());
      if (const toml::table* sub = node.as_table()) {
        walk(*sub, path);
        continue;
      }
      std::ostringstream os;
      node.visit([&](const auto& v) { os << v; });
      out[path] = os.str();
    }
  };
  walk(impl_->doc, "");
  return out;
}

std::string Config::DocumentToml() const {
  std::ostringstream os;
  os << impl_->doc;
  return os.str();
}

// ---- ConfigNode ---------------------------------------------------------------

std::string ConfigNode::KeyPath(std::string_view key) const { return JoinPath(path_, key); }

namespace {
// The empty key at the top level would be a section with the root's own path
// "": every header and key under it would be confused with the root's (found
// by fuzz/config_fuzz). `where` locates the key.
void RejectRootSection(const std::string& full, const std::string& where) {
  if (full.empty())
    throw ConfigError(fmt::format("{}: a table under the empty key \"\" at the top level is not "
                                  "a config section",
                                  where),
                      "name the table: rlid's sections are [run], [env], [policy], [trainer], ...");
}
}  // namespace

const void* ConfigNode::Find(std::string_view key) const {
  impl_->used.insert(KeyPath(key));
  if (!table_) return nullptr;
  return static_cast<toml::table*>(table_)->get(key);
}

std::string ConfigNode::Where(std::string_view key) const {
  std::string full = KeyPath(key);
  if (impl_->overridden.count(full)) return "--set " + full;
  const toml::node* n = nullptr;
  if (table_) {
    n = key.empty() ? static_cast<const toml::node*>(static_cast<toml::table*>(table_))
                    : static_cast<toml::table*>(table_)->get(key);
  }
  if (impl_->positions && n && n->source().begin.line > 0) {
    return fmt::format("{}:{}:{}", n->source().path ? *n->source().path : impl_->source,
                       n->source().begin.line, n->source().begin.column);
  }
  return impl_->source.empty() ? "<config>" : impl_->source;
}

void ConfigNode::Record(std::string_view key, std::string toml_value, std::string_view doc) const {
  std::string full = KeyPath(key);
  auto it = impl_->resolved_index.find(full);
  if (it != impl_->resolved_index.end()) {
    impl_->resolved[it->second].value = std::move(toml_value);
    return;
  }
  impl_->resolved_index[full] = impl_->resolved.size();
  impl_->resolved.push_back({path_, std::string(key), std::move(toml_value), std::string(doc)});
}

namespace {

[[noreturn]] void TypeMismatch(const ConfigNode& n, std::string_view key, const char* expected,
                               const toml::node& got) {
  throw ConfigError(fmt::format("{}: '{}' must be {}, found {}", n.Where(key), n.KeyPath(key),
                                expected, TypeName(got)));
}

int64_t ReadInt(const ConfigNode& n, std::string_view key, const toml::node& node) {
  auto v = node.value_exact<int64_t>();
  if (!v) TypeMismatch(n, key, "an integer", node);
  return *v;
}

double ReadDouble(const ConfigNode& n, std::string_view key, const toml::node& node) {
  if (auto v = node.value_exact<double>()) return *v;
  if (auto v = node.value_exact<int64_t>()) return static_cast<double>(*v);
  TypeMismatch(n, key, "a number", node);
}

// `doc` with the range appended ("AdamW beta1, in [0, 1)"); unchanged for an
// unbounded range.
template <class R>
std::string DocWithRange(std::string_view doc, const R& range) {
  if (range.Describe() == R{}.Describe()) return std::string(doc);
  return doc.empty() ? range.Describe() : fmt::format("{}, {}", doc, range.Describe());
}

// "[i]" for element i of an array key, "" for a scalar (i < 0).
std::string Element(int i) { return i < 0 ? "" : fmt::format("[{}]", i); }

// The hint of a range error: "key: doc, range" (or "key: range" without a doc).
template <class R>
std::string RangeHint(const ConfigNode& n, std::string_view key, std::string_view shown_doc,
                      const R& range) {
  return fmt::format("{}: {}", n.KeyPath(key), shown_doc.empty() ? range.Describe() : shown_doc);
}

// `shown_doc` is the key's doc with its range (the hint of the error).
void CheckDouble(const ConfigNode& n, std::string_view key, double v, const Range& range,
                 std::string_view shown_doc, int element = -1) {
  if (range.Contains(v)) return;
  std::string hint = RangeHint(n, key, shown_doc, range);
  if (!std::isfinite(v) && !(range.allow_inf && std::isinf(v)))
    throw ConfigError(fmt::format("{}: '{}{}' must be a finite number, found {}", n.Where(key),
                                  n.KeyPath(key), Element(element), v),
                      std::move(hint));
  throw ConfigError(fmt::format("{}: '{}{}' must be {}, found {}", n.Where(key), n.KeyPath(key),
                                Element(element), range.Describe(), v),
                    std::move(hint));
}

void CheckInt(const ConfigNode& n, std::string_view key, int64_t v, const IntRange& range,
              std::string_view shown_doc, int element = -1) {
  if (range.Contains(v)) return;
  throw ConfigError(fmt::format("{}: '{}{}' must be {}, found {}", n.Where(key), n.KeyPath(key),
                                Element(element), range.Describe(), v),
                    RangeHint(n, key, shown_doc, range));
}

IntRange Intersect(IntRange a, IntRange b) {
  return {std::max(a.min, b.min), std::min(a.max, b.max)};
}

std::string FormatBound(double x) { return fmt::format("{}", x); }

}  // namespace

bool Range::Contains(double v) const {
  if (has_extra && v == extra) return true;
  if (std::isnan(v) || (std::isinf(v) && !allow_inf)) return false;
  bool above_lo = lo_open ? v > lo : v >= lo;
  bool below_hi = hi_open ? v < hi : v <= hi;
  // An infinite bound is closed when inf is allowed: (0, inf] holds inf.
  if (std::isinf(v) && v == lo) above_lo = true;
  if (std::isinf(v) && v == hi) below_hi = true;
  return above_lo && below_hi;
}

std::string Range::Describe() const {
  const bool has_lo = std::isfinite(lo), has_hi = std::isfinite(hi);
  std::string d;
  if (has_lo && has_hi) {
    d = fmt::format("in {}{}, {}{}", lo_open ? "(" : "[", FormatBound(lo), FormatBound(hi),
                    hi_open ? ")" : "]");
  } else if (has_lo) {
    d = fmt::format("{} {}", lo_open ? ">" : ">=", FormatBound(lo));
  } else if (has_hi) {
    d = fmt::format("{} {}", hi_open ? "<" : "<=", FormatBound(hi));
  } else {
    d = allow_inf ? "a number other than nan" : "a finite number";
  }
  if (allow_inf && (has_lo || has_hi)) d += " (inf allowed)";
  if (has_extra) d = fmt::format("{} or {}", FormatBound(extra), d);
  return d;
}

std::string IntRange::Describe() const {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  if (min != kMin && max != kMax) return fmt::format("in [{}, {}]", min, max);
  if (min != kMin) return fmt::format(">= {}", min);
  if (max != kMax) return fmt::format("<= {}", max);
  return "an integer";
}

void ConfigNode::Get(std::string_view key, bool& value, std::string_view doc) {
  if (auto* p = static_cast<const toml::node*>(Find(key))) {
    auto v = p->value_exact<bool>();
    if (!v) TypeMismatch(*this, key, "a boolean", *p);
    value = *v;
  }
  Record(key, TomlText(value), doc);
}

void ConfigNode::Get(std::string_view key, int& value, std::string_view doc, IntRange range) {
  const std::string shown = DocWithRange(doc, range);
  int64_t v = value;
  if (auto* p = static_cast<const toml::node*>(Find(key))) v = ReadInt(*this, key, *p);
  CheckInt(*this, key, v, range, shown);  // the stated range first: its message is the useful one
  CheckInt(*this, key, v, Intersect(range, {INT32_MIN, INT32_MAX}), shown);
  value = static_cast<int>(v);
  Record(key, TomlText(value), shown);
}

void ConfigNode::Get(std::string_view key, int64_t& value, std::string_view doc, IntRange range) {
  if (auto* p = static_cast<const toml::node*>(Find(key))) value = ReadInt(*this, key, *p);
  const std::string shown = DocWithRange(doc, range);
  CheckInt(*this, key, value, range, shown);
  Record(key, TomlText(value), shown);
}

void ConfigNode::Get(std::string_view key, uint64_t& value, std::string_view doc, IntRange range) {
  const std::string shown = DocWithRange(doc, range);
  const IntRange valid = Intersect(range, IntRange::NonNegative());
  if (auto* p = static_cast<const toml::node*>(Find(key))) {
    int64_t v = ReadInt(*this, key, *p);
    CheckInt(*this, key, v, valid, shown);
    value = static_cast<uint64_t>(v);
  } else if (value <= static_cast<uint64_t>(INT64_MAX)) {
    CheckInt(*this, key, static_cast<int64_t>(value), valid, shown);
  } else if (valid.max != IntRange{}.max) {  // a default beyond int64 fits only an open-ended range
    throw ConfigError(fmt::format("{}: '{}' must be {}, found {}", Where(key), KeyPath(key),
                                  valid.Describe(), value),
                      RangeHint(*this, key, shown, valid));
  }
  Record(key, TomlText(value), shown);
}

void ConfigNode::Get(std::string_view key, double& value, std::string_view doc, Range range) {
  if (auto* p = static_cast<const toml::node*>(Find(key))) value = ReadDouble(*this, key, *p);
  const std::string shown = DocWithRange(doc, range);
  CheckDouble(*this, key, value, range, shown);
  Record(key, TomlText(value), shown);
}

void ConfigNode::Get(std::string_view key, std::string& value, std::string_view doc) {
  if (auto* p = static_cast<const toml::node*>(Find(key))) {
    auto v = p->value_exact<std::string>();
    if (!v) TypeMismatch(*this, key, "a string", *p);
    value = *v;
  }
  Record(key, TomlText(value), doc);
}

namespace {
template <class T, class Read>
void GetArray(ConfigNode& self, std::string_view key, const toml::node* p, std::vector<T>& value,
              Read read) {
  if (!p) return;
  const toml::array* arr = p->as_array();
  if (!arr) TypeMismatch(self, key, "an array", *p);
  std::vector<T> out;
  for (const auto& el : *arr) out.push_back(read(el));
  value = std::move(out);
}
}  // namespace

void ConfigNode::Get(std::string_view key, std::vector<double>& value, std::string_view doc,
                     Range range) {
  GetArray(*this, key, static_cast<const toml::node*>(Find(key)), value,
           [&](const toml::node& el) { return ReadDouble(*this, key, el); });
  const std::string shown = DocWithRange(doc, range);
  for (size_t i = 0; i < value.size(); ++i)
    CheckDouble(*this, key, value[i], range, shown, static_cast<int>(i));
  Record(key, TomlArrayText(value), shown);
}

void ConfigNode::Get(std::string_view key, std::vector<int64_t>& value, std::string_view doc,
                     IntRange range) {
  GetArray(*this, key, static_cast<const toml::node*>(Find(key)), value,
           [&](const toml::node& el) { return ReadInt(*this, key, el); });
  const std::string shown = DocWithRange(doc, range);
  for (size_t i = 0; i < value.size(); ++i)
    CheckInt(*this, key, value[i], range, shown, static_cast<int>(i));
  Record(key, TomlArrayText(value), shown);
}

void ConfigNode::Get(std::string_view key, std::vector<std::string>& value, std::string_view doc) {
  GetArray(*this, key, static_cast<const toml::node*>(Find(key)), value, [&](const toml::node& el) {
    auto v = el.value_exact<std::string>();
    if (!v) TypeMismatch(*this, key, "an array of strings", el);
    return *v;
  });
  Record(key, TomlArrayText(value), doc);
}

void ThrowUnknownMode(std::string_view what, std::string_view name,
                      const std::vector<std::string>& choices) {
  throw ConfigError(
      fmt::format("unknown {} '{}'{}", what, name, DidYouMean(name, choices)),
      fmt::format("valid values: {}", Join(choices, ", ")));
}

void ConfigNode::GetEnum(std::string_view key, std::string& value,
                         const std::vector<std::string>& allowed, std::string_view doc) {
  Get(key, value, fmt::format("{} ({})", doc, Join(allowed, " | ")));
  if (std::find(allowed.begin(), allowed.end(), value) == allowed.end())
    throw ConfigError(fmt::format("{}: '{}' = '{}' is not valid{}", Where(key), KeyPath(key), value,
                                  DidYouMean(value, allowed)),
                      fmt::format("valid values: {}", Join(allowed, ", ")));
}

void ConfigNode::GetTable(std::string_view key, nlohmann::json& value, std::string_view doc) {
  const std::string full = KeyPath(key);
  const toml::table* table = nullptr;
  if (const auto* n = static_cast<const toml::node*>(Find(key))) {
    if (!n->is_table()) TypeMismatch(*this, key, "a table", *n);
    table = n->as_table();
  }
  // Known and used as a whole: CheckAllUsed neither flags it nor looks inside.
  impl_->sections.insert(full);
  impl_->wildcard.insert(full);
  if (table) {
    const toml::table& t = *table;
    std::ostringstream js;
    js << toml::json_formatter{t};
    value = nlohmann::json::parse(js.str());
  }
  // The inline-table text of `value` for the resolved config.
  toml::table holder;
  if (table) {
    toml::table copy = *table;
    std::function<void(toml::table&)> inline_all = [&](toml::table& tt) {
      tt.is_inline(true);
      for (auto&& [k, v] : tt)
        if (auto* nested = v.as_table()) inline_all(*nested);
    };
    inline_all(copy);
    holder.insert("v", std::move(copy));
  } else {
    holder.insert("v", toml::table{});
    holder.get("v")->as_table()->is_inline(true);
  }
  std::ostringstream os;
  os << holder;
  std::string text = os.str();
  text = text.substr(text.find('=') + 1);
  while (!text.empty() && (text.front() == ' ')) text.erase(0, 1);
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.pop_back();
  Record(key, text, doc);
}

ConfigNode ConfigNode::Section(std::string_view key) const {
  std::string full = KeyPath(key);
  RejectRootSection(full, Where(key));
  impl_->sections.insert(full);
  impl_->headers.try_emplace(
      full, Config::Impl::Header{JoinKey(HeaderKey(*impl_, path_), TomlKey(key)), "", -1, path_});
  toml::table* sub = nullptr;
  if (table_) {
    toml::node* n = static_cast<toml::table*>(table_)->get(key);
    if (n) {
      if (!n->is_table())
        throw ConfigError(fmt::format("{}: '{}' must be a table [{}], found {}", Where(key), full,
                                      full, TypeName(*n)));
      sub = n->as_table();
    }
  }
  return ConfigNode(impl_, full, sub);
}

std::vector<ConfigNode> ConfigNode::TableArray(std::string_view key) const {
  std::string full = KeyPath(key);
  RejectRootSection(full, Where(key));
  impl_->table_arrays.insert(full);
  std::vector<ConfigNode> out;
  if (!table_) return out;
  toml::node* n = static_cast<toml::table*>(table_)->get(key);
  if (!n) return out;
  if (!n->is_array_of_tables())
    throw ConfigError(
        fmt::format("{}: '{}' must be an array of tables [[{}]]", Where(key), full, full));
  toml::array* arr = n->as_array();
  for (size_t i = 0; i < arr->size(); ++i) {
    std::string p = fmt::format("{}[{}]", full, i);
    impl_->sections.insert(p);
    impl_->headers.try_emplace(
        p, Config::Impl::Header{JoinKey(HeaderKey(*impl_, path_), TomlKey(key)), full,
                                static_cast<int>(i), path_});
    out.push_back(ConfigNode(impl_, p, arr->get(i)->as_table()));
  }
  return out;
}

bool ConfigNode::Has(std::string_view key) const {
  return table_ && static_cast<toml::table*>(table_)->contains(key);
}

void ConfigNode::RejectRenamed(std::string_view old_key, std::string_view new_key,
                               std::string_view what) const {
  if (!Has(old_key)) return;
  throw ConfigError(fmt::format("{}: '{}' was renamed '{}' ({})", Where(old_key),
                                KeyPath(old_key), KeyPath(new_key), what),
                    fmt::format("write {} = ... instead; the values are the same", KeyPath(new_key)));
}

std::vector<std::string> ConfigNode::PresentKeys() const {
  std::vector<std::string> out;
  std::function<void(const toml::table&, const std::string&)> walk = [&](const toml::table& t,
                                                                         const std::string& p) {
    for (auto&& [k, node] : t) {
      std::string full = JoinPath(p, k.str());
      if (node.is_table())
        walk(*node.as_table(), full);
      else if (!node.is_array_of_tables())
        out.push_back(full);
    }
  };
  if (table_) walk(*static_cast<toml::table*>(table_), path_);
  return out;
}

bool ConfigNode::IsUsed(std::string_view path) const {
  return impl_->used.count(std::string(path)) > 0;
}

void ConfigNode::MarkAllUsed() const { impl_->wildcard.insert(path_); }

void ConfigNode::Declare(std::string_view key) const { impl_->used.insert(KeyPath(key)); }

}  // namespace rlid

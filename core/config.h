// TOML configuration with typed structs whose defaults live in code.
//
//   Config cfg = Config::FromFile("configs/quickstart.toml");
//   cfg.ApplyOverride("trainer.loss.clip_high=0.28");      // --set
//   ConfigNode t = cfg.Root().Section("trainer");
//   t.Get("lr", lr_, "AdamW learning rate", Range::Positive());  // default = current value
//   cfg.CheckAllUsed();   // unknown keys -> ConfigError with file:line:column + nearest key
//   std::cout << cfg.ResolvedToml();                       // every field, defaults included
//
// Config structs call Get() for every field they declare, so the resolved
// config lists everything the run used, and anything else in the file is an
// error. Numbers are checked against the range the call site states (floats
// are finite unless the range allows inf). ConfigNode is a cheap handle
// (pointer + path) into the shared state.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "core/modes.h"

namespace rlid {

class ConfigNode;

// The valid values of a float key: an interval whose ends are open or closed,
// optionally plus one exact value outside it (an "off" setting such as
// dual_clip = 0). NaN is never valid; +-inf only with allow_inf.
//   Range::Positive()                  (0, inf)
//   Range::Unit().OpenHigh()           [0, 1)
//   Range::GreaterThan(1).Or(0)        0 or > 1
//   Range::Positive().AllowInf()       (0, inf]
struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;
  bool allow_inf = false;  // +-inf pass when they lie in [lo, hi] (bounds are then closed)
  bool has_extra = false;  // `extra` is valid as well
  double extra = 0.0;

  static constexpr Range Any() { return {}; }  // every finite number
  static constexpr Range AtLeast(double x) { return {x}; }
  static constexpr Range GreaterThan(double x) { return {x, Range{}.hi, true}; }
  static constexpr Range AtMost(double x) { return {Range{}.lo, x}; }
  static constexpr Range Closed(double lo, double hi) { return {lo, hi}; }
  static constexpr Range Positive() { return GreaterThan(0); }
  static constexpr Range NonNegative() { return AtLeast(0); }
  static constexpr Range Unit() { return Closed(0, 1); }         // [0, 1]
  static constexpr Range Probability() { return Closed(0, 1); }  // [0, 1], read as a probability
  constexpr Range OpenLow() const {
    Range r = *this;
    r.lo_open = true;
    return r;
  }
  constexpr Range OpenHigh() const {
    Range r = *this;
    r.hi_open = true;
    return r;
  }
  constexpr Range AllowInf() const {
    Range r = *this;
    r.allow_inf = true;
    return r;
  }
  constexpr Range Or(double value) const {
    Range r = *this;
    r.has_extra = true;
    r.extra = value;
    return r;
  }

  bool Contains(double v) const;
  // "in [0, 1)", "> 0", ">= 0", "0 or > 1", "finite" (for "'k' must be ...").
  std::string Describe() const;
};

// The valid values of an integer key: [min, max].
struct IntRange {
  int64_t min = std::numeric_limits<int64_t>::min();
  int64_t max = std::numeric_limits<int64_t>::max();

  static constexpr IntRange Any() { return {}; }
  static constexpr IntRange AtLeast(int64_t x) { return {x}; }
  static constexpr IntRange Closed(int64_t lo, int64_t hi) { return {lo, hi}; }
  static constexpr IntRange Positive() { return {1}; }     // >= 1 (sizes, counts that must exist)
  static constexpr IntRange NonNegative() { return {0}; }  // >= 0
  bool Contains(int64_t v) const { return v >= min && v <= max; }
  // "in [2, 8]", ">= 1", "<= 5", "any integer".
  std::string Describe() const;
};

// A mode spelt outside a config file (a flag, a Python argument): the value,
// or a ConfigError "unknown <what> '<name>'" listing the spellings.
[[noreturn]] void ThrowUnknownMode(std::string_view what, std::string_view name,
                                   const std::vector<std::string>& choices);
template <Mode E>
E RequireMode(std::string_view what, std::string_view name) {
  if (auto v = ParseMode<E>(name)) return *v;
  ThrowUnknownMode(what, name, NamesOf<E>());
}

class Config {
 public:
  Config();  // empty document
  ~Config();
  Config(Config&&) noexcept;
  Config& operator=(Config&&) noexcept;

  // A regular file of at most kMaxConfigBytes (IoError otherwise, before any
  // read: a FIFO or /dev/zero never blocks or exhausts memory).
  static Config FromFile(const std::string& path);
  static constexpr uint64_t kMaxConfigBytes = uint64_t{4} << 20;
  static Config FromString(std::string_view text, std::string source_name = "<string>");
  // A document converted to TOML from another format (e.g. the JSON object of
  // `rlid loss`): like FromString, but errors cite `source_name` without TOML
  // line:column, which would point into the converted text, not the user's file.
  static Config FromConverted(std::string_view toml_text, std::string source_name);

  // "a.b.c=value": value parsed as a TOML value, or taken as a string when it
  // is not valid TOML (so --set env.name=maze works without quotes).
  void ApplyOverride(std::string_view assignment);
  void ApplyOverrides(const std::vector<std::string>& assignments);

  ConfigNode Root();
  // Throws ConfigError for the first key no config struct declared (in the
  // whole document, or only under `section`, e.g. "env").
  void CheckAllUsed(std::string_view section = {}) const;
  // Full paths of every value read so far under `prefix` ("trainer" -> "trainer.lr", ...).
  std::vector<std::string> UsedKeys(std::string_view prefix = {}) const;
  // Every field read so far, with resolved values and their docs as comments.
  std::string ResolvedToml() const;
  // Every value of the document (after overrides) as "a.b.key" -> its TOML
  // text, tables flattened and arrays whole: two documents that say the same
  // thing give equal values however they spelled it (1e-3 and 0.001).
  std::map<std::string, std::string> DocumentValues() const;
  // The source document as TOML (after overrides).
  std::string DocumentToml() const;
  const std::string& source_name() const;

  struct Impl;  // defined in config.cc

 private:
  friend class ConfigNode;
  std::unique_ptr<Impl> impl_;
};

class ConfigNode {
 public:
  // Reads `key` into `value` if present (type-checked), keeps `value` as the
  // default otherwise, and records the resolved value with `doc`. Numbers must
  // lie in `range` (checked on the resolved value, so a bad default is caught
  // too; vectors element by element): otherwise a ConfigError
  // "file:line:col: 'section.key' must be in [0, 1), found 2" (or "--set key: ...").
  // The range is appended to `doc` in the resolved config. Floats default to
  // Range::Any(): finite. ints are also limited to the int32 range, uint64_t to >= 0.
  void Get(std::string_view key, bool& value, std::string_view doc);
  void Get(std::string_view key, int& value, std::string_view doc, IntRange range = {});
  void Get(std::string_view key, int64_t& value, std::string_view doc, IntRange range = {});
  void Get(std::string_view key, uint64_t& value, std::string_view doc, IntRange range = {});
  void Get(std::string_view key, double& value, std::string_view doc, Range range = {});
  void Get(std::string_view key, std::string& value, std::string_view doc);
  void Get(std::string_view key, std::vector<double>& value, std::string_view doc,
           Range range = {});
  void Get(std::string_view key, std::vector<int64_t>& value, std::string_view doc,
           IntRange range = {});
  void Get(std::string_view key, std::vector<std::string>& value, std::string_view doc);
  // A whole table as JSON (parameters forwarded verbatim, e.g. an external
  // env's [env.params]): absent keeps `value`; strings, numbers, booleans,
  // arrays and nested tables convert as TOML's JSON form (dates as strings);
  // recorded in the resolved config as an inline table; every key under it
  // counts as used. ConfigError when `key` is not a table.
  void GetTable(std::string_view key, nlohmann::json& value, std::string_view doc);
  // A string restricted to `allowed`; anything else is a ConfigError naming them.
  void GetEnum(std::string_view key, std::string& value, const std::vector<std::string>& allowed,
               std::string_view doc);
  // A mode (core/modes.h): reads its spelling and stores the enum value, so code
  // compares enums, never strings. `allowed` narrows the choices for this key
  // (empty: every value of E); the default must be among them.
  template <Mode E>
  void GetEnum(std::string_view key, E& value, std::string_view doc,
               std::initializer_list<E> allowed = {}) {
    std::vector<std::string> names;
    for (E e : allowed) names.emplace_back(NameOf(e));
    if (names.empty()) names = NamesOf<E>();
    std::string spelt(NameOf(value));
    GetEnum(key, spelt, names, doc);
    value = *ParseMode<E>(spelt);
  }

  // Sub-table handle; an absent table reads as empty (all defaults).
  ConfigNode Section(std::string_view key) const;
  // Array of tables ([[key]]); each element is a section "key[i]".
  std::vector<ConfigNode> TableArray(std::string_view key) const;
  bool Has(std::string_view key) const;
  // `key` is valid here though nothing read it (an unknown-key error lists it
  // among the valid keys; no resolved value is recorded).
  void Declare(std::string_view key) const;
  // A key that was renamed: when `old_key` is present, a ConfigError at its
  // location naming `new_key` (both relative to this section) and what it sets.
  void RejectRenamed(std::string_view old_key, std::string_view new_key,
                     std::string_view what) const;
  // Full paths of the values present under this section (sub-tables
  // included, arrays of tables not), in document order.
  std::vector<std::string> PresentKeys() const;
  // Whether a config struct has read the value at full path `path`.
  bool IsUsed(std::string_view path) const;
  // Marks every key under this section as used (for sections forwarded verbatim).
  void MarkAllUsed() const;
  // "trainer.loss" ("" for the root).
  const std::string& path() const { return path_; }
  // "file:line:column" of key (or of this table when key is empty), "--set a.b"
  // for a key set by an override, or the source name.
  std::string Where(std::string_view key = {}) const;
  // "trainer.loss.clip_low": the full path of a key under this section.
  std::string KeyPath(std::string_view key) const;

 private:
  friend class Config;
  ConfigNode(Config::Impl* impl, std::string path, void* table)
      : impl_(impl), path_(std::move(path)), table_(table) {}
  const void* Find(std::string_view key) const;
  void Record(std::string_view key, std::string toml_value, std::string_view doc) const;

  Config::Impl* impl_;
  std::string path_;
  void* table_;  // toml::table* or nullptr when absent
};

}  // namespace rlid

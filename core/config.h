// TOML configuration with typed structs whose defaults live in code.
//
//   Config cfg = Config::FromFile("configs/quickstart.toml");
//   cfg.ApplyOverride("trainer.loss.clip_high=0.28");      // --set
//   ConfigNode t = cfg.Root().Section("trainer");
//   t.Get("lr", lr_, "AdamW learning rate");               // default = current value
//   cfg.CheckAllUsed();   // unknown keys -> ConfigError with file:line:column + nearest key
//   std::cout << cfg.ResolvedToml();                       // every field, defaults included
//
// Config structs call Get() for every field they declare, so the resolved
// config lists everything the run used, and anything else in the file is an
// error. ConfigNode is a cheap handle (pointer + path) into the shared state.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace rlid {

class ConfigNode;

class Config {
 public:
  Config();  // empty document
  ~Config();
  Config(Config&&) noexcept;
  Config& operator=(Config&&) noexcept;

  static Config FromFile(const std::string& path);
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
  // Every field read so far, with resolved values and their docs as comments.
  std::string ResolvedToml() const;
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
  // default otherwise, and records the resolved value with `doc`.
  void Get(std::string_view key, bool& value, std::string_view doc);
  void Get(std::string_view key, int& value, std::string_view doc);
  void Get(std::string_view key, int64_t& value, std::string_view doc);
  void Get(std::string_view key, uint64_t& value, std::string_view doc);
  void Get(std::string_view key, double& value, std::string_view doc);
  void Get(std::string_view key, std::string& value, std::string_view doc);
  void Get(std::string_view key, std::vector<double>& value, std::string_view doc);
  void Get(std::string_view key, std::vector<int64_t>& value, std::string_view doc);
  void Get(std::string_view key, std::vector<std::string>& value, std::string_view doc);
  // A string restricted to `allowed`; anything else is a ConfigError naming them.
  void GetEnum(std::string_view key, std::string& value, const std::vector<std::string>& allowed,
               std::string_view doc);

  // Sub-table handle; an absent table reads as empty (all defaults).
  ConfigNode Section(std::string_view key) const;
  // Array of tables ([[key]]); each element is a section "key[i]".
  std::vector<ConfigNode> TableArray(std::string_view key) const;
  bool Has(std::string_view key) const;
  // Marks every key under this section as used (for sections forwarded verbatim).
  void MarkAllUsed() const;
  // "trainer.loss" ("" for the root).
  const std::string& path() const { return path_; }
  // "file:line:column" of key (or of this table when key is empty), or the source name.
  std::string Where(std::string_view key = {}) const;

 private:
  friend class Config;
  ConfigNode(Config::Impl* impl, std::string path, void* table)
      : impl_(impl), path_(std::move(path)), table_(table) {}
  const void* Find(std::string_view key) const;
  std::string KeyPath(std::string_view key) const;
  void Record(std::string_view key, std::string toml_value, std::string_view doc) const;

  Config::Impl* impl_;
  std::string path_;
  void* table_;  // toml::table* or nullptr when absent
};

}  // namespace rlid

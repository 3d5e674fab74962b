// The model-directory layer on top of tokenizer.json: tokenizer_config.json
// (bos/eos/pad tokens, add_bos_token, chat_template), chat_template.jinja and
// generation_config.json (eos ids), resolved to ids once and shared by copies.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/error.h"
#include "core/file_io.h"
#include "core/hash.h"
#include "core/json_file.h"
#include "policy/tokenizer/tokenizer.h"
#include "policy/tokenizer/tokenizer_internal.h"

namespace rlid::policy {
namespace fs = std::filesystem;
using Json = nlohmann::json;

struct Tokenizer::Format {
  TokenizerConfig config;
  std::optional<TokenId> bos, eos, pad;
  std::vector<TokenId> stops;
  uint64_t fingerprint = 0;
};

namespace {

constexpr std::string_view kWhat = "tokenizer metadata file";

std::string ReadText(const fs::path& p) { return ReadRegularFile(p.string(), kMaxJsonFileBytes, kWhat); }

Json ReadJson(const fs::path& p) { return ReadJsonFile(p, kWhat, BadJson::kConfigError); }

// A token field: "text", {"content": "text", ...} (older AddedToken form) or null.
std::string TokenText(const Json& cfg, const char* key, const std::string& file) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return "";
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
    return (*it)["content"].get<std::string>();
  throw ConfigError(fmt::format("{}: '{}' must be a token string, found {}", file, key, it->dump()));
}

std::vector<TokenId> IdList(const Json& cfg, const char* key, const std::string& file) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return {};
  std::vector<TokenId> out;
  auto one = [&](const Json& v) {
    if (!v.is_number_integer())
      throw ConfigError(fmt::format("{}: '{}' must be an id or a list of ids, found {}", file, key, it->dump()));
    out.push_back(v.get<TokenId>());
  };
  if (it->is_array()) {
    for (const auto& v : *it) one(v);
  } else {
    one(*it);
  }
  return out;
}

// Whether tokenizer.json's post-processor puts a special token first (how
// Llama-3's fast tokenizer adds <|begin_of_text|> without an add_bos_token key).
std::string PostProcessorBos(const Json& pp) {
  if (!pp.is_object()) return "";
  if (pp.value("type", "") == "Sequence" && pp.contains("processors") && pp["processors"].is_array())
    for (const auto& p : pp["processors"])
      if (auto t = PostProcessorBos(p); !t.empty()) return t;
  if (pp.value("type", "") == "TemplateProcessing" && pp.contains("single") && pp["single"].is_array() &&
      !pp["single"].empty()) {
    const auto& first = pp["single"][0];
    if (first.contains("SpecialToken") && first["SpecialToken"].contains("id") &&
        first["SpecialToken"]["id"].is_string())
      return first["SpecialToken"]["id"].get<std::string>();
  }
  return "";
}

}  // namespace

Tokenizer::Tokenizer(std::shared_ptr<const internal::TokenizerData> data) : data_(std::move(data)) {
  format_ = WithConfig({}).format_;
}

const TokenizerConfig& Tokenizer::config() const { return format_->config; }

Tokenizer Tokenizer::WithConfig(TokenizerConfig config) const {
  auto f = std::make_shared<Format>();
  const std::string where = fmt::format("tokenizer '{}'", data_->source);
  auto resolve = [&](const std::string& text, const char* field) -> std::optional<TokenId> {
    if (text.empty()) return std::nullopt;
    auto id = TokenToId(text);
    if (!id)
      throw ConfigError(fmt::format("{}: {} '{}' is not a token of tokenizer.json", where, field, text),
                        "tokenizer_config.json and tokenizer.json come from different models");
    return id;
  };
  f->bos = resolve(config.bos_token, "bos_token");
  f->eos = resolve(config.eos_token, "eos_token");
  f->pad = resolve(config.pad_token, "pad_token");
  if (config.add_bos && !f->bos)
    throw ConfigError(fmt::format("{}: add_bos_token is true but there is no bos_token", where));
  for (TokenId id : config.generation_eos)
    if (id < 0 || id >= VocabSize() || data_->id_kind[id] == internal::TokenizerData::IdKind::kNone)
      throw ConfigError(fmt::format("{}: generation_config.json eos_token_id {} is not a token id", where, id));
  const bool plain = config.bos_token.empty() && config.eos_token.empty() && config.pad_token.empty() &&
                     !config.add_bos && config.chat_template.empty() && config.generation_eos.empty();
  f->config = std::move(config);
  f->stops = f->config.generation_eos;
  if (auto eos = f->eos ? f->eos : data_->eos; eos && std::find(f->stops.begin(), f->stops.end(), *eos) == f->stops.end())
    f->stops.insert(f->stops.begin(), *eos);
  // A tokenizer.json alone keeps the fingerprint it always had.
  f->fingerprint = data_->fingerprint;
  if (!plain) {
    uint64_t h = HashBytes(f->config.bos_token + "\x1f" + f->config.eos_token + "\x1f" + f->config.pad_token);
    h = HashCombine(h, HashBytes(f->config.chat_template, f->config.add_bos ? 1 : 0));
    for (TokenId id : f->stops) h = HashCombine(h, static_cast<uint64_t>(id));
    f->fingerprint = HashCombine(data_->fingerprint, h);
  }
  Tokenizer out = *this;
  out.format_ = std::move(f);
  return out;
}

TokenizerConfig ReadTokenizerConfig(const std::string& dir) {
  const fs::path root(dir);
  TokenizerConfig c;
  const fs::path tc = root / "tokenizer_config.json", gc = root / "generation_config.json",
                 tj = root / "chat_template.jinja";
  if (fs::exists(tc)) {
    const std::string file = tc.string();
    c.tokenizer_config_json = ReadJson(tc);
    const Json& j = c.tokenizer_config_json;
    if (!j.is_object()) throw ConfigError(fmt::format("{} is not a JSON object", file));
    c.bos_token = TokenText(j, "bos_token", file);
    c.eos_token = TokenText(j, "eos_token", file);
    c.pad_token = TokenText(j, "pad_token", file);
    if (j.contains("add_bos_token") && !j["add_bos_token"].is_null()) {
      if (!j["add_bos_token"].is_boolean())
        throw ConfigError(fmt::format("{}: add_bos_token must be true or false", file));
      c.add_bos = j["add_bos_token"].get<bool>();
    }
    if (auto it = j.find("chat_template"); it != j.end() && !it->is_null()) {
      if (it->is_string()) {
        c.chat_template = it->get<std::string>();
      } else if (it->is_array()) {  // [{name, template}]: the one named "default"
        for (const auto& t : *it)
          if (t.is_object() && t.value("name", "") == "default" && t.contains("template") &&
              t["template"].is_string())
            c.chat_template = t["template"].get<std::string>();
        if (c.chat_template.empty())
          throw ConfigError(fmt::format("{}: chat_template lists no template named \"default\"", file));
      } else {
        throw ConfigError(fmt::format("{}: chat_template must be a string", file));
      }
    }
  }
  // Newer transformers write the template to its own file; it wins, as there.
  if (fs::exists(tj)) c.chat_template = ReadText(tj);
  if (fs::exists(gc)) {
    c.generation_config_json = ReadJson(gc);
    if (!c.generation_config_json.is_object())
      throw ConfigError(fmt::format("{} is not a JSON object", gc.string()));
    c.generation_eos = IdList(c.generation_config_json, "eos_token_id", gc.string());
  }
  return c;
}

Tokenizer Tokenizer::FromDirectory(const std::string& dir) {
  Tokenizer tok = FromFile((fs::path(dir) / "tokenizer.json").string());
  TokenizerConfig c = ReadTokenizerConfig(dir);
  // A tokenizer_config.json without add_bos_token: BOS when tokenizer.json's post-processor
  // puts bos_token first.
  const Json& j = c.tokenizer_config_json;
  if (j.is_object() && (!j.contains("add_bos_token") || j["add_bos_token"].is_null())) {
    const std::string pp = PostProcessorBos(tok.data_->post_processor_json);
    c.add_bos = !pp.empty() && pp == c.bos_token;
  }
  return tok.WithConfig(std::move(c));
}

Tokenizer Tokenizer::FromPath(const std::string& path) {
  return fs::is_directory(path) ? FromDirectory(path) : FromFile(path);
}

void Tokenizer::SaveDirectory(const std::string& dir) const {
  Save((fs::path(dir) / "tokenizer.json").string());
  auto write = [&](const char* name, const Json& j) {
    if (j.is_null()) return;
    ReplaceFile((fs::path(dir) / name).string(), j.dump(2) + "\n", "tokenizer file");
  };
  Json tc = config().tokenizer_config_json;
  // A template read from chat_template.jinja travels inside tokenizer_config.json.
  if (!config().chat_template.empty()) {
    if (tc.is_null()) tc = Json::object();
    tc["chat_template"] = config().chat_template;
  }
  write("tokenizer_config.json", tc);
  write("generation_config.json", config().generation_config_json);
}

TokenId Tokenizer::eos_id() const {
  if (format_->eos) return *format_->eos;
  if (!data_->eos)
    throw ConfigError(fmt::format("tokenizer '{}' has no end-of-text token", data_->source),
                      "add <|endoftext|> to added_tokens (rlid-trained tokenizers have it), or "
                      "set eos_token in tokenizer_config.json");
  return *data_->eos;
}

TokenId Tokenizer::pad_id() const { return format_->pad ? *format_->pad : eos_id(); }

std::optional<TokenId> Tokenizer::bos_id() const { return format_->bos; }

// Empty only for a tokenizer with no end-of-text token at all.
const std::vector<TokenId>& Tokenizer::stop_ids() const { return format_->stops; }

bool Tokenizer::IsStop(TokenId id) const {
  return std::find(format_->stops.begin(), format_->stops.end(), id) != format_->stops.end();
}

uint64_t Tokenizer::Fingerprint() const { return format_->fingerprint; }

}  // namespace rlid::policy

// Byte-level BPE tokenizer that reads and writes Hugging Face `tokenizer.json`
// (GPT-2 / Llama-3 / Qwen2-3 style) and gives the same ids as HF tokenizers.
// Text -> added-token split -> normaliser -> pre-tokeniser (Split regex +
// ByteLevel) -> BPE per pre-token. Also trains small vocabularies on env text.
// No LibTorch here: the prompt renderer, readout and sampler sit on top of it.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "policy/tokenizer/types.h"

namespace rlid::policy {

// TokenId comes from policy/tokenizer/types.h.

struct TokenizerTrainOptions {
  // Total ids including the 256 byte tokens, the forced " A".." Z" merges and
  // the 3 special tokens (so at least 285). Training stops early (smaller
  // vocabulary) when no pair occurs min_frequency times.
  int vocab_size = 1024;
  // A pair is merged only if it occurs at least this often in the corpus.
  int min_frequency = 2;
};

namespace internal {
struct TokenizerData;
}

// What a model directory adds to tokenizer.json (Hugging Face's tokenizer_config.json
// and generation_config.json): the bos/eos/pad tokens, whether plain prompts start with
// BOS, the chat template, and the ids generation stops on. Absent files leave the
// defaults (eos = the tokenizer's end-of-text token, no BOS, no template).
struct TokenizerConfig {
  std::string bos_token, eos_token, pad_token;  // token text; "" when unset
  bool add_bos = false;       // plain (non-chat) prompts start with bos_token
  std::string chat_template;  // Jinja source; "" when the model has none
  std::vector<TokenId> generation_eos;  // generation_config.json eos_token_id(s)
  nlohmann::json tokenizer_config_json;   // files as read (written back by SaveDirectory); null if absent
  nlohmann::json generation_config_json;
};

// The TokenizerConfig of model directory `dir` from its tokenizer_config.json,
// chat_template.jinja and generation_config.json alone (tokenizer.json is not
// read): tokens as text, not checked against a vocabulary, and add_bos only
// from add_bos_token (Tokenizer::FromDirectory also derives it from
// tokenizer.json and validates the rest). ConfigError for a malformed file or
// field, naming it.
TokenizerConfig ReadTokenizerConfig(const std::string& dir);

// An immutable, cheap-to-copy handle: copies share the vocabulary and the
// per-pre-token BPE cache. All const methods are safe to call concurrently.
class Tokenizer {
 public:
  // The byte-level tokenizer with no merges (256 byte tokens, " A".." Z",
  // the special tokens): valid, and a placeholder until a real one is assigned.
  Tokenizer();
  // Reads a HF tokenizer.json. IoError if unreadable; ConfigError if the JSON is
  // malformed or uses a component rlid does not implement (named in the message).
  static Tokenizer FromFile(const std::string& path);
  // tokenizer.json of `dir` plus its tokenizer_config.json, chat_template.jinja and
  // generation_config.json when present. ConfigError when a named token (bos_token,
  // eos_token, pad_token, an eos id) is not in the vocabulary, naming the field.
  static Tokenizer FromDirectory(const std::string& dir);
  // A directory (FromDirectory) or a tokenizer.json file (FromFile).
  static Tokenizer FromPath(const std::string& path);
  // The same vocabulary with `config` applied (validated as in FromDirectory).
  Tokenizer WithConfig(TokenizerConfig config) const;
  const TokenizerConfig& config() const;
  // tokenizer.json, and tokenizer_config.json / generation_config.json when the
  // tokenizer was read with them. Atomic per file.
  void SaveDirectory(const std::string& dir) const;
  static Tokenizer FromJsonString(std::string_view json, std::string source = "<json>");
  // Learns merges from `corpus` (see docs/tokenizer.md): Qwen3 pre-tokeniser
  // regex + ByteLevel, no normaliser, all 256 byte tokens, " A".." Z" forced to
  // single tokens, <|endoftext|> (eos, pad), <|im_start|>, <|im_end|> special.
  // Deterministic: equal counts are broken by the lexical order of the pair.
  static Tokenizer Train(const std::vector<std::string>& corpus, const TokenizerTrainOptions& opt);

  std::string ToJsonString() const;          // HF tokenizer.json text
  void Save(const std::string& path) const;  // atomic (tmp + rename); IoError on failure

  // Ids of `text` (arbitrary bytes; invalid UTF-8 goes through byte tokens).
  // allow_special=false encodes special added tokens as plain text (non-special
  // added tokens such as <think> are still matched, as in HF). Never adds BOS/EOS.
  std::vector<TokenId> Encode(std::string_view text, bool allow_special = true) const;
  // Concatenated bytes of the tokens (exact bytes, no U+FFFD replacement).
  // ConfigError for an id that is not in the vocabulary.
  std::string Decode(std::span<const TokenId> ids, bool skip_special = false) const;

  int32_t VocabSize() const;                                       // max id + 1
  std::optional<TokenId> TokenToId(std::string_view token) const;  // vocab or added token, raw form
  std::string IdToToken(TokenId id) const;                         // raw vocab string ("ĠA")
  std::string DecodeToken(TokenId id) const;                       // bytes of one token (" A")
  bool IsSpecial(TokenId id) const;                                // a special added token

  // The id if `text` encodes to exactly one token, else nullopt.
  std::optional<TokenId> SingleTokenId(std::string_view text) const;
  // The id of " " + label (how a label follows "Action:"); ConfigError if that
  // is not exactly one token.
  TokenId RequireLabelToken(std::string_view label) const;

  // The end of an answer: tokenizer_config's eos_token (<|im_end|> for Qwen chat
  // models), else <|endoftext|> (else <|end_of_text|>, </s>, <eos>); ConfigError if none.
  TokenId eos_id() const;
  TokenId pad_id() const;  // pad_token, else eos_id()
  std::optional<TokenId> bos_id() const;  // bos_token, if any
  // Generation stops on any of these: eos_id() and generation_config's eos ids.
  const std::vector<TokenId>& stop_ids() const;
  bool IsStop(TokenId id) const;
  // Stable hash of vocab, merges, added tokens, normaliser and pre-tokeniser.
  uint64_t Fingerprint() const;
  // Where the tokenizer came from (file path, "<json>", "<trained>").
  const std::string& source() const;

 private:
  struct Format;  // TokenizerConfig resolved to ids
  explicit Tokenizer(std::shared_ptr<const internal::TokenizerData> data);
  std::shared_ptr<const internal::TokenizerData> data_;
  std::shared_ptr<const Format> format_;
};

}  // namespace rlid::policy

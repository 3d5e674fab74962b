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

#include "policy/types.h"

namespace rlid::policy {

// TokenId comes from policy/types.h.

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

  // <|endoftext|> (else <|end_of_text|>, </s>, <eos>); ConfigError if none.
  TokenId eos_id() const;
  TokenId pad_id() const;  // = eos_id()
  // Stable hash of vocab, merges, added tokens, normaliser and pre-tokeniser.
  uint64_t Fingerprint() const;
  // Where the tokenizer came from (file path, "<json>", "<trained>").
  const std::string& source() const;

 private:
  explicit Tokenizer(std::shared_ptr<const internal::TokenizerData> data)
      : data_(std::move(data)) {}
  std::shared_ptr<const internal::TokenizerData> data_;
};

}  // namespace rlid::policy

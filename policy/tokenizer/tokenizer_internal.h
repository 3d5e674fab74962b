// Internals of policy/tokenizer/tokenizer.h shared by the loader/encoder (tokenizer.cc),
// the trainer (bpe_trainer.cc) and the Unicode helpers (unicode.cc): the
// immutable tokenizer data, the GPT-2 byte<->unicode map, UTF-8 segmentation
// (over core/utf8.h), normal forms and the PCRE2 pre-tokeniser regex. Not part
// of the public API.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/utf8.h"
#include "policy/tokenizer/tokenizer.h"

namespace rlid::policy::internal {

// ---- bytes and Unicode (unicode.cc) -------------------------------------------

// GPT-2's reversible map: byte b <-> one printable code point (UTF-8 encoded).
const std::array<std::string, 256>& ByteToUnicode();
// Code point -> byte for the 256 mapped code points, -1 for any other.
int UnicodeToByte(uint32_t code_point);
// Maps every byte of `bytes` through ByteToUnicode() ("\x20A" -> "ĠA").
std::string ByteLevelEncode(std::string_view bytes);
// Inverse of ByteLevelEncode; nullopt if a character is not a mapped byte.
std::optional<std::string> ByteLevelDecode(std::string_view token);

// Calls fn(run, valid) for each maximal run of well-formed UTF-8 (valid) or
// of ill-formed bytes (core/utf8.h decodes those one byte at a time), in order.
template <class Fn>
void ForEachUtf8Run(std::string_view s, Fn&& fn) {
  size_t i = 0;
  while (i < s.size()) {
    const size_t start = i;
    const bool valid = DecodeUtf8At(s, i).well_formed;
    while (i < s.size()) {
      if (static_cast<unsigned char>(s[i]) < 0x80) {  // ASCII fast path
        if (!valid) break;
        ++i;
        continue;
      }
      const Utf8Scalar u = DecodeUtf8At(s, i);
      if (u.well_formed != valid) break;
      i += u.length;
    }
    fn(s.substr(start, i - start), valid);
  }
}

// Unicode White_Space (for added tokens' lstrip/rstrip).
bool IsUnicodeWhitespace(uint32_t code_point);

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };
// Applies a normal form to valid UTF-8 (ASCII is returned unchanged).
std::string Normalize(std::string_view valid_utf8, NormalForm form);

// A compiled PCRE2 pattern (UTF + UCP, JIT when available). Thread-safe to match.
class Regex {
 public:
  // ConfigError naming `what` if the pattern does not compile.
  Regex(const std::string& pattern, bool literal, const std::string& what);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // Appends [begin, end) byte offsets of successive non-empty matches in
  // valid UTF-8 `s` (empty matches advance one character and are dropped).
  void FindAll(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const;

 private:
  void* code_ = nullptr;  // pcre2_code_8*
  bool jit_ = false;      // JIT-compiled: match with pcre2_jit_match
};

// ---- the tokenizer's data ------------------------------------------------------

struct AddedToken {
  std::string content;
  TokenId id = -1;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
};

// One step of the pre-tokeniser pipeline.
struct PreTokenizerStep {
  enum class Kind { kSplit, kByteLevel } kind = Kind::kSplit;
  std::shared_ptr<const Regex> regex;  // Split pattern, or GPT-2's for ByteLevel use_regex
  bool removed = false;                // Split behaviour Removed (else Isolated)
  bool invert = false;
  bool add_prefix_space = false;  // ByteLevel
};

struct MergeTarget {
  int32_t rank;
  TokenId id;
};

// Per-pre-token BPE results, sharded to keep concurrent Encode calls cheap.
class BpeCache {
 public:
  static constexpr size_t kShards = 16;
  static constexpr size_t kMaxEntriesPerShard = 1 << 14;
  static constexpr size_t kMaxWordBytes = 128;  // longer words are not cached
  bool Find(std::string_view word, std::vector<TokenId>& out) const;
  void Insert(std::string_view word, const std::vector<TokenId>& ids) const;

 private:
  struct Hash {  // transparent: lookups by string_view allocate nothing
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
  };
  struct Shard {
    std::mutex mu;
    std::unordered_map<std::string, std::vector<TokenId>, Hash, std::equal_to<>> map;
  };
  mutable std::array<Shard, kShards> shards_;
};

struct TokenizerData {
  std::string source;

  // BPE model.
  std::unordered_map<std::string, TokenId> vocab;           // raw (byte-mapped) token -> id
  std::vector<std::pair<std::string, std::string>> merges;  // rank order
  std::unordered_map<uint64_t, MergeTarget> merge_map;      // (left << 32 | right) -> target
  std::array<TokenId, 256> byte_ids{};                      // id of each single-byte token
  bool ignore_merges = false;

  // Added tokens, split out of the text first (leftmost-longest).
  std::vector<AddedToken> added;
  std::unordered_map<std::string, size_t> added_index;       // content -> index in `added`
  std::array<std::vector<size_t>, 256> added_by_first_byte;  // indices, longest first

  std::vector<NormalForm> normalizers;
  std::vector<PreTokenizerStep> pre_tokenizer;

  // Per id: the raw token string, its decoded bytes, what it is.
  enum class IdKind : uint8_t { kNone, kVocab, kAdded, kSpecial };
  std::vector<std::string> id_token;
  std::vector<std::string> id_bytes;
  std::vector<IdKind> id_kind;

  std::optional<TokenId> eos;
  uint64_t fingerprint = 0;

  // Sections written back verbatim by ToJsonString().
  nlohmann::json normalizer_json, pre_tokenizer_json, post_processor_json, decoder_json,
      truncation_json, padding_json;
  nlohmann::json model_extra;  // model keys other than type/vocab/merges, as read

  BpeCache cache;
};

// Builds the data from parsed tokenizer.json (validates every component).
std::shared_ptr<const TokenizerData> BuildTokenizerData(const nlohmann::json& j,
                                                        const std::string& source);

// The pre-tokeniser regex of Qwen2/Qwen3 (also used by rlid-trained tokenizers).
extern const char* const kQwenPattern;

}  // namespace rlid::policy::internal

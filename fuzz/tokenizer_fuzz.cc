// The byte-level BPE tokenizer (policy/tokenizer/tokenizer.h). Byte 0 picks the mode:
//   even: the rest is tokenizer.json text; when it loads, fixed strings are
//         encoded and decoded, and the tokenizer survives a ToJsonString round trip;
//   odd:  the rest is text encoded by fixed tokenizers without a normaliser
//         (the llama3-style test fixture, the byte-level default, a small
//         trained one), where Decode(Encode(text)) == text is promised
//         ("arbitrary bytes", "exact bytes").
// ConfigError/IoError are allowed; a crash, another exception or a failed
// round trip is a bug.
#include <cstdint>
#include <fstream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz/fuzz_util.h"
#include "policy/tokenizer/tokenizer.h"

namespace rlid::fuzz {
namespace {

using policy::TokenId;
using policy::Tokenizer;

const std::vector<Tokenizer>& FixedTokenizers() {
  static const auto* toks = [] {
    auto* out = new std::vector<Tokenizer>;
    out->push_back(Tokenizer::FromFile(std::string(RLID_SOURCE_DIR) +
                                       "/tests/data/tokenizer/llama3_style_tokenizer.json"));
    out->push_back(Tokenizer());
    policy::TokenizerTrainOptions opt;
    opt.vocab_size = 400;
    out->push_back(Tokenizer::Train({"You are at (1, 2). A) go north B) go east",
                                     "Action: B\nThe red key is in the kitchen.",
                                     "ééé ∑ 日本語 <|im_start|>user\nhi<|im_end|>"},
                                    opt));
    return out;
  }();
  return *toks;
}

void CheckIds(const Tokenizer& tok, const std::vector<TokenId>& ids) {
  for (TokenId id : ids) FUZZ_CHECK(id >= 0 && id < tok.VocabSize());
}

void RoundTrip(const Tokenizer& tok, std::string_view text) {
  for (bool allow_special : {true, false}) {
    const std::vector<TokenId> ids = tok.Encode(text, allow_special);
    CheckIds(tok, ids);
    const std::string back = tok.Decode(ids);
    if (back != text) {
      std::fprintf(stderr, "round trip failed (allow_special=%d, %zu -> %zu bytes)\n",
                   allow_special, text.size(), back.size());
      FUZZ_CHECK(back == text);
    }
  }
}

void Exercise(const Tokenizer& tok) {
  for (std::string_view s : {"Action: B", " A", "héllo wörld 123", "<|endoftext|>", ""}) {
    const std::vector<TokenId> ids = tok.Encode(s);
    CheckIds(tok, ids);
    (void)tok.Decode(ids);
    (void)tok.Decode(ids, /*skip_special=*/true);
    (void)tok.SingleTokenId(s);
  }
  for (TokenId id : {0, 1, tok.VocabSize() - 1}) {
    if (id < 0) continue;
    try {  // ids need not be contiguous; a gap may be refused
      (void)tok.IdToToken(id), (void)tok.DecodeToken(id), (void)tok.IsSpecial(id);
    } catch (const rlid::ConfigError&) {
    }
  }
  (void)tok.Fingerprint();
  try {
    (void)tok.eos_id(), (void)tok.pad_id();
  } catch (const ConfigError&) {
  }
  // What we write we must read back: same vocabulary, same fingerprint.
  const Tokenizer again = Tokenizer::FromJsonString(tok.ToJsonString(), "<round trip>");
  FUZZ_CHECK(again.VocabSize() == tok.VocabSize());
  FUZZ_CHECK(again.Fingerprint() == tok.Fingerprint());
}

}  // namespace
}  // namespace rlid::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rlid::fuzz;
  Input in(data, size);
  const uint8_t mode = in.TakeByte();
  try {
    if (mode % 2 == 0) {
      std::optional<Tokenizer> tok;
      try {
        tok = Tokenizer::FromJsonString(in.Rest(), "fuzz.json");
      } catch (const rlid::InternalError&) {
        throw;
      } catch (const rlid::Error&) {
        return 0;
      }
      Exercise(*tok);
    } else {
      for (const Tokenizer& tok : FixedTokenizers()) RoundTrip(tok, in.Rest());
    }
  } catch (const rlid::InternalError& e) {
    std::fprintf(stderr, "InternalError: %s\n", e.what());
    FUZZ_CHECK(!"InternalError");
  } catch (const rlid::Error& e) {
    // Decoding ids the tokenizer itself produced, or re-reading its own JSON, must not fail.
    std::fprintf(stderr, "error after a successful load: %s\n", e.what());
    FUZZ_CHECK(!"rlid::Error after a successful load");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    FUZZ_CHECK(!"only rlid::Error may be thrown");
  }
  return 0;
}

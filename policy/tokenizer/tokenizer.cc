// Loading, validating, encoding and decoding HF byte-level BPE tokenizers.
// Encode: added tokens (leftmost-longest) -> UTF-8 runs (invalid bytes are
// pre-tokens of their own) -> normal forms -> Split/ByteLevel pre-tokeniser ->
// BPE per pre-token with a rank heap and a shared per-pre-token cache.
#include "policy/tokenizer/tokenizer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <deque>
#include <fstream>
#include <optional>
#include <queue>
#include <sstream>

#include "core/error.h"
#include "core/file_io.h"
#include "core/hash.h"
#include "policy/tokenizer/tokenizer_internal.h"

namespace rlid::policy {
namespace internal {

const char* const kQwenPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

namespace {

// The regex ByteLevel applies when use_regex is true (GPT-2's).
const char* const kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

using Json = nlohmann::json;

constexpr uint64_t PairKey(TokenId a, TokenId b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}

// Reads an optional member with a type check; ConfigError names the path.
class Reader {
 public:
  explicit Reader(const std::string& source) : source_(source) {}
  // "tokenizer 'FILE': PATH" for messages raised outside the reader.
  std::string Where(const std::string& path) const {
    return fmt::format("tokenizer '{}': {}", source_, path);
  }

  [[noreturn]] void Fail(const std::string& what, const std::string& hint = {}) const {
    throw ConfigError(fmt::format("tokenizer '{}': {}", source_, what), hint);
  }
  [[noreturn]] void Unsupported(const std::string& component, const std::string& found,
                                const std::string& supported) const {
    Fail(fmt::format("{} '{}' is not supported", component, found),
         fmt::format("rlid implements byte-level BPE; supported {}: {}", component, supported));
  }

  const Json& Object(const Json& parent, const char* key, const std::string& path) const {
    auto it = parent.find(key);
    if (it == parent.end() || !it->is_object())
      Fail(fmt::format("expected an object at '{}', found {}", path,
                       it == parent.end() ? "nothing" : it->type_name()));
    return *it;
  }
  bool Bool(const Json& obj, const char* key, bool fallback, const std::string& path) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return fallback;
    if (!it->is_boolean())
      Fail(fmt::format("expected true/false at '{}.{}', found {}", path, key, it->dump()));
    return it->get<bool>();
  }
  std::string String(const Json& obj, const char* key, const std::string& path) const {
    auto it = obj.find(key);
    if (it == obj.end() || !it->is_string())
      Fail(fmt::format("expected a string at '{}.{}', found {}", path, key,
                       it == obj.end() ? "nothing" : it->dump()));
    return it->get<std::string>();
  }
  std::string Type(const Json& obj, const std::string& path) const {
    if (!obj.is_object())
      Fail(fmt::format("expected an object at '{}', found {}", path, obj.dump()));
    return String(obj, "type", path);
  }

 private:
  const std::string& source_;
};

void ReadNormalizer(const Reader& r, const Json& n, const std::string& path,
                    std::vector<NormalForm>& out) {
  if (n.is_null()) return;
  const std::string type = r.Type(n, path);
  if (type == "NFC")
    out.push_back(NormalForm::kNfc);
  else if (type == "NFD")
    out.push_back(NormalForm::kNfd);
  else if (type == "NFKC")
    out.push_back(NormalForm::kNfkc);
  else if (type == "NFKD")
    out.push_back(NormalForm::kNfkd);
  else if (type == "Sequence") {
    auto it = n.find("normalizers");
    if (it == n.end() || !it->is_array())
      r.Fail(fmt::format("expected an array at '{}.normalizers'", path));
    for (size_t i = 0; i < it->size(); ++i)
      ReadNormalizer(r, (*it)[i], fmt::format("{}.normalizers[{}]", path, i), out);
  } else {
    r.Unsupported("normalizer", type, "NFC, NFD, NFKC, NFKD, Sequence of these, null");
  }
}

void ReadPreTokenizer(const Reader& r, const Json& p, const std::string& path,
                      std::vector<PreTokenizerStep>& out) {
  const std::string type = r.Type(p, path);
  if (type == "Sequence") {
    auto it = p.find("pretokenizers");
    if (it == p.end() || !it->is_array())
      r.Fail(fmt::format("expected an array at '{}.pretokenizers'", path));
    for (size_t i = 0; i < it->size(); ++i)
      ReadPreTokenizer(r, (*it)[i], fmt::format("{}.pretokenizers[{}]", path, i), out);
  } else if (type == "Split") {
    PreTokenizerStep step;
    step.kind = PreTokenizerStep::Kind::kSplit;
    const Json& pattern = r.Object(p, "pattern", path + ".pattern");
    const std::string what = r.Where(path + ".pattern");
    if (pattern.contains("Regex")) {
      step.regex =
          std::make_shared<Regex>(r.String(pattern, "Regex", path + ".pattern"), false, what);
    } else if (pattern.contains("String")) {
      step.regex =
          std::make_shared<Regex>(r.String(pattern, "String", path + ".pattern"), true, what);
    } else {
      r.Fail(fmt::format(
          "expected {{\"Regex\": ...}} or {{\"String\": ...}} at '{}.pattern', found {}", path,
          pattern.dump()));
    }
    const std::string behavior = r.String(p, "behavior", path);
    if (behavior == "Removed")
      step.removed = true;
    else if (behavior != "Isolated")
      r.Unsupported("Split behavior", behavior, "Isolated, Removed");
    step.invert = r.Bool(p, "invert", false, path);
    out.push_back(std::move(step));
  } else if (type == "ByteLevel") {
    PreTokenizerStep step;
    step.kind = PreTokenizerStep::Kind::kByteLevel;
    step.add_prefix_space = r.Bool(p, "add_prefix_space", false, path);
    if (r.Bool(p, "use_regex", true, path))
      step.regex = std::make_shared<Regex>(kGpt2Pattern, false, r.Where(path + " (GPT-2 regex)"));
    out.push_back(std::move(step));
  } else {
    r.Unsupported("pre_tokenizer", type, "Split (Isolated/Removed), ByteLevel, Sequence of these");
  }
}

void CheckPostProcessor(const Reader& r, const Json& p, const std::string& path) {
  if (p.is_null()) return;
  const std::string type = r.Type(p, path);
  if (type == "ByteLevel" || type == "TemplateProcessing") return;
  if (type == "Sequence") {
    auto it = p.find("processors");
    if (it == p.end() || !it->is_array())
      r.Fail(fmt::format("expected an array at '{}.processors'", path));
    for (size_t i = 0; i < it->size(); ++i)
      CheckPostProcessor(r, (*it)[i], fmt::format("{}.processors[{}]", path, i));
    return;
  }
  r.Unsupported("post_processor", type, "ByteLevel, TemplateProcessing, Sequence of these, null");
}

void CheckDecoder(const Reader& r, const Json& d) {
  if (d.is_null()) r.Fail("decoder is null; a byte-level tokenizer needs the ByteLevel decoder");
  const std::string type = r.Type(d, "decoder");
  if (type != "ByteLevel") r.Unsupported("decoder", type, "ByteLevel");
}

const Json& Section(const Json& j, const char* key) {
  static const Json kNull;
  auto it = j.find(key);
  return it == j.end() ? kNull : *it;
}

uint64_t ComputeFingerprint(const TokenizerData& d) {
  uint64_t h = HashBytes("rlid-tokenizer-v1");
  for (size_t id = 0; id < d.id_token.size(); ++id)
    h = HashCombine(h, HashBytes(d.id_token[id], static_cast<uint64_t>(d.id_kind[id])));
  for (const auto& [a, b] : d.merges) h = HashCombine(h, HashBytes(b, HashBytes(a)));
  for (const auto& t : d.added)
    h = HashCombine(
        h, HashBytes(t.content, (t.special ? 1 : 0) | (t.lstrip ? 2 : 0) | (t.rstrip ? 4 : 0)));
  h = HashCombine(h, HashBytes(d.normalizer_json.dump()));
  h = HashCombine(h, HashBytes(d.pre_tokenizer_json.dump()));
  return HashCombine(h, d.ignore_merges ? 1 : 0);
}

// model.type and the model's options: plain byte-level BPE only (no dropout,
// subword prefix/suffix or byte fallback). Keys other than type/vocab/merges
// are kept verbatim for ToJsonString().
void ReadModelOptions(const Reader& r, const Json& model, TokenizerData& d) {
  if (model.contains("type")) {
    const std::string type = r.String(model, "type", "model");
    if (type != "BPE") r.Unsupported("model", type, "BPE");
  }
  for (const auto& [key, value] : model.items()) {
    if (key == "type" || key == "vocab" || key == "merges") continue;
    d.model_extra[key] = value;
    if (key == "dropout" && !value.is_null() && !(value.is_number() && value.get<double>() == 0.0))
      r.Unsupported("model.dropout", value.dump(), "null");
    if ((key == "continuing_subword_prefix" || key == "end_of_word_suffix") && !value.is_null() &&
        !(value.is_string() && value.get<std::string>().empty()))
      r.Unsupported("model." + key, value.dump(), "\"\" or null");
    if (key == "byte_fallback" && value.is_boolean() && value.get<bool>())
      r.Unsupported("model.byte_fallback", "true", "false (byte-level BPE covers every byte)");
  }
  d.ignore_merges = r.Bool(model, "ignore_merges", false, "model");
}

// model.vocab, which must hold all 256 byte symbols -> vocab, byte_ids.
// Returns the largest id.
TokenId ReadVocab(const Reader& r, const Json& model, TokenizerData& d) {
  const Json& vocab = r.Object(model, "vocab", "model.vocab");
  TokenId max_id = -1;
  d.vocab.reserve(vocab.size());
  for (const auto& [token, id_json] : vocab.items()) {
    if (!id_json.is_number_integer() || id_json.get<int64_t>() < 0 ||
        id_json.get<int64_t>() > INT32_MAX)
      r.Fail(fmt::format("model.vocab['{}'] must be a non-negative integer id, found {}", token,
                         id_json.dump()));
    const TokenId id = id_json.get<TokenId>();
    d.vocab.emplace(token, id);
    max_id = std::max(max_id, id);
  }
  const auto& byte_map = ByteToUnicode();
  for (int b = 0; b < 256; ++b) {
    auto it = d.vocab.find(byte_map[b]);
    if (it == d.vocab.end())
      r.Fail(fmt::format("model.vocab has no token for byte 0x{:02x} ('{}')", b, byte_map[b]),
             "a byte-level BPE vocabulary must contain all 256 byte symbols");
    d.byte_ids[b] = it->second;
  }
  return max_id;
}

// model.merges, each "a b" or ["a", "b"] over vocab tokens whose concatenation
// is in the vocab -> merges (rank order) and merge_map (the first rank wins).
void ReadMerges(const Reader& r, const Json& model, TokenizerData& d) {
  auto merges_it = model.find("merges");
  if (merges_it == model.end() || !merges_it->is_array())
    r.Fail("expected an array at 'model.merges'");
  d.merges.reserve(merges_it->size());
  d.merge_map.reserve(merges_it->size());
  for (size_t i = 0; i < merges_it->size(); ++i) {
    const Json& m = (*merges_it)[i];
    std::string a, b;
    if (m.is_string()) {
      const std::string& s = m.get_ref<const std::string&>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        r.Fail(fmt::format("model.merges[{}] = \"{}\" is not two tokens separated by one space", i,
                           s));
      a = s.substr(0, space);
      b = s.substr(space + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      a = m[0].get<std::string>();
      b = m[1].get<std::string>();
    } else {
      r.Fail(
          fmt::format("model.merges[{}] must be \"a b\" or [\"a\", \"b\"], found {}", i, m.dump()));
    }
    auto ia = d.vocab.find(a), ib = d.vocab.find(b), iab = d.vocab.find(a + b);
    for (const auto* part : {&a, &b})
      if (d.vocab.find(*part) == d.vocab.end())
        r.Fail(fmt::format("model.merges[{}] ('{}' '{}'): '{}' is not in model.vocab", i, a, b,
                           *part));
    if (iab == d.vocab.end())
      r.Fail(
          fmt::format("model.merges[{}] ('{}' '{}'): the merged token '{}' is not in model.vocab",
                      i, a, b, a + b));
    d.merge_map.emplace(PairKey(ia->second, ib->second),
                        MergeTarget{static_cast<int32_t>(i), iab->second});  // first rank wins
    d.merges.emplace_back(std::move(a), std::move(b));
  }
}

// The optional added_tokens array -> added, added_index. Returns the largest
// id (-1 without any).
TokenId ReadAddedTokens(const Reader& r, const Json& added, TokenizerData& d) {
  if (!added.is_null() && !added.is_array()) r.Fail("expected an array at 'added_tokens'");
  TokenId max_id = -1;
  if (!added.is_array()) return max_id;
  for (size_t i = 0; i < added.size(); ++i) {
    const std::string path = fmt::format("added_tokens[{}]", i);
    const Json& a = added[i];
    if (!a.is_object()) r.Fail(fmt::format("expected an object at '{}'", path));
    AddedToken t;
    t.content = r.String(a, "content", path);
    auto id_it = a.find("id");
    if (id_it == a.end() || !id_it->is_number_integer() || id_it->get<int64_t>() < 0 ||
        id_it->get<int64_t>() > INT32_MAX)
      r.Fail(fmt::format("expected a non-negative integer at '{}.id'", path));
    t.id = id_it->get<TokenId>();
    t.special = r.Bool(a, "special", false, path);
    t.lstrip = r.Bool(a, "lstrip", false, path);
    t.rstrip = r.Bool(a, "rstrip", false, path);
    t.normalized = r.Bool(a, "normalized", false, path);
    if (r.Bool(a, "single_word", false, path))
      r.Unsupported("added token option", "single_word=true", "single_word=false");
    if (t.content.empty()) r.Fail(fmt::format("'{}.content' is empty", path));
    if (d.added_index.count(t.content))
      r.Fail(fmt::format("added token '{}' appears twice in added_tokens", t.content));
    max_id = std::max(max_id, t.id);
    d.added_index.emplace(t.content, d.added.size());
    d.added.push_back(std::move(t));
  }
  return max_id;
}

// normalizer -> pre_tokenizer (ending in exactly one ByteLevel) ->
// post_processor -> decoder; every section is also kept verbatim.
void ReadPipeline(const Reader& r, const Json& j, TokenizerData& d) {
  d.normalizer_json = Section(j, "normalizer");
  d.pre_tokenizer_json = Section(j, "pre_tokenizer");
  d.post_processor_json = Section(j, "post_processor");
  d.decoder_json = Section(j, "decoder");
  d.truncation_json = Section(j, "truncation");
  d.padding_json = Section(j, "padding");
  ReadNormalizer(r, d.normalizer_json, "normalizer", d.normalizers);
  if (d.pre_tokenizer_json.is_null())
    r.Fail("pre_tokenizer is null; a byte-level tokenizer needs a ByteLevel pre-tokenizer");
  ReadPreTokenizer(r, d.pre_tokenizer_json, "pre_tokenizer", d.pre_tokenizer);
  const auto byte_level_steps =
      std::count_if(d.pre_tokenizer.begin(), d.pre_tokenizer.end(),
                    [](const auto& s) { return s.kind == PreTokenizerStep::Kind::kByteLevel; });
  if (byte_level_steps != 1 || d.pre_tokenizer.back().kind != PreTokenizerStep::Kind::kByteLevel)
    r.Fail("pre_tokenizer must end with exactly one ByteLevel step (byte-level BPE)",
           "e.g. Sequence[Split(regex, Isolated), ByteLevel(use_regex=false)] as in Llama-3/Qwen");
  CheckPostProcessor(r, d.post_processor_json, "post_processor");
  CheckDecoder(r, d.decoder_json);
}

// Per id in [0, max_id]: token string, decoded bytes and kind. Each id names
// one token; an added token may repeat its own vocab entry.
void BuildIdTables(const Reader& r, TokenId max_id, TokenizerData& d) {
  const size_t n = static_cast<size_t>(max_id) + 1;
  d.id_token.assign(n, {});
  d.id_bytes.assign(n, {});
  d.id_kind.assign(n, TokenizerData::IdKind::kNone);
  for (const auto& [token, id] : d.vocab) {
    if (d.id_kind[id] != TokenizerData::IdKind::kNone)
      r.Fail(
          fmt::format("model.vocab gives id {} to both '{}' and '{}'", id, d.id_token[id], token));
    d.id_kind[id] = TokenizerData::IdKind::kVocab;
    d.id_token[id] = token;
  }
  for (const auto& t : d.added) {
    if (d.id_kind[t.id] == TokenizerData::IdKind::kVocab && d.id_token[t.id] != t.content)
      r.Fail(fmt::format("added token '{}' has id {}, which model.vocab gives to '{}'", t.content,
                         t.id, d.id_token[t.id]));
    if (d.id_kind[t.id] == TokenizerData::IdKind::kAdded ||
        d.id_kind[t.id] == TokenizerData::IdKind::kSpecial)
      r.Fail(fmt::format("added tokens '{}' and '{}' share id {}", d.id_token[t.id], t.content,
                         t.id));
    d.id_kind[t.id] = t.special ? TokenizerData::IdKind::kSpecial : TokenizerData::IdKind::kAdded;
    d.id_token[t.id] = t.content;
  }
  for (size_t id = 0; id < n; ++id) {
    if (d.id_kind[id] == TokenizerData::IdKind::kNone) continue;
    // HF's ByteLevel decoder: map every character back to its byte; a token
    // with any other character is emitted as its own UTF-8.
    auto bytes = ByteLevelDecode(d.id_token[id]);
    d.id_bytes[id] = bytes ? std::move(*bytes) : d.id_token[id];
  }
}

// added_by_first_byte: per first byte, the added tokens longest first (ties in
// file order), so the first match is the leftmost-longest one.
void IndexAddedTokens(TokenizerData& d) {
  std::vector<size_t> order(d.added.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return d.added[a].content.size() > d.added[b].content.size();
  });
  for (size_t i : order)
    d.added_by_first_byte[static_cast<unsigned char>(d.added[i].content[0])].push_back(i);
}

// The first usual end-of-text name that exists (an added token before a vocab
// entry of the same name).
std::optional<TokenId> FindEos(const TokenizerData& d) {
  for (const char* name : {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>"}) {
    if (auto it = d.added_index.find(name); it != d.added_index.end())
      return d.added[it->second].id;
    if (auto it = d.vocab.find(name); it != d.vocab.end()) return it->second;
  }
  return std::nullopt;
}

}  // namespace

std::shared_ptr<const TokenizerData> BuildTokenizerData(const Json& j, const std::string& source) {
  auto d = std::make_shared<TokenizerData>();
  d->source = source;
  Reader r(d->source);
  if (!j.is_object())
    r.Fail(fmt::format("expected a JSON object at the top, found {}", j.type_name()));
  const Json& model = r.Object(j, "model", "model");
  ReadModelOptions(r, model, *d);
  const TokenId vocab_max_id = ReadVocab(r, model, *d);
  ReadMerges(r, model, *d);
  const TokenId added_max_id = ReadAddedTokens(r, Section(j, "added_tokens"), *d);
  ReadPipeline(r, j, *d);
  BuildIdTables(r, std::max(vocab_max_id, added_max_id), *d);
  IndexAddedTokens(*d);
  d->eos = FindEos(*d);
  d->fingerprint = ComputeFingerprint(*d);
  return d;
}

// ---- BPE cache ----------------------------------------------------------------

bool BpeCache::Find(std::string_view word, std::vector<TokenId>& out) const {
  Shard& s = shards_[Hash{}(word) % kShards];
  std::lock_guard lock(s.mu);
  auto it = s.map.find(word);
  if (it == s.map.end()) return false;
  out.insert(out.end(), it->second.begin(), it->second.end());
  return true;
}

void BpeCache::Insert(std::string_view word, const std::vector<TokenId>& ids) const {
  Shard& s = shards_[Hash{}(word) % kShards];
  std::lock_guard lock(s.mu);
  if (s.map.size() >= kMaxEntriesPerShard) s.map.clear();  // bounded memory; refills quickly
  s.map.emplace(std::string(word), ids);
}

namespace {

// BPE over the bytes of one pre-token: repeatedly merges the lowest-rank
// adjacent pair, leftmost first (HF's order). Appends the ids to `out`.
void BpeMerge(const TokenizerData& d, std::string_view word, std::vector<TokenId>& out) {
  struct Symbol {
    TokenId id;
    int prev, next;
    bool alive;
  };
  struct Candidate {
    int32_t rank;
    int pos;
    TokenId id;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  const int n = static_cast<int>(word.size());
  std::vector<Symbol> syms(n);
  for (int i = 0; i < n; ++i)
    syms[i] = {d.byte_ids[static_cast<unsigned char>(word[i])], i - 1, i + 1 < n ? i + 1 : -1,
               true};
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto push = [&](int pos) {
    const int next = syms[pos].next;
    if (next < 0) return;
    auto it = d.merge_map.find(PairKey(syms[pos].id, syms[next].id));
    if (it != d.merge_map.end()) heap.push({it->second.rank, pos, it->second.id});
  };
  for (int i = 0; i + 1 < n; ++i) push(i);
  while (!heap.empty()) {
    const Candidate c = heap.top();
    heap.pop();
    Symbol& left = syms[c.pos];
    if (!left.alive || left.next < 0) continue;
    Symbol& right = syms[left.next];
    auto it = d.merge_map.find(PairKey(left.id, right.id));
    if (it == d.merge_map.end() || it->second.rank != c.rank || it->second.id != c.id)
      continue;  // stale
    left.id = c.id;
    right.alive = false;
    left.next = right.next;
    if (left.next >= 0) syms[left.next].prev = c.pos;
    if (left.prev >= 0) push(left.prev);
    push(c.pos);
  }
  for (int i = 0; i >= 0; i = syms[i].next) out.push_back(syms[i].id);
}

void EncodeWord(const TokenizerData& d, std::string_view word, std::vector<TokenId>& out,
                std::vector<TokenId>& scratch) {
  if (word.empty()) return;
  if (word.size() == 1) {
    out.push_back(d.byte_ids[static_cast<unsigned char>(word[0])]);
    return;
  }
  const bool cacheable = word.size() <= BpeCache::kMaxWordBytes;
  if (cacheable && d.cache.Find(word, out)) return;
  scratch.clear();
  bool done = false;
  if (d.ignore_merges) {
    auto it = d.vocab.find(ByteLevelEncode(word));
    if (it != d.vocab.end()) {
      scratch.push_back(it->second);
      done = true;
    }
  }
  if (!done) BpeMerge(d, word, scratch);
  if (cacheable) d.cache.Insert(word, scratch);
  out.insert(out.end(), scratch.begin(), scratch.end());
}

// Per-thread buffers reused across Encode calls (no allocation per piece).
struct EncodeScratch {
  std::vector<std::string_view> pieces, next;
  std::vector<std::pair<size_t, size_t>> matches;
  std::vector<TokenId> ids;
};
EncodeScratch& Scratch() {
  thread_local EncodeScratch scratch;
  return scratch;
}

// Splits `pieces` by the regex of `step`, keeping gaps and matches as the
// step's behaviour says.
void SplitPieces(const PreTokenizerStep& step, const std::vector<std::string_view>& pieces,
                 std::vector<std::string_view>& out,
                 std::vector<std::pair<size_t, size_t>>& matches) {
  for (std::string_view p : pieces) {
    matches.clear();
    step.regex->FindAll(p, matches);
    size_t prev = 0;
    const bool keep_gaps = !step.removed || !step.invert;
    const bool keep_matches = !step.removed || step.invert;
    for (const auto& [b, e] : matches) {
      if (b > prev && keep_gaps) out.push_back(p.substr(prev, b - prev));
      if (keep_matches) out.push_back(p.substr(b, e - b));
      prev = e;
    }
    if (prev < p.size() && keep_gaps) out.push_back(p.substr(prev));
  }
}

// Normalises and pre-tokenises one valid UTF-8 run and BPE-encodes its pieces.
void EncodeValidRun(const TokenizerData& d, std::string_view run, std::vector<TokenId>& out) {
  std::string normalized;
  if (!d.normalizers.empty()) {
    normalized = std::string(run);
    for (NormalForm f : d.normalizers) normalized = Normalize(normalized, f);
    run = normalized;
  }
  EncodeScratch& scratch = Scratch();
  auto& pieces = scratch.pieces;
  auto& next = scratch.next;
  auto& matches = scratch.matches;
  pieces.assign(1, run);
  std::deque<std::string> prefixed;  // owns pieces that got a prefix space (stable addresses)
  for (const auto& step : d.pre_tokenizer) {
    next.clear();
    if (step.kind == PreTokenizerStep::Kind::kByteLevel && step.add_prefix_space) {
      for (auto& p : pieces) {
        if (!p.empty() && p.front() != ' ') {
          prefixed.push_back(" " + std::string(p));
          p = prefixed.back();
        }
      }
    }
    if (step.regex) {
      SplitPieces(step, pieces, next, matches);
      pieces.swap(next);
    }
  }
  for (std::string_view p : pieces) EncodeWord(d, p, out, scratch.ids);
}

void EncodeText(const TokenizerData& d, std::string_view text, std::vector<TokenId>& out) {
  if (text.empty()) return;
  ForEachUtf8Run(text, [&](std::string_view run, bool valid) {
    if (valid)
      EncodeValidRun(d, run, out);
    else
      EncodeWord(d, run, out, Scratch().ids);  // invalid bytes: one pre-token of byte symbols
  });
}

// Drops leading (front=true) or trailing Unicode whitespace.
std::string_view TrimWhitespace(std::string_view s, bool front) {
  if (front) {
    size_t i = 0;
    while (i < s.size()) {
      const Utf8Scalar u = DecodeUtf8At(s, i);
      if (!u.well_formed || !IsUnicodeWhitespace(u.code_point)) break;
      i += u.length;
    }
    return s.substr(i);
  }
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80 && end - start < 4)
      --start;
    const Utf8Scalar u = DecodeUtf8At(s, start);
    if (!u.well_formed || start + u.length != end || !IsUnicodeWhitespace(u.code_point)) break;
    end = start;
  }
  return s.substr(0, end);
}

}  // namespace
}  // namespace internal

using internal::TokenizerData;

Tokenizer Tokenizer::FromJsonString(std::string_view json, std::string source) {
  nlohmann::json j;  // std::map objects: O(log n) inserts for a 150k-entry vocab
  try {
    j = nlohmann::json::parse(json.begin(), json.end());
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(fmt::format("tokenizer '{}' is not valid JSON: {}", source, e.what()),
                      "pass a Hugging Face tokenizer.json");
  }
  return Tokenizer(internal::BuildTokenizerData(j, source));
}

Tokenizer::Tokenizer() {
  // Built once: training on an empty corpus yields exactly the forced tokens.
  static const std::shared_ptr<const internal::TokenizerData> kBytes = [] {
    TokenizerTrainOptions opt;
    opt.vocab_size = 285;  // 256 bytes + 26 forced label merges + 3 specials
    return Train({}, opt).data_;
  }();
  data_ = kBytes;
  format_ = WithConfig({}).format_;
}

Tokenizer Tokenizer::FromFile(const std::string& path) {
  return FromJsonString(ReadRegularFile(path, kMaxTokenizerFileBytes, "tokenizer file"), path);
}

std::string Tokenizer::ToJsonString() const {
  // Written by hand (not one nlohmann dump) so a 150k-entry vocab stays in id
  // order, one entry per line, in linear time.
  const TokenizerData& d = *data_;
  const auto q = [](const std::string& s) { return nlohmann::json(s).dump(); };
  std::string out = "{\n  \"version\": \"1.0\",\n";
  out += "  \"truncation\": " + d.truncation_json.dump() + ",\n";
  out += "  \"padding\": " + d.padding_json.dump() + ",\n";
  out += "  \"added_tokens\": [";
  for (size_t i = 0; i < d.added.size(); ++i) {
    const auto& t = d.added[i];
    out += fmt::format(
        "{}\n    {{\"id\": {}, \"content\": {}, \"single_word\": false, \"lstrip\": {}, "
        "\"rstrip\": {}, "
        "\"normalized\": {}, \"special\": {}}}",
        i ? "," : "", t.id, q(t.content), t.lstrip, t.rstrip, t.normalized, t.special);
  }
  out += d.added.empty() ? "],\n" : "\n  ],\n";
  out += "  \"normalizer\": " + d.normalizer_json.dump() + ",\n";
  out += "  \"pre_tokenizer\": " + d.pre_tokenizer_json.dump() + ",\n";
  out += "  \"post_processor\": " + d.post_processor_json.dump() + ",\n";
  out += "  \"decoder\": " + d.decoder_json.dump() + ",\n";
  out += "  \"model\": {\n    \"type\": \"BPE\",\n";
  for (const auto& [key, value] : d.model_extra.items())
    out += "    " + q(key) + ": " + value.dump() + ",\n";
  out += "    \"vocab\": {";
  bool first = true;
  for (size_t id = 0; id < d.id_token.size(); ++id) {
    if (d.id_kind[id] != TokenizerData::IdKind::kVocab) continue;
    out += fmt::format("{}\n      {}: {}", first ? "" : ",", q(d.id_token[id]), id);
    first = false;
  }
  out += "\n    },\n    \"merges\": [";
  for (size_t i = 0; i < d.merges.size(); ++i)
    out += fmt::format("{}\n      [{}, {}]", i ? "," : "", q(d.merges[i].first),
                       q(d.merges[i].second));
  out += d.merges.empty() ? "]\n  }\n}\n" : "\n    ]\n  }\n}\n";
  return out;
}

void Tokenizer::Save(const std::string& path) const {
  ReplaceFile(path, ToJsonString(), "tokenizer file");
}

std::vector<TokenId> Tokenizer::Encode(std::string_view text, bool allow_special) const {
  const TokenizerData& d = *data_;
  std::vector<TokenId> out;
  out.reserve(text.size() / 3 + 1);
  if (d.added.empty()) {
    internal::EncodeText(d, text, out);
    return out;
  }
  // Split out added tokens (leftmost-longest), then honour lstrip/rstrip by
  // trimming whitespace from the neighbouring text.
  struct Part {
    std::string_view text;
    const internal::AddedToken* token;
  };
  std::vector<Part> parts;
  size_t start = 0, i = 0;
  while (i < text.size()) {
    const internal::AddedToken* hit = nullptr;
    for (size_t k : d.added_by_first_byte[static_cast<unsigned char>(text[i])]) {
      const auto& t = d.added[k];
      if ((allow_special || !t.special) && text.compare(i, t.content.size(), t.content) == 0) {
        hit = &t;
        break;
      }
    }
    if (!hit) {
      ++i;
      continue;
    }
    if (i > start) parts.push_back({text.substr(start, i - start), nullptr});
    parts.push_back({{}, hit});
    i += hit->content.size();
    start = i;
  }
  if (start < text.size()) parts.push_back({text.substr(start), nullptr});
  for (size_t p = 0; p < parts.size(); ++p) {
    if (!parts[p].token) continue;
    if (parts[p].token->lstrip && p > 0 && !parts[p - 1].token)
      parts[p - 1].text = internal::TrimWhitespace(parts[p - 1].text, /*front=*/false);
    if (parts[p].token->rstrip && p + 1 < parts.size() && !parts[p + 1].token)
      parts[p + 1].text = internal::TrimWhitespace(parts[p + 1].text, /*front=*/true);
  }
  for (const Part& part : parts) {
    if (part.token)
      out.push_back(part.token->id);
    else
      internal::EncodeText(d, part.text, out);
  }
  return out;
}

std::string Tokenizer::Decode(std::span<const TokenId> ids, bool skip_special) const {
  const TokenizerData& d = *data_;
  std::string out;
  for (TokenId id : ids) {
    if (id < 0 || static_cast<size_t>(id) >= d.id_kind.size() ||
        d.id_kind[id] == TokenizerData::IdKind::kNone)
      throw ConfigError(fmt::format("token id {} is not in the vocabulary of '{}' (size {})", id,
                                    d.source, VocabSize()),
                        "decode ids made by the same tokenizer");
    if (skip_special && d.id_kind[id] == TokenizerData::IdKind::kSpecial) continue;
    out += d.id_bytes[id];
  }
  return out;
}

int32_t Tokenizer::VocabSize() const { return static_cast<int32_t>(data_->id_kind.size()); }

std::optional<TokenId> Tokenizer::TokenToId(std::string_view token) const {
  const TokenizerData& d = *data_;
  const std::string key(token);
  if (auto it = d.vocab.find(key); it != d.vocab.end()) return it->second;
  if (auto it = d.added_index.find(key); it != d.added_index.end()) return d.added[it->second].id;
  return std::nullopt;
}

namespace {
void CheckId(const TokenizerData& d, TokenId id) {
  if (id < 0 || static_cast<size_t>(id) >= d.id_kind.size() ||
      d.id_kind[id] == TokenizerData::IdKind::kNone)
    throw ConfigError(fmt::format("token id {} is not in the vocabulary of '{}' (size {})", id,
                                  d.source, d.id_kind.size()));
}
}  // namespace

std::string Tokenizer::IdToToken(TokenId id) const {
  CheckId(*data_, id);
  return data_->id_token[id];
}

std::string Tokenizer::DecodeToken(TokenId id) const {
  CheckId(*data_, id);
  return data_->id_bytes[id];
}

bool Tokenizer::IsSpecial(TokenId id) const {
  return id >= 0 && static_cast<size_t>(id) < data_->id_kind.size() &&
         data_->id_kind[id] == TokenizerData::IdKind::kSpecial;
}

std::optional<TokenId> Tokenizer::SingleTokenId(std::string_view text) const {
  auto ids = Encode(text);
  if (ids.size() != 1) return std::nullopt;
  return ids[0];
}

TokenId Tokenizer::RequireLabelToken(std::string_view label) const {
  const std::string text = " " + std::string(label);
  auto ids = Encode(text);
  if (ids.size() == 1) return ids[0];
  throw ConfigError(
      fmt::format(
          "label '{}' is not one token after the answer prefix: '{}' -> [{}] with tokenizer '{}'",
          label, text, fmt::join(ids, ", "), data_->source),
      "use a tokenizer trained by rlid or letter labels");
}

const std::string& Tokenizer::source() const { return data_->source; }

}  // namespace rlid::policy

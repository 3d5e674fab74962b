// Tokenizer::Train: learns a compact byte-level BPE vocabulary from a text
// corpus (the CLI builds it from env text). Pre-tokens come from the Qwen3
// regex, so " A" is a pre-token of its own and the forced merges "Ġ"+"A" ..
// "Ġ"+"Z" make every menu label one token in context. Greedy BPE with
// incremental pair counts and a lazy max-heap; ties broken lexically.
#include <fmt/format.h>

#include <algorithm>
#include <queue>
#include <unordered_map>

#include "core/error.h"
#include "policy/tokenizer/tokenizer.h"
#include "policy/tokenizer/tokenizer_internal.h"

namespace rlid::policy {
namespace {

using internal::ByteToUnicode;
using Json = nlohmann::json;

constexpr const char* kSpecialTokens[] = {"<|endoftext|>", "<|im_start|>", "<|im_end|>"};
constexpr int kNumSpecial = 3;
constexpr int kMinVocab = 256 + 26 + kNumSpecial;

constexpr uint64_t PairKey(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
}
constexpr int32_t Left(uint64_t key) { return static_cast<int32_t>(key >> 32); }
constexpr int32_t Right(uint64_t key) { return static_cast<int32_t>(key & 0xffffffffu); }

const internal::Regex& QwenRegex() {
  static const internal::Regex regex(internal::kQwenPattern, false, "Qwen3 pre-tokenizer regex");
  return regex;
}

// Pre-token -> occurrences, the way Encode() pre-tokenises (no normaliser).
std::unordered_map<std::string, int64_t> CountWords(const std::vector<std::string>& corpus) {
  std::unordered_map<std::string, int64_t> counts;
  std::vector<std::pair<size_t, size_t>> matches;
  for (const std::string& doc : corpus) {
    internal::ForEachUtf8Run(doc, [&](std::string_view run, bool valid) {
      if (!valid) {
        ++counts[std::string(run)];
        return;
      }
      matches.clear();
      QwenRegex().FindAll(run, matches);
      size_t prev = 0;
      for (const auto& [b, e] : matches) {
        if (b > prev) ++counts[std::string(run.substr(prev, b - prev))];
        ++counts[std::string(run.substr(b, e - b))];
        prev = e;
      }
      if (prev < run.size()) ++counts[std::string(run.substr(prev))];
    });
  }
  return counts;
}

class Trainer {
 public:
  Trainer(const std::vector<std::string>& corpus, const TokenizerTrainOptions& opt) : opt_(opt) {
    for (int b = 0; b < 256; ++b) AddToken(ByteToUnicode()[b]);
    auto counts = CountWords(corpus);
    std::vector<std::pair<std::string, int64_t>> sorted(counts.begin(), counts.end());
    std::sort(sorted.begin(), sorted.end());  // word order must not depend on hashing
    for (auto& [word, count] : sorted) {
      std::vector<int32_t> syms(word.size());
      for (size_t i = 0; i < word.size(); ++i) syms[i] = static_cast<unsigned char>(word[i]);
      words_.push_back(std::move(syms));
      counts_.push_back(count);
    }
  }

  void Run() {
    // " A".." Z" first, whatever the corpus says.
    for (char c = 'A'; c <= 'Z'; ++c) ForceMerge(' ', static_cast<unsigned char>(c));
    CountPairs();
    const size_t target = static_cast<size_t>(opt_.vocab_size - kNumSpecial);
    while (tokens_.size() < target && !heap_.empty()) {
      const Entry top = heap_.top();
      heap_.pop();
      auto it = pair_counts_.find(top.key);
      const int64_t actual = it == pair_counts_.end() ? 0 : it->second;
      if (actual != top.count) {  // stale: counts of existing pairs only shrink
        if (actual > 0) Push(top.key, actual);
        continue;
      }
      if (actual < opt_.min_frequency) break;
      Merge(top.key);
    }
  }

  Json ToJson() const {
    Json vocab = Json::object();
    for (size_t id = 0; id < tokens_.size(); ++id) vocab[tokens_[id]] = id;
    Json merges = Json::array();
    for (const auto& [a, b] : merges_) merges.push_back({tokens_[a], tokens_[b]});
    Json added = Json::array();
    for (int i = 0; i < kNumSpecial; ++i)
      added.push_back({{"id", tokens_.size() + i},
                       {"content", kSpecialTokens[i]},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", true}});
    const Json byte_level = {{"type", "ByteLevel"},
                             {"add_prefix_space", false},
                             {"trim_offsets", false},
                             {"use_regex", false}};
    Json j;
    j["version"] = "1.0";
    j["truncation"] = nullptr;
    j["padding"] = nullptr;
    j["added_tokens"] = std::move(added);
    j["normalizer"] = nullptr;
    j["pre_tokenizer"] = {{"type", "Sequence"},
                          {"pretokenizers",
                           {{{"type", "Split"},
                             {"pattern", {{"Regex", internal::kQwenPattern}}},
                             {"behavior", "Isolated"},
                             {"invert", false}},
                            byte_level}}};
    j["post_processor"] = byte_level;
    j["decoder"] = byte_level;
    j["model"] = {{"type", "BPE"},
                  {"dropout", nullptr},
                  {"unk_token", nullptr},
                  {"continuing_subword_prefix", ""},
                  {"end_of_word_suffix", ""},
                  {"fuse_unk", false},
                  {"byte_fallback", false},
                  {"ignore_merges", false},
                  {"vocab", std::move(vocab)},
                  {"merges", std::move(merges)}};
    return j;
  }

 private:
  struct Entry {
    int64_t count;
    uint64_t key;
  };
  // Max-heap order: higher count first, then the lexically smaller pair.
  struct Less {
    const std::vector<std::string>* tokens;
    bool operator()(const Entry& a, const Entry& b) const {
      if (a.count != b.count) return a.count < b.count;
      const auto& t = *tokens;
      const int c = t[Left(a.key)].compare(t[Left(b.key)]);
      if (c != 0) return c > 0;
      return t[Right(a.key)] > t[Right(b.key)];
    }
  };

  int32_t AddToken(const std::string& s) {
    auto [it, inserted] = index_.emplace(s, static_cast<int32_t>(tokens_.size()));
    if (inserted) tokens_.push_back(s);
    return it->second;
  }

  void Push(uint64_t key, int64_t count) { heap_.push({count, key}); }

  // Replaces non-overlapping (l, r) left to right; returns whether any changed.
  static bool Replace(std::vector<int32_t>& syms, int32_t l, int32_t r, int32_t merged) {
    bool changed = false;
    size_t out = 0;
    for (size_t i = 0; i < syms.size(); ++i) {
      if (i + 1 < syms.size() && syms[i] == l && syms[i + 1] == r) {
        syms[out++] = merged;
        ++i;
        changed = true;
      } else {
        syms[out++] = syms[i];
      }
    }
    syms.resize(out);
    return changed;
  }

  void ForceMerge(int32_t l, int32_t r) {
    const int32_t merged = AddToken(tokens_[l] + tokens_[r]);
    merges_.emplace_back(l, r);
    for (auto& w : words_) Replace(w, l, r, merged);
  }

  void CountPairs() {
    for (size_t w = 0; w < words_.size(); ++w) {
      const auto& s = words_[w];
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        const uint64_t key = PairKey(s[i], s[i + 1]);
        pair_counts_[key] += counts_[w];
        auto& list = where_[key];
        if (list.empty() || list.back() != static_cast<int32_t>(w))
          list.push_back(static_cast<int32_t>(w));
      }
    }
    std::vector<uint64_t> keys;
    keys.reserve(pair_counts_.size());
    for (const auto& [key, count] : pair_counts_) keys.push_back(key);
    std::sort(keys.begin(), keys.end());
    for (uint64_t key : keys) Push(key, pair_counts_[key]);
  }

  void Merge(uint64_t key) {
    const int32_t l = Left(key), r = Right(key);
    const int32_t merged = AddToken(tokens_[l] + tokens_[r]);
    merges_.emplace_back(l, r);
    std::vector<int32_t> affected = std::move(where_[key]);
    where_.erase(key);
    std::sort(affected.begin(), affected.end());
    affected.erase(std::unique(affected.begin(), affected.end()), affected.end());
    std::unordered_map<uint64_t, int64_t> delta;
    for (int32_t w : affected) {
      auto& s = words_[w];
      std::vector<int32_t> before = s;
      if (!Replace(s, l, r, merged)) continue;
      const int64_t c = counts_[w];
      for (size_t i = 0; i + 1 < before.size(); ++i) delta[PairKey(before[i], before[i + 1])] -= c;
      for (size_t i = 0; i + 1 < s.size(); ++i) {
        const uint64_t k = PairKey(s[i], s[i + 1]);
        delta[k] += c;
        if (s[i] == merged || s[i + 1] == merged) {
          auto& list = where_[k];
          if (list.empty() || list.back() != w) list.push_back(w);
        }
      }
    }
    std::vector<uint64_t> grown;
    for (const auto& [k, dc] : delta) {
      if (dc == 0) continue;
      int64_t& count = pair_counts_[k];
      count += dc;
      if (dc > 0) grown.push_back(k);
      if (count <= 0) pair_counts_.erase(k);
    }
    std::sort(grown.begin(), grown.end());
    for (uint64_t k : grown) Push(k, pair_counts_[k]);
    pair_counts_.erase(key);
  }

  const TokenizerTrainOptions& opt_;
  std::vector<std::string> tokens_;                 // id -> byte-level string
  std::unordered_map<std::string, int32_t> index_;  // string -> id
  std::vector<std::pair<int32_t, int32_t>> merges_;
  std::vector<std::vector<int32_t>> words_;
  std::vector<int64_t> counts_;
  std::unordered_map<uint64_t, int64_t> pair_counts_;
  std::unordered_map<uint64_t, std::vector<int32_t>> where_;  // pair -> words that may contain it
  std::priority_queue<Entry, std::vector<Entry>, Less> heap_{Less{&tokens_}};
};

}  // namespace

Tokenizer Tokenizer::Train(const std::vector<std::string>& corpus,
                           const TokenizerTrainOptions& opt) {
  if (opt.vocab_size < kMinVocab || opt.vocab_size > (1 << 24))
    throw ConfigError(
        fmt::format("tokenizer vocab_size must be in [{}, {}], found {}", kMinVocab, 1 << 24,
                    opt.vocab_size),
        "256 byte tokens + 26 label tokens ' A'..' Z' + 3 special tokens is the minimum");
  if (opt.min_frequency < 1)
    throw ConfigError(
        fmt::format("tokenizer min_frequency must be >= 1, found {}", opt.min_frequency));
  Trainer trainer(corpus, opt);
  trainer.Run();
  return Tokenizer(internal::BuildTokenizerData(trainer.ToJson(), "<trained>"));
}

}  // namespace rlid::policy

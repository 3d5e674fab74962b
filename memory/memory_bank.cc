// MemoryBank: items in a map plus visibility indexes in C++. Published items
// are grouped into partitions, one per visibility class (pass; split unless
// allow_cross_split; instance unless allow_cross_instance), so a published
// item is visible to exactly the episodes of its partition besides its own.
// Keyword relevance is FTS5's bm25 (k1 = 1.2, b = 0.75) over the tokens FTS5's
// own "porter unicode61" tokenizer produces, with every statistic (number of
// documents, average length, document frequency) taken over exactly the items
// visible to the reader: no invisible item (another split, instance or pass,
// or an unpublished item of another episode) can change a ranking.
#include "memory/memory_bank.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sqlite3.h>

#include <algorithm>
#include <cctype>
#include <climits>
#include <cmath>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "memory/sqlite.h"

namespace rlid::memory {
namespace {

constexpr size_t kMaxQueryTerms = 32;
// FTS5's bm25 constants (fts5_aux.c).
constexpr double kK1 = 1.2, kB = 0.75;

// Term -> frequency in one text, sorted by term.
using TermFreqs = std::vector<std::pair<std::string, int>>;

int FrequencyOf(const TermFreqs& terms, const std::string& term) {
  auto it = std::lower_bound(terms.begin(), terms.end(), term,
                             [](const auto& tf, const std::string& t) { return tf.first < t; });
  return it != terms.end() && it->first == term ? it->second : 0;
}

// FTS5's "porter unicode61" tokenizer called directly, so keyword memory sees
// exactly the tokens (case-folded, diacritics removed, stemmed) an FTS5 table
// with tokenize = 'porter unicode61' would index. Not thread-safe.
class PorterTokenizer {
 public:
  PorterTokenizer() {
    fts5_api* api = nullptr;
    {
      Statement s = db_.Prepare("SELECT fts5(?1)");
      sqlite3_bind_pointer(s.handle(), 1, &api, "fts5_api_ptr", nullptr);
      s.Step();
    }
    if (!api)
      throw IoError("this SQLite library was built without FTS5, which keyword memory needs",
                    "use an SQLite with FTS5, or set [memory] retrieval = \"recency\"");
    void* user = nullptr;
    RLID_CHECK_EQ(api->xFindTokenizer(api, "porter", &user, &impl_), SQLITE_OK,
                  "FTS5 has no porter tokenizer");
    const char* args[] = {"unicode61"};
    RLID_CHECK_EQ(impl_.xCreate(user, args, 1, &tok_), SQLITE_OK,
                  "creating FTS5's porter unicode61 tokenizer");
  }
  ~PorterTokenizer() {
    if (tok_) impl_.xDelete(tok_);
  }
  PorterTokenizer(const PorterTokenizer&) = delete;
  PorterTokenizer& operator=(const PorterTokenizer&) = delete;

  // Every token of `text` in order (flags: FTS5_TOKENIZE_DOCUMENT or _QUERY).
  std::vector<std::string> Tokens(std::string_view text, int flags) {
    RLID_CHECK_LE(text.size(), static_cast<size_t>(INT_MAX), "memory text too long to index");
    std::vector<std::string> out;
    auto on_token = [](void* ctx, int tflags, const char* token, int n, int, int) -> int {
      if (!(tflags & FTS5_TOKEN_COLOCATED))
        static_cast<std::vector<std::string>*>(ctx)->emplace_back(token, n);
      return SQLITE_OK;
    };
    const int rc =
        impl_.xTokenize(tok_, &out, flags, text.data(), static_cast<int>(text.size()), on_token);
    RLID_CHECK_EQ(rc, SQLITE_OK, "FTS5 tokenizer failed on a memory text");
    return out;
  }

 private:
  Db db_{":memory:", SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_MEMORY};
  fts5_tokenizer impl_{};
  ::Fts5Tokenizer* tok_ = nullptr;
};

}  // namespace

void MemoryConfig::Load(ConfigNode s) {
  s.Get("enabled", enabled, "store and retrieve agent memory");
  s.GetEnum("write", write,
            "what is stored: environment facts, plus agent notes, or nothing");
  s.Get("summaries", summaries, "add a summary item (derived from its items) at episode end");
  s.GetEnum("retrieval", retrieval,
            "newest items first, or bm25 relevance (FTS5 tokens) to the current observation");
  s.GetEnum("scope", scope,
            "read only the episode's own items, or also items of ended episodes of the run");
  s.Get("budget_items", budget_items, "at most this many memory items per prompt");
  s.Get("budget_tokens", budget_tokens,
        "at most this many tokens of memory text per prompt (0: no limit)");
  s.Get("allow_cross_split", allow_cross_split,
        "let episodes read memory created in another split (train/test); off = leak guard");
  s.Get("allow_cross_instance", allow_cross_instance,
        "let episodes read memory about another env instance (seed / world); off = each "
        "episode reads only what was learnt about its own instance");
  if (budget_items < 1)
    throw ConfigError(fmt::format("{}: memory.budget_items must be >= 1, got {}",
                                  s.Where("budget_items"), budget_items),
                      "set enabled = false to turn memory off");
  if (budget_tokens < 0)
    throw ConfigError(fmt::format("{}: memory.budget_tokens must be >= 0, got {}",
                                  s.Where("budget_tokens"), budget_tokens),
                      "0 means no token limit");
}

int CountWords(std::string_view text) {
  int n = 0;
  bool in_word = false;
  for (unsigned char c : text) {
    const bool space = std::isspace(c) != 0;
    if (!space && !in_word) ++n;
    in_word = !space;
  }
  return n;
}

std::vector<MemoryRead> ToReads(const std::vector<Retrieved>& retrieved) {
  std::vector<MemoryRead> out;
  for (const auto& r : retrieved) out.push_back({r.item.id, r.rank, r.score});
  return out;
}

struct MemoryBank::Impl {
  struct Entry {
    MemoryItem item;
    int tokens = 0;   // budget tokens (count_tokens)
    TermFreqs terms;  // keyword retrieval only
    int length = 0;   // FTS5 tokens: the bm25 document length
    bool published = false;
  };
  struct Posting {
    int64_t id;
    int tf;
  };
  // The published items of one visibility class.
  struct Partition {
    std::set<int64_t> ids;
    int64_t length = 0;  // sum of their FTS5 lengths
    std::unordered_map<std::string, std::vector<Posting>> postings;
  };
  // (pass, split or "" with allow_cross_split, instance or 0 with allow_cross_instance)
  using Key = std::tuple<int64_t, std::string, uint64_t>;
  struct Episode {
    EpisodeScope scope;
    std::vector<int64_t> items;  // created by the episode, ascending
  };

  Impl(const MemoryConfig& c, int64_t run, IdAllocator* external, TokenCounter count)
      : config(c),
        run_id(run),
        ids(external ? external : &own_ids),
        count_tokens(std::move(count)) {
    RLID_CHECK(count_tokens != nullptr, "MemoryBank needs a token counter");
    if (config.retrieval == Retrieval::kKeyword) tokenizer = std::make_unique<PorterTokenizer>();
  }

  Key KeyOf(int64_t pass, const std::string& split, uint64_t instance) const {
    return {pass, config.allow_cross_split ? std::string() : split,
            config.allow_cross_instance ? 0 : instance};
  }
  Key KeyOf(const MemoryItem& it) const { return KeyOf(it.pass, it.split, it.instance); }
  Key KeyOf(const EpisodeScope& s) const { return KeyOf(s.pass, s.split, s.instance); }
  bool RunScope() const { return config.scope == MemoryScope::kRun; }

  Episode& OpenEpisode(int64_t episode_id, std::string_view doing) {
    auto it = open.find(episode_id);
    if (it != open.end()) return it->second;
    if (ended.count(episode_id))
      throw InternalError(fmt::format("{} for episode {}, which has ended", doing, episode_id),
                          "EndEpisode must be an episode's last memory call");
    throw InternalError(
        fmt::format("{} for episode {}, which was never registered", doing, episode_id),
        "call MemoryBank::BeginEpisode(episode_id, scope) when the episode starts");
  }

  bool Visible(const Entry& e, int64_t episode_id, const EpisodeScope& s) const {
    if (e.item.source.episode_id == episode_id) return true;  // own items share its scope
    return RunScope() && e.published && KeyOf(e.item) == KeyOf(s);
  }

  void CheckGuards(const MemoryItem& it, int64_t episode_id, const EpisodeScope& s,
                   std::string_view use) const {
    if (it.pass != s.pass)
      throw InternalError(
          fmt::format("pass guard: episode {} (pass {}) may not {} memory item {} of pass {}",
                      episode_id, s.pass, use, it.id, it.pass),
          "training reads only pass 0 and each evaluation only its own pass; give every "
          "evaluation call a fresh pass from MemoryBank::NewPass()");
    if (it.split != s.split && !config.allow_cross_split)
      throw ConfigError(
          fmt::format("split guard: episode {} ({} split) may not {} memory item {} created in "
                      "the {} split",
                      episode_id, s.split, use, it.id, it.split),
          "cross-split memory is refused unless [memory] allow_cross_split = true");
    if (it.instance != s.instance && !config.allow_cross_instance)
      throw ConfigError(
          fmt::format("instance guard: episode {} (instance {}) may not {} memory item {} about "
                      "instance {}",
                      episode_id, s.instance, use, it.id, it.instance),
          "memory about another env instance is refused unless [memory] allow_cross_instance "
          "= true");
  }

  Entry& Index(MemoryItem item) {
    Entry e;
    e.tokens = count_tokens(item.content);
    if (tokenizer) {
      std::map<std::string, int> tf;
      for (auto& t : tokenizer->Tokens(item.content, FTS5_TOKENIZE_DOCUMENT)) {
        ++tf[std::move(t)];
        ++e.length;
      }
      e.terms.assign(tf.begin(), tf.end());
    }
    auto& same = by_content[std::string(MemoryKindName(item.kind)) + '\n' + item.content];
    same.insert(std::lower_bound(same.begin(), same.end(), item.id), item.id);
    const int64_t id = item.id;
    e.item = std::move(item);
    return items.emplace(id, std::move(e)).first->second;
  }

  void Publish(Entry& e) {
    e.published = true;
    Partition& p = partitions[KeyOf(e.item)];
    p.ids.insert(e.item.id);
    p.length += e.length;
    for (const auto& [term, tf] : e.terms) p.postings[term].push_back({e.item.id, tf});
  }

  MemoryItem Insert(std::string content, MemoryKind kind, MemorySource source, Episode& ep,
                    int64_t policy_version, std::vector<int64_t> parents) {
    MemoryItem item;
    item.id = ids->Next();
    item.content = std::move(content);
    item.kind = kind;
    item.source = source;
    item.source.run_id = run_id;
    item.split = ep.scope.split;
    item.instance = ep.scope.instance;
    item.pass = ep.scope.pass;
    item.policy_version = policy_version;
    item.created_at = NowIso8601();
    std::sort(parents.begin(), parents.end());
    parents.erase(std::unique(parents.begin(), parents.end()), parents.end());
    item.parents = std::move(parents);
    ep.items.push_back(item.id);
    ++stats.written;
    return Index(std::move(item)).item;
  }

  // The oldest visible item with this content and kind (the dedupe target).
  std::optional<int64_t> FindVisible(const std::string& content, MemoryKind kind,
                                     int64_t episode_id, const EpisodeScope& s) const {
    auto it = by_content.find(std::string(MemoryKindName(kind)) + '\n' + content);
    if (it == by_content.end()) return std::nullopt;
    for (int64_t id : it->second)
      if (Visible(items.at(id), episode_id, s)) return id;
    return std::nullopt;
  }

  const Partition* VisiblePartition(const Episode& ep) const {
    if (!RunScope()) return nullptr;
    auto it = partitions.find(KeyOf(ep.scope));
    return it == partitions.end() ? nullptr : &it->second;
  }

  // Visible items newest first, handed to `take(id, score)` until it returns false.
  template <class Take>
  void Recency(const Episode& ep, Take&& take) const {
    static const std::set<int64_t> kNone;
    const Partition* p = VisiblePartition(ep);
    const std::set<int64_t>& published = p ? p->ids : kNone;
    auto own = ep.items.rbegin();
    auto pub = published.rbegin();
    while (own != ep.items.rend() || pub != published.rend()) {
      const bool from_own = pub == published.rend() || (own != ep.items.rend() && *own > *pub);
      const int64_t id = from_own ? *own++ : *pub++;
      if (!take(id, static_cast<double>(id))) return;
    }
  }

  // Visible items sharing a term with `query`, best bm25 first (ties: newest).
  std::vector<std::pair<int64_t, double>> Keyword(std::string_view query, const Episode& ep) {
    std::vector<std::string> terms;
    for (auto& t : tokenizer->Tokens(query, FTS5_TOKENIZE_QUERY))
      if (terms.size() < kMaxQueryTerms && std::find(terms.begin(), terms.end(), t) == terms.end())
        terms.push_back(std::move(t));
    std::vector<std::pair<int64_t, double>> out;
    if (terms.empty()) return out;
    // Statistics of the visible set: the partition's published items + own items.
    const Partition* p = VisiblePartition(ep);
    int64_t n_docs =
        static_cast<int64_t>(ep.items.size()) + (p ? static_cast<int64_t>(p->ids.size()) : 0);
    int64_t n_tokens = p ? p->length : 0;
    for (int64_t id : ep.items) n_tokens += items.at(id).length;
    if (n_docs == 0) return out;
    const double avgdl = static_cast<double>(n_tokens) / static_cast<double>(n_docs);
    std::unordered_map<int64_t, double> score;
    std::vector<Posting> hits;
    for (const std::string& term : terms) {
      hits.clear();
      if (p)
        if (auto it = p->postings.find(term); it != p->postings.end()) hits = it->second;
      for (int64_t id : ep.items)
        if (const int tf = FrequencyOf(items.at(id).terms, term); tf > 0) hits.push_back({id, tf});
      if (hits.empty()) continue;
      const auto n_hit = static_cast<int64_t>(hits.size());
      // As fts5Bm25Function computes it, term by term in query order.
      double idf = std::log((n_docs - n_hit + 0.5) / (n_hit + 0.5));
      if (idf <= 0.0) idf = 1e-6;
      for (const Posting& h : hits) {
        const double f = h.tf, d = items.at(h.id).length;
        score[h.id] += idf * ((f * (kK1 + 1.0)) / (f + kK1 * (1 - kB + kB * d / avgdl)));
      }
    }
    out.assign(score.begin(), score.end());
    std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
      return a.second != b.second ? a.second > b.second : a.first > b.first;
    });
    return out;
  }

  const MemoryConfig& config;
  const int64_t run_id;
  IdAllocator own_ids{1};
  IdAllocator* ids;
  TokenCounter count_tokens;
  std::unique_ptr<PorterTokenizer> tokenizer;  // keyword retrieval only
  std::unordered_map<int64_t, Entry> items;
  std::unordered_map<std::string, std::vector<int64_t>> by_content;  // kind \n content -> ids
  std::map<Key, Partition> partitions;
  std::unordered_map<int64_t, Episode> open;
  std::unordered_set<int64_t> ended;
  int64_t next_pass = 1;
  Stats stats;
};

MemoryBank::MemoryBank(MemoryConfig config, int64_t run_id, IdAllocator* ids,
                       TokenCounter count_tokens)
    : config_(std::move(config)),
      impl_(std::make_unique<Impl>(config_, run_id, ids, std::move(count_tokens))) {}

MemoryBank::~MemoryBank() = default;

bool MemoryBank::Accepts(MemoryKind kind) const {
  if (!config_.enabled) return false;
  switch (kind) {
    case MemoryKind::kObservation:
      return config_.write != MemoryWrite::kNone;
    case MemoryKind::kNote:
      return config_.write == MemoryWrite::kFactsAndNotes;
    case MemoryKind::kSummary:
      return config_.summaries;
    case MemoryKind::kOracleHint:
      return true;
  }
  return false;
}

int64_t MemoryBank::NewPass() {
  std::lock_guard lk(mu_);
  return impl_->next_pass++;
}

void MemoryBank::BeginEpisode(int64_t episode_id, const EpisodeScope& scope) {
  ValidateSplit(scope.split);
  std::lock_guard lk(mu_);
  Impl& m = *impl_;
  RLID_CHECK_GT(episode_id, 0, "memory episodes need a store episode id");
  RLID_CHECK_GE(scope.pass, int64_t{0}, "episode {}: passes are 0 (training) or NewPass()",
                episode_id);
  RLID_CHECK(!m.open.count(episode_id) && !m.ended.count(episode_id),
             "episode {} registered with the memory bank twice", episode_id);
  m.open.emplace(episode_id, Impl::Episode{scope, {}});
}

std::optional<MemoryItem> MemoryBank::Write(std::string_view content, MemoryKind kind,
                                            MemorySource source, int64_t policy_version,
                                            std::vector<int64_t> parents) {
  std::lock_guard lk(mu_);
  Impl& m = *impl_;
  Impl::Episode& ep = m.OpenEpisode(source.episode_id, "memory write");
  if (!Accepts(kind)) {
    ++m.stats.refused_by_policy;
    return std::nullopt;
  }
  std::string text(Trim(content));
  RLID_CHECK(!text.empty(), "empty memory item (episode {})", source.episode_id);
  for (int64_t p : parents) {
    auto it = m.items.find(p);
    RLID_CHECK(it != m.items.end(), "parent memory item {} does not exist", p);
    m.CheckGuards(it->second.item, source.episode_id, ep.scope, "derive an item from");
  }
  if (auto dup = m.FindVisible(text, kind, source.episode_id, ep.scope)) {
    ++m.stats.deduplicated;
    return m.items.at(*dup).item;
  }
  return m.Insert(std::move(text), kind, source, ep, policy_version, std::move(parents));
}

std::vector<Retrieved> MemoryBank::Retrieve(std::string_view query, int64_t episode_id) {
  std::lock_guard lk(mu_);
  Impl& m = *impl_;
  const Impl::Episode& ep = m.OpenEpisode(episode_id, "memory retrieval");
  std::vector<Retrieved> out;
  if (!config_.enabled) return out;
  ++m.stats.retrievals;
  int used_tokens = 0;
  auto take = [&](int64_t id, double score) {
    const Impl::Entry& e = m.items.at(id);
    if (config_.budget_tokens > 0 && used_tokens + e.tokens > config_.budget_tokens) return true;
    used_tokens += e.tokens;
    out.push_back({e.item, static_cast<int>(out.size()), score});
    return static_cast<int>(out.size()) < config_.budget_items;
  };
  if (config_.retrieval == Retrieval::kKeyword) {
    for (const auto& [id, score] : m.Keyword(query, ep))
      if (!take(id, score)) break;
  } else {
    m.Recency(ep, take);
  }
  m.stats.items_read += static_cast<int64_t>(out.size());
  return out;
}

MemoryItem MemoryBank::Read(int64_t item_id, int64_t episode_id) const {
  std::lock_guard lk(mu_);
  Impl& m = *impl_;
  const Impl::Episode& ep = m.OpenEpisode(episode_id, "memory read");
  auto it = m.items.find(item_id);
  RLID_CHECK(it != m.items.end(), "memory item {} does not exist", item_id);
  const Impl::Entry& e = it->second;
  m.CheckGuards(e.item, episode_id, ep.scope, "read");
  if (!m.Visible(e, episode_id, ep.scope))
    throw InternalError(
        fmt::format("episode {} may not read memory item {} of episode {}: {}", episode_id, item_id,
                    e.item.source.episode_id,
                    m.RunScope() ? "that episode has not ended" : "[memory] scope is \"episode\""),
        "scope \"episode\" reads only the episode's own items; scope \"run\" also items of "
        "ended episodes");
  return e.item;
}

void MemoryBank::DiscardEpisode(int64_t episode_id) {
  std::lock_guard lk(mu_);
  Impl& m = *impl_;
  auto ep = m.open.find(episode_id);
  if (ep == m.open.end()) return;
  for (int64_t id : ep->second.items) {
    auto e = m.items.find(id);
    if (e == m.items.end()) continue;
    const std::string key = std::string(MemoryKindName(e->second.item.kind)) + '\n' + e->second.item.content;
    if (auto same = m.by_content.find(key); same != m.by_content.end()) {
      std::erase(same->second, id);
      if (same->second.empty()) m.by_content.erase(same);
    }
    m.items.erase(e);
  }
  m.open.erase(ep);
  m.ended.insert(episode_id);
}

std::vector<MemoryItem> MemoryBank::EndEpisode(int64_t episode_id) {
  std::lock_guard lk(mu_);
  Impl& m = *impl_;
  Impl::Episode& ep = m.OpenEpisode(episode_id, "EndEpisode");
  std::vector<int64_t> parents;
  std::vector<std::string> parts;
  int64_t version = 0;
  for (int64_t id : ep.items) {
    const MemoryItem& item = m.items.at(id).item;
    if (item.kind == MemoryKind::kSummary) continue;
    parents.push_back(id);
    parts.push_back(item.content);
    version = std::max(version, item.policy_version);
  }
  if (Accepts(MemoryKind::kSummary) && !parents.empty())
    m.Insert(fmt::format("episode {}: {}", episode_id, Join(parts, "; ")), MemoryKind::kSummary,
             MemorySource{m.run_id, episode_id, -1}, ep, version, parents);
  std::vector<MemoryItem> out;
  for (int64_t id : ep.items) {
    Impl::Entry& e = m.items.at(id);
    m.Publish(e);
    out.push_back(e.item);
  }
  m.open.erase(episode_id);
  m.ended.insert(episode_id);
  return out;
}

void MemoryBank::Restore(const std::vector<MemoryItem>& items) {
  std::lock_guard lk(mu_);
  Impl& m = *impl_;
  // Validate everything first, so a refused restore leaves the bank unchanged.
  std::unordered_set<int64_t> restoring;
  int64_t prev = 0, max_pass = -1;
  for (const MemoryItem& it : items) {
    RLID_CHECK_GT(it.id, prev, "Restore: memory items must come in increasing id order");
    prev = it.id;
    RLID_CHECK_EQ(it.source.run_id, m.run_id, "Restore: memory item {} belongs to another run",
                  it.id);
    RLID_CHECK(it.split == "train" || it.split == "test", "Restore: item {} has split '{}'", it.id,
               it.split);
    RLID_CHECK(!m.items.count(it.id), "Restore: memory item {} is already in the bank", it.id);
    RLID_CHECK(!m.open.count(it.source.episode_id),
               "Restore: memory item {} belongs to episode {}, which is open", it.id,
               it.source.episode_id);
    max_pass = std::max(max_pass, it.pass);
    if (it.pass != 0) continue;
    for (int64_t p : it.parents)
      RLID_CHECK(restoring.count(p) || m.items.count(p),
                 "Restore: parent {} of memory item {} is neither restored nor in the bank", p,
                 it.id);
    restoring.insert(it.id);
  }
  for (const MemoryItem& it : items) {
    if (it.pass != 0) continue;
    m.ended.insert(it.source.episode_id);
    m.Publish(m.Index(it));
    ++m.stats.restored;
  }
  m.next_pass = std::max(m.next_pass, max_pass + 1);
  // Skipped items keep their ids too: new items come after every given one.
  if (!items.empty() && m.ids->PeekNext() <= items.back().id) m.ids->Reset(items.back().id + 1);
}

size_t MemoryBank::size() const {
  std::lock_guard lk(mu_);
  return impl_->items.size();
}

MemoryBank::Stats MemoryBank::stats() const {
  std::lock_guard lk(mu_);
  return impl_->stats;
}

}  // namespace rlid::memory

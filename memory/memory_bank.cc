// MemoryBank: items in a map, mirrored into an in-memory SQLite database that
// answers visibility (scope + split guard), dedupe and FTS5 keyword queries.
// Keyword indexes are kept per split ("train", "test") and combined ("all"),
// so bm25 term statistics of one split never depend on another split's items
// unless cross-split reads are allowed.
#include "memory/memory_bank.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sqlite3.h>

#include <algorithm>
#include <cctype>

#include "core/check.h"
#include "core/error.h"
#include "core/strings.h"
#include "memory/sqlite.h"

namespace rlid::memory {
namespace {

constexpr size_t kMaxQueryTerms = 32;
const char* const kPartitions[] = {"train", "test", "all"};

// Visible to (?1 episode, ?2 run scope, ?3 cross-split allowed, ?4 split).
constexpr const char* kVisible =
    "(i.episode_id = ?1 OR (?2 AND i.published = 1)) AND (?3 OR i.split = ?4)";

// Lowercased distinct terms of `text`: runs of ASCII letters/digits and
// non-ASCII bytes (so UTF-8 words stay whole). Quoted for FTS5, so no query
// syntax can come from the text.
std::string FtsQuery(std::string_view text) {
  std::vector<std::string> terms;
  std::string cur;
  auto flush = [&] {
    if (!cur.empty() && terms.size() < kMaxQueryTerms &&
        std::find(terms.begin(), terms.end(), cur) == terms.end())
      terms.push_back(cur);
    cur.clear();
  };
  for (unsigned char c : text) {
    if (std::isalnum(c) || c >= 0x80)
      cur += static_cast<char>(std::tolower(c));
    else
      flush();
  }
  flush();
  std::vector<std::string> quoted;
  for (const auto& t : terms) quoted.push_back("\"" + t + "\"");
  return Join(quoted, " OR ");
}

}  // namespace

void MemoryConfig::Load(ConfigNode s) {
  s.Get("enabled", enabled, "store and retrieve agent memory");
  s.GetEnum("write", write, {"facts", "facts+notes", "none"},
            "what is stored: environment facts, plus agent notes, or nothing");
  s.Get("summaries", summaries, "add a summary item (derived from its items) at episode end");
  s.GetEnum("retrieval", retrieval, {"recency", "keyword"},
            "newest items first, or FTS5 bm25 relevance to the current observation");
  s.GetEnum("scope", scope, {"episode", "run"},
            "read only the episode's own items, or also items of ended episodes of the run");
  s.Get("budget_items", budget_items, "at most this many memory items per prompt");
  s.Get("budget_tokens", budget_tokens,
        "at most this many tokens of memory text per prompt (0: no limit)");
  s.Get("allow_cross_split", allow_cross_split,
        "let episodes read memory created in another split (train/test); off = leak guard");
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

struct MemoryBank::Sql {
  Db db{":memory:", SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_MEMORY};
  Statement insert, publish, dedupe, recency;
  Statement fts_insert[3], keyword[3];

  Sql() {
    db.Exec(
        "CREATE TABLE items(id INTEGER PRIMARY KEY, episode_id INTEGER NOT NULL, "
        "split TEXT NOT NULL, kind TEXT NOT NULL, content TEXT NOT NULL, "
        "published INTEGER NOT NULL DEFAULT 0);"
        "CREATE INDEX items_by_episode ON items(episode_id);"
        "CREATE INDEX items_by_content ON items(content, kind);",
        "creating the memory bank");
    insert = db.Prepare(
        "INSERT INTO items(id, episode_id, split, kind, content) VALUES (?, ?, ?, ?, ?)");
    publish = db.Prepare("UPDATE items SET published = 1 WHERE episode_id = ?");
    dedupe = db.Prepare(fmt::format(
        "SELECT i.id FROM items i WHERE i.content = ?5 AND i.kind = ?6 AND {} ORDER BY i.id "
        "LIMIT 1",
        kVisible));
    recency = db.Prepare(
        fmt::format("SELECT i.id, i.id FROM items i WHERE {} ORDER BY i.id DESC", kVisible));
    for (int p = 0; p < 3; ++p) {
      // Table names come from the fixed list above, never from user data.
      const std::string t = fmt::format("fts_{}", kPartitions[p]);
      db.Exec(fmt::format("CREATE VIRTUAL TABLE {} USING fts5(content, tokenize = 'porter "
                          "unicode61')",
                          t),
              "creating the keyword index");
      fts_insert[p] = db.Prepare(fmt::format("INSERT INTO {}(rowid, content) VALUES (?, ?)", t));
      keyword[p] = db.Prepare(
          fmt::format("SELECT i.id, -bm25({0}) FROM {0} JOIN items i ON i.id = {0}.rowid "
                      "WHERE {0} MATCH ?5 AND {1} ORDER BY bm25({0}), i.id DESC",
                      t, kVisible));
    }
  }
};

MemoryBank::MemoryBank(MemoryConfig config, int64_t run_id, IdAllocator* ids,
                       TokenCounter count_tokens)
    : config_(std::move(config)),
      run_id_(run_id),
      own_ids_(1),
      ids_(ids ? ids : &own_ids_),
      count_tokens_(std::move(count_tokens)),
      sql_(std::make_unique<Sql>()) {
  RLID_CHECK(count_tokens_ != nullptr, "MemoryBank needs a token counter");
}

MemoryBank::~MemoryBank() = default;

bool MemoryBank::Accepts(MemoryKind kind) const {
  if (!config_.enabled) return false;
  switch (kind) {
    case MemoryKind::kObservation:
      return config_.write != "none";
    case MemoryKind::kNote:
      return config_.write == "facts+notes";
    case MemoryKind::kSummary:
      return config_.summaries;
    case MemoryKind::kOracleHint:
      return true;
  }
  return false;
}

void MemoryBank::CheckParentSplit(const MemoryItem& parent, std::string_view split) const {
  if (parent.split != split && !config_.allow_cross_split)
    throw ConfigError(fmt::format("split guard: an item of the {} split cannot be derived from "
                                  "memory item {} of the {} split",
                                  split, parent.id, parent.split),
                      "cross-split memory is refused unless [memory] allow_cross_split = true");
}

std::optional<MemoryItem> MemoryBank::Write(std::string_view content, MemoryKind kind,
                                            MemorySource source, std::string_view split,
                                            int64_t policy_version, std::vector<int64_t> parents) {
  ValidateSplit(split);
  std::lock_guard lk(mu_);
  if (!Accepts(kind)) {
    ++stats_.refused_by_policy;
    return std::nullopt;
  }
  const std::string text(Trim(content));
  RLID_CHECK(!text.empty(), "empty memory item (episode {})", source.episode_id);
  RLID_CHECK_GT(source.episode_id, 0, "memory items need a source episode");
  RLID_CHECK(!ended_episodes_.count(source.episode_id), "write to ended episode {}",
             source.episode_id);
  for (int64_t p : parents) {
    auto it = items_.find(p);
    RLID_CHECK(it != items_.end(), "parent memory item {} does not exist", p);
    CheckParentSplit(it->second, split);
  }
  // Dedupe against what the source episode can see.
  Statement& d = sql_->dedupe;
  d.Bind(1, source.episode_id)
      .Bind(2, config_.scope == "run")
      .Bind(3, config_.allow_cross_split)
      .Bind(4, split)
      .Bind(5, text)
      .Bind(6, MemoryKindName(kind));
  const bool dup = d.Step();
  const int64_t dup_id = dup ? d.Int(0) : 0;
  d.Reset();
  if (dup) {
    ++stats_.deduplicated;
    return items_.at(dup_id);
  }
  return Insert(text, kind, source, std::string(split), policy_version, std::move(parents));
}

MemoryItem MemoryBank::Insert(std::string content, MemoryKind kind, MemorySource source,
                              std::string split, int64_t policy_version,
                              std::vector<int64_t> parents) {
  MemoryItem item;
  item.id = ids_->Next();
  item.content = std::move(content);
  item.kind = kind;
  item.source = source;
  item.source.run_id = run_id_;
  item.split = std::move(split);
  item.policy_version = policy_version;
  item.created_at = NowIso8601();
  std::sort(parents.begin(), parents.end());
  parents.erase(std::unique(parents.begin(), parents.end()), parents.end());
  item.parents = std::move(parents);

  sql_->insert.Bind(1, item.id)
      .Bind(2, source.episode_id)
      .Bind(3, item.split)
      .Bind(4, MemoryKindName(kind))
      .Bind(5, item.content);
  sql_->insert.Run();
  for (int p = 0; p < 3; ++p) {
    if (p < 2 && item.split != kPartitions[p]) continue;
    sql_->fts_insert[p].Bind(1, item.id).Bind(2, item.content);
    sql_->fts_insert[p].Run();
  }
  tokens_[item.id] = count_tokens_(item.content);
  open_episodes_[source.episode_id].push_back(item.id);
  ++stats_.written;
  return items_.emplace(item.id, item).first->second;
}

std::vector<Retrieved> MemoryBank::Retrieve(std::string_view query, const RetrievalContext& ctx) {
  ValidateSplit(ctx.split);
  std::lock_guard lk(mu_);
  std::vector<Retrieved> out;
  if (!config_.enabled) return out;
  ++stats_.retrievals;
  Statement* s = &sql_->recency;
  if (config_.retrieval == "keyword") {
    const std::string match = FtsQuery(query);
    if (match.empty()) return out;
    const int p = config_.allow_cross_split ? 2 : (ctx.split == "train" ? 0 : 1);
    s = &sql_->keyword[p];
    s->Bind(5, match);
  }
  s->Bind(1, ctx.episode_id)
      .Bind(2, config_.scope == "run")
      .Bind(3, config_.allow_cross_split)
      .Bind(4, ctx.split);
  int used_tokens = 0;
  try {
    while (static_cast<int>(out.size()) < config_.budget_items && s->Step()) {
      const int64_t id = s->Int(0);
      const int tokens = tokens_.at(id);
      if (config_.budget_tokens > 0 && used_tokens + tokens > config_.budget_tokens) continue;
      used_tokens += tokens;
      out.push_back({items_.at(id), static_cast<int>(out.size()), s->Double(1)});
    }
  } catch (...) {
    s->Reset();
    throw;
  }
  s->Reset();
  stats_.items_read += static_cast<int64_t>(out.size());
  return out;
}

MemoryItem MemoryBank::Read(int64_t item_id, const RetrievalContext& ctx) const {
  ValidateSplit(ctx.split);
  std::lock_guard lk(mu_);
  auto it = items_.find(item_id);
  RLID_CHECK(it != items_.end(), "memory item {} does not exist", item_id);
  if (it->second.split != ctx.split && !config_.allow_cross_split)
    throw ConfigError(fmt::format("split guard: episode {} ({} split) may not read memory item {} "
                                  "created in the {} split",
                                  ctx.episode_id, ctx.split, item_id, it->second.split),
                      "cross-split memory is refused unless [memory] allow_cross_split = true");
  return it->second;
}

std::vector<MemoryItem> MemoryBank::EndEpisode(int64_t episode_id) {
  std::lock_guard lk(mu_);
  RLID_CHECK(!ended_episodes_.count(episode_id), "episode {} ended twice", episode_id);
  ended_episodes_.insert(episode_id);
  std::vector<int64_t> ids;
  if (auto it = open_episodes_.find(episode_id); it != open_episodes_.end()) {
    ids = std::move(it->second);
    open_episodes_.erase(it);
  }
  std::vector<int64_t> parents;
  std::vector<std::string> parts;
  int64_t version = 0;
  for (int64_t id : ids) {
    const MemoryItem& item = items_.at(id);
    if (item.kind == MemoryKind::kSummary) continue;
    parents.push_back(id);
    parts.push_back(item.content);
    version = std::max(version, item.policy_version);
  }
  if (Accepts(MemoryKind::kSummary) && !parents.empty()) {
    const MemoryItem& first = items_.at(parents.front());
    for (int64_t p : parents) CheckParentSplit(items_.at(p), first.split);
    MemoryItem summary =
        Insert(fmt::format("episode {}: {}", episode_id, Join(parts, "; ")), MemoryKind::kSummary,
               MemorySource{run_id_, episode_id, -1}, first.split, version, parents);
    ids.push_back(summary.id);
    open_episodes_.erase(episode_id);  // Insert registered it; the episode is over
  }
  sql_->publish.Bind(1, episode_id);
  sql_->publish.Run();
  std::vector<MemoryItem> out;
  for (int64_t id : ids) out.push_back(items_.at(id));
  return out;
}

size_t MemoryBank::size() const {
  std::lock_guard lk(mu_);
  return items_.size();
}

MemoryBank::Stats MemoryBank::stats() const {
  std::lock_guard lk(mu_);
  return stats_;
}

}  // namespace rlid::memory

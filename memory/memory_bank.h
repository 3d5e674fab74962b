// The agent's memory for one run: an in-process, thread-safe bank of items.
//   write policies:     environment facts, agent notes, episode summaries
//   retrieval policies: recency or keyword relevance (SQLite FTS5, bm25),
//                       scope "episode" (own items) or "run" (also items of
//                       ended episodes), a budget in items and tokens
//   split guard:        an episode never reads (or derives from) an item of
//                       another split unless allow_cross_split = true
// Items carry provenance (source run/episode/step, split, policy version,
// parents). EndEpisode returns an episode's new items; they are persisted with
// that episode through the Writer, and every retrieval a step used is stored
// as its MemoryReads, so each prompt can be reconstructed from the database.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/config.h"
#include "memory/records.h"
#include "memory/store.h"

namespace rlid::memory {

// The [memory] section of an experiment config.
struct MemoryConfig {
  bool enabled = false;         // off: Write stores nothing, Retrieve returns nothing
  std::string write = "facts";  // "facts" | "facts+notes" | "none"
  bool summaries = false;       // EndEpisode adds a summary item derived from the episode's items
  std::string retrieval = "recency";  // "recency" | "keyword" (FTS5 bm25)
  std::string scope = "episode";   // "episode": own items only; "run": also ended episodes' items
  int budget_items = 8;            // at most this many items per prompt
  int budget_tokens = 256;         // and at most this many tokens of item text (0: no limit)
  bool allow_cross_split = false;  // let an episode read items created in another split

  // Reads every field (defaults above) and validates ranges (ConfigError).
  void Load(ConfigNode section);
};

// Who is asking: the reading episode and its split.
struct RetrievalContext {
  int64_t episode_id = 0;
  std::string split = "train";
};

struct Retrieved {
  MemoryItem item;
  int rank = 0;        // 0 = first in the prompt
  double score = 0.0;  // keyword: -bm25 (higher = more relevant); recency: the item id
};

// Tokens of a text for the budget; the default counts whitespace-separated words.
using TokenCounter = std::function<int(std::string_view)>;
int CountWords(std::string_view text);

// Memory reads for a StepRecord.
std::vector<MemoryRead> ToReads(const std::vector<Retrieved>& retrieved);

class MemoryBank {
 public:
  // `ids` allocates item ids (Store::item_ids() when persisting; the bank owns
  // a counter starting at 1 when null). `run_id` is stamped on every item.
  MemoryBank(MemoryConfig config, int64_t run_id, IdAllocator* ids = nullptr,
             TokenCounter count_tokens = CountWords);
  ~MemoryBank();
  MemoryBank(const MemoryBank&) = delete;
  MemoryBank& operator=(const MemoryBank&) = delete;

  const MemoryConfig& config() const { return config_; }
  // Whether the write policy stores items of this kind (summaries: config.summaries;
  // oracle hints: whenever memory is enabled, since an experiment injects them on purpose).
  bool Accepts(MemoryKind kind) const;

  // Stores an item created at `source` (episode, step) in `split`. Returns
  // nullopt when memory is off or the policy does not store this kind; the
  // existing item when identical content of the same kind is already visible
  // to the source episode (dedupe within scope). ConfigError when a parent is
  // from another split and cross-split use is not allowed; InternalError for
  // an unknown parent or a write to an ended episode.
  std::optional<MemoryItem> Write(std::string_view content, MemoryKind kind, MemorySource source,
                                  std::string_view split, int64_t policy_version,
                                  std::vector<int64_t> parents = {});

  // The items to put in the prompt of a step of ctx.episode_id, best first,
  // within the budget. Only items visible under the scope and the split guard
  // are candidates; keyword retrieval returns only items sharing a term with
  // `query` (no terms: nothing).
  std::vector<Retrieved> Retrieve(std::string_view query, const RetrievalContext& ctx);

  // One item by id, for code that cites a specific item. ConfigError (the
  // split guard) when the item is from another split and that is not allowed.
  MemoryItem Read(int64_t item_id, const RetrievalContext& ctx) const;

  // Ends an episode: adds its summary (if summaries are on and it created
  // items), publishes its items to later episodes (scope "run"), and returns
  // the items it created, in id order, for EpisodeRecord::new_items.
  std::vector<MemoryItem> EndEpisode(int64_t episode_id);

  size_t size() const;

  struct Stats {
    int64_t written = 0, deduplicated = 0, refused_by_policy = 0, retrievals = 0, items_read = 0;
  };
  Stats stats() const;

 private:
  struct Sql;
  MemoryItem Insert(std::string content, MemoryKind kind, MemorySource source, std::string split,
                    int64_t policy_version, std::vector<int64_t> parents);
  void CheckParentSplit(const MemoryItem& parent, std::string_view split) const;

  MemoryConfig config_;
  int64_t run_id_;
  IdAllocator own_ids_;
  IdAllocator* ids_;
  TokenCounter count_tokens_;

  mutable std::mutex mu_;
  std::unordered_map<int64_t, MemoryItem> items_;
  std::unordered_map<int64_t, int> tokens_;                          // item id -> token count
  std::unordered_map<int64_t, std::vector<int64_t>> open_episodes_;  // episode -> new item ids
  std::set<int64_t> ended_episodes_;
  Stats stats_;
  std::unique_ptr<Sql> sql_;  // in-memory SQLite: visibility table + FTS5 indexes
};

}  // namespace rlid::memory

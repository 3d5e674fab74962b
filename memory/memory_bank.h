// The agent's memory for one run: an in-process, thread-safe bank of items.
//   write policies:     environment facts, agent notes, episode summaries
//   retrieval policies: recency or keyword relevance (bm25 over FTS5 tokens),
//                       scope "episode" (own items) or "run" (also items of
//                       ended episodes), a budget in items and tokens
//   visibility:         every episode registers its EpisodeScope (split, env
//                       instance, pass); another episode's item is visible only
//                       from the same pass, the same split (unless
//                       allow_cross_split) and the same instance (unless
//                       allow_cross_instance)
// Items carry provenance (source run/episode/step, split, instance, pass,
// policy version, parents). EndEpisode returns an episode's new items; they are
// persisted with that episode through the Writer, and every retrieval a step
// used is stored as its MemoryReads, so each prompt can be reconstructed from
// the database. Restore reloads a run's items for `rlid train --resume`.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.h"
#include "memory/records.h"
#include "memory/store.h"

namespace rlid::memory {

// What is stored ([memory] write): environment facts, also agent notes, or nothing.
enum class MemoryWrite { kFacts, kFactsAndNotes, kNone };
constexpr auto Spellings(MemoryWrite) {
  return ModeNames<MemoryWrite>(
      {{MemoryWrite::kFacts, "facts"}, {MemoryWrite::kFactsAndNotes, "facts+notes"}, {MemoryWrite::kNone, "none"}});
}
// How items are ranked ([memory] retrieval): newest first, or bm25 relevance.
enum class Retrieval { kRecency, kKeyword };
constexpr auto Spellings(Retrieval) {
  return ModeNames<Retrieval>({{Retrieval::kRecency, "recency"}, {Retrieval::kKeyword, "keyword"}});
}
// Which items an episode reads ([memory] scope): its own, or also those of the
// run's ended episodes.
enum class MemoryScope { kEpisode, kRun };
constexpr auto Spellings(MemoryScope) {
  return ModeNames<MemoryScope>({{MemoryScope::kEpisode, "episode"}, {MemoryScope::kRun, "run"}});
}

// The [memory] section of an experiment config.
struct MemoryConfig {
  bool enabled = false;         // off: Write stores nothing, Retrieve returns nothing
  MemoryWrite write = MemoryWrite::kFacts;
  bool summaries = false;       // EndEpisode adds a summary item derived from the episode's items
  Retrieval retrieval = Retrieval::kRecency;
  MemoryScope scope = MemoryScope::kEpisode;
  int budget_items = 8;            // at most this many items per prompt
  int budget_tokens = 256;         // and at most this many tokens of item text (0: no limit)
  bool allow_cross_split = false;  // let an episode read items created in another split
  bool allow_cross_instance = false;  // let an episode read items about another env instance

  // Reads every field (defaults above) and validates ranges (ConfigError).
  void Load(ConfigNode section);
};

// What an episode is about and which evaluation it belongs to; registered
// once per episode with MemoryBank::BeginEpisode and stamped on its items.
//
// Passes: every training episode of a run uses pass 0 for the whole run. Each
// evaluation call uses a fresh pass (MemoryBank::NewPass(): 1, 2, ...), so an
// evaluation never reads items written by another evaluation or by training,
// and its result does not depend on which evaluations ran before it. (The
// split guard separates train from test as well; the pass also separates two
// evaluations of the same split, and an evaluation on the train split from
// training.)
struct EpisodeScope {
  std::string split = "train";  // "train" | "test"
  uint64_t instance = 0;        // the env instance: env seed / world id
  int64_t pass = 0;             // 0: training; NewPass() for each evaluation call
};

struct Retrieved {
  MemoryItem item;
  int rank = 0;        // 0 = first in the prompt
  double score = 0.0;  // keyword: bm25 relevance (higher = more relevant); recency: the item id
};

// Tokens of a text for the budget; the default counts whitespace-separated words.
using TokenCounter = std::function<int(std::string_view)>;
int CountWords(std::string_view text);

// Memory reads for a StepRecord.
std::vector<MemoryRead> ToReads(const std::vector<Retrieved>& retrieved);

// Visibility. An item is visible to episode E (scope S) when it is E's own,
// or when scope = "run", its episode has ended, and it has S.pass, S.split
// (unless allow_cross_split) and S.instance (unless allow_cross_instance).
// Retrieve, Read and dedupe all use exactly this rule. Keyword relevance is
// computed over exactly the visible items (their count, lengths and term
// frequencies), so nothing invisible can change a ranking.
//
// Every method that names an episode throws InternalError when the episode
// was never registered (BeginEpisode) or has ended.
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

  // A fresh evaluation pass id: 1, 2, ... (after Restore: above every restored
  // item's pass). Pass 0 is training's.
  int64_t NewPass();

  // Registers an episode before it writes or reads memory. ConfigError for an
  // unknown split; InternalError for an episode id <= 0, a negative pass, or
  // an episode registered before (open or ended).
  void BeginEpisode(int64_t episode_id, const EpisodeScope& scope);

  // Stores an item created at `source` (episode, step); split, instance and
  // pass come from the source episode's scope. Returns nullopt when memory is
  // off or the policy does not store this kind; the existing item when
  // identical content of the same kind is already visible to the source
  // episode (dedupe uses the visibility rule). A parent must pass the same
  // guards as a read: ConfigError when it is from another split or instance
  // and that is not allowed, InternalError when it is from another pass or
  // does not exist.
  std::optional<MemoryItem> Write(std::string_view content, MemoryKind kind, MemorySource source,
                                  int64_t policy_version, std::vector<int64_t> parents = {});

  // The items to put in the prompt of a step of `episode_id`, best first,
  // within the budget. Only visible items are candidates; keyword retrieval
  // returns only items sharing a (stemmed) term with `query` (no terms: nothing).
  std::vector<Retrieved> Retrieve(std::string_view query, int64_t episode_id);

  // One item by id, for code that cites a specific item. ConfigError when the
  // split guard or the instance guard refuses it; InternalError when it does
  // not exist, is from another pass, or is not visible under the scope.
  MemoryItem Read(int64_t item_id, int64_t episode_id) const;

  // Ends an episode: adds its summary (if summaries are on and it created
  // items), publishes its items to later episodes (scope "run"), and returns
  // the items it created, in id order, for EpisodeRecord::new_items.
  std::vector<MemoryItem> EndEpisode(int64_t episode_id);
  // Ends an episode that is thrown away (an env failure dropped it): its items
  // are removed unpublished, so no later episode reads what no stored episode
  // wrote. A no-op for an episode that is not open.
  void DiscardEpisode(int64_t episode_id);

  // Reloads stored items (Store::MemoryItems of this run, in id order) when a
  // run resumes, before any episode begins. Items keep their ids, content,
  // provenance and creation time; they are published and their episodes count
  // as ended. Items of passes other than 0 are skipped: evaluation passes are
  // never read again (NewPass only moves past them), so restoring them would
  // only cost memory. Afterwards the id allocator is raised to at least the
  // largest given id + 1, skipped items included (never lowered; Store::TruncateRun and Store::Open
  // already reset the store's allocators to MAX(id) + 1 of the file).
  // InternalError for an item of another run, an id already in the bank, an
  // item of an open episode, items out of id order, or a parent that is
  // neither restored nor in the bank. stats().restored counts what was restored.
  void Restore(const std::vector<MemoryItem>& items);

  size_t size() const;

  struct Stats {
    int64_t written = 0, deduplicated = 0, refused_by_policy = 0, retrievals = 0, items_read = 0,
            restored = 0;
  };
  Stats stats() const;

 private:
  struct Impl;  // items, visibility indexes, episodes, tokenizer (memory_bank.cc)
  const MemoryConfig config_;
  mutable std::mutex mu_;  // guards *impl_
  std::unique_ptr<Impl> impl_;
};

}  // namespace rlid::memory

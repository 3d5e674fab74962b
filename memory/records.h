// Plain records for everything rlid stores per run: runs, episodes with their
// steps, menus and memory reads, memory items with provenance, metrics and
// checkpoints. Producers (agents, trainers) fill these; memory::Store writes
// them to SQLite. No LibTorch, no SQL here.
#pragma once

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace rlid::memory {

inline constexpr double kNotApplicable = std::numeric_limits<double>::quiet_NaN();

// One row of `runs`. BeginRun fills start time and status "running".
struct RunRecord {
  // 0: the next free id. > 0: this id (a data-parallel rank's shard mirrors the
  // run row of rank 0's database, so its episodes reference the same run).
  int64_t id = 0;
  std::string name;
  std::string arm;          // "ppo_decision", "grpo", ...; may be empty
  std::string kind;         // "train" | "eval" | "compare" | "sft"
  std::string config_toml;  // the resolved config
  uint64_t seed = 0;
  std::string code_version;        // empty: this build's VersionString()
  bool allow_cross_split = false;  // [memory] allow_cross_split (v_split_leaks.permitted)
  std::string env_metadata;        // the env's metadata (JSON object text), "" for none
};

// Run status values accepted by EndRun.
// How a run ended. "crashed" is set by the store, not by a run: a writer that
// opens the database marks every run still "running" as crashed, because the
// one-writer lock proves their processes are gone.
inline constexpr const char* kRunStatuses[] = {"completed", "failed", "interrupted", "crashed"};

enum class MemoryKind { kObservation, kNote, kSummary, kOracleHint };
// "observation" | "note" | "summary" | "oracle_hint" (the stored spelling).
const char* MemoryKindName(MemoryKind kind);
MemoryKind ParseMemoryKind(std::string_view name);  // ConfigError on unknown names

// Where a memory item came from. t < 0: the episode as a whole (summaries).
struct MemorySource {
  int64_t run_id = 0;
  int64_t episode_id = 0;
  int t = -1;
};

struct MemoryItem {
  int64_t id = 0;
  std::string content;
  MemoryKind kind = MemoryKind::kObservation;
  MemorySource source;
  std::string split;  // "train" | "test": the split of the episode that created it
  // The env instance (seed / world id) and memory pass of that episode
  // (memory::EpisodeScope). Stored as INTEGER with the same 64 bits, so an
  // instance >= 2^63 reads back negative in SQL (seeds are small in practice).
  uint64_t instance = 0;
  int64_t pass = 0;  // 0: training; each evaluation call has its own pass
  int64_t policy_version = 0;
  std::string created_at;        // ISO-8601 UTC
  std::vector<int64_t> parents;  // items it was derived from (ids < id)
};

// One memory item placed in a step's prompt.
struct MemoryRead {
  int64_t item_id = 0;
  int rank = 0;  // 0 = first item in the prompt
  double score = 0.0;
};

struct RealisationRecord {
  std::string text;
  double probability = kNotApplicable;
};

struct MenuItemRecord {
  int position = 0;  // display position in the prompt (0 = first)
  int action = -1;
  std::string label;
  std::string command;
  std::string afterstate;
  double probability = kNotApplicable;  // p(action | state) under the rollout policy
  std::vector<RealisationRecord> realisations;
};

struct StepRecord {
  int t = 0;
  std::string observation;
  std::string prompt;        // full rendered prompt; stored once per distinct hash
  uint64_t prompt_hash = 0;  // 0: computed from `prompt` with HashBytes
  int prompt_tokens = 0;
  int action = -1;  // -1: invalid
  std::string label;
  std::string command;
  std::string generated_text;  // token plane; empty (stored NULL) for the decision plane
  int generated_tokens = 0;
  double logp_rollout = kNotApplicable;  // under the rollout engine
  double logp_train = kNotApplicable;    // under the training engine
  double value = kNotApplicable;
  double reward = 0.0;
  bool invalid = false;
  std::string invalid_reason;
  std::vector<MenuItemRecord> menu;
  std::vector<MemoryRead> reads;
  // Provenance (schema 3; stored NULL when not recorded).
  // The realisation that produced the action: the one the free text compiled
  // through (token plane) or the one drawn from pi(y | s, a)
  // (decision plane). Empty: none (always empty for an invalid step).
  std::string realisation;
  uint64_t state_hash = 0;                  // env State::Hash() before acting; 0: not recorded
  std::optional<uint64_t> afterstate_hash;  // the chosen action's afterstate; none if invalid
  int optimal = -1;  // 1: one of the oracle's optimal actions; 0: not (invalid: 0); -1: no oracle
  // Earlier steps of the episode its prompt showed (steps t - n .. t - 1;
  // prompt.history_steps), so the prompt's provenance is exact.
  int history_steps = 0;
};

struct EpisodeRecord {
  int64_t id = 0;  // from Store::NewEpisodeId()
  int64_t run_id = 0;
  std::string env;
  uint64_t seed = 0;
  std::string split = "train";     // "train" | "test"
  std::string plane = "decision";  // "decision" | "token"
  // How its actions were chosen: "rollout" (training, sampled), "greedy" or
  // "sampled" (evaluation on test seeds), "scripted" (oracle demonstrations).
  std::string mode = "rollout";
  int64_t policy_version = 0;
  int64_t iteration = 0;
  double ret = 0.0;
  bool success = false;
  int length = 0;
  bool truncated = false;
  int attempts = 1;  // plays: 1 + the retries an env failure caused ([env] retries)
  std::vector<StepRecord> steps;
  std::vector<MemoryItem> new_items;  // created during this episode (MemoryBank::EndEpisode)
};

struct MetricRecord {
  int64_t run_id = 0;
  int64_t iteration = 0;
  std::string key;  // namespaced: "losses/clipfrac", "budget/generated_tokens"
  double value = 0.0;
  double wall_time = 0.0;  // Unix seconds; 0: stamped at Submit
};

struct CheckpointRecord {
  int64_t run_id = 0;
  int64_t iteration = 0;
  std::string path;
};

// Rows an episode record turns into (episode, steps, prompts at most, menu
// items, reads, memory items, parents); for throughput accounting.
int64_t RowCount(const EpisodeRecord& e);

// Throws InternalError when a record breaks the storage contract (unknown
// split/plane, duplicate step t, duplicate menu position or read rank, an item
// whose source is another episode, a parent id not below the item id, an
// invalid step with a realisation, afterstate or optimal = 1, an afterstate
// hash without a state hash, optimal outside -1/0/1, a negative item pass, ...).
// Called before a record is queued, so one bad record cannot poison a batch.
void ValidateEpisode(const EpisodeRecord& e);
void ValidateSplit(std::string_view split);  // "train" | "test", ConfigError otherwise

// Current UTC time as "2024-05-01T12:34:56.789Z".
std::string NowIso8601();
// Unix time in seconds (wall clock).
double NowUnixSeconds();

}  // namespace rlid::memory

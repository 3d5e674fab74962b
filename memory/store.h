// memory::Store: the SQLite database of one run directory (<run_dir>/rlid.db).
// Everything the agent saw and did (episodes, steps, menus, prompts), its
// memory items with provenance, metrics and checkpoints live here, readable
// with plain SQL. ReadWrite opens apply forward migrations, WAL mode and
// foreign keys; one writer process per database is enforced with a lock file.
// ReadOnly opens use SQLITE_OPEN_READONLY + PRAGMA query_only. All SQL is
// prepared; user data is only ever bound.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <variant>
#include <vector>

#include "memory/query.h"
#include "memory/records.h"
#include "memory/sqlite.h"

namespace rlid::memory {

inline constexpr const char* kDatabaseFileName = "rlid.db";

// A data-parallel run: rank 0 writes rlid.db (runs, metrics, checkpoints, its
// episodes); rank r > 0 writes its episodes to "rlid.rank<r>.db" beside it,
// with ids from r * kShardIdStride + 1 on, so ids are unique across the run's
// files. Read-only opens of rlid.db attach the shards (Store::Open).
std::string ShardFileName(int rank);
inline constexpr int64_t kShardIdStride = int64_t{1} << 40;

// Client-side id allocation (thread-safe). Ids are handed out before the rows
// are committed, so an episode's memory items and reads can reference each
// other while the episode is still in the writer's queue.
class IdAllocator {
 public:
  explicit IdAllocator(int64_t next = 1) : next_(next) {}
  int64_t Next() { return next_.fetch_add(1, std::memory_order_relaxed); }
  int64_t PeekNext() const { return next_.load(std::memory_order_relaxed); }
  void Reset(int64_t next) { next_.store(next, std::memory_order_relaxed); }

 private:
  std::atomic<int64_t> next_;
};

struct StoreOptions {
  // How long to wait for another connection's lock before failing.
  int busy_timeout_ms = 5000;
  // synchronous=FULL (commits survive power loss) instead of NORMAL (commits
  // survive a killed process; the default, several times faster in WAL mode).
  bool durable = false;
};

// One unit the writer commits: an episode with all its rows, a metric, a checkpoint.
using WriteJob = std::variant<EpisodeRecord, MetricRecord, CheckpointRecord>;

// Rows TruncateRun deleted.
struct TruncateResult {
  int64_t episodes = 0, memory_items = 0, metrics = 0, checkpoints = 0;
};

// kTransaction: all jobs in one transaction (atomic). kPerRow: every row in
// its own transaction (no atomicity; the benchmark's baseline only).
enum class Batching { kTransaction, kPerRow };

class Store {
 public:
  enum class Mode { kReadWrite, kReadOnly };

  // ReadWrite creates the file if needed. Throws IoError for: a missing
  // directory, an unwritable directory, a file that is not an SQLite database,
  // an SQLite database that is not rlid's, a schema newer than this build, a
  // database another rlid process is writing, a lock held too long.
  static std::unique_ptr<Store> Open(const std::string& path, Mode mode, StoreOptions options = {});
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  const std::string& path() const { return db_.path(); }
  Mode mode() const { return mode_; }
  int schema_version() const { return schema_version_; }

  // A new row in `runs` (status 'running'); returns its id.
  int64_t BeginRun(const RunRecord& run);
  // status: "completed" | "failed" | "interrupted".
  void EndRun(int64_t run_id, std::string_view status);
  // Continues an existing run (`rlid train --resume`): status 'running' again,
  // ended_at NULL. ConfigError naming the run when the database has no such run.
  void ResumeRun(int64_t run_id);
  // Whether the database has a `runs` row with this id.
  bool HasRun(int64_t run_id) const;
  // Removes what a run wrote after a checkpoint, in ONE transaction: its
  // episodes with id > last_episode_id or iteration > last_iteration (played
  // ahead of the checkpoint by asynchronous rollouts) with their steps, menu items, memory
  // reads, the memory items they created and those items' parent edges; its
  // metrics and checkpoint rows with iteration > last_iteration. Rows of other
  // runs and prompts (shared by hash) are kept. Afterwards episode_ids() and
  // item_ids() restart at MAX(id) + 1 of the file, so ids continue where the
  // checkpoint left off. ConfigError when the run does not exist;
  // InternalError (nothing deleted) when a kept read or derivation references
  // an item that would be deleted (not a checkpoint boundary).
  TruncateResult TruncateRun(int64_t run_id, int64_t last_iteration, int64_t last_episode_id);

  // Counters start at MAX(id) + 1 of the file at open.
  IdAllocator& episode_ids() { return episode_ids_; }
  IdAllocator& item_ids() { return item_ids_; }
  int64_t NewEpisodeId() { return episode_ids_.Next(); }

  // Writes the jobs; with kTransaction either all become visible or none.
  // Records are validated first (InternalError for a broken contract).
  void Write(std::span<const WriteJob> jobs, Batching batching = Batching::kTransaction);
  void WriteEpisode(const EpisodeRecord& episode);
  void WriteMetric(const MetricRecord& metric);
  void WriteCheckpoint(const CheckpointRecord& checkpoint);

  bool HasMemoryItem(int64_t id) const;
  // Every memory item of a run in id order, as MemoryBank::Restore takes them:
  // content, kind, source (t = -1 for a whole-episode item), split, instance,
  // pass, policy version, creation time and parents (ascending). Files older
  // than schema 3 read as instance 0, pass 0.
  std::vector<MemoryItem> MemoryItems(int64_t run_id) const;
  // One read-only statement (see RunReadOnlyQuery).
  QueryResult Query(std::string_view sql) const { return RunReadOnlyQuery(db_, sql); }
  // PRAGMA integrity_check == "ok" and PRAGMA foreign_key_check is empty.
  bool CheckIntegrity(std::string* report = nullptr) const;
  // Read-only opens of a run's rlid.db: how many rank shards are attached
  // (their episodes, steps, menus and memory appear in every table and view).
  int attached_shards() const { return attached_shards_; }
  const Db& db() const { return db_; }
  Db& db() { return db_; }

 private:
  Store(const std::string& path, Mode mode, StoreOptions options, int lock_fd,
        const std::string& immutable_uri);
  void OpenReadWrite();
  void OpenReadOnly();
  void AttachShards();
  void CheckVersion(int version) const;
  void RequireRun(int64_t run_id, std::string_view doing) const;
  void ResetIdAllocators();
  void Prepare();
  void WriteJobRows(const WriteJob& job);
  void WriteEpisodeRows(const EpisodeRecord& e);
  void WriteMetricRow(const MetricRecord& m);
  void WriteCheckpointRow(const CheckpointRecord& c);

  // The flock()ed descriptor of the database file while open for writing.
  // Declared before db_, so it closes after the connection (see AcquireWriterLock).
  struct LockFd {
    explicit LockFd(int f) : fd(f) {}
    ~LockFd();
    LockFd(const LockFd&) = delete;
    LockFd& operator=(const LockFd&) = delete;
    int fd = -1;
  };
  LockFd lock_;
  Db db_;
  Mode mode_;
  StoreOptions options_;
  int schema_version_ = 0;
  int attached_shards_ = 0;
  IdAllocator episode_ids_, item_ids_;

  // Prompt hashes known to be committed (skips re-inserting repeated prompts).
  std::unordered_set<uint64_t> known_prompts_;
  std::vector<uint64_t> txn_prompts_;  // added by the open transaction

  struct Statements;
  std::unique_ptr<Statements> st_;
};

// "<dir>/rlid.db" for a run directory, the path itself for a file. IoError
// when the path does not exist or the directory has no rlid.db.
std::string ResolveDatabasePath(const std::string& run_dir_or_file);

}  // namespace rlid::memory

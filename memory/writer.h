// memory::Writer: the single background writer of a Store. Rollout threads
// Submit() whole episodes (and metrics, checkpoints); one thread commits them
// FIFO in batched transactions, so an episode becomes visible atomically.
// Episodes whose memory reads or item parents reference items not yet
// committed (another episode still on its way) are held back until those
// items arrive, so foreign keys always hold. Errors are sticky: the first
// failure is rethrown by every later Submit/Flush, never lost.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <unordered_set>
#include <vector>

#include "memory/store.h"

namespace rlid::memory {

struct WriterOptions {
  size_t max_queue = 4096;  // Submit blocks while this many jobs wait (backpressure)
  size_t max_batch = 256;   // jobs per transaction at most
};

class Writer {
 public:
  // The store must outlive the writer; while the writer exists, write to the
  // store only through it (ids may be allocated from the store directly).
  explicit Writer(Store& store, WriterOptions options = {});
  // Flushes; an error it cannot report any more is logged.
  ~Writer();
  Writer(const Writer&) = delete;
  Writer& operator=(const Writer&) = delete;

  // Queue a job and return (blocks only when the queue is full). Throws the
  // writer's stored error if an earlier batch failed; InternalError for an
  // episode that breaks the storage contract (ValidateEpisode).
  void Submit(EpisodeRecord episode);
  void Submit(MetricRecord metric);
  void Submit(CheckpointRecord checkpoint);
  // Blocks until every job submitted before the call is committed. Throws the
  // stored error, or InternalError if an episode is still held back because
  // an item it depends on was never submitted (call Flush when the rollout
  // threads are quiescent).
  void Flush();

  // Synchronous run bookkeeping on the writer's connection.
  int64_t BeginRun(const RunRecord& run);
  void EndRun(int64_t run_id, std::string_view status);  // flushes first
  void ResumeRun(int64_t run_id);                        // flushes first
  // Store::TruncateRun after a Flush; also forgets which item ids it saw
  // committed, since truncation frees ids for reuse.
  TruncateResult TruncateRun(int64_t run_id, int64_t last_iteration, int64_t last_episode_id);

  struct Stats {
    int64_t episodes = 0, metrics = 0, checkpoints = 0;  // committed
    int64_t rows = 0;                                    // rows inserted (RowCount for episodes)
    int64_t transactions = 0;                            // committed batches
    int64_t held = 0;                                    // episodes waiting for an item right now
    double busy_seconds = 0;      // wall time the writer thread spent in Store::Write
    double busy_cpu_seconds = 0;  // CPU time of the writer thread in Store::Write
  };
  Stats stats() const;
  Store& store() { return store_; }

 private:
  struct Job {
    uint64_t seq;
    WriteJob job;
  };
  void Enqueue(WriteJob job);
  void Loop();
  // Ids of items the job needs that it does not create itself.
  static std::vector<int64_t> Dependencies(const WriteJob& job);
  bool IsCommitted(int64_t item_id);
  void ThrowIfFailed() const;  // mu_ held

  Store& store_;
  WriterOptions options_;
  std::mutex store_mu_;  // serialises use of store_

  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_, space_cv_;
  std::deque<Job> queue_;
  std::vector<Job> held_;  // writer thread only, but read by Flush under mu_
  uint64_t submitted_ = 0;
  uint64_t processed_ = 0;  // highest seq below which every job is committed or held
  bool stop_ = false;
  std::exception_ptr error_;
  Stats stats_;
  std::unordered_set<int64_t> committed_items_;  // guarded by store_mu_
  std::thread thread_;
};

}  // namespace rlid::memory

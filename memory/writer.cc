// Writer: FIFO queue -> one background thread -> batched Store::Write calls,
// with dependency holding for memory items and sticky errors.
#include "memory/writer.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <functional>
#include <unordered_set>

#include "core/check.h"
#include "core/error.h"

namespace rlid::memory {
namespace {

double MonotonicSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

}  // namespace

Writer::Writer(Store& store, WriterOptions options) : store_(store), options_(options) {
  RLID_CHECK_EQ(static_cast<int>(store_.mode()), static_cast<int>(Store::Mode::kReadWrite),
                "a Writer needs a store opened read-write");
  RLID_CHECK_GE(options_.max_queue, size_t{1});
  RLID_CHECK_GE(options_.max_batch, size_t{1});
  thread_ = std::thread([this] { Loop(); });
}

Writer::~Writer() {
  try {
    Flush();
  } catch (const std::exception& e) {
    spdlog::error("rlid.db writer for '{}': {}", store_.path(), e.what());
  }
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

void Writer::ThrowIfFailed() const {
  if (error_) std::rethrow_exception(error_);
}

void Writer::Enqueue(WriteJob job) {
  std::unique_lock lk(mu_);
  ThrowIfFailed();
  space_cv_.wait(lk, [&] { return queue_.size() < options_.max_queue || error_; });
  ThrowIfFailed();
  queue_.push_back(Job{++submitted_, std::move(job)});
  lk.unlock();
  work_cv_.notify_one();
}

void Writer::Submit(EpisodeRecord episode) {
  ValidateEpisode(episode);
  Enqueue(std::move(episode));
}

void Writer::Submit(MetricRecord metric) {
  RLID_CHECK(!metric.key.empty(), "metric without a key (iteration {})", metric.iteration);
  if (metric.wall_time == 0) metric.wall_time = NowUnixSeconds();
  Enqueue(std::move(metric));
}

void Writer::Submit(CheckpointRecord checkpoint) { Enqueue(std::move(checkpoint)); }

void Writer::Flush() {
  std::unique_lock lk(mu_);
  const uint64_t target = submitted_;
  done_cv_.wait(lk, [&] { return processed_ >= target || error_; });
  ThrowIfFailed();
  std::vector<std::string> stuck;
  for (const Job& j : held_) {
    if (j.seq > target) continue;
    const auto& e = std::get<EpisodeRecord>(j.job);
    std::vector<std::string> missing;
    for (int64_t id : Dependencies(j.job)) missing.push_back(std::to_string(id));
    stuck.push_back(
        fmt::format("episode {} (depends on items {})", e.id, fmt::join(missing, ", ")));
  }
  if (!stuck.empty())
    throw InternalError(
        fmt::format("{} episode(s) wait for memory items that were never submitted: {}",
                    stuck.size(), fmt::join(stuck, "; ")),
        "submit the episode that created those items (with MemoryBank::EndEpisode's items) "
        "before flushing");
}

int64_t Writer::BeginRun(const RunRecord& run) {
  {
    std::lock_guard lk(mu_);
    ThrowIfFailed();
  }
  std::lock_guard store_lk(store_mu_);
  return store_.BeginRun(run);
}

void Writer::EndRun(int64_t run_id, std::string_view status) {
  Flush();
  std::lock_guard store_lk(store_mu_);
  store_.EndRun(run_id, status);
}

void Writer::ResumeRun(int64_t run_id) {
  Flush();
  std::lock_guard store_lk(store_mu_);
  store_.ResumeRun(run_id);
}

TruncateResult Writer::TruncateRun(int64_t run_id, int64_t last_iteration,
                                   int64_t last_episode_id) {
  Flush();
  std::lock_guard store_lk(store_mu_);
  TruncateResult r = store_.TruncateRun(run_id, last_iteration, last_episode_id);
  committed_items_.clear();
  return r;
}

Writer::Stats Writer::stats() const {
  std::lock_guard lk(mu_);
  return stats_;
}

std::vector<int64_t> Writer::Dependencies(const WriteJob& job) {
  std::vector<int64_t> deps;
  const auto* e = std::get_if<EpisodeRecord>(&job);
  if (!e) return deps;
  std::unordered_set<int64_t> own;
  for (const auto& it : e->new_items) own.insert(it.id);
  for (const auto& s : e->steps)
    for (const auto& r : s.reads)
      if (!own.count(r.item_id)) deps.push_back(r.item_id);
  for (const auto& it : e->new_items)
    for (int64_t p : it.parents)
      if (!own.count(p)) deps.push_back(p);
  std::sort(deps.begin(), deps.end());
  deps.erase(std::unique(deps.begin(), deps.end()), deps.end());
  return deps;
}

bool Writer::IsCommitted(int64_t item_id) {
  if (committed_items_.count(item_id)) return true;
  if (!store_.HasMemoryItem(item_id)) return false;
  committed_items_.insert(item_id);
  return true;
}

namespace {

// The jobs of one batch that can be written now, in an order where every job
// comes after the memory items it depends on: those committed (`committed`)
// or accepted earlier in this batch, repeating until nothing changes (a held
// job may depend on a later one in the same batch). Adds the accepted items to
// `batch_items` and their counts to `delta`; returns the accepted indices.
std::vector<size_t> AcceptReady(const std::vector<const WriteJob*>& jobs,
                                const std::vector<std::vector<int64_t>>& deps,
                                const std::function<bool(int64_t)>& committed,
                                std::unordered_set<int64_t>& batch_items, Writer::Stats& delta) {
  std::vector<size_t> order;
  std::vector<bool> accepted(jobs.size(), false);
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t i = 0; i < jobs.size(); ++i) {
      if (accepted[i]) continue;
      bool ready = true;
      for (int64_t d : deps[i]) ready = ready && (batch_items.count(d) || committed(d));
      if (!ready) continue;
      accepted[i] = progress = true;
      if (const auto* e = std::get_if<EpisodeRecord>(jobs[i])) {
        for (const auto& it : e->new_items) batch_items.insert(it.id);
        ++delta.episodes;
        delta.rows += RowCount(*e);
      } else {
        ++(std::holds_alternative<MetricRecord>(*jobs[i]) ? delta.metrics : delta.checkpoints);
        ++delta.rows;
      }
      order.push_back(i);
    }
  }
  return order;
}

// Adds one transaction's counts and busy time to the writer's totals.
void AddCounts(const Writer::Stats& d, Writer::Stats& into) {
  into.episodes += d.episodes;
  into.metrics += d.metrics;
  into.checkpoints += d.checkpoints;
  into.rows += d.rows;
  into.transactions += d.transactions;
  into.busy_seconds += d.busy_seconds;
  into.busy_cpu_seconds += d.busy_cpu_seconds;
}

}  // namespace

void Writer::Loop() {
  while (true) {
    std::vector<Job> candidates;
    uint64_t last_seq = 0;
    {
      std::unique_lock lk(mu_);
      work_cv_.wait(lk, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) break;  // stop_ and drained
      candidates = std::move(held_);
      held_.clear();
      for (size_t n = 0; n < options_.max_batch && !queue_.empty(); ++n) {
        candidates.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      last_seq = candidates.back().seq;
      if (error_) {  // after a failure nothing more is written
        processed_ = std::max(processed_, last_seq);
        lk.unlock();
        done_cv_.notify_all();
        space_cv_.notify_all();
        continue;
      }
    }
    space_cv_.notify_all();

    std::exception_ptr failure;
    std::vector<bool> accepted(candidates.size(), false);
    std::vector<WriteJob> ordered;
    std::unordered_set<int64_t> batch_items;
    Stats delta;
    {
      std::lock_guard store_lk(store_mu_);
      try {
        std::vector<std::vector<int64_t>> deps(candidates.size());
        std::vector<const WriteJob*> jobs(candidates.size());
        for (size_t i = 0; i < candidates.size(); ++i) {
          deps[i] = Dependencies(candidates[i].job);
          jobs[i] = &candidates[i].job;
        }
        const std::vector<size_t> order =
            AcceptReady(jobs, deps, [this](int64_t id) { return IsCommitted(id); }, batch_items, delta);
        for (size_t i : order) {
          accepted[i] = true;
          ordered.push_back(std::move(candidates[i].job));
        }
        if (!ordered.empty()) {
          const double t0 = MonotonicSeconds(), c0 = ThreadCpuSeconds();
          store_.Write(ordered);
          delta.busy_seconds = MonotonicSeconds() - t0;
          delta.busy_cpu_seconds = ThreadCpuSeconds() - c0;
          delta.transactions = 1;
          committed_items_.insert(batch_items.begin(), batch_items.end());
        }
      } catch (...) {
        failure = std::current_exception();
      }
    }
    {
      std::lock_guard lk(mu_);
      for (size_t i = 0; i < candidates.size(); ++i)
        if (!accepted[i] && !failure) held_.push_back(std::move(candidates[i]));
      if (failure) {
        error_ = failure;
      } else {
        AddCounts(delta, stats_);
      }
      stats_.held = static_cast<int64_t>(held_.size());
      processed_ = std::max(processed_, last_seq);
    }
    done_cv_.notify_all();
    space_cv_.notify_all();
  }
}

}  // namespace rlid::memory

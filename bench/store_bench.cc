// `rlid bench store`: write throughput of the run database, measured in one
// run on fresh files in a scratch directory:
//   - rows/s for batched transactions vs one transaction per row (the ratio),
//   - episode commit latency through the Writer (Submit + Flush),
//   - Writer queue throughput with several submitting threads, and the
//     submitting thread's cost per step (what logging adds to a rollout loop).
// Episodes are synthetic but sized like real ones (unique ~1.5 KB prompts,
// menus with afterstates, memory items and reads).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <thread>
#include <tuple>

#include "bench/bench.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/rng.h"
#include "memory/store.h"
#include "memory/writer.h"

namespace rlid::bench {
namespace {

namespace fs = std::filesystem;
using memory::EpisodeRecord;

struct Shape {
  int steps = 10;
  int menu = 4;
  int reads = 2;
};

std::string Words(Rng& rng, int n) {
  static const char* kWords[] = {"red",  "key", "kitchen", "door", "hall",   "lamp",  "north",
                                 "east", "box", "locked",  "open", "attic",  "map",   "you",
                                 "see",  "a",   "the",     "is",   "cellar", "stairs"};
  std::string out;
  for (int i = 0; i < n; ++i) {
    if (i) out += ' ';
    out += kWords[rng.UniformInt(std::size(kWords))];
  }
  return out;
}

// Episode `id` reading items (id-1 ... id-reads) of earlier episodes and creating item `id`.
EpisodeRecord MakeEpisode(int64_t id, int64_t run, const Shape& shape, Rng& rng,
                          int64_t first_item) {
  EpisodeRecord e;
  e.id = id;
  e.run_id = run;
  e.env = "bench";
  e.seed = static_cast<uint64_t>(2 * id);
  e.length = shape.steps;
  e.success = rng.Bernoulli(0.5);
  e.ret = e.success;
  const std::string instructions = Words(rng, 150);
  for (int t = 0; t < shape.steps; ++t) {
    memory::StepRecord s;
    s.t = t;
    s.observation = Words(rng, 40);
    s.prompt =
        fmt::format("{}\n\nObservation: {}\n\nMemory: {}\n\nMenu: ...\nAction:", instructions,
                    s.observation, Words(rng, 30));
    s.prompt_tokens = 260;
    s.action = static_cast<int>(rng.UniformInt(static_cast<uint64_t>(shape.menu)));
    s.label = std::string(1, static_cast<char>('A' + s.action));
    s.command = Words(rng, 2);
    s.logp_rollout = -rng.Uniform();
    s.logp_train = s.logp_rollout - 1e-4;
    s.value = rng.Uniform();
    s.reward = t + 1 == shape.steps ? e.ret : 0.0;
    for (int k = 0; k < shape.menu; ++k) {
      memory::MenuItemRecord m;
      m.position = k;
      m.action = k;
      m.label = std::string(1, static_cast<char>('A' + k));
      m.command = Words(rng, 2);
      m.afterstate = Words(rng, 20);
      m.probability = 1.0 / shape.menu;
      m.realisations = {{m.label, 0.2}, {m.command, 0.05}};
      s.menu.push_back(std::move(m));
    }
    if (t == 0)
      for (int r = 0; r < shape.reads && id - 1 - r >= first_item; ++r)
        s.reads.push_back({id - 1 - r, r, 1.0});
    e.steps.push_back(std::move(s));
  }
  memory::MemoryItem item;
  item.id = id;  // bench ids: item i is created by episode i
  item.content = Words(rng, 8);
  item.source = {run, id, 0};
  item.split = "train";
  e.new_items.push_back(std::move(item));
  return e;
}

struct Db {
  std::unique_ptr<memory::Store> store;
  int64_t run = 0;
};

Db Fresh(const fs::path& dir, const std::string& name) {
  const fs::path path = dir / (name + ".db");
  for (const char* suffix : {"", "-wal", "-shm", "-writer.lock"})
    fs::remove(path.string() + suffix);
  Db db;
  db.store = memory::Store::Open(path.string(), memory::Store::Mode::kReadWrite);
  memory::RunRecord r;
  r.name = "bench";
  r.kind = "train";
  db.run = db.store->BeginRun(r);
  return db;
}

// CPU seconds of the calling thread (excludes time the scheduler gave to others:
// this machine is shared, so CPU-time rates are the stabler numbers).
double ThreadCpu() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double Percentile(std::vector<double> v, double q) {
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * (v.size() - 1) + 0.5)];
}

class StoreBench : public Benchmark {
 public:
  void AddOptions(CLI::App& app) override {
    app.add_option("--episodes", episodes_, "episodes for the batched and queue runs")
        ->capture_default_str();
    app.add_option("--per-row-episodes", per_row_episodes_,
                   "episodes for the one-transaction-per-row baseline")
        ->capture_default_str();
    app.add_option("--batch", batch_, "episodes per transaction in the batched run")
        ->capture_default_str();
    app.add_option("--steps", shape_.steps, "steps per episode")->capture_default_str();
    app.add_option("--menu", shape_.menu, "menu items per step")->capture_default_str();
    app.add_option("--submitters", threads_, "threads submitting episodes in the queue run")
        ->capture_default_str();
    app.add_option("--latency-episodes", latency_episodes_, "episodes timed one by one")
        ->capture_default_str();
    app.add_option("--dir", dir_, "scratch directory (default: a new temp directory)");
  }

  nlohmann::json Run() override {
    if (episodes_ < 1 || per_row_episodes_ < 1 || batch_ < 1 || shape_.steps < 1 ||
        shape_.menu < 1 || threads_ < 1 || latency_episodes_ < 2)
      throw ConfigError("rlid bench store: every count must be >= 1 (latency episodes >= 2)");
    fs::path dir = dir_.empty()
                       ? fs::temp_directory_path() / fmt::format("rlid_store_bench_{}", ::getpid())
                       : fs::path(dir_);
    fs::create_directories(dir);
    nlohmann::json out;
    out["shape"] = {{"steps", shape_.steps}, {"menu", shape_.menu}, {"reads", shape_.reads}};
    // Progress in episodes written, over the four measurements.
    Progress progress("bench store: episodes written",
                      2 * static_cast<int64_t>(episodes_) + per_row_episodes_ + latency_episodes_);
    int64_t written = 0;

    // 1. Batched transactions vs one transaction per row, same episode shape.
    auto rows_per_s = [&](const std::string& name, int n, memory::Batching batching, int batch) {
      Db db = Fresh(dir, name);
      Rng rng = Rng::Stream(1, "store_bench", 0);
      std::vector<memory::WriteJob> jobs;
      int64_t rows = 0;
      double busy = 0, cpu = 0;
      for (int i = 1; i <= n; ++i) {
        EpisodeRecord e = MakeEpisode(db.store->NewEpisodeId(), db.run, shape_, rng, 1);
        db.store->item_ids().Next();
        rows += memory::RowCount(e);
        jobs.push_back(std::move(e));
        if (static_cast<int>(jobs.size()) == batch || i == n) {
          const double t0 = MonotonicSeconds(), c0 = ThreadCpu();
          db.store->Write(jobs, batching);
          busy += MonotonicSeconds() - t0;
          cpu += ThreadCpu() - c0;
          written += static_cast<int64_t>(jobs.size());
          jobs.clear();
          progress.Update(written, name);
        }
      }
      return std::tuple{rows / busy, rows / cpu, rows};
    };
    const auto [batched, batched_cpu, batched_rows] =
        rows_per_s("batched", episodes_, memory::Batching::kTransaction, batch_);
    const auto [per_row, per_row_cpu, per_row_rows] =
        rows_per_s("per_row", per_row_episodes_, memory::Batching::kPerRow, 1);
    out["inserts"] = {{"batched_rows_per_s", batched},
                      {"batched_rows_per_cpu_s", batched_cpu},
                      {"batched_rows", batched_rows},
                      {"batch_episodes", batch_},
                      {"per_row_rows_per_s", per_row},
                      {"per_row_rows_per_cpu_s", per_row_cpu},
                      {"per_row_rows", per_row_rows},
                      {"batched_over_per_row", batched / per_row},
                      {"batched_over_per_row_cpu", batched_cpu / per_row_cpu}};

    // 2. Commit latency: Submit one episode, Flush, repeat (idle writer each time).
    {
      Db db = Fresh(dir, "latency");
      memory::Writer writer(*db.store);
      Rng rng = Rng::Stream(2, "store_bench", 0);
      std::vector<double> ms;
      for (int i = 0; i < latency_episodes_; ++i) {
        EpisodeRecord e = MakeEpisode(db.store->NewEpisodeId(), db.run, shape_, rng, 1);
        db.store->item_ids().Next();
        const double t0 = MonotonicSeconds();
        writer.Submit(std::move(e));
        writer.Flush();
        ms.push_back(1e3 * (MonotonicSeconds() - t0));
        progress.Update(++written, "commit latency");
      }
      out["commit_latency_ms"] = {{"p50", Percentile(ms, 0.5)},
                                  {"p95", Percentile(ms, 0.95)},
                                  {"max", *std::max_element(ms.begin(), ms.end())}};
    }

    // 3. Queue throughput: threads submit pre-built episodes as fast as they can.
    {
      Db db = Fresh(dir, "queue");
      Rng rng = Rng::Stream(3, "store_bench", 0);
      std::vector<std::vector<EpisodeRecord>> work(threads_);
      int64_t rows = 0;
      for (int i = 0; i < episodes_; ++i) {
        EpisodeRecord e = MakeEpisode(db.store->NewEpisodeId(), db.run, shape_, rng, 1);
        db.store->item_ids().Next();
        rows += memory::RowCount(e);
        work[i % threads_].push_back(std::move(e));
      }
      memory::Writer writer(*db.store);
      std::vector<double> submit_s(threads_, 0.0);
      const double t0 = MonotonicSeconds();
      std::vector<std::thread> pool;
      for (int t = 0; t < threads_; ++t)
        pool.emplace_back([&, t] {
          for (auto& e : work[t]) {
            const double s0 = MonotonicSeconds();
            writer.Submit(std::move(e));
            submit_s[t] += MonotonicSeconds() - s0;
          }
        });
      for (auto& th : pool) th.join();
      writer.Flush();
      const double wall = MonotonicSeconds() - t0;
      written += episodes_;
      progress.Update(written, "writer queue");
      const auto stats = writer.stats();
      double submit_total = 0;
      for (double s : submit_s) submit_total += s;
      const double steps = static_cast<double>(episodes_) * shape_.steps;
      out["queue"] = {{"threads", threads_},
                      {"episodes_per_s", episodes_ / wall},
                      {"rows_per_s", rows / wall},
                      {"transactions", stats.transactions},
                      {"episodes_per_transaction", static_cast<double>(stats.episodes) /
                                                       std::max<int64_t>(1, stats.transactions)},
                      {"caller_us_per_step", 1e6 * submit_total / steps},
                      {"writer_us_per_step", 1e6 * stats.busy_seconds / steps},
                      {"writer_cpu_us_per_step", 1e6 * stats.busy_cpu_seconds / steps}};
    }
    const double db_mb = static_cast<double>(fs::file_size(dir / "batched.db")) / (1 << 20);
    out["batched_db_mb"] = db_mb;
    if (dir_.empty()) fs::remove_all(dir);

    std::cout << fmt::format(
        "inserts: batched {:.0f} rows/s ({} episodes/txn), one txn per row {:.0f} rows/s, "
        "ratio {:.1f}x (CPU time: {:.0f} vs {:.0f} rows/cpu-s, {:.1f}x)\n",
        batched, batch_, per_row, batched / per_row, batched_cpu, per_row_cpu,
        batched_cpu / per_row_cpu);
    std::cout << fmt::format("commit latency (Submit+Flush): p50 {:.2f} ms, p95 {:.2f} ms\n",
                             out["commit_latency_ms"]["p50"].get<double>(),
                             out["commit_latency_ms"]["p95"].get<double>());
    std::cout << fmt::format(
        "writer queue ({} threads): {:.0f} episodes/s, {:.0f} rows/s; caller {:.2f} us/step, "
        "writer thread {:.1f} us/step ({:.1f} CPU)\n",
        threads_, out["queue"]["episodes_per_s"].get<double>(),
        out["queue"]["rows_per_s"].get<double>(), out["queue"]["caller_us_per_step"].get<double>(),
        out["queue"]["writer_us_per_step"].get<double>(),
        out["queue"]["writer_cpu_us_per_step"].get<double>());
    return out;
  }

 private:
  Shape shape_;
  int episodes_ = 400, per_row_episodes_ = 40, batch_ = 16, threads_ = 4, latency_episodes_ = 50;
  std::string dir_;
};

const Registrar<BenchRegistry> kRegister(
    "store", "run database: batched vs per-row inserts, commit latency, writer queue throughput",
    [] { return std::make_unique<StoreBench>(); });

}  // namespace
}  // namespace rlid::bench

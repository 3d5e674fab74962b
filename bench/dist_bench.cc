// `rlid bench dist`: data-parallel scaling on this machine. The same training
// config (same total batch per iteration) runs as a job of 1 rank and of 2
// ranks, each rank with 1 intra-op thread, through the same --nproc launcher;
// the result is the ratio of the two jobs' training wall-clock over the same
// iterations (the first, warm-up iteration left out), measured in one run:
//   speedup = t(1 rank) / t(2 ranks),  efficiency = speedup / 2.
// Each job's time is the slowest rank's (time/iteration_s), so waiting at the
// gradient all-reduce counts. The ranks' logs go to <dir>/ranks.log.
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>

#include "bench/bench.h"
#include "core/error.h"
#include "core/launch.h"
#include "memory/store.h"

namespace rlid::bench {
namespace {

namespace fs = std::filesystem;

using memory::NumericValue;

class DistBench final : public Benchmark {
 public:
  void AddOptions(CLI::App& app) override {
    app.add_option("--config", config_, "training config (both jobs run it)")
        ->check(CLI::ExistingFile)
        ->capture_default_str();
    app.add_option("--iterations", iterations_, "measured iterations per job (after one warm-up)")
        ->capture_default_str();
    app.add_option("--set", sets_, "config override for both jobs (repeatable)");
    app.add_option("--dir", dir_, "scratch directory (default: a new temp directory, removed)");
  }

  nlohmann::json Run() override {
    if (iterations_ < 1)
      throw ConfigError(fmt::format("--iterations must be >= 1, found {}", iterations_));
    const bool scratch = dir_.empty();
    const fs::path dir =
        scratch ? fs::temp_directory_path() / fmt::format("rlid_bench_dist_{}", ::getpid()) : fs::path(dir_);
    fs::remove_all(dir);
    fs::create_directories(dir);
    nlohmann::json out;
    out["config"] = config_;
    out["iterations_measured"] = iterations_;
    out["threads_per_rank"] = 1;
    double seconds[3] = {0, 0, 0};
    for (int n : {1, 2}) {
      const fs::path run = dir / fmt::format("ranks{}", n);
      std::vector<std::string> args = {"train", config_, "--out", run.string(), "--threads", "1",
                                       "--set", fmt::format("trainer.iterations={}", iterations_ + 1),
                                       "--set", "trainer.eval_every=0", "--set", "trainer.eval_sampled=false",
                                       "--set", "trainer.eval_episodes=1", "--set", "trainer.checkpoint_every=0",
                                       "--set", "trainer.budget=iterations", "--metrics-only"};
      for (const auto& s : sets_) args.insert(args.end(), {"--set", s});
      const LaunchResult r =
          LaunchLocalRanks({.nproc = n, .args = args, .log_file = (dir / "ranks.log").string()});
      if (r.exit_code != 0)
        throw Error(fmt::format("the {}-rank job failed: {}", n, r.summary),
                    fmt::format("see {}", (dir / "ranks.log").string()));
      auto store = memory::Store::Open((run / memory::kDatabaseFileName).string(),
                                       memory::Store::Mode::kReadOnly);
      auto q = store->Query(
          "SELECT SUM(value), COUNT(*) FROM metrics WHERE key = 'time/iteration_s' AND iteration >= 1");
      seconds[n] = NumericValue(q.rows.at(0).at(0));
      auto steps = store->Query(
          "SELECT value FROM metrics WHERE key = 'budget/env_steps' ORDER BY iteration DESC LIMIT 1");
      nlohmann::json j;
      j["ranks"] = n;
      j["train_seconds"] = seconds[n];
      j["env_steps_total"] = steps.rows.empty() ? 0.0 : NumericValue(steps.rows[0][0]);
      j["seconds_per_iteration"] = seconds[n] / iterations_;
      out["jobs"].push_back(j);
    }
    out["speedup_2_over_1"] = seconds[1] / seconds[2];
    out["scaling_efficiency"] = seconds[1] / seconds[2] / 2.0;
    out["cores_on_machine"] = static_cast<int>(::sysconf(_SC_NPROCESSORS_ONLN));
    if (scratch) fs::remove_all(dir);
    return out;
  }

 private:
  std::string config_ = "configs/bandit_ppo.toml";
  int64_t iterations_ = 8;
  std::vector<std::string> sets_;
  std::string dir_;
};

const Registrar<BenchRegistry> kRegister(
    "dist", "data-parallel scaling: a job of 2 ranks vs 1 rank (1 thread each), as a ratio",
    [] { return std::make_unique<DistBench>(); });

}  // namespace
}  // namespace rlid::bench

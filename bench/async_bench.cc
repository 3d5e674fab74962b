// `rlid bench async`: the wall-clock speed-up of asynchronous rollouts
// (trainer.max_staleness = s) over the synchronous loop, as a ratio measured in
// one run. One session per staleness, all with the same config. They iterate
// alternately, so a machine that slows down slows every arm alike. After one
// warm-up iteration each, the arms are timed over the same number of
// iterations. The speed-up compares env steps per second.
//
// An async arm plays each batch while the previous update runs. Its first
// iteration plays inline and the worker fills the pipeline behind it, so the
// warm-up leaves it in its steady state.
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <memory>

#include "bench/bench.h"
#include "bench/training_arm.h"
#include "core/error.h"
#include "core/progress.h"
#include "trainers/runtime/trainer.h"

namespace rlid::bench {
namespace {

namespace fs = std::filesystem;

class AsyncBench final : public Benchmark {
 public:
  void AddOptions(CLI::App& app) override {
    app.add_option("--env", env_, "environment (change its parameters with --set env.KEY=V)")
        ->capture_default_str();
    app.add_option("--algorithm", algorithm_, "trainer")->capture_default_str();
    app.add_option("--staleness", staleness_, "max_staleness of the async arms (beside 0)")
        ->delimiter(',')
        ->capture_default_str();
    app.add_option("--iterations", iterations_, "timed iterations per arm (after one warm-up)")
        ->capture_default_str();
    app.add_option("--episodes", episodes_, "episodes per iteration (all in lockstep)")
        ->capture_default_str();
    app.add_option("--set", sets_, "config override, e.g. --set trainer.epochs=1 (repeatable)");
  }

  nlohmann::json Run() override {
    const int threads = cli::GlobalThreads().value_or(0);
    if (iterations_ < 1)
      throw ConfigError(fmt::format("--iterations must be >= 1, found {}", iterations_));
    std::vector<int64_t> levels = {0};
    for (int64_t s : staleness_) {
      if (s < 1) throw ConfigError(fmt::format("--staleness takes values >= 1, found {}", s));
      levels.push_back(s);
    }
    const fs::path root =
        fs::temp_directory_path() / fmt::format("rlid_async_bench_{}", ::getpid());
    fs::remove_all(root);
    struct Arm {
      int64_t staleness;
      std::unique_ptr<trainers::ExperimentConfig> cfg;  // the run keeps a reference
      std::unique_ptr<TrainingArm> run;
      int64_t steps0 = 0;
    };
    std::vector<Arm> arms;
    for (int64_t s : levels) {
      auto sets = sets_;
      sets.push_back(fmt::format("trainer.max_staleness={}", s));
      Arm arm{s, BenchTrainConfig(env_, algorithm_, iterations_ + 1, episodes_, threads, sets)};
      arm.run = std::make_unique<TrainingArm>(*arm.cfg, (root / fmt::format("s{}", s)).string(),
                                              /*record=*/false);
      arms.push_back(std::move(arm));
    }
    Progress progress("bench async: iterations (every arm)", iterations_ + 1);
    for (auto& a : arms) a.run->Iteration(0);  // warm-up; fills the async pipeline
    for (auto& a : arms) {
      a.run->Reset();
      a.steps0 = a.run->session->budget.env_steps;
    }
    progress.Update(1, "(warm-up)");
    for (int64_t it = 1; it <= iterations_; ++it) {
      // Rotate which arm goes first.
      for (size_t k = 0; k < arms.size(); ++k) arms[(k + it) % arms.size()].run->Iteration(it);
      progress.Update(it + 1);
    }
    nlohmann::json out;
    out["env"] = env_;
    out["algorithm"] = algorithm_;
    out["iterations"] = iterations_;
    out["episodes_per_iteration"] = episodes_;
    out["threads"] = threads;
    double base_rate = 0;
    for (auto& a : arms) {
      const double steps = static_cast<double>(a.run->session->budget.env_steps - a.steps0);
      const double rate = steps / a.run->seconds;
      if (a.staleness == 0) base_rate = rate;
      nlohmann::json row = {{"max_staleness", a.staleness},
                            {"seconds", a.run->seconds},
                            {"env_steps", steps},
                            {"env_steps_per_s", rate},
                            {"speedup", rate / base_rate}};
      out["arms"].push_back(row);
      std::cout << fmt::format(
          "max_staleness {}: {:.2f} s per iteration, {:.1f} env steps/s, speed-up {:.2f}x\n",
          a.staleness, a.run->seconds / static_cast<double>(iterations_), rate, rate / base_rate);
    }
    arms.clear();
    fs::remove_all(root);
    return out;
  }

 private:
  std::string env_ = "bandit", algorithm_ = "grpo";
  std::vector<int64_t> staleness_ = {1, 2, 4};
  int64_t iterations_ = 6, episodes_ = 32;
  std::vector<std::string> sets_;
};

const Registrar<BenchRegistry> kRegister(
    "async",
    "wall-clock speed-up of asynchronous rollouts (max_staleness) over the synchronous loop",
    [] { return std::make_unique<AsyncBench>(); });

}  // namespace
}  // namespace rlid::bench

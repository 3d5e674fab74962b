// `rlid bench train`: training iterations per second, where one iteration's
// time goes (rollout readout forward, env step/menu/prompt building, update,
// logging) as fractions, and the overhead of full provenance logging. The
// overhead is a ratio measured in one run: two sessions with the same config
// (hence the same trajectories), one recording every step, menu and memory
// read to SQLite and one recording only metrics, iterate alternately; the
// recording session also waits for its writer to commit after each iteration,
// so the ratio is an upper bound (a real run overlaps commits with compute).
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>

#include "bench/bench.h"
#include "bench/training_arm.h"
#include "core/config.h"
#include "core/error.h"
#include "core/progress.h"
#include "trainers/runtime/trainer.h"

namespace rlid::bench {
namespace {

namespace fs = std::filesystem;

class TrainBench final : public Benchmark {
 public:
  void AddOptions(CLI::App& app) override {
    app.add_option("--env", env_,
                   "environment (its default parameters; change them with --set env.KEY=V)")
        ->capture_default_str();
    app.add_option("--iterations", iterations_,
                   "measured iterations per session (after one warm-up)")
        ->capture_default_str();
    app.add_option("--algorithm", algorithm_, "trainer")->capture_default_str();
    app.add_option("--episodes", episodes_, "episodes per iteration (all in lockstep)")
        ->capture_default_str();
    app.add_option("--set", sets_, "config override, e.g. --set env.size=3 (repeatable)");
    app.add_option("--dir", dir_,
                   "scratch directory for the two runs (default: a new temp directory, removed)");
  }

  nlohmann::json Run() override {
    threads_ = cli::GlobalThreads().value_or(0);  // rlid --threads N
    if (iterations_ < 1)
      throw ConfigError(fmt::format("--iterations must be >= 1, found {}", iterations_));
    auto cfg = BenchTrainConfig(env_, algorithm_, iterations_ + 1, episodes_, threads_, sets_);

    const bool scratch = dir_.empty();
    fs::path root = scratch
                        ? fs::temp_directory_path() / fmt::format("rlid_train_bench_{}", ::getpid())
                        : fs::path(dir_);
    fs::remove_all(root / "on");
    fs::remove_all(root / "off");
    nlohmann::json out;
    {
      TrainingArm on(*cfg, (root / "on").string(), true), off(*cfg, (root / "off").string(), false);
      // Warm-up (allocations, first-touch), then alternate which arm goes first.
      Progress progress("bench train: iterations (both arms)", iterations_ + 1);
      on.Iteration(0);
      off.Iteration(0);
      progress.Update(1, "(warm-up)");
      on.Reset(), off.Reset();
      bool same = true;
      for (int64_t it = 1; it <= iterations_; ++it) {
        double a = 0, b = 0;
        if (it % 2 == 1) {
          a = on.Iteration(it);
          b = off.Iteration(it);
        } else {
          b = off.Iteration(it);
          a = on.Iteration(it);
        }
        same = same && a == b;
        progress.Update(it + 1);
      }
      const auto& t = on.times;
      const double iter_s = on.seconds / static_cast<double>(iterations_);
      auto frac = [&](double x) { return x / on.seconds; };
      const double other = on.seconds - t.readout - t.env - t.update - t.logging;
      out["env"] = on.session->env->Info().name;
      out["algorithm"] = algorithm_;
      out["iterations"] = iterations_;
      out["episodes_per_iteration"] = cfg->trainer.episodes_per_iteration;
      out["decisions_per_iteration"] = on.decisions / static_cast<double>(iterations_);
      out["threads"] = threads_;
      out["iterations_per_s"] = 1.0 / iter_s;
      out["seconds_per_iteration"] = iter_s;
      out["fraction"] = {{"readout", frac(t.readout)},
                         {"env", frac(t.env)},
                         {"update", frac(t.update)},
                         {"logging", frac(t.logging)},
                         {"other", frac(other)}};
      out["seconds"] = {
          {"readout", t.readout}, {"env", t.env}, {"update", t.update}, {"logging", t.logging}};
      out["provenance"] = {
          {"recording_s", on.seconds},
          {"metrics_only_s", off.seconds},
          {"overhead", on.seconds / off.seconds - 1.0},
          {"target", 0.05},
          {"writer_busy_s", on.session->writer->stats().busy_seconds - on.writer_busy0},
          {"same_trajectories", same}};
      std::cout << fmt::format(
          "{} x {} episodes: {:.2f} iterations/s ({:.2f} s each); readout {:.0f}%, env {:.0f}%, "
          "update {:.0f}%, "
          "logging {:.1f}%, other {:.1f}%; provenance logging overhead {:+.1f}% (target <= 5%)\n",
          env_, cfg->trainer.episodes_per_iteration, 1.0 / iter_s, iter_s, 100 * frac(t.readout),
          100 * frac(t.env), 100 * frac(t.update), 100 * frac(t.logging), 100 * frac(other),
          100 * (on.seconds / off.seconds - 1.0));
    }
    if (scratch) fs::remove_all(root);
    return out;
  }

 private:
  std::string env_ = "bandit", algorithm_ = "ppo_decision", dir_;
  int64_t iterations_ = 6, episodes_ = 32;
  int threads_ = 0;
  std::vector<std::string> sets_;
};

const Registrar<BenchRegistry> kRegister(
    "train",
    "training iterations/s, the time split of an iteration, and provenance-logging overhead",
    [] { return std::make_unique<TrainBench>(); });

}  // namespace
}  // namespace rlid::bench

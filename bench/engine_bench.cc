// `rlid bench engine`: where an iteration's time goes when the token plane
// samples with rlid's engine and when it samples with vLLM, beside the decision
// plane's readout, on the same env, model, seed and LoRA adapters. The arms
// iterate alternately after one warm-up iteration each (which starts the vLLM
// server), so a machine that slows down slows every arm alike. Reported per arm:
// seconds per iteration split into rollout (sampling or readout), env, update
// and weight sync; generated tokens per second of sampling; decisions (env
// steps) per second of the whole iteration and of its rollout (sampling or
// readout, and env). Ratios come from one run.
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

struct EngineArm {
  std::string name, algorithm, engine;
  std::unique_ptr<trainers::ExperimentConfig> cfg;  // the run keeps a reference
  std::unique_ptr<TrainingArm> run;
  agents::Budget start;
};

class EngineBench final : public Benchmark {
 public:
  void AddOptions(CLI::App& app) override {
    app.add_option("--env", env_, "environment (change its parameters with --set env.KEY=V)")
        ->capture_default_str();
    app.add_option("--engines", engines_, "token-plane engines to time (rlid, vllm)")
        ->delimiter(',')
        ->capture_default_str();
    app.add_option("--iterations", iterations_, "timed iterations per arm (after one warm-up)")
        ->capture_default_str();
    app.add_option("--episodes", episodes_, "episodes per iteration (all in lockstep)")->capture_default_str();
    app.add_option("--max-new-tokens", max_new_tokens_, "sampler.max_new_tokens")->capture_default_str();
    app.add_option("--set", sets_, "config override for every arm (repeatable)");
  }

  nlohmann::json Run() override {
    const int threads = cli::GlobalThreads().value_or(0);
    if (iterations_ < 1) throw ConfigError(fmt::format("--iterations must be >= 1, found {}", iterations_));
    const fs::path root = fs::temp_directory_path() / fmt::format("rlid_engine_bench_{}", ::getpid());
    fs::remove_all(root);
    std::vector<EngineArm> arms;
    arms.push_back({"decision plane (readout)", "ppo_decision", "rlid", nullptr, nullptr, {}});
    for (const auto& e : engines_) arms.push_back({"token plane, engine " + e, "grpo", e, nullptr, nullptr, {}});
    for (auto& a : arms) {
      auto sets = sets_;
      sets.insert(sets.begin(), {"policy.lora.rank=8", "policy.lora.alpha=16", "trainer.group_size=4",
                                 fmt::format("sampler.max_new_tokens={}", max_new_tokens_),
                                 "sampler.engine=" + a.engine});
      a.cfg = BenchTrainConfig(env_, a.algorithm, iterations_ + 1, episodes_, threads, sets);
      a.run = std::make_unique<TrainingArm>(*a.cfg, (root / fmt::format("arm{}", &a - arms.data())).string(),
                                            /*record=*/false);
    }
    Progress progress("bench engine: iterations (every arm)", iterations_ + 1);
    for (auto& a : arms) a.run->Iteration(0);  // warm-up: starts the engines
    for (auto& a : arms) {
      a.run->Reset();
      a.start = a.run->session->budget;
    }
    progress.Update(1, "(warm-up)");
    for (int64_t it = 1; it <= iterations_; ++it) {
      for (size_t k = 0; k < arms.size(); ++k) arms[(k + it) % arms.size()].run->Iteration(it);
      progress.Update(it + 1);
    }
    nlohmann::json out = {{"env", env_}, {"iterations", iterations_}, {"episodes_per_iteration", episodes_},
                          {"max_new_tokens", max_new_tokens_}, {"threads", threads}};
    const double n = static_cast<double>(iterations_);
    for (auto& a : arms) {
      const auto& b = a.run->session->budget;
      const auto& t = a.run->times;
      const double sync = b.engine_sync_seconds - a.start.engine_sync_seconds;
      const double tokens = static_cast<double>(b.generated_tokens - a.start.generated_tokens);
      const double steps = static_cast<double>(b.env_steps - a.start.env_steps);
      nlohmann::json row = {{"arm", a.name},
                            {"s_per_iteration", a.run->seconds / n},
                            {"rollout_s", t.readout / n},
                            {"env_s", t.env / n},
                            {"update_s", t.update / n},
                            {"sync_s", sync / n},
                            {"generated_tokens_per_s", t.readout > 0 ? tokens / t.readout : 0.0},
                            {"decisions_per_s", steps / a.run->seconds},
                            {"rollout_decisions_per_s", t.readout + t.env > 0 ? steps / (t.readout + t.env) : 0.0}};
      out["arms"].push_back(row);
      std::cout << fmt::format(
          "{:<28} {:6.2f} s/iteration (rollout {:.2f}, env {:.2f}, update {:.2f}, sync {:.2f}); "
          "{:7.1f} tokens/s sampling; {:6.1f} decisions/s ({:.1f} per rollout second)\n",
          a.name, a.run->seconds / n, t.readout / n, t.env / n, t.update / n, sync / n,
          row["generated_tokens_per_s"].get<double>(), row["decisions_per_s"].get<double>(),
          row["rollout_decisions_per_s"].get<double>());
    }
    arms.clear();
    fs::remove_all(root);
    return out;
  }

 private:
  std::string env_ = "bandit";
  std::vector<std::string> engines_ = {"rlid", "vllm"};
  int64_t iterations_ = 3, episodes_ = 32;
  int max_new_tokens_ = 16;
  std::vector<std::string> sets_;
};

const Registrar<BenchRegistry> kRegister(
    "engine",
    "token plane on rlid's engine vs vLLM, beside the decision plane: s/iteration split, tokens/s, "
    "decisions/s",
    [] { return std::make_unique<EngineBench>(); });

}  // namespace
}  // namespace rlid::bench

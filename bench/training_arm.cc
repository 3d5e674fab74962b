#include "bench/training_arm.h"

#include <fmt/format.h>

#include "bench/bench.h"
#include "core/config.h"

namespace rlid::bench {

std::unique_ptr<trainers::ExperimentConfig> BenchTrainConfig(const std::string& env,
                                                             const std::string& algorithm,
                                                             int64_t iterations, int64_t episodes,
                                                             int threads,
                                                             const std::vector<std::string>& sets) {
  const std::string toml = fmt::format(R"(
[run]
name = "bench_train"
seed = 1
threads = {}
[env]
name = "{}"
[policy]
preset = "tiny"
[trainer]
algorithm = "{}"
iterations = {}
episodes_per_iteration = {}
num_envs = {}
minibatch_size = 64
)",
                                       threads, env, algorithm, iterations, episodes, episodes);
  Config raw = Config::FromString(toml, "bench train");
  raw.ApplyOverrides(sets);
  return trainers::ExperimentConfig::FromConfig(std::move(raw));
}

TrainingArm::TrainingArm(const trainers::ExperimentConfig& cfg, const std::string& dir, bool record)
    : trainer(trainers::TrainerRegistry::Global().Make(cfg.trainer.algorithm)),
      session(std::make_unique<trainers::Run>(
          cfg,
          trainers::RunOptions{.out_dir = dir, .kind = trainers::RunKind::kBench, .quiet = true, .record = record})),
      runner(std::make_unique<trainers::IterationRunner>(*trainer, cfg.trainer, session->model)) {}

TrainingArm::~TrainingArm() {
  try {
    session->End("completed");
  } catch (...) {
  }
}

double TrainingArm::Iteration(int64_t it) {
  auto& s = *session;
  const agents::StageTimes before = s.times;
  const double t0 = MonotonicSeconds();
  trainers::IterationContext ctx{it, s.cfg.trainer, s.cfg.run.seed, s.Agent(trainer->plane(), it),
                                 s.budget, s.recorder(), s.comm};
  trainers::Metrics m = runner->Run(ctx);
  const double iterate_s = MonotonicSeconds() - t0;
  // Booked before the metrics / the flush add to logging, as in Train.
  s.times.AddUnclaimedToUpdate(before, iterate_s);
  s.recorder().Metrics(it, m);
  if (s.recorder().records_episodes()) s.recorder().Flush();
  seconds += MonotonicSeconds() - t0;
  times.readout += s.times.readout - before.readout;
  times.env += s.times.env - before.env;
  times.update += s.times.update - before.update;
  times.logging += s.times.logging - before.logging;
  double ret = 0;
  for (const auto& [k, v] : m) {
    if (k == "rollout/return") ret = v;
    if (k == "charts/decisions") decisions += v;
  }
  return ret;
}

void TrainingArm::Reset() {
  seconds = 0, decisions = 0;
  times = {};
  writer_busy0 = session->writer->stats().busy_seconds;
}

}  // namespace rlid::bench

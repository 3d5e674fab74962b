// The training loop shared by every algorithm. A Trainer (one file per
// algorithm, registered by name) implements one iteration — rollout on train
// seeds, then the update — and the loop around it does the rest: periodic
// evaluation on test seeds (greedy and sampled), namespaced metrics into
// SQLite, a progress line with ETA, atomic checkpoints every N iterations,
// --resume from the last checkpoint, and the stop rule of the budget.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "agents/rollout.h"
#include "core/registry.h"
#include "trainers/algorithms/experiment.h"

namespace rlid::trainers {

using Metrics = std::vector<std::pair<std::string, double>>;

class Trainer {
 public:
  static constexpr const char* kRegistryKind = "trainer";
  virtual ~Trainer() = default;
  virtual policy::Plane plane() const = 0;
  // Once, before the first iteration (optimiser, reference copies, ...).
  virtual void Setup(Session& s) = 0;
  // One iteration: rollout on train seeds -> update. Returns metrics.
  virtual Metrics Iterate(Session& s, int64_t iteration) = 0;
  // Optimiser state for checkpoints (--resume).
  virtual void SaveState(const std::string& dir) const = 0;
  virtual void LoadState(const std::string& dir) = 0;
};
using TrainerRegistry = Registry<Trainer>;

struct EvalResult {
  int64_t episodes = 0;
  double success = 0, ret = 0, length = 0, invalid_rate = 0;
  // Decision plane, env with an oracle: mean over the visited test states of
  // sum_{a optimal} p(a|s) (bandit: P(best arm)); -1 when not measured.
  double p_optimal = -1;
};

// Test-split episodes 0..n-1 (the same seeds at every evaluation). The time
// counts as s.times.eval; records go to the store when s.record is on.
EvalResult Evaluate(Session& s, policy::Plane plane, int64_t episodes, bool greedy,
                    int64_t iteration);

// Throws NumericError naming the first parameter with a NaN/Inf entry and the
// iteration (the non-finite guard: such weights are never checkpointed).
void CheckParametersFinite(policy::TransformerLM& model, int64_t iteration);

// Train-seed episodes of one iteration: episodes_per_iteration / group_size
// env seeds, each played group_size times; streams unique per episode.
std::vector<agents::EpisodeSpec> TrainSpecs(const TrainerConfig& cfg, uint64_t run_seed,
                                            int64_t iteration);

// Summary metrics of a batch of episodes ("rollout/success", ...).
Metrics RolloutMetrics(const std::vector<agents::EpisodeData>& episodes);

struct TrainResult {
  int64_t iterations = 0;  // iterations completed (in this and earlier resumed runs)
  EvalResult final_greedy, final_sampled;
  std::string final_checkpoint;
  bool budget_reached = false;
};

struct TrainOptions {
  bool resume = false;
  bool quiet = false;  // no progress line
  std::string label;   // progress-line prefix (compare: "<arm> s<seed>")
};

// The loop: per iteration trainer.Iterate, the non-finite guard on the
// weights, budget + time/* metrics, evaluation every eval_every iterations
// (and after the last), metrics into SQLite, checkpoints every
// checkpoint_every iterations (and after the last), the progress line.
// resume: continues from checkpoints/latest of s.run_dir (weights, trainer
// state, budget counters, iteration), which gives the same weights and metrics
// as an uninterrupted run because every random stream derives from
// (run seed, iteration / episode stream).
TrainResult Train(Session& s, Trainer& trainer, const TrainOptions& opt = {});

// Per-sample gradient variance of losses[i]() over the model parameters:
// mean_i ||g_i - mean_j g_j||^2 (each closure builds its own graph).
double GradientVariance(policy::TransformerLM& model,
                        const std::vector<std::function<torch::Tensor()>>& losses);

}  // namespace rlid::trainers

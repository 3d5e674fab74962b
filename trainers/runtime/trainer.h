// The training loop shared by every algorithm. A Trainer (one file per
// algorithm, registered by name) states three things — how an iteration's
// episodes are played (Play), what the update needs from them (Prepare) and
// the update itself (Learn) — and the loop owns, once, what happens between
// and around them (trainers/runtime/iteration.h): rollouts played ahead with
// bounded staleness, recording the episodes with the weights that played
// them, the budget, periodic evaluation on test seeds (greedy and sampled),
// namespaced metrics into SQLite, a progress line with ETA, atomic
// checkpoints every N iterations, --resume from the last checkpoint, and the
// stop rule of the budget.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "agents/rollout.h"
#include "core/registry.h"
#include "trainers/runtime/rollout_ahead.h"
#include "trainers/runtime/run.h"

namespace rlid::trainers {

// What one iteration of an algorithm works with, and nothing else of the run.
struct IterationContext {
  int64_t iteration = 0;
  const TrainerConfig& cfg;     // [trainer]
  uint64_t seed = 0;            // run seed (train seeds, minibatch order)
  agents::AgentContext agent;   // plays episodes: env, policy, renderer, memory, rollout engine
  agents::Budget& budget;       // what this rank spends (Train sums the ranks' spending)
  Recorder& recorder;           // episodes into the store (this rank's)
  // The job: a data-parallel trainer rolls out its rank's share of the train
  // seeds (RankSpecs) and normalises every loss by the job's global counts.
  Comm& comm;
};

class Trainer {
 public:
  static constexpr const char* kRegistryKind = "trainer";
  virtual ~Trainer() = default;
  virtual policy::Plane plane() const = 0;
  // Once, before the first iteration: the policy this trainer optimises.
  virtual void Setup(const TrainerConfig& cfg, policy::TransformerLM model) = 0;

  // One iteration is the loop's walk (IterationRunner::Run): play -> record
  // -> prepare -> learn. The batch lives in the loop from Play to Learn.
  //
  // 1. Play: how this iteration's train episodes are played, with the weights
  //    of the batch's version (agent.model, agent.sampler, agent.policy_version),
  //    spending into the budget given. The loop calls it on the learner's
  //    thread, or ahead on the rollout worker (trainer.max_staleness > 0): it
  //    must not use the Comm's collectives, the learner's model or anything
  //    the update touches.
  virtual RolloutAhead::Play Play(const IterationContext& c) = 0;
  //    Then, on the learner's thread once the batch is taken: playing that
  //    depends on what was played (DAPO's resampling of zero-variance groups),
  //    which moves the episodes the update must not learn from to
  //    batch.dropped. Returns what it measured. Default: nothing more to play.
  virtual Metrics Complete(IterationContext& c, PlayedBatch& batch);
  // 2. Prepare: from the recorded batch to what the update needs (scores,
  //    advantages through the registry, the staleness correction's pi_prox),
  //    kept by the trainer for Learn. Called only when the job has an
  //    episode to learn from. Returns its metrics.
  virtual Metrics Prepare(IterationContext& c, const PlayedBatch& batch) = 0;
  // 3. Learn: the update on what Prepare made; returns the losses, the
  //    gradient SNR when due, and the update's charts.
  virtual Metrics Learn(IterationContext& c, const PlayedBatch& batch) = 0;

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

// Test-split episodes 0..n-1 (the same seeds at every evaluation), greedy or
// sampled, in `agent`'s plane. The model work counts as budget.eval; records go
// to `recorder` when it records episodes (null: nowhere).
// With a distributed `comm`, rank r plays the episodes i with i % size == r
// (the streams are the episodes', so the result equals one process's) and
// every rank returns the job's totals; the job's evaluation work is added to
// budget.eval on every rank.
EvalResult Evaluate(agents::AgentContext agent, policy::Plane plane, int64_t episodes,
                    bool greedy, agents::Budget& budget, Recorder* recorder,
                    Comm* comm = nullptr);

// Throws NumericError naming the first parameter with a NaN/Inf entry and the
// iteration (the non-finite guard: such weights are never checkpointed).
void CheckParametersFinite(policy::TransformerLM& model, int64_t iteration);
// L2 norm of the trainable parameters (TrainableParameters), in float64.
double TrainableNorm(policy::TransformerLM& model);
// NumericError naming the iteration when after > limit * before (limit 0 = off):
// updates that explode without turning non-finite (lr = 1e30 gives finite ±1e30 weights).
void CheckWeightGrowth(double before, double after, double limit, double lr, int64_t iteration);

// Train-seed episodes of one iteration: episodes_per_iteration / group_size
// env seeds, each played group_size times; streams unique per episode.
std::vector<agents::EpisodeSpec> TrainSpecs(const TrainerConfig& cfg, uint64_t run_seed,
                                            int64_t iteration);

// The share of `specs` (TrainSpecs order) rank comm.rank() plays: a contiguous
// block of whole groups, so group advantages need no other rank and the
// ranks' episodes, concatenated in rank order, are one process's batch.
// ConfigError when there are fewer groups than ranks.
std::vector<agents::EpisodeSpec> RankSpecs(const std::vector<agents::EpisodeSpec>& specs,
                                           const Comm& comm);

// Summary metrics of a batch of episodes ("rollout/episodes", "rollout/success",
// ...); with a distributed `comm`, of every rank's episodes together. No
// episode at all (every one dropped after env failures) gives only
// rollout/episodes = 0: a rate of nothing is not recorded as 0.
Metrics RolloutMetrics(const std::vector<agents::EpisodeData>& episodes, Comm* comm = nullptr);
// The same over every episode a batch played: those it learns from and the dropped ones.
Metrics RolloutMetrics(const PlayedBatch& batch, Comm* comm = nullptr);

// An iteration with no episode to learn from in the whole job (every one
// dropped after env failures): the update is skipped, and the metrics say so
// ("charts/update_skipped" = 1). `rollout` is RolloutMetrics of the played
// episodes, whose rollout/episodes is already the job's count (every rank
// gets the same answer without another collective).
bool NothingToLearn(const Metrics& rollout);
Metrics SkippedUpdate(Metrics metrics, int64_t iteration);

// The job's budget after an iteration: `before` plus every rank's spending
// (after - before), summed over ranks. wall_seconds is the caller's.
agents::Budget ReduceBudget(const agents::Budget& before, const agents::Budget& after, Comm& comm);

// Signal-to-noise ratio of a per-episode policy-gradient estimate, measured
// the same way in both planes: g_i = the gradient of episode i's term of the
// arm's own policy loss (the terms sum to the loss of the batch, so the
// scale of advantages and sum-vs-mean aggregation cancel).
struct GradientSnr {
  int64_t episodes = 0;
  double mean_sq_norm = 0;  // ||mean_i g_i||^2
  double trace_cov = 0;     // tr Cov(g) = sum_i ||g_i - mean g||^2 / (n - 1)
  double snr = 0;           // mean_sq_norm / trace_cov (pure noise gives about 1/n)
};
// episode_loss(i) returns episode i's loss term, computed by `model`; each is
// back-propagated once and accumulated into one running sum (no per-episode
// gradient copies). The model's work goes to `compute` (forward + backward).
// Needs n >= 2; the model's gradients are left zeroed.
GradientSnr MeasureGradientSnr(policy::TransformerLM& model, int64_t n,
                               const std::function<torch::Tensor(int64_t)>& episode_loss,
                               agents::StageCompute& compute);
// grad/snr, grad/episode_mean_sq_norm, grad/episode_trace_cov, grad/snr_episodes.
Metrics SnrMetrics(const GradientSnr& g);

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

// The loop: per iteration IterationRunner::Run (play -> record -> prepare ->
// learn), the non-finite guard on the weights, budget + time/* metrics,
// evaluation every eval_every iterations (and after the last; with
// eval_at_start also before the first, logged at iteration -1 with an empty
// budget), metrics into SQLite, checkpoints every checkpoint_every iterations
// (and after the last), the progress line.
// resume: continues from checkpoints/latest of run.dir (weights, trainer
// state, budget counters, iteration), which gives the same weights and metrics
// as an uninterrupted run because every random stream derives from
// (run seed, iteration / episode stream).
TrainResult Train(Run& run, Trainer& trainer, const TrainOptions& opt = {});

// Whether `budget` has reached the limit of [trainer] budget / budget_value.
bool BudgetReached(const TrainerConfig& cfg, const agents::Budget& budget);

}  // namespace rlid::trainers

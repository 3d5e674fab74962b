// Budget counters kept from the first rollout line, with the same rules in
// both planes: every decision attempt is an env step (an invalid answer used an
// interaction too), and every model forward and backward is counted with its
// FLOPs (policy::ModelConfig::ForwardFlops over the tokens actually processed,
// as the model itself counts them; ComputeScope books them), by stage:
// rollout (readouts, samples, reference and bootstrap-value passes), update
// (old-log-prob and reference passes, update forwards and backwards),
// evaluation and diagnostics (gradient statistics) apart. What was generated
// and then discarded (DAPO filtering, invalid answers) is counted, never hidden.
// All counters are cumulative.
#pragma once

#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "policy/model/model.h"

namespace rlid::agents {

// The model work of one stage.
struct StageCompute {
  int64_t forwards = 0;   // model forward calls
  int64_t backwards = 0;  // backward passes
  int64_t tokens = 0;     // tokens fed to the model by those forwards
  double flops = 0;       // forward FLOPs + 2 x the FLOPs of each forward that was back-propagated

  StageCompute& operator+=(const StageCompute& o);
};

// Books into `stage` the work that `models` did between construction and
// destruction, as their forwards count it (policy::TransformerLMImpl::work()):
// the one way compute enters a budget, so no call site computes a cost. With
// Pass::kForwardBackward the scope's forwards were back-propagated by one
// backward pass (3 x their FLOPs; no backward when the models did nothing).
// Null models are skipped.
class ComputeScope {
 public:
  enum class Pass { kForward, kForwardBackward };
  ComputeScope(StageCompute& stage, std::initializer_list<policy::TransformerLM> models,
               Pass pass = Pass::kForward);
  ~ComputeScope();
  ComputeScope(const ComputeScope&) = delete;
  ComputeScope& operator=(const ComputeScope&) = delete;

 private:
  StageCompute& stage_;
  Pass pass_;
  std::vector<std::pair<policy::TransformerLM, policy::ForwardCost>> start_;
};

// Books `work` of a model with `config` into `stage` as forward-only work
// (what ComputeScope does for a model; rollout engines report their own work).
void BookWork(StageCompute& stage, const policy::ModelConfig& config, const policy::ForwardCost& work);

struct Budget {
  int64_t episodes = 0;           // episodes finished (train rollouts)
  // Episodes an env failure ended ([env] on_error = "drop_episode"): left out
  // of the rollout's result; their decisions still count as env steps.
  int64_t episodes_dropped = 0;
  // Plays an env failure broke that were played again ([env] retries): each
  // is left out; its decisions still count as env steps.
  int64_t episodes_retried = 0;
  int64_t env_steps = 0;          // decision attempts: valid actions and invalid answers
  int64_t invalid_steps = 0;      // of those, answers that compiled to no action
  int64_t prompt_tokens = 0;      // prompt tokens the rollouts fed to the model
  int64_t generated_tokens = 0;   // tokens sampled by the rollout engine
  int64_t samples_generated = 0;  // decisions/responses produced
  int64_t samples_used = 0;       // of those, the ones that reached an update
  int64_t tokens_used = 0;  // token plane: response tokens of the samples that reached an update
  int64_t groups_generated = 0;  // token plane groups sampled
  int64_t groups_kept = 0;       // groups that reached an update
  StageCompute rollout;          // training rollouts
  StageCompute update;           // the learner: old-log-prob/reference passes, update fwd + bwd
  StageCompute eval;             // test-seed evaluation (not part of the training budget)
  StageCompute diagnostic;       // gradient statistics (not part of the training budget)
  double wall_seconds = 0;       // training wall-clock (excludes evaluation)
  // Of that, seconds spent making the rollout engine serve new weights (a
  // server engine: writing, loading and probing them; rlid's engine: copying).
  double engine_sync_seconds = 0;

  // The training budget: rollout + update.
  double TrainingFlops() const { return rollout.flops + update.flops; }
  int64_t TokensProcessed() const { return rollout.tokens + update.tokens; }

  Budget& operator+=(const Budget& o);
  // ("budget/env_steps", value), ... for the metrics table: every counter, the
  // stages as budget/<stage>_{forwards,backwards,tokens,flops}, and the
  // training totals budget/flops, budget/tokens_processed,
  // budget/forward_passes and budget/backward_passes (rollout + update).
  std::vector<std::pair<std::string, double>> Metrics() const;
  // The inverse of Metrics() (checkpoints store a budget this way); absent keys read as 0.
  static Budget FromMetrics(const std::map<std::string, double>& metrics);
};

// Wall-clock seconds by stage, cumulative over a run: where an iteration's
// time goes (`time/*` metrics, `rlid bench train`). Not saved in checkpoints.
struct StageTimes {
  double readout = 0;     // policy forwards of rollouts (label readout, reference, sampler)
  double env = 0;         // env steps, menus + afterstates, memory, prompt rendering
  double update = 0;      // the trainer's update (advantages, epochs x minibatches)
  double logging = 0;     // store records + metrics on the training thread
  double eval = 0;        // test-seed evaluation
  double checkpoint = 0;  // checkpoint writing

  // Books as update time the part of `seconds` (an iteration's wall time,
  // measured from when `before` was copied) that the readout, env and
  // logging stages did not claim: advantages and epochs x minibatches.
  void AddUnclaimedToUpdate(const StageTimes& before, double seconds);

  // ("time/readout_s", this - since), ... for the stages above.
  std::vector<std::pair<std::string, double>> Delta(const StageTimes& since) const;
};

// Adds the seconds between construction and destruction to `*into` (no-op for null).
class StageTimer {
 public:
  explicit StageTimer(double* into) : into_(into), start_(std::chrono::steady_clock::now()) {}
  ~StageTimer() {
    if (into_)
      *into_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  StageTimer(const StageTimer&) = delete;
  StageTimer& operator=(const StageTimer&) = delete;

 private:
  double* into_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace rlid::agents

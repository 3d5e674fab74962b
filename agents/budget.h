// Budget counters kept from the first rollout line: what was computed, and
// what of it reached an update. Generated-then-discarded work (DAPO filtering,
// invalid answers) is counted, never hidden. All counters are cumulative.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace rlid::agents {

struct Budget {
  int64_t episodes = 0;           // episodes finished (train rollouts)
  int64_t env_steps = 0;          // env transitions (valid actions applied)
  int64_t decisions = 0;          // agent turns incl. invalid answers
  int64_t invalid_steps = 0;      // token-plane answers that compiled to no action
  int64_t forward_passes = 0;     // model calls (readout batches, sampler steps, scoring batches)
  int64_t prompt_tokens = 0;      // tokens fed to the model to read prompts
  int64_t generated_tokens = 0;   // tokens sampled by the rollout engine
  int64_t samples_generated = 0;  // decisions/responses produced
  int64_t samples_used = 0;       // of those, the ones that reached an update
  int64_t tokens_used = 0;  // token plane: response tokens of the samples that reached an update
  int64_t groups_generated = 0;  // token plane groups sampled
  int64_t groups_kept = 0;       // groups that reached an update
  double train_flops = 0;        // estimated forward+backward FLOPs of updates
  double rollout_flops = 0;      // estimated forward FLOPs of rollouts
  double wall_seconds = 0;       // training wall-clock (excludes evaluation)

  Budget& operator+=(const Budget& o);
  // ("budget/env_steps", value), ... for the metrics table.
  std::vector<std::pair<std::string, double>> Metrics() const;
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

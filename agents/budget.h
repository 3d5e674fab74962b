// Budget counters kept from the first rollout line: what was computed, and
// what of it reached an update. Generated-then-discarded work (DAPO filtering,
// invalid answers) is counted, never hidden. All counters are cumulative.
#pragma once

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
  int64_t tokens_used = 0;        // token plane: response tokens of the samples that reached an update
  int64_t groups_generated = 0;   // token plane groups sampled
  int64_t groups_kept = 0;        // groups that reached an update
  double train_flops = 0;         // estimated forward+backward FLOPs of updates
  double rollout_flops = 0;       // estimated forward FLOPs of rollouts
  double wall_seconds = 0;        // training wall-clock (excludes evaluation)

  Budget& operator+=(const Budget& o);
  // ("budget/env_steps", value), ... for the metrics table.
  std::vector<std::pair<std::string, double>> Metrics() const;
};

}  // namespace rlid::agents

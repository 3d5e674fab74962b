// Budget counters and stage timers of rollouts and training.
#include "agents/budget.h"

namespace rlid::agents {

Budget& Budget::operator+=(const Budget& o) {
  episodes += o.episodes;
  env_steps += o.env_steps;
  decisions += o.decisions;
  invalid_steps += o.invalid_steps;
  forward_passes += o.forward_passes;
  prompt_tokens += o.prompt_tokens;
  generated_tokens += o.generated_tokens;
  samples_generated += o.samples_generated;
  samples_used += o.samples_used;
  tokens_used += o.tokens_used;
  groups_generated += o.groups_generated;
  groups_kept += o.groups_kept;
  train_flops += o.train_flops;
  rollout_flops += o.rollout_flops;
  wall_seconds += o.wall_seconds;
  return *this;
}

std::vector<std::pair<std::string, double>> Budget::Metrics() const {
  return {{"budget/episodes", static_cast<double>(episodes)},
          {"budget/env_steps", static_cast<double>(env_steps)},
          {"budget/decisions", static_cast<double>(decisions)},
          {"budget/invalid_steps", static_cast<double>(invalid_steps)},
          {"budget/forward_passes", static_cast<double>(forward_passes)},
          {"budget/prompt_tokens", static_cast<double>(prompt_tokens)},
          {"budget/generated_tokens", static_cast<double>(generated_tokens)},
          {"budget/samples_generated", static_cast<double>(samples_generated)},
          {"budget/samples_used", static_cast<double>(samples_used)},
          {"budget/tokens_used", static_cast<double>(tokens_used)},
          {"budget/groups_generated", static_cast<double>(groups_generated)},
          {"budget/groups_kept", static_cast<double>(groups_kept)},
          {"budget/train_flops", train_flops},
          {"budget/rollout_flops", rollout_flops},
          {"budget/wall_seconds", wall_seconds}};
}

void StageTimes::AddUnclaimedToUpdate(const StageTimes& before, double seconds) {
  update += seconds - (readout - before.readout) - (env - before.env) - (logging - before.logging);
}

std::vector<std::pair<std::string, double>> StageTimes::Delta(const StageTimes& since) const {
  return {{"time/readout_s", readout - since.readout},
          {"time/env_s", env - since.env},
          {"time/update_s", update - since.update},
          {"time/logging_s", logging - since.logging},
          {"time/eval_s", eval - since.eval},
          {"time/checkpoint_s", checkpoint - since.checkpoint}};
}

}  // namespace rlid::agents

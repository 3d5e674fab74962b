// Decision PPO's rollout batch and its advantage targets as functions of the
// recorded episodes (the trainer itself registers in ppo_decision.cc; these
// are exposed for tests).
#pragma once

#include <torch/torch.h>

#include <utility>
#include <vector>

#include "agents/rollout.h"
#include "trainers/runtime/experiment.h"

namespace rlid::trainers {

// The rollout batch as flat tensors (CPU, float64) and what each update needs.
struct DecisionBatch {
  // One decision of the batch.
  struct Decision {
    const agents::StepData* step;
    int episode;
  };
  std::vector<Decision> dec;
  std::vector<std::vector<float>> old_dist, ref_dist;  // decision distributions per decision
  // [N]: outcome index in the decision distribution, its rollout log p, V(s_t),
  // the reward (minus the exact reference KL with placement "reward"), whether
  // it ends its episode, and the value the return continues from after it:
  // V(s_T) where the step limit cut the episode, 0 after a terminal state.
  torch::Tensor outcome, old_logp, old_value, reward, ends, end_values;
  // [N] the rollout's log p of the outcome when the batch was played with
  // older weights than the learner's (asynchronous rollouts, staleness.kind =
  // decoupled): old_dist / old_logp are then pi_prox, read by the learner
  // before its update. Undefined: old_* are the rollout's own (on-policy).
  torch::Tensor behav_logp;
  int64_t size() const { return static_cast<int64_t>(dec.size()); }
};

DecisionBatch FlattenDecisions(const std::vector<agents::EpisodeData>& episodes,
                               const agents::ReadoutConfig& readout, const TrainerConfig& cfg,
                               bool use_ref, int64_t iteration);

// (advantages, value targets) [N]: GAE over the batch with the cut episodes
// bootstrapped from V(s_T), or grpo/rloo episode advantages (gigpo: episode
// plus step-group advantages per decision) with the bootstrapped discounted
// return-to-go as the value target.
// `step_groups` (when given) receives the estimator's metrics (gigpo:
// GigpoStepGroupMetrics).
std::pair<torch::Tensor, torch::Tensor> DecisionAdvantages(
    const TrainerConfig& cfg, const std::vector<agents::EpisodeData>& episodes,
    const DecisionBatch& batch, std::vector<std::pair<std::string, double>>* step_groups = nullptr);

}  // namespace rlid::trainers

// Dr. GRPO (Liu et al. 2025): GRPO without the two length/difficulty biases —
// the group advantage is not divided by the std, and the per-token losses are
// summed per sequence and divided by a constant (the longest answer,
// aggregation seq_mean_token_sum_norm) instead of the sequence length.
#include "trainers/algorithms/token_trainer.h"

namespace rlid::trainers {
namespace {

const Registrar<TrainerPresetRegistry> kPreset("dr_grpo", "Dr. GRPO defaults", [] {
  return std::make_unique<TrainerPreset>(TrainerPreset{[](TrainerConfig& t) {
    t.group_size = 8;
    t.advantage.estimator = "grpo";
    t.advantage.std_norm = false;
    t.loss.policy_loss = "ppo_clip";
    t.loss.clip_low = t.loss.clip_high = 0.2;
    t.loss.aggregation = Aggregation::kSeqMeanTokenSumNorm;
    t.loss.aggregation_norm = 0;  // = sampler.max_new_tokens
  }});
});

const Registrar<TrainerRegistry> kRegister(
    "dr_grpo", "Dr. GRPO: no std normalisation, constant-normaliser aggregation",
    [] { return std::make_unique<TokenTrainer>(); });

}  // namespace
}  // namespace rlid::trainers

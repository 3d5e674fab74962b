// GRPO (Shao et al. 2024) in the token plane: G episodes per env seed, the
// episode return normalised by the group's mean and (unbiased) std, broadcast
// to every response token; PPO clipped surrogate (0.2) with the per-sequence
// token mean; optional k3 KL to the reference ([trainer.kl] coef).
#include "trainers/algorithms/token_trainer.h"

namespace rlid::trainers {
namespace {

const Registrar<TrainerPresetRegistry> kPreset("grpo", "GRPO defaults", [] {
  return std::make_unique<TrainerPreset>(TrainerPreset{[](TrainerConfig& t) {
    t.group_size = 8;
    t.advantage.estimator = "grpo";
    t.advantage.std_norm = true;
    t.loss.policy_loss = "ppo_clip";
    t.loss.clip_low = t.loss.clip_high = 0.2;
    t.loss.aggregation = Aggregation::kSeqMeanTokenMean;
    t.kl.estimator = "k3";
  }});
});

const Registrar<TrainerRegistry> kRegister(
    "grpo", "GRPO: group-normalised returns, clipped token surrogate",
    [] { return std::make_unique<TokenTrainer>(); });

}  // namespace
}  // namespace rlid::trainers

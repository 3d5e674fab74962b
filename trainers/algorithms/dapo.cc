// DAPO (Yu et al. 2025): clip-higher (0.2 / 0.28), token-mean aggregation over
// the whole batch, dynamic sampling — groups whose returns are all equal carry
// no gradient and are dropped, and rollouts continue (bounded rounds) until
// the batch is full — and overlong reward shaping. Every generated-then-
// discarded group, sample and token is counted in the budget.
#include "trainers/algorithms/token_trainer.h"

namespace rlid::trainers {
namespace {

const Registrar<TrainerPresetRegistry> kPreset("dapo", "DAPO defaults", [] {
  return std::make_unique<TrainerPreset>(TrainerPreset{[](TrainerConfig& t) {
    t.group_size = 8;
    t.advantage.estimator = "grpo";
    t.advantage.std_norm = true;
    t.loss.policy_loss = "ppo_clip";
    t.loss.clip_low = 0.2;
    t.loss.clip_high = 0.28;
    t.loss.aggregation = Aggregation::kTokenMean;
    t.token.filter_zero_variance_groups = true;
    t.token.max_generation_rounds = 4;
    t.token.overlong_buffer = 4;
    t.token.overlong_factor = 1.0;
  }});
});

const Registrar<TrainerRegistry> kRegister(
    "dapo", "DAPO: clip-higher, dynamic sampling, token-mean, overlong shaping",
    [] { return std::make_unique<TokenTrainer>(); });

}  // namespace
}  // namespace rlid::trainers

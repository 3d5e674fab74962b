// GSPO (Zheng et al. 2025): the importance ratio is the sequence's geometric
// mean token ratio, clipped per sequence (ranges ~3e-4 / 4e-4), with the
// per-sequence token mean. `loss.policy_loss = "gspo_token"` gives the
// token-level variant with token advantages.
#include "trainers/algorithms/token_trainer.h"

namespace rlid::trainers {
namespace {

const Registrar<TrainerPresetRegistry> kPreset("gspo", "GSPO defaults", [] {
  return std::make_unique<TrainerPreset>(TrainerPreset{[](TrainerConfig& t) {
    t.group_size = 8;
    t.advantage.estimator = "grpo";
    t.advantage.std_norm = true;
    t.loss.policy_loss = "gspo";
    t.loss.clip_low = 3e-4;
    t.loss.clip_high = 4e-4;
    t.loss.aggregation = Aggregation::kSeqMeanTokenMean;
  }});
});

const Registrar<TrainerRegistry> kRegister("gspo", "GSPO: sequence-level ratio and clipping",
                                           [] { return std::make_unique<TokenTrainer>(); });

}  // namespace
}  // namespace rlid::trainers

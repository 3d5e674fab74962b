// The token-plane trainer shared by GRPO, Dr. GRPO, DAPO and GSPO (one small
// file each sets its algorithm's defaults). It samples G episodes per env seed
// with the rollout engine, turns episode returns into group-relative
// advantages broadcast over every response token of the episode, recomputes
// old log-probs with the training forward (shared-prefix scoring), keeps the
// rollout-engine log-probs for TIS/IcePop/reject, and optimises the policy
// loss of the shared library. DAPO's zero-variance group filtering resamples
// until the batch is full (bounded rounds) with honest budget accounting.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "trainers/optim.h"
#include "trainers/trainer.h"

namespace rlid::trainers {

class TokenTrainer : public Trainer {
 public:
  policy::Plane plane() const override { return policy::Plane::kToken; }
  void Setup(Session& s) override;
  Metrics Iterate(Session& s, int64_t iteration) override;
  void SaveState(const std::string& dir) const override;
  void LoadState(const std::string& dir) override;

 private:
  std::unique_ptr<Optimizer> opt_;
};

// One response of a kept episode, ready for the update.
struct TokenSample {
  const agents::StepData* step = nullptr;
  int episode = 0;
  double advantage = 0;
};

// Group-relative advantages per episode (or per step with return_mode =
// "discounted"), with DAPO overlong shaping and KL-in-reward applied to the
// scores first. Exposed for tests.
std::vector<TokenSample> TokenAdvantages(const TrainerConfig& cfg, int max_new_tokens,
                                         const std::vector<agents::EpisodeData>& episodes,
                                         const std::vector<std::vector<double>>& kl_per_step = {});

// True when every episode of the group has the same return (std exactly 0).
bool ZeroVarianceGroup(const std::vector<const agents::EpisodeData*>& group);

}  // namespace rlid::trainers

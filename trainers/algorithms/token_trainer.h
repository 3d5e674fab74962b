// The token-plane trainer shared by GRPO, Dr. GRPO, DAPO and GSPO (one small
// file each sets its algorithm's defaults). It samples G episodes per env seed
// with the rollout engine, turns episode returns (or per-step discounted
// returns) into group-relative advantages broadcast over every response token,
// recomputes old log-probs with the training forward (shared-prefix scoring),
// keeps the rollout-engine log-probs for TIS/IcePop/reject, and optimises the
// policy loss of the shared library. DAPO's zero-variance group filtering
// resamples until the batch is full (bounded rounds) with honest accounting:
// generated = kept + dropped, for groups, responses and response tokens.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "trainers/algorithms/optim.h"
#include "trainers/algorithms/trainer.h"

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
  int episode = 0;  // index into the kept episodes
  double advantage = 0;
};

// Group-relative advantages, one per response. The score of a response is
//   return_mode "episode":    the episode's shaped return Σ_t r'_t, the same for every step;
//   return_mode "discounted": its step's return-to-go G_t = r'_t + γ G_{t+1} (γ = advantage.gamma),
// where r'_t = r_t + overlong shaping (DAPO, when overlong_buffer > 0) − kl.coef ·
// kl_per_step[e][t] (KL in the reward; empty = none). Scores are compared within the episode's
// group (spec.group): in "discounted" mode every step of every episode of the group is one member.
// Steps without a response get no sample. Exposed for tests.
std::vector<TokenSample> TokenAdvantages(const TrainerConfig& cfg, int max_new_tokens,
                                         const std::vector<agents::EpisodeData>& episodes,
                                         const std::vector<std::vector<double>>& kl_per_step = {});

// True when every episode of the group has the same return (std exactly 0).
bool ZeroVarianceGroup(const std::vector<const agents::EpisodeData*>& group);

// Minibatches (indices into `samples`) of at most `size` responses that keep
// responses to the same prompt adjacent, so the shared-prefix forward encodes
// that prompt once: prompt buckets are shuffled by `rng` (in first-seen order
// when rng is null), concatenated, and cut every `size` responses.
std::vector<std::vector<size_t>> PromptMinibatches(const std::vector<TokenSample>& samples,
                                                   int64_t size, Rng* rng);

}  // namespace rlid::trainers

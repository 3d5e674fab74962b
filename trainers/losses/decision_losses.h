// Decision-plane pieces as pure tensor functions, used by decision PPO: the
// exact label-marginal KL and entropy over a menu, the full-vocabulary row
// entropy (for contrast), the value loss, the Rao-Blackwellised all-action
// surrogate, and PPO on decisions (ppo_clip with T = 1). Menus are padded to K
// items; item_mask marks real items, and padded items may hold any junk.
// Decision GAE is GaeAdvantages in advantages.h.
#pragma once

#include <torch/torch.h>

#include "trainers/losses/losses.h"

namespace rlid::trainers {

// logp, ref_logp: [B,K] log p(a|s) over the menu; item_mask: [B,K] 0/1.
// -> [B] sum_a p(a|s) (log p(a|s) - log ref(a|s)), exact, differentiable in logp.
torch::Tensor MenuKl(const torch::Tensor& logp, const torch::Tensor& ref_logp,
                     const torch::Tensor& item_mask);

// -> [B] -sum_a p(a|s) log p(a|s) over the menu items.
torch::Tensor MenuEntropy(const torch::Tensor& logp, const torch::Tensor& item_mask);

// row_logp: [B,V] log-softmax over the full vocabulary at the answer position
// (-inf allowed) -> [B] entropy of that row. Differs from MenuEntropy: it also
// spreads over realisations and off-menu tokens.
torch::Tensor RowEntropy(const torch::Tensor& row_logp);

// values, old_values, returns: [N]. clip > 0: CleanRL's clipped loss
// 0.5 * max((v - R)^2, (old + clamp(v - old, -clip, clip) - R)^2); clip <= 0:
// 0.5 * (v - R)^2. Summed and divided by `count` (the step's global number of
// decisions; < 0 = N).
torch::Tensor ValueLoss(const torch::Tensor& values, const torch::Tensor& old_values,
                        const torch::Tensor& returns, double clip, double count = -1);

// Rao-Blackwellised all-action surrogate. logp, q_hat: [B,K]; item_mask: [B,K].
// -> [B] J(s) = sum_a p(a|s) * sg(A_hat(s,a)) with A_hat = q_hat - sum_a sg(p(a|s)) q_hat,
// so grad J(s) = sum_a grad p(a|s) A_hat(s,a): every menu action contributes, not
// only the sampled one. Maximise it (the loss is -mean J). When the menu
// probabilities sum to 1 the baseline term contributes exactly zero gradient.
torch::Tensor AllActionSurrogate(const torch::Tensor& logp, const torch::Tensor& item_mask,
                                 const torch::Tensor& q_hat);

// PPO on decisions: one decision = one token. logp / old_logp / advantages: [B]
// for the chosen actions; the same PolicyLoss with T = 1. behav_logp [B]: the
// rollout's log p(a|s) when the batch was played with older weights than
// old_logp's (asynchronous rollouts; old_logp is then pi_prox), for the
// staleness weight; undefined = on-policy for old_logp.
LossResult DecisionPpoLoss(const LossConfig& cfg, const torch::Tensor& logp,
                           const torch::Tensor& old_logp, const torch::Tensor& advantages,
                           GlobalCounts counts = {}, const torch::Tensor& behav_logp = {});

}  // namespace rlid::trainers

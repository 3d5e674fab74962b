// Config structs of the loss and advantage library ([trainer.loss],
// [trainer.loss.engine], [trainer.kl], [trainer.advantage]); the keys and their
// meaning are specified in docs/algorithms.md. Defaults live here; Load()
// reads a ConfigNode (unknown keys are rejected by Config::CheckAllUsed) and
// Validate() rejects values no formula accepts. The pure functions in
// losses.h / advantages.h validate the structs they are given as well.
#pragma once

#include <string>
#include <vector>

#include "core/config.h"

namespace rlid::trainers {

// The modes of the keys below (core/modes.h): their config spellings.
enum class EngineKind { kNone, kTis, kIcepop, kReject };
constexpr auto Spellings(EngineKind) {
  using E = EngineKind;
  return ModeNames<E>({{E::kNone, "none"}, {E::kTis, "tis"}, {E::kIcepop, "icepop"}, {E::kReject, "reject"}});
}
enum class CorrectionLevel { kToken, kSequence };
constexpr auto Spellings(CorrectionLevel) {
  return ModeNames<CorrectionLevel>(
      {{CorrectionLevel::kToken, "token"}, {CorrectionLevel::kSequence, "sequence"}});
}
enum class StalenessKind { kDecoupled, kNone };
constexpr auto Spellings(StalenessKind) {
  return ModeNames<StalenessKind>(
      {{StalenessKind::kDecoupled, "decoupled"}, {StalenessKind::kNone, "none"}});
}
enum class CapMode { kMask, kClamp };
constexpr auto Spellings(CapMode) {
  return ModeNames<CapMode>({{CapMode::kMask, "mask"}, {CapMode::kClamp, "clamp"}});
}
enum class Aggregation { kTokenMean, kTokenSum, kSeqMeanTokenMean, kSeqMeanTokenSum, kSeqMeanTokenSumNorm };
constexpr auto Spellings(Aggregation) {
  using A = Aggregation;
  return ModeNames<A>({{A::kTokenMean, "token_mean"},
                       {A::kTokenSum, "token_sum"},
                       {A::kSeqMeanTokenMean, "seq_mean_token_mean"},
                       {A::kSeqMeanTokenSum, "seq_mean_token_sum"},
                       {A::kSeqMeanTokenSumNorm, "seq_mean_token_sum_norm"}});
}
enum class KlPlacement { kLoss, kReward };
constexpr auto Spellings(KlPlacement) {
  return ModeNames<KlPlacement>({{KlPlacement::kLoss, "loss"}, {KlPlacement::kReward, "reward"}});
}

// Train-vs-rollout engine correction, k = pi_old,train / pi_rollout.
struct EngineConfig {
  EngineKind kind = EngineKind::kNone;
  // token: k_t per token; sequence: k_i = exp(clamp(sum_t (old - rollout) m, +-20)).
  CorrectionLevel level = CorrectionLevel::kToken;
  // tis: w = clamp(k, floor, cap); cap > 0 (inf allowed: no cap).
  double cap = 2.0;
  // tis: lower clamp of w; 0 keeps small ratios.
  double floor = 0.0;
  // icepop / reject: k outside [low, high] is zeroed (icepop) or removed from the mask (reject).
  double low = 0.5;
  double high = 5.0;

  void Load(ConfigNode n);
  void Validate() const;
};

// Policy-staleness correction of asynchronous rollouts (trainer.max_staleness > 0):
// a batch played with weights older than the learner's. It is kept apart from
// the engine correction: staleness compares two weight versions in the
// training engine, the engine correction two engines at one version.
struct StalenessConfig {
  // decoupled: the surrogate is clipped around the proximal policy pi_prox (the
  // learner's weights before this update, recomputed) and every token is
  // weighted by w = pi_prox / pi_behav (decoupled PPO, as AReaL); none: the
  // surrogate is clipped around pi_behav itself, no weight (naive
  // asynchronous PPO, no extra forward).
  StalenessKind kind = StalenessKind::kDecoupled;
  // decoupled: what a ratio above cap gives. mask: weight 0, the token staying
  // in the aggregation denominator (AReaL's behav_imp_weight_cap); clamp: w = cap.
  CapMode cap_mode = CapMode::kMask;
  // decoupled: the bound of the ratio (inf allowed: no bound).
  double cap = 5.0;

  void Load(ConfigNode n);
  void Validate() const;
};

// [trainer.loss]: the policy surrogate and how per-token losses become one scalar.
struct LossConfig {
  // ppo_clip | gspo | gspo_token | cispo (registered in PolicyLossRegistry).
  std::string policy_loss = "ppo_clip";
  // Ratio clip range [1 - clip_low, 1 + clip_high] (DAPO clip-higher: 0.2, 0.28).
  double clip_low = 0.2;
  double clip_high = 0.2;
  // ppo_clip dual clip c > 1: for A < 0 the loss is min(-A c, clipped loss); 0 = off.
  double dual_clip = 0.0;
  // r = exp(clamp(logp - old, -x, x)) for ppo_clip and cispo; x > 0.
  double log_ratio_clamp = 20.0;
  Aggregation aggregation = Aggregation::kTokenMean;
  // Constant divisor of seq_mean_token_sum_norm; 0 = the padded width T of the batch
  // (set it to the maximum response length when batches are padded differently).
  double aggregation_norm = 0.0;
  EngineConfig engine;
  StalenessConfig staleness;  // [trainer.loss.staleness] (both planes)

  // sequence_keys: also the aggregation keys and the `engine` sub-table, which
  // only multi-token (token-plane) losses read.
  void Load(ConfigNode n, bool sequence_keys = true);
  void Validate() const;
};

// [trainer.kl]: KL to the reference policy, d = logp - ref.
struct KlConfig {
  // k1 | abs | k2 | k3 (registered in KlEstimatorRegistry).
  std::string estimator = "k3";
  // Keep the estimator's value but use the k2 gradient (d).
  bool straight_through = false;
  // beta >= 0; 0 = off.
  double coef = 0.0;
  // loss: beta * aggregate(kl) is added to the loss; reward: r_t -= beta * kl_t.
  KlPlacement placement = KlPlacement::kLoss;

  // estimator_keys: also `estimator` and `straight_through` (the decision
  // plane's KL is exact over the menu and reads neither).
  void Load(ConfigNode n, bool estimator_keys = true);
  void Validate() const;
};

// [trainer.advantage].
struct AdvantageConfig {
  // gae | grpo | rloo | reinforce_pp | reinforce_pp_baseline | gigpo (AdvantageRegistry).
  std::string estimator = "grpo";
  // grpo: divide by the group std (false = Dr. GRPO).
  bool std_norm = true;
  // grpo: A = (s - mean) / (std + std_eps).
  double std_eps = 1e-6;
  // Discount and GAE lambda (gae, reinforce_pp; gigpo's step returns), both in [0, 1].
  double gamma = 1.0;
  double lambda = 0.95;
  // gigpo: weight of the step-level term, A = A^E + step_weight · A^S (>= 0).
  double step_weight = 1.0;

  // gae_keys: also `lambda` (only the decision plane has a GAE estimator).
  void Load(ConfigNode n, bool gae_keys = true);
  void Validate() const;
};

}  // namespace rlid::trainers

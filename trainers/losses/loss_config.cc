// Loading and validation of the loss / KL / advantage config structs. Names of
// registered components come from their registries, so a new surrogate or
// estimator is accepted by the config as soon as it registers itself.
#include "trainers/losses/loss_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"
#include "core/strings.h"
#include "trainers/losses/advantages.h"
#include "trainers/losses/kl.h"
#include "trainers/losses/losses.h"

namespace rlid::trainers {
namespace {

void Require(bool ok, std::string_view key, double value, std::string_view expected) {
  if (!ok)
    throw ConfigError(fmt::format("'{}' = {} is invalid: expected {}", key, value, expected));
}

void RequireName(const std::vector<std::string>& known, std::string_view key,
                 const std::string& value, std::string_view what) {
  if (std::find(known.begin(), known.end(), value) == known.end())
    throw ConfigError(
        fmt::format("unknown {} '{}' for '{}'{}", what, value, key, DidYouMean(value, known)),
        fmt::format("known: {}", Join(known, ", ")));
}

// Runs a struct's Validate() and prefixes its error with where the section came from.
template <class Struct>
void ValidateAt(const Struct& s, const ConfigNode& n) {
  try {
    s.Validate();
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("{}: {}", n.Where(), e.what()), e.hint());
  }
}

}  // namespace

void EngineConfig::Load(ConfigNode n) {
  n.GetEnum("kind", kind, "train-vs-rollout engine correction");
  n.GetEnum("level", level, "correction per token or per sequence");
  n.Get("cap", cap, "tis: upper clamp of the weight (inf = no cap)", Range::Positive().AllowInf());
  n.Get("floor", floor, "tis: lower clamp of the weight (0 keeps small ratios; <= cap)",
        Range::Closed(0, cap));
  n.Get("low", low, "icepop/reject: lower bound of kept ratios (0: no lower bound, as TRL's default)",
        Range::NonNegative());
  n.Get("high", high, "icepop/reject: upper bound of kept ratios (> low; inf: no upper bound)",
        Range::GreaterThan(low).AllowInf());
  ValidateAt(*this, n);
}

void EngineConfig::Validate() const {
  Require(cap > 0 && !std::isnan(cap), "loss.engine.cap", cap, "> 0 (inf allowed)");
  Require(floor >= 0 && floor <= cap, "loss.engine.floor", floor, "0 <= floor <= cap");
  Require(low >= 0 && std::isfinite(low), "loss.engine.low", low, "a finite value >= 0");
  Require(high > low && !std::isnan(high), "loss.engine.high", high, "> loss.engine.low (inf allowed)");
}

void StalenessConfig::Load(ConfigNode n) {
  n.GetEnum("kind", kind,
            "asynchronous batches: decoupled (clip around pi_prox, weight pi_prox / pi_behav) "
            "or none (clip around pi_behav)");
  n.GetEnum("cap_mode", cap_mode,
            "decoupled: a ratio pi_prox / pi_behav above cap gets weight 0 (mask, AReaL) or cap "
            "(clamp)");
  n.Get("cap", cap, "decoupled: bound of pi_prox / pi_behav (inf = no bound)",
        Range::Positive().AllowInf());
  ValidateAt(*this, n);
}

void StalenessConfig::Validate() const {
  Require(cap > 0 && !std::isnan(cap), "loss.staleness.cap", cap, "> 0 (inf allowed)");
}

void LossConfig::Load(ConfigNode n, bool sequence_keys) {
  n.GetEnum("policy_loss", policy_loss, PolicyLossRegistry::Global().Names(), "surrogate");
  // clip_low >= 1 is valid: the lower bound 1 - clip_low <= 0 never binds (CISPO's
  // reference setting is clip_low = 10).
  n.Get("clip_low", clip_low, "ratio clip: lower bound 1 - clip_low (>= 1: no lower bound)",
        Range::NonNegative());
  n.Get("clip_high", clip_high, "ratio clip: upper bound 1 + clip_high (clip-higher)",
        Range::NonNegative());
  n.Get("dual_clip", dual_clip, "ppo_clip dual clip c > 1 for A < 0 (0 = off)",
        Range::GreaterThan(1).Or(0));
  n.Get("log_ratio_clamp", log_ratio_clamp, "r = exp(clamp(logp - old, -x, x))", Range::Positive());
  if (sequence_keys) {
    n.GetEnum("aggregation", aggregation, "per-token losses -> scalar");
    n.Get("aggregation_norm", aggregation_norm,
          "seq_mean_token_sum_norm divisor (0 = padded width T)", Range::NonNegative());
    engine.Load(n.Section("engine"));
  }
  staleness.Load(n.Section("staleness"));
  ValidateAt(*this, n);
}

void LossConfig::Validate() const {
  RequireName(PolicyLossRegistry::Global().Names(), "loss.policy_loss", policy_loss, "policy loss");
  Require(clip_low >= 0 && std::isfinite(clip_low), "loss.clip_low", clip_low,
          "a finite value >= 0");
  Require(clip_high >= 0 && std::isfinite(clip_high), "loss.clip_high", clip_high,
          "a finite value >= 0");
  Require(dual_clip == 0 || dual_clip > 1, "loss.dual_clip", dual_clip, "0 (off) or > 1");
  Require(log_ratio_clamp > 0 && std::isfinite(log_ratio_clamp), "loss.log_ratio_clamp",
          log_ratio_clamp, "a finite value > 0");
  Require(aggregation_norm >= 0 && std::isfinite(aggregation_norm), "loss.aggregation_norm",
          aggregation_norm, "a finite value >= 0 (0 = padded width)");
  engine.Validate();
  staleness.Validate();
}

void KlConfig::Load(ConfigNode n, bool estimator_keys) {
  if (estimator_keys) {
    n.GetEnum("estimator", estimator, KlEstimatorRegistry::Global().Names(),
              "per-token KL estimator of d = logp - ref");
    n.Get("straight_through", straight_through, "estimator value with the k2 gradient");
  }
  n.Get("coef", coef, "KL coefficient beta (0 = off)", Range::NonNegative());
  n.GetEnum("placement", placement,
            "loss: + beta aggregate(kl); reward: r_t -= beta kl_t");
  ValidateAt(*this, n);
}

void KlConfig::Validate() const {
  RequireName(KlEstimatorRegistry::Global().Names(), "kl.estimator", estimator, "KL estimator");
  Require(coef >= 0 && std::isfinite(coef), "kl.coef", coef, "a finite value >= 0");
}

void AdvantageConfig::Load(ConfigNode n, bool gae_keys) {
  n.GetEnum("estimator", estimator, AdvantageRegistry::Global().Names(), "advantage estimator");
  n.Get("std_norm", std_norm, "grpo: divide by the group std (false = Dr. GRPO)");
  n.Get("std_eps", std_eps, "grpo: A = (s - mean) / (std + std_eps)", Range::Positive());
  n.Get("gamma", gamma, "discount (gae, reinforce_pp, gigpo's step returns)", Range::Unit());
  if (gae_keys) n.Get("lambda", lambda, "GAE lambda", Range::Unit());
  n.Get("step_weight", step_weight, "gigpo: A = A_episode + step_weight * A_step",
        Range::NonNegative());
  ValidateAt(*this, n);
}

void AdvantageConfig::Validate() const {
  RequireName(AdvantageRegistry::Global().Names(), "advantage.estimator", estimator,
              "advantage estimator");
  Require(std_eps > 0 && std::isfinite(std_eps), "advantage.std_eps", std_eps,
          "a finite value > 0");
  Require(gamma >= 0 && gamma <= 1, "advantage.gamma", gamma, "a value in [0, 1]");
  Require(lambda >= 0 && lambda <= 1, "advantage.lambda", lambda, "a value in [0, 1]");
  Require(step_weight >= 0 && std::isfinite(step_weight), "advantage.step_weight", step_weight,
          "a finite value >= 0");
}

}  // namespace rlid::trainers

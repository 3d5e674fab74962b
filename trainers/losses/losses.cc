// Policy surrogates (registered at the bottom), engine correction, aggregation
// and their composition PolicyLoss. Formulas: docs/algorithms.md. Every
// [B,T] input is sanitised first (padded positions -> 0), so junk in padding
// never reaches a value or a gradient; every max/min/clamp is the torch op the
// reference implementations use, so ties split gradients the same way.
#include "trainers/losses/losses.h"

#include <fmt/format.h>

#include "core/error.h"
#include "trainers/losses/kl.h"
#include "trainers/losses/tensor_checks.h"

namespace rlid::trainers {
namespace {

torch::Tensor False(const torch::Tensor& like) { return torch::zeros_like(like, torch::kBool); }

// ppo_clip: L = max(-A r, -A clamp(r, 1 - lo, 1 + hi)); dual clip for A < 0.
class PpoClip : public PolicyLossFn {
 public:
  SurrogateOutput Compute(const LossConfig& cfg, const torch::Tensor& log_prob,
                          const torch::Tensor& old_log_prob, const torch::Tensor& adv,
                          const torch::Tensor& mask) const override {
    torch::Tensor lr =
        torch::clamp(log_prob - old_log_prob, -cfg.log_ratio_clamp, cfg.log_ratio_clamp);
    torch::Tensor ratio = torch::exp(lr);
    torch::Tensor l1 = -adv * ratio;
    torch::Tensor l2 = -adv * torch::clamp(ratio, 1.0 - cfg.clip_low, 1.0 + cfg.clip_high);
    torch::Tensor clipped_loss = torch::maximum(l1, l2);
    SurrogateOutput out{clipped_loss, torch::gt(l2, l1), False(adv)};
    if (cfg.dual_clip > 0) {
      torch::Tensor l3 = -adv * cfg.dual_clip;
      torch::Tensor negative = adv < 0;
      out.clipped_lower = torch::gt(clipped_loss, l3) & negative;
      out.loss = torch::where(negative, torch::minimum(l3, clipped_loss), clipped_loss);
    }
    return out;
  }
};

// Sequence ratio s_i = exp(sum_t lr m / max(n_i, 1)) (geometric mean of token ratios).
torch::Tensor SequenceLogRatio(const torch::Tensor& log_prob, const torch::Tensor& old_log_prob,
                               const torch::Tensor& mask) {
  torch::Tensor n = mask.sum(1).to(log_prob.scalar_type()).clamp_min(1.0);
  return Clean(log_prob - old_log_prob, mask).sum(1) / n;  // [B]
}

SurrogateOutput ClippedWithRatio(const LossConfig& cfg, const torch::Tensor& ratio,
                                 const torch::Tensor& adv) {
  torch::Tensor l1 = -adv * ratio;
  torch::Tensor l2 = -adv * torch::clamp(ratio, 1.0 - cfg.clip_low, 1.0 + cfg.clip_high);
  return {torch::maximum(l1, l2), torch::gt(l2, l1), False(adv)};
}

// gspo: the sequence ratio carries the gradient sum_t s_i m_t / n_i * grad logp_t.
class Gspo : public PolicyLossFn {
 public:
  SurrogateOutput Compute(const LossConfig& cfg, const torch::Tensor& log_prob,
                          const torch::Tensor& old_log_prob, const torch::Tensor& adv,
                          const torch::Tensor& mask) const override {
    torch::Tensor s = torch::exp(SequenceLogRatio(log_prob, old_log_prob, mask)).unsqueeze(1);
    return ClippedWithRatio(cfg, s.expand_as(adv), adv);
  }
};

// gspo_token: value s_i per token, gradient s_i * grad logp_t; log s clamped at 10.
class GspoToken : public PolicyLossFn {
 public:
  SurrogateOutput Compute(const LossConfig& cfg, const torch::Tensor& log_prob,
                          const torch::Tensor& old_log_prob, const torch::Tensor& adv,
                          const torch::Tensor& mask) const override {
    torch::Tensor log_s = SequenceLogRatio(log_prob, old_log_prob, mask).detach().unsqueeze(1);
    torch::Tensor log_st = torch::clamp_max(log_prob - log_prob.detach() + log_s, 10.0);
    return ClippedWithRatio(cfg, torch::exp(log_st), adv);
  }
};

// cispo: L = -sg(clamp(r, 1 - lo, 1 + hi)) A logp.
class Cispo : public PolicyLossFn {
 public:
  SurrogateOutput Compute(const LossConfig& cfg, const torch::Tensor& log_prob,
                          const torch::Tensor& old_log_prob, const torch::Tensor& adv,
                          const torch::Tensor& mask) const override {
    torch::Tensor ratio = torch::exp(
        torch::clamp(log_prob - old_log_prob, -cfg.log_ratio_clamp, cfg.log_ratio_clamp));
    torch::Tensor clamped = torch::clamp(ratio, 1.0 - cfg.clip_low, 1.0 + cfg.clip_high).detach();
    return {-clamped * adv * log_prob, torch::ne(ratio, clamped), False(adv)};
  }
};

const Registrar<PolicyLossRegistry> kPpoClip(
    "ppo_clip", "PPO clipped surrogate with clip-higher and optional dual clip",
    [] { return std::make_unique<PpoClip>(); });
const Registrar<PolicyLossRegistry> kGspo("gspo", "GSPO: clipped sequence-level ratio",
                                          [] { return std::make_unique<Gspo>(); });
const Registrar<PolicyLossRegistry> kGspoToken(
    "gspo_token", "GSPO-token: sequence ratio value, per-token gradient",
    [] { return std::make_unique<GspoToken>(); });
const Registrar<PolicyLossRegistry> kCispo("cispo", "CISPO: detached clipped IS weight x A x logp",
                                           [] { return std::make_unique<Cispo>(); });

struct Prepared {
  int64_t batch = 0, width = 0;
  torch::Tensor mask;  // bool [B,T] response mask
  torch::Tensor log_prob, old_log_prob, advantages, rollout_log_prob, ref_log_prob;  // clean
  torch::Tensor behav_log_prob;  // clean; undefined when the batch is on-policy for old
  // What the engine correction compares with the rollout engine: pi_behav when
  // the batch is stale, otherwise old_log_prob (the same weights).
  const torch::Tensor& engine_anchor() const {
    return behav_log_prob.defined() ? behav_log_prob : old_log_prob;
  }
};

// Shape checks, dtype conversion and sanitation of every input.
Prepared Prepare(const LossConfig& loss, const KlConfig& kl, const PolicyLossInputs& in) {
  loss.Validate();
  kl.Validate();
  if (!in.log_prob.defined() || in.log_prob.dim() != 2 || in.log_prob.size(0) == 0 ||
      in.log_prob.size(1) == 0)
    throw ConfigError(fmt::format("log_prob has shape {}, expected a non-empty [B,T] matrix",
                                  ShapeString(in.log_prob)),
                      "one row per response, one column per token position");
  if (!in.log_prob.is_floating_point())
    throw ConfigError("log_prob must be a floating-point tensor");
  Prepared p;
  p.batch = in.log_prob.size(0);
  p.width = in.log_prob.size(1);
  const auto dtype = in.log_prob.scalar_type();
  std::vector<int64_t> shape = {p.batch, p.width};
  p.mask = BoolMask("response_mask", in.response_mask, in.log_prob);
  auto clean = [&](std::string_view name, const torch::Tensor& t) {
    RequireShape(name, t, shape, "the shape of log_prob");
    return Clean(t.detach().to(in.log_prob.device(), dtype), p.mask);
  };
  p.log_prob = Clean(in.log_prob, p.mask);
  p.old_log_prob = clean("old_log_prob", in.old_log_prob);
  if (!in.advantages.defined())
    throw ConfigError("advantages are missing", "pass advantages as [B] or [B,T]");
  if (in.advantages.dim() == 1 && in.advantages.size(0) == p.batch) {
    p.advantages = Clean(in.advantages.detach().to(in.log_prob.device(), dtype).unsqueeze(1).expand(shape), p.mask);
  } else if (in.advantages.sizes().vec() == shape) {
    p.advantages = Clean(in.advantages.detach().to(in.log_prob.device(), dtype), p.mask);
  } else {
    throw ConfigError(
        fmt::format("advantages has shape {}, expected [{}] or [{}, {}] (log_prob "
                    "is [{}, {}])",
                    ShapeString(in.advantages), p.batch, p.batch, p.width, p.batch, p.width),
        "one advantage per response, or one per token");
  }
  if (in.rollout_log_prob.defined()) {
    p.rollout_log_prob = clean("rollout_log_prob", in.rollout_log_prob);
  } else if (loss.engine.kind != EngineKind::kNone) {
    throw ConfigError(fmt::format("engine.kind = '{}' needs rollout_log_prob", NameOf(loss.engine.kind)),
                      "pass the rollout engine's log-probs, or set engine.kind = 'none'");
  }
  if (in.behav_log_prob.defined()) p.behav_log_prob = clean("behav_log_prob", in.behav_log_prob);
  if (in.ref_log_prob.defined()) {
    p.ref_log_prob = clean("ref_log_prob", in.ref_log_prob);
  } else if (kl.coef > 0 && kl.placement == KlPlacement::kLoss) {
    throw ConfigError("kl.coef > 0 with placement 'loss' needs ref_log_prob",
                      "pass the reference policy's log-probs, or set kl.coef = 0");
  }
  return p;
}

double Denominator(double global, const torch::Tensor& local) {
  double d = global >= 0 ? global : local.item<double>();
  return d > 0 ? d : 1.0;
}

}  // namespace

double MaskedMean(const torch::Tensor& x, const torch::Tensor& mask) {
  torch::NoGradGuard no_grad;
  torch::Tensor m = mask.to(torch::kBool);
  double n = m.sum().item<double>();
  if (n == 0) return 0.0;
  return Clean(x.to(torch::kFloat64), m).sum().item<double>() / n;
}

torch::Tensor Aggregate(const torch::Tensor& loss_mat, const torch::Tensor& mask,
                        Aggregation mode, double norm, GlobalCounts counts) {
  RequireSameShape("loss mask", mask, "per-token losses", loss_mat);
  torch::Tensor m = mask.to(torch::kBool);
  torch::Tensor masked = Clean(loss_mat, m);
  if (mode == Aggregation::kTokenMean) return masked.sum() / Denominator(counts.tokens, m.sum());
  if (mode == Aggregation::kTokenSum) return masked.sum();
  torch::Tensor n = m.sum(1);
  double sequences = Denominator(counts.sequences, (n > 0).sum());
  switch (mode) {
    case Aggregation::kSeqMeanTokenMean:
      return (masked.sum(1) / n.to(loss_mat.scalar_type()).clamp_min(1.0)).sum() / sequences;
    case Aggregation::kSeqMeanTokenSum:
      return masked.sum(1).sum() / sequences;
    case Aggregation::kSeqMeanTokenSumNorm: {
      double divisor = norm > 0 ? norm : static_cast<double>(loss_mat.size(1));
      return masked.sum(1).sum() / sequences / divisor;
    }
    default:
      throw InternalError(fmt::format("aggregation {} has no formula", static_cast<int>(mode)));
  }
}

EngineCorrection CorrectEngine(const EngineConfig& cfg, const torch::Tensor& old_log_prob,
                               const torch::Tensor& rollout_log_prob, const torch::Tensor& mask) {
  cfg.Validate();
  torch::NoGradGuard no_grad;
  torch::Tensor m = mask.to(torch::kBool);
  EngineCorrection out{torch::ones_like(old_log_prob), m, {}};
  if (!rollout_log_prob.defined()) {
    if (cfg.kind != EngineKind::kNone)
      throw ConfigError(fmt::format("engine.kind = '{}' needs rollout_log_prob", NameOf(cfg.kind)));
    return out;
  }
  RequireSameShape("rollout_log_prob", rollout_log_prob, "old_log_prob", old_log_prob);
  torch::Tensor old = Clean(old_log_prob.detach(), m);
  torch::Tensor rollout = Clean(rollout_log_prob.to(old.device(), old.scalar_type()), m);
  out.metrics["engine/kl"] = MaskedMean(rollout - old, m);
  if (cfg.kind == EngineKind::kNone) return out;

  torch::Tensor delta = Clean(old - rollout, m);
  torch::Tensor k;
  if (cfg.level == CorrectionLevel::kToken) {
    k = torch::exp(torch::clamp(delta, -20.0, 20.0));
  } else {
    k = torch::exp(torch::clamp(delta.sum(1), -20.0, 20.0)).unsqueeze(1).expand_as(delta);
  }
  out.metrics["engine/ratio_mean"] = MaskedMean(k, m);
  if (cfg.kind == EngineKind::kTis) {
    out.weight = torch::clamp(k, cfg.floor, cfg.cap);
    out.metrics["engine/capped_frac"] = MaskedMean((k > cfg.cap) | (k < cfg.floor), m);
    out.metrics["engine/weight_mean"] = MaskedMean(out.weight, m);
    return out;
  }
  torch::Tensor keep = (k >= cfg.low) & (k <= cfg.high);
  out.metrics["engine/masked_frac"] = MaskedMean(~keep, m);
  if (cfg.kind == EngineKind::kIcepop) {
    out.weight = torch::where(keep, k, torch::zeros_like(k));
    out.metrics["engine/weight_mean"] = MaskedMean(out.weight, m);
  } else {  // reject
    out.loss_mask = m & keep;
    out.metrics["engine/weight_mean"] = MaskedMean(keep, m);
  }
  return out;
}

StalenessCorrection CorrectStaleness(const StalenessConfig& cfg, const torch::Tensor& prox_log_prob,
                                     const torch::Tensor& behav_log_prob,
                                     const torch::Tensor& mask) {
  cfg.Validate();
  RequireSameShape("behav_log_prob", behav_log_prob, "old_log_prob", prox_log_prob);
  torch::NoGradGuard no_grad;
  torch::Tensor m = mask.to(torch::kBool);
  torch::Tensor prox = Clean(prox_log_prob.detach(), m);
  torch::Tensor behav = Clean(behav_log_prob.to(prox.device(), prox.scalar_type()), m);
  torch::Tensor ratio = torch::exp(torch::clamp(prox - behav, -20.0, 20.0));
  torch::Tensor weight = cfg.cap_mode == CapMode::kClamp
                             ? torch::clamp_max(ratio, cfg.cap)
                             : torch::where(ratio <= cfg.cap, ratio, torch::zeros_like(ratio));
  StalenessCorrection out{weight, {}};
  out.metrics["staleness/kl"] = MaskedMean(behav - prox, m);
  out.metrics["staleness/ratio_mean"] = MaskedMean(ratio, m);
  out.metrics["staleness/weight_mean"] = MaskedMean(out.weight, m);
  out.metrics["staleness/capped_frac"] = MaskedMean(ratio > cfg.cap, m);
  return out;
}

GlobalCounts LocalCounts(const LossConfig& loss, const PolicyLossInputs& in) {
  Prepared p = Prepare(loss, KlConfig{}, in);
  EngineCorrection engine =
      CorrectEngine(loss.engine, p.engine_anchor(), p.rollout_log_prob, p.mask);
  torch::Tensor n = engine.loss_mask.sum(1);
  return {engine.loss_mask.sum().item<double>(), (n > 0).sum().item<double>()};
}

LossResult PolicyLoss(const LossConfig& loss, const KlConfig& kl, const PolicyLossInputs& in) {
  Prepared p = Prepare(loss, kl, in);
  EngineCorrection engine =
      CorrectEngine(loss.engine, p.engine_anchor(), p.rollout_log_prob, p.mask);
  const torch::Tensor& m = engine.loss_mask;

  auto surrogate = PolicyLossRegistry::Global().Make(loss.policy_loss);
  SurrogateOutput s = surrogate->Compute(loss, p.log_prob, p.old_log_prob, p.advantages, m);
  torch::Tensor per_token = s.loss * engine.weight;
  std::map<std::string, double> staleness_metrics;
  if (p.behav_log_prob.defined()) {
    if (loss.staleness.kind != StalenessKind::kDecoupled)
      throw ConfigError(
          fmt::format("behav_log_prob is given but loss.staleness.kind = '{}'",
                      NameOf(loss.staleness.kind)),
          "with kind 'none' pass pi_behav as old_log_prob (the surrogate clips around it)");
    StalenessCorrection stale =
        CorrectStaleness(loss.staleness, p.old_log_prob, p.behav_log_prob, m);
    per_token = per_token * stale.weight;
    staleness_metrics = std::move(stale.metrics);
  }
  torch::Tensor pg = Aggregate(per_token, m, loss.aggregation, loss.aggregation_norm, in.counts);

  LossResult out{pg, std::move(engine.metrics)};
  out.metrics.insert(staleness_metrics.begin(), staleness_metrics.end());
  {
    torch::NoGradGuard no_grad;
    torch::Tensor lr =
        torch::clamp(p.log_prob - p.old_log_prob, -loss.log_ratio_clamp, loss.log_ratio_clamp);
    out.metrics["clip_frac"] = MaskedMean(s.clipped, m);
    out.metrics["clip_frac_lower"] = MaskedMean(s.clipped_lower, m);
    out.metrics["approx_kl"] = MaskedMean(-lr, m);
    out.metrics["pg_loss"] = pg.item<double>();
  }
  if (p.ref_log_prob.defined()) {
    torch::Tensor kl_t = KlPenalty(kl, p.log_prob, p.ref_log_prob, m);
    torch::Tensor kl_agg = Aggregate(kl_t, m, loss.aggregation, loss.aggregation_norm, in.counts);
    out.metrics["kl"] = kl_agg.item<double>();
    if (kl.placement == KlPlacement::kLoss && kl.coef > 0) out.loss = out.loss + kl.coef * kl_agg;
  }
  return out;
}

}  // namespace rlid::trainers

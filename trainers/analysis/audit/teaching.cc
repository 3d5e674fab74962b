// Audit check 4, teaching: GRPO-family teaching cases on the loss library.
#include <fmt/format.h>

#include <cmath>

#include "trainers/analysis/audit/audit_internal.h"
#include "trainers/losses/advantages.h"
#include "trainers/losses/losses.h"

namespace rlid::trainers::audit_internal {
namespace {

// Each teaching case adds its numbers to `c` and returns whether it holds.

// (a) An all-wrong group gives zero advantage under GRPO and Dr. GRPO.
bool AllWrongGroupHasNoAdvantage(AuditCheck& c) {
  auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  bool ok = true;
  for (bool std_norm : {true, false}) {
    AdvantageConfig ac;
    ac.estimator = "grpo";
    ac.std_norm = std_norm;
    AdvantageInputs in;
    in.scores = torch::zeros({4}, f64);
    in.response_mask = torch::ones({4, 1}, f64);
    in.groups = {0, 0, 0, 0};
    double m = ComputeAdvantages(ac, in).advantages.abs().max().item<double>();
    ok = ok && m == 0.0;
    c.numbers.push_back(
        {fmt::format("all-wrong group, {}: max |A|", std_norm ? "GRPO" : "Dr. GRPO"), Num(m)});
  }
  return ok;
}

// (b) GSPO's sequence clip vs per-token clipping with one outlier token.
bool SequenceClipDropsTheOutlier(AuditCheck& c) {
  auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  auto old = torch::full({1, 4}, -1.0, f64);
  auto lp_data = torch::tensor({-1.0, -1.0, -1.0, 1.0}, f64).unsqueeze(0);
  int nonzero[2];
  double losses[2];
  for (int which = 0; which < 2; ++which) {
    LossConfig lc;
    lc.policy_loss = which == 0 ? "ppo_clip" : "gspo";
    lc.clip_low = which == 0 ? 0.2 : 3e-4;
    lc.clip_high = which == 0 ? 0.2 : 4e-4;
    lc.aggregation = Aggregation::kSeqMeanTokenMean;
    PolicyLossInputs in;
    in.log_prob = lp_data.clone().requires_grad_(true);
    in.old_log_prob = old;
    in.advantages = torch::ones({1}, f64);
    in.response_mask = torch::ones({1, 4}, f64);
    auto res = PolicyLoss(lc, KlConfig{}, in);
    auto g = torch::autograd::grad({res.loss}, {in.log_prob})[0];
    nonzero[which] = static_cast<int>((g.abs() > 0).sum().item<int64_t>());
    losses[which] = res.loss.item<double>();
  }
  c.numbers.push_back(
      {"outlier token (log-ratio 2 on 1 of 4 tokens): tokens with gradient, per-token PPO clip",
       fmt::format("{} of 4 (loss {:.4f})", nonzero[0], losses[0])});
  c.numbers.push_back({"same sequence, GSPO sequence clip",
                       fmt::format("{} of 4 (loss {:.4f}; geometric-mean ratio {:.3f} is clipped)",
                                   nonzero[1], losses[1], std::exp(0.5))});
  return nonzero[0] == 3 && nonzero[1] == 0;
}

// (c) TIS keeps a very small engine ratio, IcePop zeroes it.
bool EngineCorrectionsTreatASmallRatio(AuditCheck& c) {
  auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  auto o = torch::full({1, 1}, -1.0, f64), r = torch::full({1, 1}, -1.0 + std::log(1000.0), f64);
  auto mask = torch::ones({1, 1}, torch::kBool);
  EngineConfig tis;
  tis.kind = EngineKind::kTis;
  EngineConfig ice;
  ice.kind = EngineKind::kIcepop;
  double wt = CorrectEngine(tis, o, r, mask).weight.item<double>();
  double wi = CorrectEngine(ice, o, r, mask).weight.item<double>();
  c.numbers.push_back({"engine ratio k = 1e-3: TIS weight (cap 2, floor 0)", Num(wt)});
  c.numbers.push_back({"engine ratio k = 1e-3: IcePop weight ([0.5, 5])", Num(wi)});
  return std::abs(wt - 1e-3) < 1e-9 && wi == 0.0;
}

// (d) Label-marginal KL/entropy vs the full-vocabulary row on the same state
// (reported, not judged).
void MenuVsRowEntropy(policy::TransformerLM& model, const policy::PromptRenderer& renderer,
                      const AuditState& state, FiniteGuard& finite, AuditCheck& c) {
  torch::NoGradGuard ng;
  auto rb = policy::Readout(model, {DistinctRequest(renderer, state)}, {policy::Normalisation::kMenu, false});
  double hm = rb.menu_entropy[0].item<double>(), hr = rb.row_entropy[0].item<double>();
  double mass = rb.candidate_mass[0].item<double>();
  finite(hm, [] { return std::string("state 1 menu entropy"); });
  finite(hr, [] { return std::string("state 1 row entropy"); });
  finite(mass, [] { return std::string("state 1 candidate mass"); });
  double K = static_cast<double>(state.menu.size()),
         V = static_cast<double>(model->config().vocab_size);
  c.numbers.push_back({"state 1: menu entropy H(p(.|s)) / KL(p || uniform menu)",
                       fmt::format("{:.4f} / {:.4f} nats", hm, std::log(K) - hm)});
  c.numbers.push_back({"state 1: full-row entropy / KL(row || uniform vocab)",
                       fmt::format("{:.4f} / {:.4f} nats", hr, std::log(V) - hr)});
  c.numbers.push_back({"state 1: candidate mass", Num(mass)});
}

}  // namespace

AuditCheck Teaching(policy::TransformerLM& model, const policy::PromptRenderer& renderer,
                    const std::vector<AuditState>& states) {
  AuditCheck c{"teaching", "GRPO-family teaching cases"};
  FiniteGuard finite;
  const bool advantages = AllWrongGroupHasNoAdvantage(c);
  const bool clip = SequenceClipDropsTheOutlier(c);
  const bool engine = EngineCorrectionsTreatASmallRatio(c);
  MenuVsRowEntropy(model, renderer, states[0], finite, c);
  c.passed = advantages && clip && engine;
  c.note =
      "The menu KL that decision PPO uses is exact over K actions; the row statistics spread over "
      "the whole vocabulary.";
  finite.Apply(c);
  return c;
}

}  // namespace rlid::trainers::audit_internal

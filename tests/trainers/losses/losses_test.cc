// Hand-computed checks of the policy losses, aggregation with global counts,
// engine corrections, KL terms and padding invariance (trainers/losses/losses.h, kl.h).
#include "trainers/losses/losses.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/config.h"
#include "core/error.h"
#include "core/rng.h"
#include "tests/trainers/losses/tensor_test_util.h"
#include "trainers/losses/kl.h"

namespace rlid::trainers {
namespace {

using testing::Mat;
using testing::Near;
using testing::Same;
using testing::Vec;

struct Eval {
  double loss;
  torch::Tensor grad;
  std::map<std::string, double> metrics;
};

// Loss value, d loss / d log_prob and metrics for one call.
Eval Evaluate(const LossConfig& cfg, const KlConfig& kl, PolicyLossInputs in) {
  torch::Tensor lp = in.log_prob.clone().requires_grad_(true);
  in.log_prob = lp;
  LossResult r = PolicyLoss(cfg, kl, in);
  torch::Tensor grad = torch::zeros_like(lp);
  if (r.loss.requires_grad()) {
    auto g = torch::autograd::grad({r.loss}, {lp}, {}, false, false, true);
    if (g[0].defined()) grad = g[0];
  }
  return {r.loss.item<double>(), grad, r.metrics};
}

Eval Evaluate(const LossConfig& cfg, PolicyLossInputs in) { return Evaluate(cfg, KlConfig{}, in); }

// One response, four tokens with ratios 1.5, 0.5, 0.5, 3 and advantages +1, +1, -1, -1.
PolicyLossInputs FourTokens() {
  PolicyLossInputs in;
  in.old_log_prob = Mat({{-1.0, -1.0, -1.0, -1.0}});
  in.log_prob =
      in.old_log_prob + Mat({{std::log(1.5), std::log(0.5), std::log(0.5), std::log(3.0)}});
  in.advantages = Mat({{1.0, 1.0, -1.0, -1.0}});
  return in;
}

TEST(PpoClip, HandComputedClipDualClipAndClipHigher) {
  LossConfig cfg;  // eps 0.2 / 0.2, token_mean
  // L = max(-A r, -A clamp(r, .8, 1.2)) = [-1.2, -0.5, 0.8, 3]; only t1 is unclipped.
  Eval plain = Evaluate(cfg, FourTokens());
  EXPECT_NEAR(plain.loss, (-1.2 - 0.5 + 0.8 + 3.0) / 4, 1e-15);
  EXPECT_TRUE(Near(plain.grad, Mat({{0.0, -0.5 / 4, 0.0, 3.0 / 4}}), 1e-15));
  EXPECT_DOUBLE_EQ(plain.metrics["clip_frac"], 0.5);  // t0, t2
  EXPECT_DOUBLE_EQ(plain.metrics["clip_frac_lower"], 0.0);
  EXPECT_NEAR(plain.metrics["approx_kl"], -std::log(1.5 * 0.5 * 0.5 * 3.0) / 4, 1e-15);

  // Dual clip c = 2: t3 (A < 0, L = 3) becomes min(-A c, 3) = 2 with zero gradient.
  cfg.dual_clip = 2.0;
  Eval dual = Evaluate(cfg, FourTokens());
  EXPECT_NEAR(dual.loss, (-1.2 - 0.5 + 0.8 + 2.0) / 4, 1e-15);
  EXPECT_TRUE(Near(dual.grad, Mat({{0.0, -0.5 / 4, 0.0, 0.0}}), 1e-15));
  EXPECT_DOUBLE_EQ(dual.metrics["clip_frac_lower"], 0.25);

  // Clip-higher 0.6: r = 1.5 is inside [0.8, 1.6], so t0 keeps its gradient -A r.
  cfg.dual_clip = 0.0;
  cfg.clip_high = 0.6;
  Eval higher = Evaluate(cfg, FourTokens());
  EXPECT_NEAR(higher.loss, (-1.5 - 0.5 + 0.8 + 3.0) / 4, 1e-15);
  EXPECT_TRUE(Near(higher.grad, Mat({{-1.5 / 4, -0.5 / 4, 0.0, 3.0 / 4}}), 1e-15));
  EXPECT_DOUBLE_EQ(higher.metrics["clip_frac"], 0.25);
}

TEST(PpoClip, LogRatioClampStopsTheGradient) {
  LossConfig cfg;
  cfg.log_ratio_clamp = 0.5;
  cfg.clip_high = 10.0;
  PolicyLossInputs in;
  in.old_log_prob = Mat({{0.0, 0.0}});
  in.log_prob = Mat({{1.0, 0.25}});
  in.advantages = Vec({1.0});
  Eval e = Evaluate(cfg, in);
  // r = exp(clamp(lr, -0.5, 0.5)) = [e^0.5 (clamped, no gradient), e^0.25].
  EXPECT_NEAR(e.loss, -(std::exp(0.5) + std::exp(0.25)) / 2, 1e-15);
  EXPECT_TRUE(Near(e.grad, Mat({{0.0, -std::exp(0.25) / 2}}), 1e-15));
}

TEST(Aggregation, AllFiveModesAndGlobalDenominators) {
  torch::Tensor loss = Mat({{1, 2, 3}, {4, 5, 6}, {7, 8, 9}});
  torch::Tensor mask = Mat({{1, 1, 0}, {1, 0, 0}, {0, 0, 0}}).to(torch::kBool);  // row 2 empty
  auto agg = [&](const std::string& mode, double norm = 0, GlobalCounts c = {}) {
    return Aggregate(loss, mask, RequireMode<Aggregation>("aggregation", mode), norm, c).item<double>();
  };
  EXPECT_DOUBLE_EQ(agg("token_mean"), 7.0 / 3);
  EXPECT_DOUBLE_EQ(agg("token_sum"), 7.0);
  EXPECT_DOUBLE_EQ(agg("seq_mean_token_mean"), (1.5 + 4.0) / 2);
  EXPECT_DOUBLE_EQ(agg("seq_mean_token_sum"), (3.0 + 4.0) / 2);
  EXPECT_DOUBLE_EQ(agg("seq_mean_token_sum_norm"), 3.5 / 3);  // norm 0 = width T = 3
  EXPECT_DOUBLE_EQ(agg("seq_mean_token_sum_norm", 8.0), 3.5 / 8);
  // Global counts replace the local ones.
  EXPECT_DOUBLE_EQ(agg("token_mean", 0, {10, -1}), 0.7);
  EXPECT_DOUBLE_EQ(agg("seq_mean_token_mean", 0, {-1, 4}), 5.5 / 4);
  EXPECT_DOUBLE_EQ(agg("seq_mean_token_sum", 0, {-1, 4}), 7.0 / 4);
  EXPECT_DOUBLE_EQ(agg("token_sum", 0, {10, 4}), 7.0);
  // Nothing valid: 0, not NaN.
  torch::Tensor none = torch::zeros({2, 2}, torch::kBool);
  for (const auto& m : Spellings(Aggregation{}))
    EXPECT_EQ(Aggregate(Mat({{1, 2}, {3, 4}}), none, m.value).item<double>(), 0.0) << m.name;
  EXPECT_THROW(agg("mean"), ConfigError);
}

// Deterministic inputs from a named stream: [B,T] with ragged masks and an empty row.
PolicyLossInputs RandomBatch(uint64_t seed, int64_t b, int64_t t) {
  Rng rng = Rng::Stream(seed, "losses_test");
  auto fill = [&](double lo, double hi) {
    torch::Tensor x = torch::empty({b, t}, torch::kFloat64);
    auto a = x.accessor<double, 2>();
    for (int64_t i = 0; i < b; ++i)
      for (int64_t j = 0; j < t; ++j) a[i][j] = lo + (hi - lo) * rng.Uniform();
    return x;
  };
  PolicyLossInputs in;
  in.old_log_prob = fill(-3.0, -0.05);
  in.log_prob = in.old_log_prob + fill(-0.6, 0.6);
  in.rollout_log_prob = in.old_log_prob + fill(-1.2, 1.2);
  in.ref_log_prob = in.old_log_prob + fill(-0.5, 0.5);
  in.advantages = fill(-1.5, 1.5);
  torch::Tensor mask = torch::zeros({b, t}, torch::kFloat64);
  for (int64_t i = 0; i < b; ++i) {
    int64_t len = i == 2 ? 0 : 1 + static_cast<int64_t>(rng.UniformInt(t));
    mask.index_put_({i, torch::indexing::Slice(0, len)}, 1.0);
  }
  in.response_mask = mask;
  return in;
}

PolicyLossInputs Rows(const PolicyLossInputs& in, int64_t begin, int64_t end) {
  auto s = [&](const torch::Tensor& x) { return x.slice(0, begin, end); };
  PolicyLossInputs out = in;
  out.log_prob = s(in.log_prob);
  out.old_log_prob = s(in.old_log_prob);
  out.rollout_log_prob = s(in.rollout_log_prob);
  out.ref_log_prob = s(in.ref_log_prob);
  out.advantages = s(in.advantages);
  out.response_mask = s(in.response_mask);
  return out;
}

TEST(Aggregation, MicroBatchesWithGlobalCountsSumToTheFullBatch) {
  PolicyLossInputs full = RandomBatch(7, 6, 5);
  KlConfig kl;
  kl.coef = 0.3;
  for (std::string loss_name : {"ppo_clip", "gspo", "cispo"}) {
    for (std::string engine : {"none", "reject"}) {
      for (const auto& mode : NamesOf<Aggregation>()) {
        LossConfig cfg;
        cfg.policy_loss = loss_name;
        cfg.aggregation = RequireMode<Aggregation>("aggregation", mode);
        cfg.dual_clip = loss_name == "ppo_clip" ? 3.0 : 0.0;
        cfg.engine.kind = RequireMode<EngineKind>("kind", engine);
        cfg.engine.low = 0.6;
        cfg.engine.high = 1.8;
        SCOPED_TRACE(loss_name + " / " + engine + " / " + mode);
        Eval whole = Evaluate(cfg, kl, full);
        // The step's counts are the sums of the micro-batches' local counts.
        GlobalCounts a = LocalCounts(cfg, Rows(full, 0, 2));
        GlobalCounts b = LocalCounts(cfg, Rows(full, 2, 6));
        GlobalCounts all = LocalCounts(cfg, full);
        EXPECT_EQ(a.tokens + b.tokens, all.tokens);
        EXPECT_EQ(a.sequences + b.sequences, all.sequences);
        PolicyLossInputs first = Rows(full, 0, 2), second = Rows(full, 2, 6);
        first.counts = second.counts = all;
        Eval e1 = Evaluate(cfg, kl, first), e2 = Evaluate(cfg, kl, second);
        EXPECT_NEAR(e1.loss + e2.loss, whole.loss, 1e-14);
        EXPECT_TRUE(Near(torch::cat({e1.grad, e2.grad}), whole.grad, 1e-15));
        // Local means per micro-batch would not add up (the reason for global counts).
        if (mode != "token_sum") {
          PolicyLossInputs l1 = Rows(full, 0, 2), l2 = Rows(full, 2, 6);
          EXPECT_GT(std::abs(Evaluate(cfg, kl, l1).loss + Evaluate(cfg, kl, l2).loss - whole.loss),
                    1e-6);
        }
      }
    }
  }
}

TEST(Gspo, SequenceClipDiffersFromPerTokenClipWithAnOutlierToken) {
  // One response, A = +1, token log-ratios [0, 0, 0, 0.8]: the outlier alone is clipped
  // per token, but the geometric mean exp(0.2) = 1.2214 > 1.2 clips the whole sequence.
  PolicyLossInputs in;
  in.old_log_prob = Mat({{-1.0, -1.0, -1.0, -1.0}});
  in.log_prob = in.old_log_prob + Mat({{0.0, 0.0, 0.0, 0.8}});
  in.advantages = Vec({1.0});
  LossConfig seq;
  seq.policy_loss = "gspo";
  seq.aggregation = Aggregation::kSeqMeanTokenMean;
  Eval g = Evaluate(seq, in);
  EXPECT_NEAR(g.loss, -1.2, 1e-15);
  EXPECT_TRUE(Near(g.grad, torch::zeros({1, 4}, torch::kFloat64), 0));
  EXPECT_DOUBLE_EQ(g.metrics["clip_frac"], 1.0);

  LossConfig token = seq;
  token.policy_loss = "ppo_clip";
  Eval p = Evaluate(token, in);
  EXPECT_NEAR(p.loss, (-1 - 1 - 1 - 1.2) / 4, 1e-15);
  EXPECT_TRUE(Near(p.grad, Mat({{-0.25, -0.25, -0.25, 0.0}}), 1e-15));

  // Inside the clip range the sequence ratio spreads its gradient evenly: s m_t / n.
  seq.clip_high = 1.0;
  Eval open = Evaluate(seq, in);
  double s = std::exp(0.2);
  EXPECT_NEAR(open.loss, -s, 1e-15);
  EXPECT_TRUE(Near(open.grad, torch::full({1, 4}, -s / 4, torch::kFloat64), 1e-15));
}

TEST(Gspo, TokenFormHasTheSameValueButPerTokenGradient) {
  // s = 1; token advantages [1, 3]. gspo: d/dlogp_u = -(1/n) sum_t A_t s / n = -1 for both;
  // gspo_token: -(1/n) A_u s = [-0.5, -1.5]. Both losses are -(1 + 3)/2 = -2.
  PolicyLossInputs in;
  in.old_log_prob = Mat({{-0.7, -1.3}});
  in.log_prob = in.old_log_prob.clone();
  in.advantages = Mat({{1.0, 3.0}});
  LossConfig cfg;
  cfg.aggregation = Aggregation::kSeqMeanTokenMean;
  cfg.policy_loss = "gspo";
  Eval g = Evaluate(cfg, in);
  cfg.policy_loss = "gspo_token";
  Eval t = Evaluate(cfg, in);
  EXPECT_DOUBLE_EQ(g.loss, -2.0);
  EXPECT_DOUBLE_EQ(t.loss, -2.0);
  EXPECT_TRUE(Near(g.grad, Mat({{-1.0, -1.0}}), 1e-15));
  EXPECT_TRUE(Near(t.grad, Mat({{-0.5, -1.5}}), 1e-15));
}

TEST(Cispo, DetachedClippedWeightTimesLogProb) {
  // t0: r = 1.5 -> weight 1.2, A = 2, logp = -0.5: L = -1.2 * 2 * -0.5 = 1.2, grad -2.4.
  // t1: r = 1.1 (inside), A = -1, logp = -1: L = -1.1, grad 1.1.
  PolicyLossInputs in;
  in.log_prob = Mat({{-0.5, -1.0}});
  in.old_log_prob = in.log_prob - Mat({{std::log(1.5), std::log(1.1)}});
  in.advantages = Mat({{2.0, -1.0}});
  LossConfig cfg;
  cfg.policy_loss = "cispo";
  Eval e = Evaluate(cfg, in);
  EXPECT_NEAR(e.loss, (1.2 - 1.1) / 2, 1e-15);
  EXPECT_TRUE(Near(e.grad, Mat({{-1.2, 0.55}}), 1e-15));
  EXPECT_DOUBLE_EQ(e.metrics["clip_frac"], 0.5);
}

// Two tokens, r = 1, A = 1; the first has k = pi_old / pi_rollout = 0.1, the second k = 1.
PolicyLossInputs EngineCase() {
  PolicyLossInputs in;
  in.old_log_prob = Mat({{-1.0, -2.0}});
  in.log_prob = in.old_log_prob.clone();
  in.rollout_log_prob = in.old_log_prob - Mat({{std::log(0.1), 0.0}});
  in.advantages = Vec({1.0});
  return in;
}

TEST(EngineCorrection, TisKeepsASmallRatioIcePopZeroesItRejectDropsIt) {
  LossConfig cfg;
  cfg.engine.kind = EngineKind::kTis;  // cap 2, floor 0
  Eval tis = Evaluate(cfg, EngineCase());
  EXPECT_NEAR(tis.loss, (-0.1 - 1.0) / 2, 1e-15);
  EXPECT_TRUE(Near(tis.grad, Mat({{-0.05, -0.5}}), 1e-15));
  EXPECT_NEAR(tis.metrics["engine/kl"], std::log(10.0) / 2, 1e-15);
  EXPECT_NEAR(tis.metrics["engine/weight_mean"], 0.55, 1e-15);
  EXPECT_DOUBLE_EQ(tis.metrics["engine/capped_frac"], 0.0);

  cfg.engine.kind = EngineKind::kIcepop;  // [0.5, 5]: weight 0, but the token stays in the denominator
  Eval ice = Evaluate(cfg, EngineCase());
  EXPECT_NEAR(ice.loss, -0.5, 1e-15);
  EXPECT_TRUE(Near(ice.grad, Mat({{0.0, -0.5}}), 1e-15));
  EXPECT_DOUBLE_EQ(ice.metrics["engine/masked_frac"], 0.5);

  cfg.engine.kind = EngineKind::kReject;  // removed from the mask: the denominator shrinks to 1
  Eval rej = Evaluate(cfg, EngineCase());
  EXPECT_NEAR(rej.loss, -1.0, 1e-15);
  EXPECT_TRUE(Near(rej.grad, Mat({{0.0, -1.0}}), 1e-15));
  EXPECT_DOUBLE_EQ(rej.metrics["engine/masked_frac"], 0.5);
  EXPECT_EQ(LocalCounts(cfg, EngineCase()).tokens, 1.0);

  // TIS floor 0.5 lifts the small weight; a cap of 0.05 caps both.
  cfg.engine.kind = EngineKind::kTis;
  cfg.engine.floor = 0.5;
  Eval floored = Evaluate(cfg, EngineCase());
  EXPECT_NEAR(floored.loss, (-0.5 - 1.0) / 2, 1e-15);
  EXPECT_DOUBLE_EQ(floored.metrics["engine/capped_frac"], 0.5);
  cfg.engine.floor = 0.0;
  cfg.engine.cap = 0.05;
  Eval capped = Evaluate(cfg, EngineCase());
  EXPECT_NEAR(capped.loss, -0.05, 1e-15);
  EXPECT_DOUBLE_EQ(capped.metrics["engine/capped_frac"], 1.0);
}

TEST(EngineCorrection, SequenceLevelUsesTheProductOfTokenRatios) {
  // k_seq = 0.1 * 1 = 0.1 for both tokens.
  LossConfig cfg;
  cfg.engine.level = CorrectionLevel::kSequence;
  cfg.engine.kind = EngineKind::kTis;
  EXPECT_NEAR(Evaluate(cfg, EngineCase()).loss, (-0.1 - 0.1) / 2, 1e-15);
  cfg.engine.kind = EngineKind::kIcepop;
  Eval ice = Evaluate(cfg, EngineCase());
  EXPECT_EQ(ice.loss, 0.0);
  EXPECT_DOUBLE_EQ(ice.metrics["engine/masked_frac"], 1.0);
  cfg.engine.kind = EngineKind::kReject;
  EXPECT_EQ(Evaluate(cfg, EngineCase()).loss, 0.0);
  EXPECT_EQ(LocalCounts(cfg, EngineCase()).sequences, 0.0);
  // A sequence ratio of 3 = 0.1 * 30 passes icepop's [0.5, 5] whole.
  PolicyLossInputs in = EngineCase();
  in.rollout_log_prob = in.old_log_prob - Mat({{std::log(0.1), std::log(30.0)}});
  Eval kept = Evaluate(cfg, in);
  EXPECT_NEAR(kept.loss, -1.0, 1e-15);
  cfg.engine.kind = EngineKind::kIcepop;
  EXPECT_NEAR(Evaluate(cfg, in).loss, -3.0, 1e-14);
}

// Decoupled PPO on a stale batch, hand-computed after AReaL's
// ppo_actor_loss_fn. Two tokens, A = 1, the current policy equals pi_prox
// (r = 1, no clipping); pi_prox / pi_behav is 2 and 8. The default cap 5
// masks the second token as AReaL does (weight 0, still in the denominator);
// cap_mode clamp weights it 5. The engine correction compares pi_behav (not
// pi_prox) with the rollout engine: k = 1 on both tokens, so TIS changes
// nothing and engine/kl is 0 however stale the batch is.
TEST(StalenessCorrection, WeightsTokensByProxOverBehaviourApartFromTheEngine) {
  PolicyLossInputs in;
  in.old_log_prob = Mat({{-1.0, -2.0}});  // pi_prox
  in.log_prob = in.old_log_prob.clone();
  in.behav_log_prob = in.old_log_prob - Mat({{std::log(2.0), std::log(8.0)}});
  in.rollout_log_prob = in.behav_log_prob.clone();
  in.advantages = Vec({1.0});
  LossConfig cfg;
  cfg.engine.kind = EngineKind::kTis;
  Eval e = Evaluate(cfg, in);
  EXPECT_NEAR(e.loss, -(2.0 + 0.0) / 2, 1e-12);
  EXPECT_TRUE(Near(e.grad, Mat({{-1.0, 0.0}}), 1e-12));
  EXPECT_NEAR(e.metrics["staleness/weight_mean"], 1.0, 1e-12);
  EXPECT_NEAR(e.metrics["staleness/ratio_mean"], 5.0, 1e-12);
  EXPECT_NEAR(e.metrics["staleness/kl"], -(std::log(2.0) + std::log(8.0)) / 2, 1e-12);
  EXPECT_DOUBLE_EQ(e.metrics["staleness/capped_frac"], 0.5);
  EXPECT_NEAR(e.metrics["engine/kl"], 0.0, 1e-15);
  EXPECT_NEAR(e.metrics["engine/weight_mean"], 1.0, 1e-15);

  cfg.staleness.cap_mode = CapMode::kClamp;
  Eval clamped = Evaluate(cfg, in);
  EXPECT_NEAR(clamped.loss, -(2.0 + 5.0) / 2, 1e-12);
  EXPECT_TRUE(Near(clamped.grad, Mat({{-1.0, -2.5}}), 1e-12));
  EXPECT_NEAR(clamped.metrics["staleness/weight_mean"], 3.5, 1e-12);

  // The same batch on-policy (no pi_behav): the engine now sees the gap and
  // TIS caps it at 2, while nothing is reported as staleness.
  PolicyLossInputs fresh = in;
  fresh.behav_log_prob = torch::Tensor();
  Eval f = Evaluate(cfg, fresh);
  EXPECT_NEAR(f.loss, -(2.0 + 2.0) / 2, 1e-12);
  EXPECT_EQ(f.metrics.count("staleness/weight_mean"), 0u);
  EXPECT_NEAR(f.metrics["engine/kl"], -(std::log(2.0) + std::log(8.0)) / 2, 1e-12);

  // No cap: the weights are the ratios themselves, in either mode.
  cfg.staleness.cap = std::numeric_limits<double>::infinity();
  EXPECT_NEAR(Evaluate(cfg, in).loss, -(2.0 + 8.0) / 2, 1e-12);
  cfg.staleness.cap_mode = CapMode::kMask;
  EXPECT_NEAR(Evaluate(cfg, in).loss, -(2.0 + 8.0) / 2, 1e-12);
  // kind = none clips around pi_behav, passed as old_log_prob: a pi_behav
  // beside it is a caller's mistake, refused.
  cfg.staleness.kind = StalenessKind::kNone;
  EXPECT_THROW(Evaluate(cfg, in), ConfigError);
}

TEST(Kl, EstimatorsAndStraightThroughHandComputed) {
  torch::Tensor ref = Mat({{-1.0, -1.0, -1.0}});
  torch::Tensor d = Mat({{0.5, -1.0, -30.0}});
  torch::Tensor mask = torch::ones({1, 3}, torch::kBool);
  auto eval = [&](const std::string& name, bool st) {
    KlConfig cfg;
    cfg.estimator = name;
    cfg.straight_through = st;
    torch::Tensor lp = (ref + d).requires_grad_(true);
    torch::Tensor kl = KlPenalty(cfg, lp, ref, mask);
    torch::Tensor grad = torch::autograd::grad({kl.sum()}, {lp})[0];
    return std::make_pair(kl.detach(), grad);
  };
  double e = std::exp(1.0);
  auto [k1, g1] = eval("k1", false);
  EXPECT_TRUE(Near(k1, d, 1e-15));
  EXPECT_TRUE(Near(g1, Mat({{1, 1, 1}}), 0));
  auto [ka, ga] = eval("abs", false);
  EXPECT_TRUE(Near(ka, Mat({{0.5, 1.0, 30.0}}), 1e-15));
  EXPECT_TRUE(Near(ga, Mat({{1, -1, -1}}), 0));
  auto [k2, g2] = eval("k2", false);
  EXPECT_TRUE(Near(k2, Mat({{0.125, 0.5, 450.0}}), 1e-13));
  EXPECT_TRUE(Near(g2, d, 1e-15));
  // k3 = exp(-d) + d - 1; at d = -30, -d is clamped to 20 and the result to 10 (no gradient).
  auto [k3, g3] = eval("k3", false);
  EXPECT_TRUE(Near(k3, Mat({{std::exp(-0.5) - 0.5, e - 2.0, 10.0}}), 1e-15));
  EXPECT_TRUE(Near(g3, Mat({{1 - std::exp(-0.5), 1 - e, 0.0}}), 1e-15));
  // Straight-through: the estimator's value with the k2 gradient d.
  for (std::string name : {"k1", "abs", "k3"}) {
    auto [v, g] = eval(name, true);
    EXPECT_TRUE(Near(v, eval(name, false).first, 0)) << name;
    EXPECT_TRUE(Near(g, d, 1e-15)) << name;
  }
}

TEST(Kl, LossPlacementAddsBetaTimesAggregateRewardPlacementDoesNot) {
  PolicyLossInputs in = FourTokens();
  in.ref_log_prob = in.log_prob - Mat({{0.5, -1.0, 0.0, 0.25}});  // d
  LossConfig cfg;
  cfg.aggregation = Aggregation::kSeqMeanTokenSum;
  KlConfig kl;
  kl.estimator = "k2";
  kl.coef = 0.1;
  Eval base = Evaluate(cfg, KlConfig{}, in);
  Eval with = Evaluate(cfg, kl, in);
  double kl_sum = 0.5 * (0.25 + 1.0 + 0.0 + 0.0625);
  EXPECT_NEAR(with.loss, base.loss + 0.1 * kl_sum, 1e-15);
  EXPECT_NEAR(with.metrics["kl"], kl_sum, 1e-15);
  EXPECT_TRUE(Near(with.grad, base.grad + 0.1 * Mat({{0.5, -1.0, 0.0, 0.25}}), 1e-15));
  kl.placement = KlPlacement::kReward;
  Eval reward = Evaluate(cfg, kl, in);
  EXPECT_EQ(reward.loss, base.loss);
  EXPECT_TRUE(Same(reward.grad, base.grad));
  EXPECT_NEAR(reward.metrics["kl"], kl_sum, 1e-15);
  // Reward placement: r_t - beta kl_t on valid tokens, padding 0.
  torch::Tensor shaped = KlShapedRewards(kl, Mat({{0, 0, 0, 1}}), in.log_prob, in.ref_log_prob,
                                         Mat({{1, 1, 1, 0}}).to(torch::kBool));
  EXPECT_TRUE(Near(shaped, Mat({{-0.0125, -0.05, 0.0, 0.0}}), 1e-15));
}

TEST(Padding, JunkInPaddedPositionsNeverChangesValueOrGradient) {
  PolicyLossInputs clean = RandomBatch(11, 4, 6);
  clean.advantages = clean.advantages.clone();
  torch::Tensor pad = clean.response_mask == 0;
  PolicyLossInputs junk = clean;
  const double inf = std::numeric_limits<double>::infinity();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  int i = 0;
  for (torch::Tensor* t : {&junk.log_prob, &junk.old_log_prob, &junk.rollout_log_prob,
                           &junk.ref_log_prob, &junk.advantages}) {
    const double values[] = {1e300, -1e300, inf, nan, 7.5};
    *t = t->masked_fill(pad, values[i++ % 5]);
  }
  KlConfig kl;
  kl.coef = 0.2;
  for (const auto& name : PolicyLossRegistry::Global().Names()) {
    for (std::string engine : {"none", "tis", "icepop", "reject"}) {
      for (std::string level : {"token", "sequence"}) {
        for (const auto& mode : NamesOf<Aggregation>()) {
          LossConfig cfg;
          cfg.policy_loss = name;
          cfg.aggregation = RequireMode<Aggregation>("aggregation", mode);
          cfg.dual_clip = name == "ppo_clip" ? 3.0 : 0.0;
          cfg.engine.kind = RequireMode<EngineKind>("kind", engine);
          cfg.engine.level = RequireMode<CorrectionLevel>("level", level);
          SCOPED_TRACE(name + "/" + engine + "/" + level + "/" + mode);
          Eval a = Evaluate(cfg, kl, clean), b = Evaluate(cfg, kl, junk);
          ASSERT_TRUE(std::isfinite(a.loss));
          EXPECT_EQ(a.loss, b.loss);
          EXPECT_TRUE(Same(a.grad, b.grad));
          EXPECT_EQ(a.metrics, b.metrics);
          EXPECT_TRUE(Same(a.grad.masked_select(pad),
                           torch::zeros({pad.sum().item<int64_t>()}, torch::kFloat64)));
        }
      }
    }
  }
}

TEST(PolicyLoss, AdvantagesPerSequenceEqualBroadcastAndMaskTypesAgree) {
  PolicyLossInputs in = RandomBatch(3, 3, 4);
  in.advantages = Vec({0.5, -1.0, 2.0});
  LossConfig cfg;
  Eval a = Evaluate(cfg, in);
  PolicyLossInputs b = in;
  b.advantages = in.advantages.unsqueeze(1).expand({3, 4}).clone();
  b.response_mask = in.response_mask.to(torch::kBool);
  Eval e = Evaluate(cfg, b);
  EXPECT_EQ(a.loss, e.loss);
  EXPECT_TRUE(Same(a.grad, e.grad));
  b.response_mask = in.response_mask.to(torch::kInt64);
  EXPECT_EQ(Evaluate(cfg, b).loss, a.loss);
}

TEST(PolicyLoss, ErrorsNameKeysShapesAndKnownNames) {
  PolicyLossInputs in = FourTokens();
  LossConfig cfg;
  cfg.policy_loss = "ppo";
  try {
    PolicyLoss(cfg, KlConfig{}, in);
    FAIL();
  } catch (const ConfigError& e) {
    std::string m = std::string(e.what()) + e.hint();
    for (const char* name : {"ppo_clip", "gspo", "gspo_token", "cispo"})
      EXPECT_NE(m.find(name), std::string::npos) << m;
  }
  EXPECT_THROW(PolicyLossRegistry::Global().Make("nope"), ConfigError);
  EXPECT_THROW(KlEstimatorRegistry::Global().Make("k4"), ConfigError);
  cfg = LossConfig{};
  cfg.dual_clip = 0.5;
  EXPECT_THROW(PolicyLoss(cfg, KlConfig{}, in), ConfigError);
  cfg = LossConfig{};
  PolicyLossInputs bad = in;
  bad.old_log_prob = Mat({{1.0, 2.0}});
  try {
    PolicyLoss(cfg, KlConfig{}, bad);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("old_log_prob has shape [1, 2], expected [1, 4]"),
              std::string::npos)
        << e.what();
  }
  bad = in;
  bad.advantages = Vec({1.0, 2.0});
  EXPECT_THROW(PolicyLoss(cfg, KlConfig{}, bad), ConfigError);
  bad = in;
  bad.response_mask = Mat({{1, 0.5, 1, 1}});
  EXPECT_THROW(PolicyLoss(cfg, KlConfig{}, bad), ConfigError);
  cfg.engine.kind = EngineKind::kTis;
  EXPECT_THROW(PolicyLoss(cfg, KlConfig{}, in), ConfigError);  // no rollout_log_prob
  KlConfig kl;
  kl.coef = 0.1;
  EXPECT_THROW(PolicyLoss(LossConfig{}, kl, in), ConfigError);  // no ref_log_prob
}

TEST(LossConfig, LoadsFromTomlAndRejectsUnknownKeysAndBadValues) {
  Config cfg = Config::FromString(
      "[trainer.loss]\npolicy_loss = 'gspo'\nclip_high = 0.28\naggregation = "
      "'seq_mean_token_mean'\n[trainer.loss.engine]\nkind = 'icepop'\nlevel = 'sequence'\n"
      "[trainer.kl]\nestimator = 'k1'\nstraight_through = true\ncoef = 0.01\n"
      "[trainer.advantage]\nestimator = 'rloo'\ngamma = 0.9\n",
      "exp.toml");
  LossConfig loss;
  KlConfig kl;
  AdvantageConfig adv;
  ConfigNode trainer = cfg.Root().Section("trainer");
  loss.Load(trainer.Section("loss"));
  kl.Load(trainer.Section("kl"));
  adv.Load(trainer.Section("advantage"));
  cfg.CheckAllUsed();
  EXPECT_EQ(loss.policy_loss, "gspo");
  EXPECT_DOUBLE_EQ(loss.clip_high, 0.28);
  EXPECT_EQ(loss.engine.kind, EngineKind::kIcepop);
  EXPECT_EQ(loss.engine.level, CorrectionLevel::kSequence);
  EXPECT_TRUE(kl.straight_through);
  EXPECT_EQ(adv.estimator, "rloo");
  EXPECT_DOUBLE_EQ(adv.gamma, 0.9);
  EXPECT_DOUBLE_EQ(adv.lambda, 0.95);

  Config typo = Config::FromString("[loss.engine]\ncapp = 3\n", "t.toml");
  LossConfig l2;
  l2.Load(typo.Root().Section("loss"));
  EXPECT_THROW(typo.CheckAllUsed(), ConfigError);
  Config bad = Config::FromString("[loss]\naggregation = 'seq_mean'\n", "b.toml");
  EXPECT_THROW(l2.Load(bad.Root().Section("loss")), ConfigError);
  Config bad_floor = Config::FromString("[engine]\nfloor = 3.0\n", "f.toml");
  EngineConfig e;
  EXPECT_THROW(e.Load(bad_floor.Root().Section("engine")), ConfigError);  // floor > cap
}

// The ConfigError message of loading `[trainer.<section>]` with `key = value`,
// "" when it loads.
std::string LoadError(const std::string& section, const std::string& line) {
  Config cfg = Config::FromString("[trainer." + section + "]\n" + line + "\n", "bad.toml");
  ConfigNode trainer = cfg.Root().Section("trainer");
  try {
    if (section == "loss") {
      LossConfig().Load(trainer.Section("loss"));
    } else if (section == "loss.engine") {
      EngineConfig().Load(trainer.Section("loss").Section("engine"));
    } else if (section == "kl") {
      KlConfig().Load(trainer.Section("kl"));
    } else {
      AdvantageConfig().Load(trainer.Section("advantage"));
    }
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(LossConfig, ValuesOutsideTheirRangeNameKeyRangeAndPosition) {
  struct Case {
    const char* section;
    const char* line;
    const char* expected;  // after "bad.toml:2:<column of the value>: 'trainer.<section>."
  } cases[] = {
      {"loss", "clip_low = -0.1", "clip_low' must be >= 0, found -0.1"},
      {"loss", "clip_low = inf", "clip_low' must be a finite number, found inf"},
      {"loss", "clip_high = -0.2", "clip_high' must be >= 0, found -0.2"},
      {"loss", "clip_high = inf", "clip_high' must be a finite number, found inf"},
      {"loss", "dual_clip = 0.5", "dual_clip' must be 0 or > 1, found 0.5"},
      {"loss", "dual_clip = 1", "dual_clip' must be 0 or > 1, found 1"},
      {"loss", "log_ratio_clamp = 0", "log_ratio_clamp' must be > 0, found 0"},
      {"loss", "aggregation_norm = -1", "aggregation_norm' must be >= 0, found -1"},
      {"loss", "aggregation_norm = nan", "aggregation_norm' must be a finite number, found nan"},
      {"loss.engine", "cap = 0", "cap' must be > 0 (inf allowed), found 0"},
      {"loss.engine", "cap = -inf", "cap' must be > 0 (inf allowed), found -inf"},
      {"loss.engine", "cap = nan", "cap' must be a finite number, found nan"},
      {"loss.engine", "floor = -0.5", "floor' must be in [0, 2], found -0.5"},
      {"loss.engine", "low = -0.1", "low' must be >= 0, found -0.1"},
      {"loss.engine", "low = nan", "low' must be a finite number, found nan"},
      {"loss.engine", "high = nan", "high' must be a finite number, found nan"},
      {"loss.engine", "high = 0.5", "high' must be > 0.5 (inf allowed), found 0.5"},
      {"kl", "coef = -0.01", "coef' must be >= 0, found -0.01"},
      {"kl", "coef = inf", "coef' must be a finite number, found inf"},
      {"advantage", "std_eps = 0", "std_eps' must be > 0, found 0"},
      {"advantage", "gamma = 1.5", "gamma' must be in [0, 1], found 1.5"},
      {"advantage", "lambda = -0.1", "lambda' must be in [0, 1], found -0.1"},
  };
  for (const auto& c : cases) {
    const std::string msg = LoadError(c.section, c.line);
    const size_t column = std::string(c.line).find('=') + 3;
    const std::string want =
        fmt::format("bad.toml:2:{}: 'trainer.{}.{}", column, c.section, c.expected);
    EXPECT_NE(msg.find(want), std::string::npos)
        << c.line << "\n  got: " << msg << "\n  want: " << want;
  }
  // The bounds themselves, and an uncapped TIS weight, are valid.
  for (const auto& [section, line] : std::vector<std::pair<std::string, std::string>>{
           {"loss", "clip_low = 0.0"},
           {"loss", "clip_low = 10.0"},  // CISPO's reference setting: no lower bound
           {"loss", "dual_clip = 0"},
           {"loss", "dual_clip = 3"},
           {"loss", "clip_high = 0"},
           {"loss.engine", "cap = inf"},
           {"loss.engine", "floor = 2.0"},
           {"loss.engine", "low = 0"},  // TRL's one-sided mask (no lower bound)
           {"loss.engine", "high = inf"},
           {"kl", "coef = 0"},
           {"advantage", "gamma = 0\nlambda = 1"}})
    EXPECT_EQ(LoadError(section, line), "") << line;
  // Validate() (what the pure functions call on hand-made structs) agrees.
  LossConfig loss;
  loss.clip_low = -1.0;
  EXPECT_THROW(loss.Validate(), ConfigError);
  EngineConfig engine;
  engine.low = -0.5;
  EXPECT_THROW(engine.Validate(), ConfigError);
  engine.low = std::nan("");
  EXPECT_THROW(engine.Validate(), ConfigError);
  engine.low = 0;
  EXPECT_NO_THROW(engine.Validate());
  engine.high = std::nan("");
  EXPECT_THROW(engine.Validate(), ConfigError);
  AdvantageConfig adv;
  adv.std_eps = 0;
  EXPECT_THROW(adv.Validate(), ConfigError);
}

}  // namespace
}  // namespace rlid::trainers

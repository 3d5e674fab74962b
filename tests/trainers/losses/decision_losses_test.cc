// Hand-computed checks of the decision-plane pieces (trainers/decision_losses.h).
#include "trainers/losses/decision_losses.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "tests/trainers/losses/tensor_test_util.h"

namespace rlid::trainers {
namespace {

using testing::Mat;
using testing::Near;
using testing::Vec;

constexpr double kInf = std::numeric_limits<double>::infinity();

TEST(MenuKl, ExactLabelMarginalKlAndItsGradient) {
  // p = [0.5, 0.3, 0.2], ref = [0.2, 0.3, 0.5]; a padded 4th item holds junk.
  torch::Tensor logp =
      Mat({{std::log(0.5), std::log(0.3), std::log(0.2), 1e300}}).requires_grad_(true);
  torch::Tensor ref = Mat({{std::log(0.2), std::log(0.3), std::log(0.5), -kInf}});
  torch::Tensor mask = Mat({{1, 1, 1, 0}});
  torch::Tensor kl = MenuKl(logp, ref, mask);
  EXPECT_NEAR(kl.item<double>(), 0.5 * std::log(2.5) + 0.2 * std::log(0.4), 1e-15);
  // d/dlogp_a sum_b p_b (logp_b - ref_b) = p_a (logp_a - ref_a + 1).
  torch::Tensor grad = torch::autograd::grad({kl.sum()}, {logp})[0];
  EXPECT_TRUE(
      Near(grad, Mat({{0.5 * (std::log(2.5) + 1), 0.3, 0.2 * (std::log(0.4) + 1), 0}}), 1e-15));
  // Identical distributions: exactly 0.
  EXPECT_EQ(MenuKl(ref, ref, mask).item<double>(), 0.0);
}

TEST(MenuEntropy, MenuVersusFullRow) {
  torch::Tensor logp = Mat({{std::log(0.5), std::log(0.25), std::log(0.25)}, {0.0, -kInf, 9.0}});
  torch::Tensor mask = Mat({{1, 1, 1}, {1, 1, 0}});
  // Row 0: 1.5 ln 2. Row 1: a certain action (p = 1) next to an impossible one: 0.
  EXPECT_TRUE(Near(MenuEntropy(logp, mask), Vec({1.5 * std::log(2.0), 0.0}), 1e-15));
  // Full vocabulary row: two equally likely realisations of one action, one impossible token.
  torch::Tensor row = Mat({{std::log(0.5), std::log(0.5), -kInf}}).requires_grad_(true);
  torch::Tensor h = RowEntropy(row);
  EXPECT_NEAR(h.item<double>(), std::log(2.0), 1e-15);
  torch::Tensor grad = torch::autograd::grad({h.sum()}, {row})[0];
  EXPECT_TRUE(torch::isfinite(grad).all().item<bool>()) << grad;
}

TEST(ValueLoss, ClippedLikeCleanRlAndGlobalCount) {
  torch::Tensor v = Vec({1.0, 2.0, 0.0}).requires_grad_(true);
  torch::Tensor old = Vec({0.5, 2.5, 0.1});
  torch::Tensor ret = Vec({2.0, 0.0, 0.1});
  // i0: max(1, (0.7 - 2)^2 = 1.69); i1: max(4, (2.3 - 0)^2 = 5.29); i2: max(0.01, 0) = 0.01.
  torch::Tensor clipped = ValueLoss(v, old, ret, 0.2);
  EXPECT_NEAR(clipped.item<double>(), 0.5 * (1.69 + 5.29 + 0.01) / 3, 1e-15);
  // i0, i1 take the clipped branch (no gradient); i2 moved inside the clip range: (v - R) / 3.
  torch::Tensor grad = torch::autograd::grad({clipped}, {v})[0];
  EXPECT_TRUE(Near(grad, Vec({0.0, 0.0, -0.1 / 3}), 1e-15));
  EXPECT_NEAR(ValueLoss(v, old, ret, 0.0).item<double>(), 0.5 * (1 + 4 + 0.01) / 3, 1e-15);
  EXPECT_NEAR(ValueLoss(v, old, ret, 0.0, 10).item<double>(), 0.5 * (1 + 4 + 0.01) / 10, 1e-15);
}

TEST(AllActionSurrogate, GradientIsSumOverActionsOfGradPTimesAdvantage) {
  // Logits z -> log_softmax; p = softmax(z); q_hat per action.
  torch::Tensor z = Vec({0.3, -0.2, 1.1, 5.0}).unsqueeze(0).requires_grad_(true);
  torch::Tensor mask = Mat({{1, 1, 1, 0}});
  torch::Tensor masked_z = z.masked_fill(mask == 0, -kInf);
  torch::Tensor logp = torch::log_softmax(masked_z, 1);
  torch::Tensor q = Mat({{1.0, 0.0, 2.0, 1e300}});
  torch::Tensor j = AllActionSurrogate(logp, mask, q);
  EXPECT_NEAR(j.item<double>(), 0.0, 1e-15);  // sum_a p(a) (q - sum_b p q) with sum p = 1
  torch::Tensor grad = torch::autograd::grad({j.sum()}, {z})[0];

  // Reference: sum_a grad p(a) * A_hat(a), with grad p from autograd one action at a time.
  torch::Tensor p = torch::softmax(masked_z, 1).detach();
  double baseline = 0;
  for (int a = 0; a < 3; ++a) baseline += p[0][a].item<double>() * q[0][a].item<double>();
  torch::Tensor expected = torch::zeros_like(z);
  for (int a = 0; a < 3; ++a) {
    torch::Tensor pa = torch::softmax(z.masked_fill(mask == 0, -kInf), 1)[0][a];
    torch::Tensor gpa = torch::autograd::grad({pa}, {z})[0];
    expected += gpa * (q[0][a].item<double>() - baseline);
  }
  EXPECT_TRUE(Near(grad, expected, 1e-15));
  // For a softmax it is p_a * A_hat(a) per logit.
  EXPECT_NEAR(grad[0][0].item<double>(), p[0][0].item<double>() * (1.0 - baseline), 1e-15);
}

TEST(DecisionPpo, IsPpoClipWithOneTokenPerDecision) {
  LossConfig cfg;
  cfg.dual_clip = 3.0;
  torch::Tensor old = Vec({-1.0, -0.5, -2.0});
  torch::Tensor logp = (old + Vec({0.4, -0.1, -0.5})).requires_grad_(true);
  torch::Tensor adv = Vec({1.0, -2.0, 0.5});
  LossResult d = DecisionPpoLoss(cfg, logp, old, adv);
  PolicyLossInputs in;
  in.log_prob = logp.unsqueeze(1);
  in.old_log_prob = old.unsqueeze(1);
  in.advantages = adv;
  LossResult t = PolicyLoss(cfg, KlConfig{}, in);
  EXPECT_EQ(d.loss.item<double>(), t.loss.item<double>());
  EXPECT_EQ(d.metrics, t.metrics);
  // r = [e^.4, e^-.1, e^-.5] with A = [1, -2, .5]: only the first is clipped (to 1.2);
  // the third's clipped loss -0.5 * 0.8 is below its unclipped one.
  double expected = (-1.2 + 2 * std::exp(-0.1) - 0.5 * std::exp(-0.5)) / 3;
  EXPECT_NEAR(d.loss.item<double>(), expected, 1e-15);
  EXPECT_THROW(DecisionPpoLoss(cfg, logp.unsqueeze(1), old, adv), ConfigError);
}

}  // namespace
}  // namespace rlid::trainers

// The verdict's statistics against known values: Student's t quantiles,
// success estimates with the test episodes' noise, Welch intervals, and the
// single-seed rule.
#include "trainers/analysis/stats.h"

#include <gtest/gtest.h>

#include <cmath>

#include "trainers/analysis/compare.h"

namespace rlid::trainers {
namespace {

TEST(Stats, StudentTQuantilesMatchTables) {
  // Two-sided 95%: t_{0.975, df}.
  EXPECT_NEAR(StudentTQuantile(0.975, 1), 12.7062, 1e-3);
  EXPECT_NEAR(StudentTQuantile(0.975, 2), 4.3027, 1e-4);
  EXPECT_NEAR(StudentTQuantile(0.975, 4), 2.7764, 1e-4);
  EXPECT_NEAR(StudentTQuantile(0.975, 30), 2.0423, 1e-4);
  EXPECT_NEAR(StudentTQuantile(0.975, 1e6), 1.9600, 1e-3);
  EXPECT_NEAR(StudentTQuantile(0.5, 3), 0.0, 1e-9);
  EXPECT_NEAR(StudentTCdf(-2.7764, 4), 0.025, 1e-4);
  EXPECT_NEAR(StudentTQuantile(0.025, 7.5), -StudentTQuantile(0.975, 7.5), 1e-9);
}

TEST(Stats, SuccessEstimateFloorsTheSeedSpreadByTheTestNoise) {
  // Three seeds that agree exactly: the spread says 0, the 64 test episodes do not.
  auto e = EstimateSuccess({0.5, 0.5, 0.5}, 64);
  EXPECT_DOUBLE_EQ(e.mean, 0.5);
  EXPECT_DOUBLE_EQ(e.seed_sd, 0.0);
  const double q = (32.0 + 2) / 68;  // Agresti-Coull
  EXPECT_NEAR(e.binomial_se, std::sqrt(3 * q * (1 - q) / 68) / 3, 1e-12);
  EXPECT_DOUBLE_EQ(e.se, e.binomial_se);
  // All failures still carry noise.
  EXPECT_GT(EstimateSuccess({0.0, 0.0}, 8).se, 0.0);
  // Seeds that disagree: the spread dominates.
  auto d = EstimateSuccess({0.2, 0.8, 0.5}, 1000);
  EXPECT_NEAR(d.seed_sd, 0.3, 1e-12);
  EXPECT_NEAR(d.se, 0.3 / std::sqrt(3.0), 1e-12);
}

TEST(Stats, WelchIntervalAndTie) {
  SuccessEstimate a{3, 0.9, 0.05, 0.01, 0.05 / std::sqrt(3.0)};
  SuccessEstimate b{3, 0.3, 0.05, 0.01, 0.05 / std::sqrt(3.0)};
  auto g = CompareSuccess(a, b);
  ASSERT_TRUE(g.comparable);
  EXPECT_NEAR(g.df, 4.0, 1e-9);  // equal variances and sizes: df = 2 (n - 1)
  const double half = StudentTQuantile(0.975, 4) * std::sqrt(2 * 0.05 * 0.05 / 3);
  EXPECT_NEAR(g.lo, 0.6 - half, 1e-9);
  EXPECT_NEAR(g.hi, 0.6 + half, 1e-9);
  EXPECT_FALSE(g.tie);
  b.mean = 0.85;
  EXPECT_TRUE(CompareSuccess(a, b).tie);
  // One seed: no claim.
  SuccessEstimate one{1, 0.9, 0, 0.03, 0.03};
  auto n = CompareSuccess(one, b);
  EXPECT_FALSE(n.comparable);
  EXPECT_TRUE(n.tie);
}

ArmSummary Arm(const std::string& name, const std::string& plane, std::vector<double> seeds) {
  ArmSummary a;
  a.arm = a.algorithm = name;
  a.plane = plane;
  a.seeds = static_cast<int>(seeds.size());
  a.success = EstimateSuccess(seeds, 64);
  return a;
}

TEST(Stats, VerdictSaysTieAheadOrNoClaim) {
  auto ahead = Verdict({Arm("ppo_decision", "decision", {0.9, 0.92, 0.88}),
                        Arm("grpo", "token", {0.2, 0.25, 0.3})},
                       "bandit", 0.25);
  EXPECT_NE(ahead.find("ppo_decision is ahead"), std::string::npos) << ahead;
  EXPECT_NE(ahead.find("(chance 0.250)"), std::string::npos) << ahead;
  auto tie = Verdict({Arm("ppo_decision", "decision", {0.9, 0.3, 0.6}),
                      Arm("grpo", "token", {0.5, 0.6, 0.4})},
                     "bandit", -1);
  EXPECT_NE(tie.find("a tie"), std::string::npos) << tie;
  auto single =
      Verdict({Arm("ppo_decision", "decision", {0.9}), Arm("grpo", "token", {0.2})}, "bandit", -1);
  EXPECT_NE(single.find("no claim about the gap"), std::string::npos) << single;
  // A token-plane arm can win, and the verdict says so.
  auto token = Verdict({Arm("ppo_decision", "decision", {0.2, 0.25, 0.3}),
                        Arm("grpo", "token", {0.9, 0.92, 0.88})},
                       "bandit", -1);
  EXPECT_NE(token.find("grpo (token plane)"), std::string::npos) << token;
  EXPECT_NE(token.find("grpo is ahead"), std::string::npos) << token;
}

}  // namespace
}  // namespace rlid::trainers

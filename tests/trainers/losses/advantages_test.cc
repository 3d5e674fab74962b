// Hand-computed checks of every advantage estimator, groups of one, all-equal
// groups, padding invariance and the decision-plane GAE (trainers/losses/advantages.h).
#include "trainers/losses/advantages.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "tests/trainers/losses/tensor_test_util.h"

namespace rlid::trainers {
namespace {

using testing::Mat;
using testing::Near;
using testing::Same;
using testing::Vec;

AdvantageConfig Estimator(const std::string& name) {
  AdvantageConfig cfg;
  cfg.estimator = name;
  return cfg;
}

TEST(Grpo, GroupNormalisedWithAndWithoutStd) {
  // Group 0 scores [1, 0, 0.5]: mean 0.5, unbiased std 0.5. Group 1 is a single response.
  AdvantageInputs in;
  in.scores = Vec({1.0, 0.0, 0.5, 3.0});
  in.response_mask = Mat({{1, 1}, {1, 0}, {0, 0}, {1, 1}});
  in.groups = {0, 0, 0, 1};
  AdvantageResult r = ComputeAdvantages(Estimator("grpo"), in);
  double a = 0.5 / (0.5 + 1e-6);
  EXPECT_TRUE(Near(r.advantages, Mat({{a, a}, {-a, 0}, {0, 0}, {0, 0}}), 1e-15));
  EXPECT_TRUE(Same(r.returns, r.advantages));
  AdvantageConfig dr = Estimator("grpo");
  dr.std_norm = false;
  EXPECT_TRUE(Near(ComputeAdvantages(dr, in).advantages,
                   Mat({{0.5, 0.5}, {-0.5, 0}, {0, 0}, {0, 0}}), 1e-15));
}

TEST(Grpo, AllEqualGroupGivesExactlyZeroWithAndWithoutStd) {
  // 0.1 + 0.1 + 0.1 is not 0.3 in floating point: (s - mean) / (std + eps) would be ~1e-11.
  AdvantageInputs in;
  in.token_rewards = Mat({{0.1, 0}, {0, 0.1}, {0.1, 0}});
  in.response_mask = Mat({{1, 1}, {1, 1}, {1, 0}});
  in.groups = {4, 4, 4};
  for (bool std_norm : {true, false}) {
    AdvantageConfig cfg = Estimator("grpo");
    cfg.std_norm = std_norm;
    torch::Tensor a = ComputeAdvantages(cfg, in).advantages;
    EXPECT_EQ(a.abs().max().item<double>(), 0.0) << std_norm;
  }
  for (const char* name : {"rloo", "reinforce_pp_baseline"})
    EXPECT_EQ(ComputeAdvantages(Estimator(name), in).advantages.abs().max().item<double>(), 0.0)
        << name;
}

// GiGPO on step rows. Group 0: episode A visits anchors 10, 20 (rewards 0, 1),
// episode B visits 10, 30 (0, 0); group 1: C visits 10 (reward 2), D visits 40
// (0). gamma 0.5: A's returns-to-go are 0.5 and 1, B's 0 and 0. Anchor 10 of
// group 1 must not join anchor 10 of group 0.
AdvantageInputs TwoGroupsOfSteps() {
  AdvantageInputs in;
  in.scores = Vec({0, 1, 0, 0, 2, 0});
  in.response_mask = Mat({{1}, {1}, {1}, {1}, {1}, {1}});
  in.groups = {0, 0, 0, 0, 1, 1};
  in.episodes = {0, 0, 1, 1, 2, 3};
  in.anchors = {10, 20, 10, 30, 10, 40};
  return in;
}

TEST(Gigpo, EpisodeTermPlusStepTermOverSharedAnchorsHandComputed) {
  AdvantageConfig cfg = Estimator("gigpo");
  cfg.gamma = 0.5;
  cfg.std_norm = false;  // verl-agent's default mode, mean_norm
  // A^E: group 0 returns [1, 0] -> +-0.5; group 1 returns [2, 0] -> +-1.
  // A^S: step group (0, 10) = {A_0: 0.5, B_0: 0} -> +-0.25; every other step group has one member.
  EXPECT_TRUE(Near(ComputeAdvantages(cfg, TwoGroupsOfSteps()).advantages,
                   Mat({{0.75}, {0.5}, {-0.75}, {-0.5}, {1}, {-1}}), 1e-15));
  cfg.std_norm = true;  // mean_std_norm: both terms divided by their group's unbiased std + eps
  const double e = 0.5 / (std::sqrt(0.5) + 1e-6), g1 = 1.0 / (std::sqrt(2.0) + 1e-6);
  const double st = 0.25 / (std::sqrt(0.125) + 1e-6);
  EXPECT_TRUE(Near(ComputeAdvantages(cfg, TwoGroupsOfSteps()).advantages,
                   Mat({{e + st}, {e}, {-e - st}, {-e}, {g1}, {-g1}}), 1e-12));
}

TEST(Gigpo, AStateVisitedTwiceInOneEpisodeCountsTwiceInItsStepGroup) {
  // A: anchors 10, 10, 20 with rewards 0, 0, 1; B: 10, 30 with 0, 0; gamma 1.
  // Step group (0, 10) = {A_0: 1, A_1: 1, B_0: 0}, mean 2/3. Weight 0.5.
  AdvantageInputs in;
  in.scores = Vec({0, 0, 1, 0, 0});
  in.response_mask = Mat({{1}, {1}, {1}, {1}, {1}});
  in.groups = {0, 0, 0, 0, 0};
  in.episodes = {0, 0, 0, 1, 1};
  in.anchors = {10, 10, 20, 10, 30};
  AdvantageConfig cfg = Estimator("gigpo");
  cfg.std_norm = false;
  cfg.step_weight = 0.5;
  const double a = 0.5 + 0.5 / 3.0, b = -0.5 - 0.5 * 2.0 / 3.0;
  EXPECT_TRUE(
      Near(ComputeAdvantages(cfg, in).advantages, Mat({{a}, {a}, {0.5}, {b}, {-0.5}}), 1e-15));
}

TEST(Gigpo, WithoutRepeatedStatesItIsGrpoOnEpisodeReturns) {
  // Episodes of 2, 1 and 3 steps in one group, every state distinct: the step
  // term is exactly 0 whatever its weight, and each step gets its episode's GRPO
  // advantage.
  AdvantageInputs in;
  in.scores = Vec({0.5, 1, 3, 0, 0, -1});
  in.response_mask = Mat({{1}, {1}, {1}, {1}, {1}, {1}});
  in.groups = {7, 7, 7, 7, 7, 7};
  in.episodes = {0, 0, 1, 2, 2, 2};
  in.anchors = {1, 2, 3, 4, 5, 6};
  AdvantageInputs episodes;
  episodes.scores = Vec({1.5, 3, -1});
  episodes.response_mask = Mat({{1}, {1}, {1}});
  episodes.groups = {7, 7, 7};
  for (bool std_norm : {true, false}) {
    AdvantageConfig gigpo = Estimator("gigpo"), grpo = Estimator("grpo");
    gigpo.std_norm = grpo.std_norm = std_norm;
    gigpo.step_weight = 10.0;
    gigpo.gamma = 0.9;
    torch::Tensor e = ComputeAdvantages(grpo, episodes).advantages.squeeze(1);
    torch::Tensor expect =
        e.index_select(0, torch::tensor({0, 0, 1, 2, 2, 2}, torch::kInt64)).unsqueeze(1);
    EXPECT_TRUE(Same(ComputeAdvantages(gigpo, in).advantages, expect)) << std_norm;
  }
}

TEST(Gigpo, ErrorsNameTheMissingStepRows) {
  AdvantageInputs in = TwoGroupsOfSteps();
  in.anchors.clear();
  try {
    ComputeAdvantages(Estimator("gigpo"), in);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("an episode id and an anchor per step row"),
              std::string::npos)
        << e.what();
  }
  in = TwoGroupsOfSteps();
  in.groups[1] = 1;  // episode 0 split across groups
  EXPECT_THROW(ComputeAdvantages(Estimator("gigpo"), in), ConfigError);
}

TEST(Rloo, LeaveOneOutBaseline) {
  // [1, 0, 0.5]: 1 - 0.25, 0 - 0.75, 0.5 - 0.5; the single response of group 9 gets 0.
  AdvantageInputs in;
  in.scores = Vec({1.0, 0.0, 0.5, 2.0});
  in.response_mask = Mat({{1}, {1}, {1}, {1}});
  in.groups = {0, 0, 0, 9};
  EXPECT_TRUE(Near(ComputeAdvantages(Estimator("rloo"), in).advantages,
                   Mat({{0.75}, {-0.75}, {0.0}, {0.0}}), 1e-15));
}

TEST(ReinforcePp, DiscountedReturnsOverValidTokensThenWhitened) {
  AdvantageConfig cfg = Estimator("reinforce_pp");
  cfg.gamma = 0.5;
  AdvantageInputs in;
  in.token_rewards = Mat({{1, 0, 2}, {0, 4, 0}});
  in.response_mask = Mat({{1, 1, 1}, {1, 0, 0}});
  // Row 0: G = [1 + 0.5 (0 + 0.5 * 2), 0 + 0.5 * 2, 2] = [1.5, 1, 2]; row 1: [0] (the 4 is
  // padding).
  AdvantageResult r = ComputeAdvantages(cfg, in);
  EXPECT_TRUE(Near(r.returns, Mat({{1.5, 1, 2}, {0, 0, 0}}), 1e-15));
  // Valid returns [1.5, 1, 2, 0]: mean 1.125, unbiased var = 0.729166..
  double var = (0.140625 + 0.015625 + 0.765625 + 1.265625) / 3;
  double k = 1.0 / std::sqrt(var + 1e-8);
  EXPECT_TRUE(
      Near(r.advantages, Mat({{0.375 * k, -0.125 * k, 0.875 * k}, {-1.125 * k, 0, 0}}), 1e-14));
  // A hole in the mask is skipped: G_0 = r_0 + gamma r_2.
  in.token_rewards = Mat({{1, 1e300, 2}, {0, 0, 0}});
  in.response_mask = Mat({{1, 0, 1}, {1, 1, 1}});
  EXPECT_TRUE(Near(ComputeAdvantages(cfg, in).returns, Mat({{2, 0, 2}, {0, 0, 0}}), 1e-15));
}

TEST(ReinforcePp, ScoresArePlacedAtTheLastValidToken) {
  AdvantageConfig cfg = Estimator("reinforce_pp");
  cfg.gamma = 0.5;
  AdvantageInputs in;
  in.scores = Vec({4.0, 1.0, 7.0});
  in.response_mask = Mat({{1, 1, 0}, {1, 1, 1}, {0, 0, 0}});
  EXPECT_TRUE(
      Near(ComputeAdvantages(cfg, in).returns, Mat({{2, 4, 0}, {0.25, 0.5, 1}, {0, 0, 0}}), 1e-15));
}

TEST(ReinforcePpBaseline, GroupMeanThenWhitening) {
  // Group 0: [1, 0] -> [0.5, -0.5]; group 1 (one response) -> 0. Broadcast over tokens
  // [0.5, 0.5, -0.5, 0]: mean 0.125, var = (0.140625 * 2 + 0.390625 + 0.015625) / 3.
  AdvantageInputs in;
  in.scores = Vec({1.0, 0.0, 5.0});
  in.response_mask = Mat({{1, 1}, {1, 0}, {1, 0}});
  in.groups = {0, 0, 1};
  AdvantageResult r = ComputeAdvantages(Estimator("reinforce_pp_baseline"), in);
  double k = 1.0 / std::sqrt((0.140625 * 2 + 0.390625 + 0.015625) / 3 + 1e-8);
  EXPECT_TRUE(
      Near(r.advantages, Mat({{0.375 * k, 0.375 * k}, {-0.625 * k, 0}, {-0.125 * k, 0}}), 1e-14));
  EXPECT_TRUE(Same(r.returns, r.advantages));
}

TEST(Gae, TokenLevelHandComputed) {
  AdvantageConfig cfg = Estimator("gae");
  cfg.gamma = 0.9;
  cfg.lambda = 0.8;
  AdvantageInputs in;
  in.token_rewards = Mat({{0, 1, 1e300}, {1, 0, 0}});
  in.values = Mat({{0.5, 0.2, 9}, {0.1, 0.1, 0.1}});
  in.response_mask = Mat({{1, 1, 0}, {1, 1, 1}});
  // Row 0: delta_1 = 1 - 0.2 = 0.8; delta_0 = 0.9 * 0.2 - 0.5 = -0.32; A_0 = -0.32 + 0.72 * 0.8.
  // Row 1: deltas [1 + 0.09 - 0.1, 0.09 - 0.1, -0.1]; A_2 = -0.1, A_1 = -0.01 - 0.072,
  //        A_0 = 0.99 + 0.72 * -0.082.
  AdvantageResult r = ComputeAdvantages(cfg, in);
  EXPECT_TRUE(Near(r.advantages, Mat({{0.256, 0.8, 0}, {0.93096, -0.082, -0.1}}), 1e-15));
  EXPECT_TRUE(Near(r.returns, Mat({{0.756, 1.0, 0}, {1.03096, 0.018, 0}}), 1e-15));
  in.values = torch::Tensor();
  EXPECT_THROW(ComputeAdvantages(cfg, in), ConfigError);
}

TEST(Gae, DecisionsPackedInEpisodesWithTerminalAndCutEnds) {
  // Episode A: decisions 0-1, terminal. Episode B: decisions 2-3, cut with V(s') = 0.4.
  DecisionGaeInputs in;
  in.rewards = Vec({0, 1, 0, 0});
  in.values = Vec({0.5, 0.6, 0.2, 0.3});
  in.episode_end = Vec({0, 1, 0, 1});
  in.end_values = Vec({0, 0, 0, 0.4});
  AdvantageResult r = GaeAdvantages(in, 0.9, 0.5);
  // A_3 = 0.36 - 0.3; A_2 = (0.27 - 0.2) + 0.45 A_3; A_1 = 1 - 0.6; A_0 = (0.54 - 0.5) + 0.45 A_1.
  EXPECT_TRUE(Near(r.advantages, Vec({0.22, 0.4, 0.097, 0.06}), 1e-15));
  EXPECT_TRUE(Near(r.returns, Vec({0.72, 1.0, 0.297, 0.36}), 1e-15));
  in.episode_end = Vec({0, 1, 0, 0});
  EXPECT_THROW(GaeAdvantages(in, 0.9, 0.5), ConfigError);
}

TEST(Advantages, JunkInPaddingNeverChangesAResult) {
  AdvantageInputs clean;
  clean.token_rewards = Mat({{0.5, 0, 1}, {0, 0, 0}, {0.2, 0.7, 0}, {1, 0, 0}});
  clean.values = Mat({{0.1, 0.2, 0.3}, {0.4, 0, 0}, {0.5, 0.1, 0}, {0.9, 0, 0}});
  clean.response_mask = Mat({{1, 1, 1}, {1, 0, 0}, {1, 1, 0}, {0, 0, 0}});
  clean.groups = {0, 0, 1, 1};
  clean.episodes = {0, 1, 2, 2};  // gigpo's step rows (the others ignore them)
  clean.anchors = {5, 5, 6, 7};
  AdvantageInputs junk = clean;
  torch::Tensor pad = clean.response_mask == 0;
  junk.token_rewards = clean.token_rewards.masked_fill(pad, 1e300);
  junk.values = clean.values.masked_fill(pad, -std::numeric_limits<double>::infinity());
  for (const auto& name : AdvantageRegistry::Global().Names()) {
    for (double gamma : {1.0, 0.7}) {
      AdvantageConfig cfg = Estimator(name);
      cfg.gamma = gamma;
      AdvantageResult a = ComputeAdvantages(cfg, clean), b = ComputeAdvantages(cfg, junk);
      EXPECT_TRUE(Same(a.advantages, b.advantages)) << name;
      EXPECT_TRUE(Same(a.returns, b.returns)) << name;
      EXPECT_EQ(a.advantages.masked_select(pad).abs().sum().item<double>(), 0.0) << name;
    }
  }
}

TEST(Advantages, ScoresAndTokenRewardsAgreeForOutcomeEstimators) {
  AdvantageInputs tokens;
  tokens.token_rewards = Mat({{0, 1}, {0.3, 0}, {0, 0.2}, {2, 0}});
  tokens.response_mask = Mat({{1, 1}, {1, 0}, {1, 1}, {1, 0}});
  tokens.groups = {0, 0, 0, 0};
  tokens.episodes = {0, 0, 1, 2};
  tokens.anchors = {1, 2, 1, 1};
  AdvantageInputs scores = tokens;
  scores.token_rewards = torch::Tensor();
  scores.scores = Vec({1.0, 0.3, 0.2, 2.0});
  for (const char* name : {"grpo", "rloo", "reinforce_pp_baseline", "gigpo"})
    EXPECT_TRUE(Near(ComputeAdvantages(Estimator(name), tokens).advantages,
                     ComputeAdvantages(Estimator(name), scores).advantages, 1e-15))
        << name;
}

TEST(Advantages, ErrorsNameTheProblem) {
  AdvantageInputs in;
  in.scores = Vec({1.0, 0.0});
  in.response_mask = Mat({{1, 1}, {1, 1}});
  EXPECT_THROW(ComputeAdvantages(Estimator("grpo"), in), ConfigError);  // no groups
  in.groups = {0, 0, 0};
  EXPECT_THROW(ComputeAdvantages(Estimator("grpo"), in), ConfigError);  // 3 ids for 2
  in.groups = {0, 0};
  in.token_rewards = Mat({{1, 0}, {0, 0}});
  EXPECT_THROW(ComputeAdvantages(Estimator("grpo"), in), ConfigError);  // both inputs
  in.token_rewards = torch::Tensor();
  in.response_mask = Mat({{1, 1}});
  EXPECT_THROW(ComputeAdvantages(Estimator("grpo"), in), ConfigError);  // mask rows
  try {
    ComputeAdvantages(Estimator("ppo"), in);
    FAIL();
  } catch (const ConfigError& e) {
    std::string m = std::string(e.what()) + e.hint();
    EXPECT_NE(m.find("reinforce_pp_baseline"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace rlid::trainers

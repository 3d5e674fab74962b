// Token-plane advantages on hand-made episodes: group-relative episode returns
// broadcast to every step, per-step discounted returns, DAPO overlong shaping,
// KL in the reward, and the prompt-keeping minibatches of the update.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "core/error.h"
#include "trainers/algorithms/token_trainer.h"

namespace rlid::trainers {
namespace {

// An episode of the given group whose step t has reward rewards[t] and a
// response of lengths[t] tokens (default 2) to a prompt with hash prompt_hash + t.
agents::EpisodeData Episode(int group, std::vector<double> rewards,
                            std::vector<size_t> lengths = {}, uint64_t prompt_hash = 100) {
  agents::EpisodeData e;
  e.spec.group = group;
  for (size_t t = 0; t < rewards.size(); ++t) {
    agents::StepData st;
    st.t = static_cast<int>(t);
    st.reward = rewards[t];
    st.text.response.assign(lengths.empty() ? 2 : lengths[t], 7);
    st.prompt.hash = prompt_hash + t;
    e.ret += rewards[t];
    e.steps.push_back(std::move(st));
  }
  return e;
}

TrainerConfig Grpo(bool std_norm) {
  TrainerConfig c;
  c.advantage.estimator = "grpo";
  c.advantage.std_norm = std_norm;
  return c;
}

TEST(TokenAdvantages, EpisodeReturnIsGroupNormalisedAndBroadcastToEveryStep) {
  // Group 0: returns 1 and 0 (2 and 1 steps); group 1: returns 0.5, 0.5, 2.
  std::vector<agents::EpisodeData> eps = {Episode(0, {0.0, 1.0}), Episode(0, {0.0}),
                                          Episode(1, {0.5}), Episode(1, {0.25, 0.25}),
                                          Episode(1, {2.0})};
  auto samples = TokenAdvantages(Grpo(true), 16, eps);
  ASSERT_EQ(samples.size(), 7u);
  // Group 0: mean 0.5, unbiased std sqrt(0.5): A = ±0.5 / (sqrt(0.5) + 1e-6).
  const double a0 = 0.5 / (std::sqrt(0.5) + 1e-6);
  EXPECT_NEAR(samples[0].advantage, a0, 1e-12);
  EXPECT_NEAR(samples[1].advantage, a0, 1e-12);  // the same value at every step
  EXPECT_NEAR(samples[2].advantage, -a0, 1e-12);
  // Group 1: scores 0.5, 0.5, 2 -> mean 1, unbiased std sqrt(((.5)^2 * 2 + 1) / 2) = sqrt(0.75).
  const double sd = std::sqrt(0.75) + 1e-6;
  EXPECT_NEAR(samples[3].advantage, -0.5 / sd, 1e-12);
  EXPECT_NEAR(samples[4].advantage, -0.5 / sd, 1e-12);
  EXPECT_NEAR(samples[5].advantage, -0.5 / sd, 1e-12);
  EXPECT_NEAR(samples[6].advantage, 1.0 / sd, 1e-12);
  EXPECT_EQ(samples[6].episode, 4);
  EXPECT_EQ(samples[1].step, &eps[0].steps[1]);

  // Dr. GRPO: no std.
  auto dr = TokenAdvantages(Grpo(false), 16, eps);
  EXPECT_DOUBLE_EQ(dr[0].advantage, 0.5);
  EXPECT_DOUBLE_EQ(dr[2].advantage, -0.5);
  EXPECT_DOUBLE_EQ(dr[6].advantage, 1.0);
}

TEST(TokenAdvantages, DiscountedReturnsToGoAreComparedWithinTheGroup) {
  // gamma 0.5. Episode A rewards (0, -0.1, 1): G = (0.2, 0.4, 1). Episode B rewards (-0.1, 0): G =
  // (-0.1, 0). Group members (5 steps): mean = 1.5 / 5 = 0.3.
  TrainerConfig c = Grpo(false);
  c.token.return_mode = ReturnMode::kDiscounted;
  c.advantage.gamma = 0.5;
  std::vector<agents::EpisodeData> eps = {Episode(3, {0.0, -0.1, 1.0}), Episode(3, {-0.1, 0.0})};
  auto s = TokenAdvantages(c, 16, eps);
  ASSERT_EQ(s.size(), 5u);
  const double want[] = {0.2 - 0.3, 0.4 - 0.3, 1.0 - 0.3, -0.1 - 0.3, 0.0 - 0.3};
  for (int i = 0; i < 5; ++i) EXPECT_NEAR(s[i].advantage, want[i], 1e-12) << "sample " << i;

  // gamma 1 with std: G = (0.9, 0.9, 1) and (-0.1, 0).
  c.advantage.gamma = 1.0;
  c.advantage.std_norm = true;
  s = TokenAdvantages(c, 16, eps);
  const double g[] = {0.9, 0.9, 1.0, -0.1, 0.0};
  double mean = 0, var = 0;
  for (double v : g) mean += v / 5;
  for (double v : g) var += (v - mean) * (v - mean) / 4;
  for (int i = 0; i < 5; ++i)
    EXPECT_NEAR(s[i].advantage, (g[i] - mean) / (std::sqrt(var) + 1e-6), 1e-12);

  // Episodes of different groups never share a baseline: B's advantages do not
  // depend on A's rewards.
  eps[1].spec.group = 4;
  auto before = TokenAdvantages(c, 16, eps);
  eps[0].steps[2].reward = 7.0;
  auto after = TokenAdvantages(c, 16, eps);
  EXPECT_NEAR(before[3].advantage, -0.05 / (std::sqrt(0.005) + 1e-6), 1e-12);
  EXPECT_EQ(after[3].advantage, before[3].advantage);
  EXPECT_EQ(after[4].advantage, before[4].advantage);
  EXPECT_NE(after[0].advantage, before[0].advantage);
}

// GiGPO through the token plane: steps are rows, StepData::state_hash is the
// anchor, rewards are shaped as for the other estimators (here KL in the
// reward), and a step without a response still counts in its groups.
TEST(TokenAdvantages, GigpoGroupsStepsByTheirStateHash) {
  TrainerConfig c = Grpo(false);
  c.advantage.estimator = "gigpo";
  c.advantage.gamma = 0.5;
  c.kl.coef = 0.5;
  std::vector<agents::EpisodeData> eps = {Episode(0, {0.0, 1.0}), Episode(0, {0.0, 0.0})};
  eps[0].steps[0].state_hash = eps[1].steps[0].state_hash = 10;  // both start in one state
  eps[0].steps[1].state_hash = 20, eps[1].steps[1].state_hash = 30;
  // KL 0.5 on B's second step: shaped rewards A (0, 1), B (0, -0.25), returns 1 and -0.25.
  const std::vector<std::vector<double>> kl = {{0.0, 0.0}, {0.0, 0.5}};
  auto s = TokenAdvantages(c, 16, eps, kl);
  ASSERT_EQ(s.size(), 4u);
  // A^E = +-0.625; step group (0, 10): returns-to-go 0.5 and -0.125 -> +-0.3125.
  const double want[] = {0.625 + 0.3125, 0.625, -0.625 - 0.3125, -0.625};
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(s[i].advantage, want[i], 1e-12) << "sample " << i;
  // B's first step without a response: no sample, but A's step group still holds it.
  eps[1].steps[0].text.response.clear();
  auto fewer = TokenAdvantages(c, 16, eps, kl);
  ASSERT_EQ(fewer.size(), 3u);
  EXPECT_NEAR(fewer[0].advantage, want[0], 1e-12);
  EXPECT_EQ(fewer[2].step, &eps[1].steps[1]);
}

TEST(TokenAdvantages, OverlongShapingPenalisesLongAnswers) {
  // max_new_tokens 8, buffer 4, factor 2: penalty min(-(len - 4) / 4 * 2, 0).
  TrainerConfig c = Grpo(false);
  c.token.overlong_buffer = 4;
  c.token.overlong_factor = 2.0;
  std::vector<agents::EpisodeData> eps = {Episode(0, {1.0}, {3}), Episode(0, {1.0}, {6}),
                                          Episode(0, {1.0}, {8})};
  auto s = TokenAdvantages(c, 8, eps);
  // Scores 1, 1 - 1 = 0, 1 - 2 = -1; mean 0.
  EXPECT_DOUBLE_EQ(s[0].advantage, 1.0);
  EXPECT_DOUBLE_EQ(s[1].advantage, 0.0);
  EXPECT_DOUBLE_EQ(s[2].advantage, -1.0);
}

TEST(TokenAdvantages, KlInTheRewardIsSubtractedPerStep) {
  TrainerConfig c = Grpo(false);
  c.kl.coef = 0.5;
  std::vector<agents::EpisodeData> eps = {Episode(0, {0.0, 1.0}), Episode(0, {1.0})};
  // Scores: 1 - 0.5 * (0.2 + 0.4) = 0.7 and 1 - 0.5 * 1.0 = 0.5; mean 0.6.
  auto s = TokenAdvantages(c, 16, eps, {{0.2, 0.4}, {1.0}});
  EXPECT_NEAR(s[0].advantage, 0.1, 1e-12);
  EXPECT_NEAR(s[1].advantage, 0.1, 1e-12);
  EXPECT_NEAR(s[2].advantage, -0.1, 1e-12);
  EXPECT_THROW(TokenAdvantages(c, 16, eps, {{0.2, 0.4}}), InternalError);
}

TEST(TokenAdvantages, StepsWithoutResponseScoreButGetNoSample) {
  std::vector<agents::EpisodeData> eps = {Episode(0, {0.0, 1.0}), Episode(0, {0.0})};
  eps[0].steps[0].text.response.clear();
  auto s = TokenAdvantages(Grpo(false), 16, eps);
  ASSERT_EQ(s.size(), 2u);
  EXPECT_EQ(s[0].step, &eps[0].steps[1]);
  EXPECT_DOUBLE_EQ(s[0].advantage, 0.5);
  EXPECT_DOUBLE_EQ(s[1].advantage, -0.5);
}

TEST(TokenAdvantages, RejectsEstimatorsWithoutGroups) {
  TrainerConfig c = Grpo(true);
  c.advantage.estimator = "gae";
  std::vector<agents::EpisodeData> eps = {Episode(0, {1.0})};
  try {
    TokenAdvantages(c, 16, eps);
    ADD_FAILURE() << "gae was accepted in the token plane";
  } catch (const ConfigError& e) {  // the hint lists the registered group estimators
    EXPECT_NE(e.hint().find("grpo, reinforce_pp_baseline, rloo"), std::string::npos) << e.hint();
  }
  c.advantage.estimator = "rloo";
  eps.push_back(Episode(0, {0.0}));
  eps.push_back(Episode(0, {0.5}));
  auto s = TokenAdvantages(c, 16, eps);  // A_i = s_i - mean of the others
  EXPECT_DOUBLE_EQ(s[0].advantage, 1.0 - 0.25);
  EXPECT_DOUBLE_EQ(s[1].advantage, 0.0 - 0.75);
  EXPECT_DOUBLE_EQ(s[2].advantage, 0.5 - 0.5);
}

TEST(TokenAdvantages, ZeroVarianceGroupsCompareScoresExactly) {
  TrainerConfig c = Grpo(true);
  std::vector<agents::EpisodeData> eps = {Episode(0, {1.0}), Episode(0, {0.5, 0.5}),
                                          Episode(1, {1.0}), Episode(1, {0.0}), Episode(2, {0.0})};
  EXPECT_EQ(ZeroVarianceGroups(ScoreEpisodes(c, 16, eps)), (std::vector<int64_t>{0, 2}));
}

// DAPO's filter compared raw returns while the advantages compared the shaped
// ones: a group whose answers all succeed but differ in length has a non-zero
// shaped variance (the overlong penalty) and must be kept — and, with the KL
// in the reward, a group of equal returns differs by its KL.
TEST(TokenAdvantages, ZeroVarianceFilterSeesTheShapedRewardsTheAdvantagesUse) {
  TrainerConfig c = Grpo(true);
  std::vector<agents::EpisodeData> eps = {Episode(0, {1.0}, {3}), Episode(0, {1.0}, {8})};
  EXPECT_EQ(ZeroVarianceGroups(ScoreEpisodes(c, 8, eps)), (std::vector<int64_t>{0}));
  c.token.overlong_buffer = 4;
  EXPECT_TRUE(ZeroVarianceGroups(ScoreEpisodes(c, 8, eps)).empty());
  auto s = TokenAdvantages(c, 8, eps);
  EXPECT_GT(s[0].advantage, 0);  // the short answer is preferred
  c.token.overlong_buffer = 0;
  c.kl.coef = 0.1;
  EXPECT_TRUE(ZeroVarianceGroups(ScoreEpisodes(c, 8, eps, {{0.0}, {1.0}})).empty());
}

TEST(PromptMinibatches, KeepResponsesToOnePromptTogether) {
  // 3 groups x 4 episodes of 2 steps; step 0 shares the group's prompt, step 1 is unique.
  std::vector<agents::EpisodeData> eps;
  for (int g = 0; g < 3; ++g)
    for (int k = 0; k < 4; ++k) {
      eps.push_back(Episode(g, {0.0, static_cast<double>(k % 2)}, {}, 1000 * g));
      eps.back().steps[1].prompt.hash = 1000 * g + 10 + k;
    }
  auto samples = TokenAdvantages(Grpo(false), 16, eps);
  ASSERT_EQ(samples.size(), 24u);
  Rng rng(5);
  auto mbs = PromptMinibatches(samples, 5, &rng);
  ASSERT_EQ(mbs.size(), 5u);  // ceil(24 / 5)
  std::multiset<size_t> seen;
  for (size_t m = 0; m < mbs.size(); ++m) {
    EXPECT_EQ(mbs[m].size(), m + 1 < mbs.size() ? 5u : 4u);
    seen.insert(mbs[m].begin(), mbs[m].end());
  }
  EXPECT_EQ(seen.size(), 24u);
  EXPECT_EQ(std::set<size_t>(seen.begin(), seen.end()).size(), 24u);
  // In the concatenated order every prompt's responses are contiguous.
  std::vector<uint64_t> order;
  for (const auto& mb : mbs)
    for (size_t i : mb) order.push_back(samples[i].step->prompt.hash);
  std::set<uint64_t> closed;
  for (size_t i = 0; i < order.size(); ++i) {
    EXPECT_EQ(closed.count(order[i]), 0u) << "prompt " << order[i] << " split into two runs";
    if (i + 1 == order.size() || order[i + 1] != order[i]) closed.insert(order[i]);
  }
  // Deterministic by the Rng; without one, first-seen order.
  Rng rng2(5);
  EXPECT_EQ(PromptMinibatches(samples, 5, &rng2), mbs);
  auto plain = PromptMinibatches(samples, 100, nullptr);
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_EQ(samples[plain[0][0]].step->prompt.hash, 0u);
  EXPECT_EQ(samples[plain[0][1]].step->prompt.hash, 0u);
}

}  // namespace
}  // namespace rlid::trainers

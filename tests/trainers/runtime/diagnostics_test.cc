// The run diagnostics: hand-made tallies for each check's threshold, and a
// token-plane run from a random model, whose answers are nearly all invalid,
// warning about it with the commonest reasons.
#include "trainers/runtime/diagnostics.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/cli/run_cli.h"
#include "trainers/runtime/trainer.h"

namespace rlid::trainers {
namespace {

agents::EpisodeData Episode(int steps, int invalid, bool success, const std::string& reason = "") {
  agents::EpisodeData e;
  e.success = success;
  for (int i = 0; i < steps; ++i) {
    agents::StepData s;
    s.invalid = i < invalid;
    if (s.invalid) s.invalid_reason = reason;
    e.steps.push_back(s);
  }
  return e;
}

TEST(Diagnostics, InvalidReasonKindsElideQuotedTextAndNumbers) {
  EXPECT_EQ(InvalidReasonKind("no menu action matches 'recommend Leo water'"),
            "no menu action matches '…'");
  EXPECT_EQ(InvalidReasonKind("answer too long (412 bytes) to be a menu choice"),
            "answer too long (…) to be a menu choice");
  EXPECT_EQ(InvalidReasonKind("'go to A' mentions A (go to the cellar) but is not an answer"),
            "'…' mentions X (…) but is not an answer");
  EXPECT_EQ(InvalidReasonKind("answer has 3 lines"), "answer has N lines");
}

TEST(Diagnostics, MostlyInvalidAnswersWarnWithTheCommonestKinds) {
  EpisodeTally t;
  for (int i = 0; i < 8; ++i) t.Add(Episode(4, 3, false, "no menu action matches 'x" + std::to_string(i) + "'"));
  t.Add(Episode(4, 4, false, "empty answer"));
  ASSERT_EQ(t.steps, 36);
  auto w = InvalidAnswersWarning(t);
  ASSERT_TRUE(w);
  EXPECT_NE(w->find("78% of the token plane's 36 answers"), std::string::npos) << *w;
  EXPECT_NE(w->find("\"no menu action matches '…'\" (24), \"empty answer\" (4)"), std::string::npos) << *w;
  // Half or fewer, or too few answers to tell: silent.
  EpisodeTally half;
  for (int i = 0; i < 16; ++i) half.Add(Episode(4, 2, false, "empty answer"));
  EXPECT_FALSE(InvalidAnswersWarning(half));
  EpisodeTally few;  // a majority of fewer than 8 answers
  few.Add(Episode(6, 4, false, "empty answer"));
  EXPECT_FALSE(InvalidAnswersWarning(few));
  // Every answer invalid: said at any count (a 100%-invalid run of 4 answers).
  EpisodeTally all;
  all.Add(Episode(4, 4, false, "empty answer"));
  auto every = InvalidAnswersWarning(all);
  ASSERT_TRUE(every);
  EXPECT_NE(every->find("100% of the token plane's 4 answers"), std::string::npos) << *every;
}

TEST(Diagnostics, FailingDemonstrationsWarn) {
  EXPECT_FALSE(DemonstrationsWarning(0.9, 0.1));
  EXPECT_FALSE(DemonstrationsWarning(0.25, 1.0));  // format-only demonstrations, by design
  auto w = DemonstrationsWarning(0.25, 0.6);
  ASSERT_TRUE(w);
  EXPECT_NE(w->find("only 25%"), std::string::npos) << *w;
  EXPECT_NE(w->find("random_action_frac = 0.6"), std::string::npos) << *w;
}

TEST(Diagnostics, EpisodesEndingFarEarlierThanTheOraclesWarn) {
  const OracleReference oracle{.episodes = 16, .success = 1.0, .mean_length = 4.0};
  EpisodeTally early;
  for (int i = 0; i < 10; ++i) early.Add(Episode(1, 0, i == 0));
  auto w = EarlyEndWarning(early, oracle);
  ASSERT_TRUE(w);
  EXPECT_NE(w->find("end after 1.0 steps"), std::string::npos) << *w;
  EXPECT_NE(w->find("oracle takes 4.0 steps"), std::string::npos) << *w;
  // Long failing episodes, short successful ones, or an env without an oracle: silent.
  EpisodeTally long_failing;
  for (int i = 0; i < 10; ++i) long_failing.Add(Episode(4, 0, false));
  EXPECT_FALSE(EarlyEndWarning(long_failing, oracle));
  EpisodeTally short_winning;
  for (int i = 0; i < 10; ++i) short_winning.Add(Episode(1, 0, true));
  EXPECT_FALSE(EarlyEndWarning(short_winning, oracle));
  EXPECT_FALSE(EarlyEndWarning(early, OracleReference{}));
}

// An iteration whose episodes were all dropped after env failures measured
// nothing: no rate is recorded (a 0 would read as a measured failure).
TEST(Diagnostics, NoEpisodesGiveNoRolloutRates) {
  const Metrics none = RolloutMetrics(std::vector<agents::EpisodeData>{});
  ASSERT_EQ(none.size(), 1u);
  EXPECT_EQ(none[0].first, "rollout/episodes");
  EXPECT_EQ(none[0].second, 0.0);
  const Metrics one = RolloutMetrics({Episode(2, 0, true)});
  auto find = [&](const std::string& key) {
    for (const auto& [k, v] : one)
      if (k == key) return v;
    return -1.0;
  };
  EXPECT_EQ(find("rollout/success"), 1.0);
  EXPECT_EQ(find("rollout/episodes"), 1.0);
}

// GRPO from a random model (no warm start): the answers are noise.
TEST(Diagnostics, ATokenPlaneRunOfInvalidAnswersSaysSo) {
  const auto dir = std::filesystem::temp_directory_path() / ("rlid_diag_" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "c.toml") << R"(
[run]
threads = 1
[env]
name = "bandit"
[tokenizer]
vocab_size = 300
corpus_episodes = 20
[policy]
preset = "tiny"
num_layers = 1
[sampler]
max_new_tokens = 4
[trainer]
algorithm = "grpo"
iterations = 1
episodes_per_iteration = 32
group_size = 4
num_envs = 32
minibatch_size = 32
epochs = 1
eval_episodes = 2
eval_sampled = false
)";
  auto r = testing::RunRlidProcess("train " + (dir / "c.toml").string() + " --out " + (dir / "run").string());
  std::filesystem::remove_all(dir);
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("answers this iteration were invalid; commonest:"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace rlid::trainers

// [trainer] validation: settings that would train on nothing, or keys that do
// not apply, are ConfigErrors that name the key and say what to do.
#include <gtest/gtest.h>

#include "core/error.h"
#include "tests/agents/fixtures.h"

namespace rlid::trainers {
namespace {

constexpr const char* kToml = R"(
[run]
name = "cfg"
[env]
name = "bandit"
[trainer]
algorithm = "ppo_decision"
)";

std::string ErrorOf(const std::vector<std::string>& sets) {
  try {
    testing::Experiment(kToml, sets);
  } catch (const ConfigError& e) {
    return std::string(e.what()) + " | " + e.hint();
  }
  return "";
}

// A group estimator with groups of one gives every advantage exactly 0: the run
// would train only its value and entropy terms, in either plane.
TEST(TrainerConfig, GroupEstimatorsNeedGroupsOfTwo) {
  for (const char* algorithm : {"grpo", "dr_grpo", "dapo", "gspo"}) {
    auto e = ErrorOf({std::string("trainer.algorithm=") + algorithm, "trainer.group_size=1"});
    EXPECT_NE(e.find("group_size = 1"), std::string::npos) << algorithm << ": " << e;
    EXPECT_NE(e.find("group_size >= 2"), std::string::npos) << algorithm << ": " << e;
  }
  for (const char* est : {"grpo", "rloo"}) {
    auto e = ErrorOf({std::string("trainer.advantage.estimator=") + est});
    EXPECT_NE(e.find("needs groups of at least 2"), std::string::npos) << est << ": " << e;
  }
  EXPECT_EQ(ErrorOf({"trainer.advantage.estimator=rloo", "trainer.group_size=4",
                     "trainer.episodes_per_iteration=32"}),
            "");
  EXPECT_EQ(ErrorOf({"trainer.algorithm=grpo"}), "");  // the preset's groups of 8
}

// gigpo reads step rows in either plane and computes its own step returns.
TEST(TrainerConfig, GigpoRunsInBothPlanesOnEpisodeReturns) {
  EXPECT_EQ(ErrorOf({"trainer.algorithm=grpo", "trainer.advantage.estimator=gigpo",
                     "trainer.advantage.step_weight=0.5"}),
            "");
  EXPECT_EQ(ErrorOf({"trainer.advantage.estimator=gigpo", "trainer.group_size=4",  // decision plane
                     "trainer.episodes_per_iteration=32"}),
            "");
  auto e = ErrorOf({"trainer.advantage.estimator=gigpo"});  // groups of one
  EXPECT_NE(e.find("needs groups of at least 2"), std::string::npos) << e;
  e = ErrorOf({"trainer.algorithm=grpo", "trainer.advantage.estimator=gigpo",
               "trainer.return_mode=discounted"});
  EXPECT_NE(e.find("return_mode = 'discounted'"), std::string::npos) << e;
  e = ErrorOf({"trainer.algorithm=dapo", "trainer.advantage.estimator=gigpo"});
  EXPECT_NE(e.find("filter_zero_variance_groups = false"), std::string::npos) << e;
  e = ErrorOf({"trainer.algorithm=grpo", "trainer.advantage.estimator=gigpo",
               "trainer.advantage.step_weight=-1"});
  EXPECT_NE(e.find("step_weight"), std::string::npos) << e;
}

TEST(TrainerConfig, AllActionNeedsAMenuNormalisedReadout) {
  auto e = ErrorOf({"trainer.gradient_estimator=all_action", "readout.normalisation=other"});
  EXPECT_NE(e.find("all_action"), std::string::npos) << e;
  EXPECT_EQ(ErrorOf({"trainer.gradient_estimator=all_action"}), "");
}

// trainer.estimator was renamed trainer.gradient_estimator (three keys were
// called "estimator"): the old spelling is an error that names the new key,
// in every algorithm, from a file or from --set.
TEST(TrainerConfig, TheRenamedEstimatorKeyNamesItsNewName) {
  for (const char* algorithm : {"ppo_decision", "grpo"}) {
    auto e =
        ErrorOf({std::string("trainer.algorithm=") + algorithm, "trainer.estimator=all_action"});
    EXPECT_NE(e.find("--set trainer.estimator: 'trainer.estimator' was renamed "
                     "'trainer.gradient_estimator'"),
              std::string::npos)
        << algorithm << ": " << e;
    EXPECT_NE(e.find("write trainer.gradient_estimator = ... instead"), std::string::npos) << e;
  }
  std::string toml = std::string(kToml) + "estimator = \"sampled\"\n";
  try {
    testing::Experiment(toml, {});
    ADD_FAILURE() << "the old key loaded";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("test.toml:8:13: 'trainer.estimator' was renamed"),
              std::string::npos)
        << e.what();
  }
}

// A key only another algorithm reads would be silently ignored: it is an error
// that names the algorithm and lists what it reads.
TEST(TrainerConfig, KeysOfAnotherAlgorithmAreErrors) {
  struct Case {
    const char* algorithm;
    const char* key;
  } cases[] = {{"grpo", "trainer.vf_coef=0.5"},
               {"gspo", "trainer.gradient_estimator=all_action"},
               {"dapo", "trainer.advantage.lambda=0.9"},
               {"ppo_decision", "trainer.sampling.filter_zero_variance_groups=true"},
               {"ppo_decision", "trainer.loss.aggregation=token_sum"},
               {"ppo_decision", "trainer.loss.engine.kind=tis"},
               {"ppo_decision", "trainer.kl.estimator=k1"},
               {"ppo_decision", "trainer.return_mode=discounted"}};
  for (const auto& c : cases) {
    const std::string key = std::string(c.key).substr(0, std::string(c.key).find('='));
    auto e = ErrorOf({std::string("trainer.algorithm=") + c.algorithm, c.key});
    EXPECT_NE(e.find(key + " does not apply to algorithm '" + c.algorithm + "'"), std::string::npos)
        << e;
    EXPECT_NE(e.find(std::string(c.algorithm) + " reads: "), std::string::npos) << e;
    EXPECT_NE(e.find("--set " + key), std::string::npos) << "where the key came from: " << e;
  }
  // The same keys with the algorithm that reads them load.
  EXPECT_EQ(ErrorOf({"trainer.vf_coef=0.5"}), "");
  EXPECT_EQ(ErrorOf({"trainer.algorithm=dapo", "trainer.loss.engine.kind=tis"}), "");
  // The list is the algorithm's own keys.
  auto e = ErrorOf({"trainer.algorithm=grpo", "trainer.vf_coef=0.5"});
  EXPECT_NE(e.find("loss.aggregation"), std::string::npos) << e;
  EXPECT_EQ(e.find("vf_clip"), std::string::npos) << e;
  // A key no algorithm reads is an unknown key with a suggestion.
  auto typo = ErrorOf({"trainer.vf_coeff=0.5"});
  EXPECT_NE(typo.find("unknown key 'trainer.vf_coeff'"), std::string::npos) << typo;
  EXPECT_NE(typo.find("vf_coef"), std::string::npos) << typo;
}

// trainer.max_staleness and [trainer.loss.staleness] are read in both planes;
// DAPO's resampled rounds cannot be played ahead.
TEST(TrainerConfig, AsynchronousRolloutsInBothPlanesButNotWithDapoRounds) {
  EXPECT_EQ(ErrorOf({"trainer.max_staleness=2", "trainer.loss.staleness.cap=3"}), "");
  EXPECT_EQ(ErrorOf({"trainer.algorithm=grpo", "trainer.max_staleness=4",
                     "trainer.loss.staleness.kind=none"}),
            "");
  auto e = ErrorOf({"trainer.algorithm=dapo", "trainer.max_staleness=1"});
  EXPECT_NE(e.find("max_staleness"), std::string::npos) << e;
  EXPECT_NE(e.find("filter_zero_variance_groups = false"), std::string::npos) << e;
  EXPECT_EQ(ErrorOf({"trainer.algorithm=dapo", "trainer.max_staleness=1",
                     "trainer.sampling.filter_zero_variance_groups=false"}),
            "");
  for (const char* set : {"trainer.max_staleness=-1", "trainer.loss.staleness.cap=0"}) {
    const std::string key = std::string(set).substr(0, std::string(set).find('='));
    e = ErrorOf({set});
    EXPECT_NE(e.find("'" + key + "'"), std::string::npos) << set << ": " << e;
  }
  e = ErrorOf({"trainer.loss.staleness.kind=late"});
  EXPECT_NE(e.find("decoupled"), std::string::npos) << e;
}

TEST(TrainerConfig, BadValuesNameTheKey) {
  for (const char* set : {"trainer.iterations=-1", "trainer.epochs=0", "trainer.lr=nan",
                          "trainer.adam_beta1=2", "trainer.vf_coef=inf", "trainer.ent_coef=-0.1",
                          "trainer.grad_snr_episodes=1", "sampler.top_p=0", "sft.batch_size=0",
                          "trainer.eval_episodes=0", "trainer.loss.clip_high=-1"}) {
    const std::string key = std::string(set).substr(0, std::string(set).find('='));
    auto e = ErrorOf({set});
    EXPECT_NE(e.find("'" + key + "'"), std::string::npos) << set << ": " << e;
    EXPECT_EQ(e.find("internal"), std::string::npos) << set << ": " << e;
  }
}

// A quoted key with a dot at the top level is one key named "trainer.lr": it
// used to be ignored because its name equals the path of a real key.
TEST(TrainerConfig, ARootLevelDottedKeyIsAnError) {
  try {
    testing::Experiment(std::string(kToml) + "\n", {});
    Config c = Config::FromString(std::string("\"trainer.lr\" = 1\n") + kToml, "test.toml");
    ExperimentConfig::FromConfig(std::move(c));
    ADD_FAILURE() << "a quoted dotted key was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("trainer.lr"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("test.toml:1:"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace rlid::trainers

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

TEST(TrainerConfig, AllActionNeedsAMenuNormalisedReadout) {
  auto e = ErrorOf({"trainer.estimator=all_action", "readout.normalisation=other"});
  EXPECT_NE(e.find("all_action"), std::string::npos) << e;
  EXPECT_EQ(ErrorOf({"trainer.estimator=all_action"}), "");
}

}  // namespace
}  // namespace rlid::trainers

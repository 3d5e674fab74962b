// Hostile sizes and run names: counts a run allocates or loops over have documented upper
// bounds (kMax* in trainers/runtime/experiment.cc, policy/model/model.cc and policy/model/lora.cc), and
// run.name must be one safe directory name; each violation is a ConfigError naming the key.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.h"
#include "tests/agents/fixtures.h"

namespace rlid::trainers {
namespace {

constexpr const char* kToml = R"(
[run]
name = "bounds"
[env]
name = "bandit"
)";

std::string ErrorOf(const std::vector<std::string>& sets) {
  try {
    testing::Experiment(kToml, sets);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(SizeBounds, OversizedCountsAreConfigErrors) {
  struct Case {
    std::string set, needle;
  };
  const std::vector<Case> cases = {
      {"trainer.episodes_per_iteration=2147483648",
       "'trainer.episodes_per_iteration' must be in [1, 1048576], found 2147483648"},
      {"trainer.episodes_per_iteration=9223372036854775807", "episodes_per_iteration"},
      {"trainer.group_size=2147483648", "'trainer.group_size' must be in [1, 1048576]"},
      {"trainer.eval_episodes=1000000000000", "'trainer.eval_episodes' must be in [1, 1048576]"},
      {"trainer.minibatch_size=1000000000000", "'trainer.minibatch_size' must be in [1, 16777216]"},
      {"trainer.num_envs=2147483647", "'trainer.num_envs' must be in [1, 65536]"},
      // Beyond int32 for an int field: a range error, never a wrapped value.
      {"trainer.num_envs=4294967297", "trainer.num_envs"},
      {"trainer.epochs=1000000000", "'trainer.epochs' must be in [1, 65536]"},
      {"tokenizer.vocab_size=2000000000", "'tokenizer.vocab_size' must be in [257, 4194304]"},
      {"policy.num_layers=100000", "'policy.num_layers' must be in [1, 1024], found 100000"},
      {"policy.num_layers=1e5", "policy.num_layers"},  // a float is no layer count
      {"policy.lora.rank=1000000000000", "'policy.lora.rank' must be in [0, 16384]"},
  };
  for (const Case& c : cases) {
    const std::string error = ErrorOf({c.set});
    EXPECT_NE(error.find(c.needle), std::string::npos) << c.set << ": " << error;
  }
  EXPECT_EQ(ErrorOf({"trainer.episodes_per_iteration=1048576", "trainer.num_envs=65536"}), "");
}

// run.name is joined under runs/: "../../x" wrote outside it and "" was an internal error.
TEST(SizeBounds, RunNameIsOneSafeDirectoryName) {
  const std::vector<std::string> bad_names = {"../../x", "a/b",      "",         ".",
                                              "..",      ".hidden", "-rf",      "tab\there",
                                              std::string(200, 'n')};
  for (const std::string& bad : bad_names) {
    const std::string error = ErrorOf({"run.name=\"" + bad + "\""});
    EXPECT_NE(error.find("'run.name' names a directory under runs/"), std::string::npos)
        << "'" << bad << "': " << error;
  }
  EXPECT_NE(ErrorOf({"run.name=\"\""}).find("is empty"), std::string::npos);
  EXPECT_NE(ErrorOf({"run.name=\"../../x\""}).find("starts with '.'"), std::string::npos);
  EXPECT_NE(ErrorOf({"run.name=\"a/../../x\""}).find("path separator"), std::string::npos);
  for (const std::string good : {"maze_ppo", "run-2.1", "My Run", "caf\xc3\xa9"}) {
    EXPECT_EQ(ErrorOf({"run.name=\"" + good + "\""}), "") << good;
  }
}

}  // namespace
}  // namespace rlid::trainers

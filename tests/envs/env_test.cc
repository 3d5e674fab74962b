// MakeEnv(name, params): a parameter outside its range is a ConfigError that
// names the key, its valid range and the value, and where it was set.
#include "envs/api/env.h"

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace rlid::envs {
namespace {

std::string MakeError(const std::string& env, const std::vector<std::string>& params) {
  try {
    MakeEnv(env, params);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(MakeEnv, ParamErrorsNameKeyRangeAndValue) {
  struct Case {
    const char* env;
    std::vector<std::string> params;
    const char* want;
  } cases[] = {
      {"bandit", {"arms=9"}, "--set env.arms: 'env.arms' must be in [2, 8], found 9"},
      {"bandit", {"wrong_reward=nan"}, "'env.wrong_reward' must be a finite number, found nan"},
      {"maze", {"size=13"}, "--set env.size: 'env.size' must be in [2, 12], found 13"},
      {"maze", {"extra_edges=inf"}, "'env.extra_edges' must be a finite number, found inf"},
      {"maze", {"extra_edges=1.5"}, "'env.extra_edges' must be in [0, 1], found 1.5"},
      {"maze", {"view_radius=-1"}, "'env.view_radius' must be >= 0, found -1"},
      {"maze", {"step_cost=-1"}, "'env.step_cost' must be >= 0, found -1"},
      // Ranges that depend on other parameters.
      {"keys", {"rooms=3", "extra_doors=2"}, "'env.extra_doors' must be in [0, 1], found 2"},
      {"keys",
       {"rooms=3", "extra_doors=1", "locked_doors=4"},
       "'env.locked_doors' must be in [0, 3], found 4"},
      {"keys", {"success_reward=0"}, "'env.success_reward' must be > 0, found 0"},
      {"arcgrid", {"min_ops=3"}, "'env.min_ops' must be in [1, 2], found 3"},
      {"arcgrid", {"max_ops=3", "step_limit=2"}, "'env.step_limit' must be in [3, 1000], found 2"},
      {"craft", {"distractors=11"}, "'env.distractors' must be in [0, 10], found 11"},
      {"craft", {"depth=0"}, "'env.depth' must be in [1, 4], found 0"},
  };
  for (const auto& c : cases) {
    const std::string msg = MakeError(c.env, c.params);
    EXPECT_NE(msg.find(c.want), std::string::npos)
        << c.env << " " << c.params.back() << "\n  got: " << msg;
  }
}

}  // namespace
}  // namespace rlid::envs

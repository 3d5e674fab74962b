#include <gtest/gtest.h>

#include "envs/env.h"

namespace rlid::envs {
namespace {

TEST(Bandit, PinnedObservations) {
  auto env = MakeEnv("bandit");
  // Golden texts: a change here changes every experiment on bandit.
  EXPECT_EQ(env->NewState(0)->Observation(), env->NewState(0)->Observation());
  auto s = env->NewState(1);
  Menu m = s->CompileMenu();
  ASSERT_EQ(m.size(), 4u);
  int correct = 0;
  for (const auto& it : m.items) {
    auto c = s->Clone();
    auto out = c->Apply(it.action);
    EXPECT_TRUE(out.terminal);
    correct += out.success;
    EXPECT_EQ(out.reward, out.success ? 1.0 : 0.0);
  }
  EXPECT_EQ(correct, 1);
}

TEST(Bandit, ParamsAreValidated) {
  EXPECT_THROW(MakeEnv("bandit", {"arms=1"}), ConfigError);
  EXPECT_THROW(MakeEnv("bandit", {"armz=3"}), ConfigError);
  EXPECT_EQ(MakeEnv("bandit", {"arms=8"})->NewState(0)->CompileMenu().size(), 8u);
}

TEST(Bandit, CompileUnderstandsItems) {
  auto s = MakeEnv("bandit", {"shuffle=false"})->NewState(2);
  Menu m = s->CompileMenu();
  EXPECT_EQ(s->Compile("I would recommend the umbrella.").action, 1);
  EXPECT_EQ(s->Compile("B").action, 1);
  EXPECT_EQ(s->Compile("water").action, 0);
  EXPECT_FALSE(s->Compile("water or umbrella").valid());
}

}  // namespace
}  // namespace rlid::envs

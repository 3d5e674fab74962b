// bandit: pinned texts of a few seeds, one correct item per context, params
// validated, free text understood.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "envs/api/env.h"

namespace rlid::envs {
namespace {

TEST(Bandit, PinnedObservations) {
  auto env = MakeEnv("bandit");
  // Golden texts: a change here changes every experiment on bandit.
  struct Pinned {
    uint64_t seed;
    const char* observation;
    std::vector<std::string> menu;  // commands in env order (labels A, B, C, D)
    const char* correct;
  } pinned[] = {
      {0,
       "Ava feels parched at the market. Recommend one item.",
       {"recommend sunscreen", "recommend water", "recommend coat", "recommend umbrella"},
       "recommend water"},
      {1,
       "Noah will sit in the sun all day at the station. Recommend one item.",
       {"recommend sunscreen", "recommend coat", "recommend umbrella", "recommend water"},
       "recommend sunscreen"},
      {7,
       "Omar is thirsty after a long run at the station. Recommend one item.",
       {"recommend sunscreen", "recommend umbrella", "recommend water", "recommend coat"},
       "recommend water"},
  };
  for (const auto& p : pinned) {
    SCOPED_TRACE(p.seed);
    auto s = env->NewState(p.seed);
    EXPECT_EQ(s->Observation(), p.observation);
    Menu m = s->CompileMenu();
    std::vector<std::string> commands, correct;
    for (const auto& it : m.items) {
      commands.push_back(it.command);
      if (s->Clone()->Apply(it.action).success) correct.push_back(it.command);
    }
    EXPECT_EQ(commands, p.menu);
    EXPECT_EQ(correct, std::vector<std::string>{p.correct});
  }
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
  EXPECT_EQ(s->Compile("I would recommend umbrella.").action, 1);
  EXPECT_EQ(s->Compile("the umbrella").action, 1);
  // Not a listed realisation: invalid, and the reason says which item it mentions.
  auto r = s->Compile("I would recommend the umbrella.");
  EXPECT_FALSE(r.valid());
  EXPECT_NE(r.reason.find("mentions B (recommend umbrella)"), std::string::npos) << r.reason;
  EXPECT_EQ(s->Compile("B").action, 1);
  EXPECT_EQ(s->Compile("water").action, 0);
  EXPECT_FALSE(s->Compile("water or umbrella").valid());
}

}  // namespace
}  // namespace rlid::envs

// craft: pinned observations and menus, crafting mechanics (gather, craft,
// wrong combinations, carry limit), the plan-length oracle against exact
// enumeration, every depth, and parameter validation.
#include <gtest/gtest.h>

#include <set>
#include <sstream>

#include "core/error.h"
#include "core/rng.h"
#include "envs/api/env.h"
#include "envs/api/menu_state.h"
#include "envs/api/state_graph.h"
#include "tests/envs/env_test_util.h"

namespace rlid::envs {
namespace {

StepOutcome Do(State& s, const std::string& text) {
  auto res = s.Compile(text);
  EXPECT_TRUE(res.valid()) << text << ": " << res.reason;
  if (!res.valid()) return {};
  return s.Apply(res.action);
}

std::vector<std::string> Commands(const Menu& m) {
  std::vector<std::string> out;
  for (const auto& it : m.items) out.push_back(it.command);
  return out;
}

using testing::Words;

TEST(Craft, PinnedSeed0) {
  auto s = MakeEnv("craft")->NewState(0);
  // Golden texts: a change here changes every experiment on craft.
  EXPECT_EQ(s->Observation(),
            "Goal: make a sail.\n"
            "Recipes: sail = cloth + rope; glass = sand + coal; rope = flax + flax; cloth = wool + "
            "wool.\n"
            "You have: iron ore, wool, flax (at most 2 of each).");
  Menu m = s->CompileMenu();
  EXPECT_EQ(Commands(m),
            (std::vector<std::string>{"gather coal", "gather sand", "gather wool", "gather flax",
                                      "combine iron ore and wool", "combine iron ore and flax",
                                      "combine wool and flax"}));
  EXPECT_EQ(m.items[2].afterstate, "You gather wool. You have: iron ore, 2 wool, flax.");
  EXPECT_EQ(m.items[4].afterstate,
            "Nothing is made: iron ore and wool do not combine. You have: iron ore, wool, flax.");
  EXPECT_EQ(m.items[2].realisations,
            (std::vector<std::string>{"gather wool", "shear wool", "get wool", "collect wool"}));
  EXPECT_EQ(m.items[6].realisations,
            (std::vector<std::string>{"combine wool and flax", "wool and flax", "wool + flax",
                                      "combine flax and wool"}));
}

TEST(Craft, PinnedSeed4) {
  auto s = MakeEnv("craft")->NewState(4);
  EXPECT_EQ(s->Observation(),
            "Goal: make a stick.\n"
            "Recipes: stick = plank + blade; blade = flint + stone; plank = wood + wood; arrow = "
            "stick + blade.\n"
            "You have: 2 wood, clay, flint (at most 2 of each).");
  Menu m = s->CompileMenu();
  // Two wood held: the carry limit removes "gather wood"; two of one item combine.
  EXPECT_EQ(Commands(m),
            (std::vector<std::string>{"gather stone", "gather flint", "combine wood and wood",
                                      "combine wood and clay", "combine wood and flint",
                                      "combine clay and flint"}));
  EXPECT_EQ(m.items[2].afterstate, "You make a plank. You have: clay, flint, plank.");
  EXPECT_EQ(m.items[2].realisations[3], "combine two wood");
}

TEST(Craft, ShortestPlanEarnsTheOptimalReturn) {
  auto s = MakeEnv("craft")->NewState(0);
  auto* oracle = dynamic_cast<OracleState*>(s.get());
  ASSERT_NE(oracle, nullptr);
  // sail = cloth + rope; held: wool, flax. Plan: 2 gathers + 3 crafts.
  EXPECT_NEAR(oracle->OptimalReturn(), 1.0 - 5 * 0.01, 1e-12);
  std::vector<ActionId> best = oracle->OptimalActions();
  Menu m = s->CompileMenu();
  std::set<std::string> best_commands;
  for (ActionId a : best) best_commands.insert(m.items[m.IndexOfAction(a)].command);
  EXPECT_EQ(best_commands, (std::set<std::string>{"gather wool", "gather flax"}));

  double ret = 0;
  for (const char* cmd : {"shear wool", "gather flax", "combine wool and wool", "flax + flax"}) {
    auto out = Do(*s, cmd);
    EXPECT_FALSE(out.terminal) << cmd;
    EXPECT_DOUBLE_EQ(out.reward, -0.01) << cmd;
    ret += out.reward;
  }
  EXPECT_EQ(s->Observation(),
            "Goal: make a sail.\n"
            "Recipes: sail = cloth + rope; glass = sand + coal; rope = flax + flax; cloth = wool + "
            "wool.\n"
            "You have: iron ore, rope, cloth (at most 2 of each).");
  auto out = Do(*s, "combine cloth and rope");
  EXPECT_TRUE(out.terminal);
  EXPECT_TRUE(out.success);
  EXPECT_FALSE(out.truncated);
  ret += out.reward;
  EXPECT_NEAR(ret, 0.95, 1e-12);
  EXPECT_EQ(s->Observation(), "You made a sail. Goal reached.");
  EXPECT_TRUE(s->CompileMenu().items.empty());
}

TEST(Craft, WrongCombinationWastesAStepAndChangesNothing) {
  auto s = MakeEnv("craft")->NewState(0);
  uint64_t h = s->Hash();
  std::string obs = s->Observation();
  auto out = Do(*s, "combine iron ore and wool");
  EXPECT_DOUBLE_EQ(out.reward, -0.01);
  EXPECT_FALSE(out.terminal);
  EXPECT_EQ(s->Hash(), h);
  EXPECT_EQ(s->Observation(), obs);
  EXPECT_EQ(s->StepCount(), 1);
  EXPECT_NEAR(dynamic_cast<OracleState*>(s.get())->OptimalReturn(), 0.95, 1e-12);
}

TEST(Craft, DecoyRecipeIsAWaste) {
  // Seed 0's decoy (glass = sand + coal) is a real recipe that does not help the sail.
  auto s = MakeEnv("craft")->NewState(0);
  Do(*s, "gather sand");
  Do(*s, "gather coal");
  auto* oracle = dynamic_cast<OracleState*>(s.get());
  EXPECT_NEAR(oracle->OptimalReturn(), 0.95, 1e-12);  // plan unchanged: still 5 steps
  auto out = Do(*s, "combine sand and coal");
  EXPECT_FALSE(out.terminal);
  EXPECT_NE(s->Observation().find("You have: iron ore, wool, flax, glass"), std::string::npos)
      << s->Observation();
}

TEST(Craft, CarryLimitBoundsGathering) {
  auto s = MakeEnv("craft")->NewState(0);
  Do(*s, "gather coal");
  Do(*s, "gather coal");
  for (const auto& cmd : Commands(s->CompileMenu())) EXPECT_NE(cmd, "gather coal");
  EXPECT_FALSE(s->Compile("gather coal").valid());
}

TEST(Craft, BudgetAwareOracle) {
  // With the tightest step limit (7 at depth 2), three wasted steps leave 4 < 5.
  auto s = MakeEnv("craft", {"step_limit=7"})->NewState(0);
  auto* oracle = dynamic_cast<OracleState*>(s.get());
  EXPECT_NEAR(oracle->OptimalReturn(), 0.95, 1e-12);
  Do(*s, "combine iron ore and wool");
  EXPECT_NEAR(oracle->OptimalReturn(), 0.95, 1e-12);  // 6 left, plan 5
  Do(*s, "combine iron ore and wool");
  EXPECT_NEAR(oracle->OptimalReturn(), 0.95, 1e-12);  // 5 left, plan 5
  Do(*s, "combine iron ore and wool");
  EXPECT_TRUE(oracle->OptimalActions().empty());
  EXPECT_NEAR(oracle->OptimalReturn(), -0.04, 1e-12);  // truncated after 4 more steps
}

TEST(Craft, FactsAreRecipesAndTriedWrongPairs) {
  auto s = MakeEnv("craft")->NewState(0);
  auto* facts = dynamic_cast<FactSource*>(s.get());
  ASSERT_NE(facts, nullptr);
  EXPECT_EQ(facts->Facts(),
            (std::vector<std::string>{
                "combining cloth and rope makes a sail", "combining sand and coal makes glass",
                "combining flax and flax makes a rope", "combining wool and wool makes cloth"}));
  // A wrong pair, once tried, is a fact too (once, however often it is tried).
  Do(*s, "combine wool and iron ore");
  Do(*s, "iron ore + wool");
  auto after = facts->Facts();
  ASSERT_EQ(after.size(), 5u);
  EXPECT_EQ(after.back(), "iron ore and wool do not combine");
  EXPECT_EQ(dynamic_cast<FactSource*>(s->Clone().get())->Facts(), after);
}

TEST(Craft, OracleMatchesEnumerationOnVisitedStates) {
  // A long step limit keeps the budget out of the comparison; the carry
  // limit keeps the graphs small.
  for (const char* depth : {"depth=1", "depth=2"}) {
    testing::ExpectOracleMatchesEnumeration(*MakeEnv("craft", {depth, "step_limit=60"}), 6, 4,
                                            depth);
  }
}

TEST(Craft, EveryDepthIsSolvableAndMenusFit) {
  for (int depth = 1; depth <= 4; ++depth) {
    auto env =
        MakeEnv("craft", {"depth=" + std::to_string(depth), "distractors=10", "extra_recipes=4"});
    for (uint64_t seed = 0; seed < 40; ++seed) {
      auto s = env->NewState(seed);
      double predicted = dynamic_cast<OracleState*>(s.get())->OptimalReturn();
      EXPECT_LE(predicted, 1.0 - 2 * 0.01 + 1e-12);  // at least two steps
      double ret = 0;
      bool success = false;
      Rng rng(seed);
      while (!s->IsTerminal()) {
        ValidateMenu(s->CompileMenu());  // <= 26 items, distinct realisations
        auto best = dynamic_cast<OracleState*>(s.get())->OptimalActions();
        ASSERT_FALSE(best.empty());
        auto out = s->Apply(best[rng.UniformInt(best.size())]);
        ret += out.reward;
        success |= out.success;
      }
      EXPECT_TRUE(success) << "depth " << depth << " seed " << seed;
      EXPECT_NEAR(ret, predicted, 1e-9) << "depth " << depth << " seed " << seed;
    }
  }
}

TEST(Craft, ConciseTexts) {
  auto env = MakeEnv("craft");
  int max_obs = 0, max_after = 0;
  for (uint64_t seed = 0; seed < 100; ++seed) {
    auto s = env->NewState(seed);
    Rng rng(seed);
    while (!s->IsTerminal()) {
      max_obs = std::max(max_obs, Words(s->Observation()));
      for (const auto& it : s->CompileMenu().items)
        max_after = std::max(max_after, Words(it.afterstate));
      auto legal = s->LegalActions();
      s->Apply(legal[rng.UniformInt(legal.size())]);
    }
  }
  EXPECT_LE(max_obs, 70);
  EXPECT_LE(max_after, 30);
}

TEST(Craft, DistractorsParameter) {
  // Without distractors every offered combination is a recipe.
  auto env = MakeEnv("craft", {"distractors=0"});
  for (uint64_t seed = 0; seed < 20; ++seed) {
    auto s = env->NewState(seed);
    for (const auto& it : s->CompileMenu().items)
      if (it.command.rfind("combine", 0) == 0) {
        EXPECT_EQ(it.afterstate.rfind("You make", 0), 0u) << it.afterstate;
      }
  }
  // Seed 0 holds three distinct items: three wrong pairs exist, all shown.
  auto many = MakeEnv("craft", {"distractors=10"})->NewState(0);
  EXPECT_EQ(many->CompileMenu().size(), 7u);
  auto one = MakeEnv("craft", {"distractors=1"})->NewState(0);
  EXPECT_EQ(one->CompileMenu().size(), 5u);
}

TEST(Craft, ExtraRecipesParameter) {
  auto s = MakeEnv("craft", {"extra_recipes=0"})->NewState(0);
  EXPECT_EQ(s->Observation().find("glass"), std::string::npos) << s->Observation();
  for (const auto& cmd : Commands(s->CompileMenu())) EXPECT_NE(cmd, "gather sand");
}

TEST(Craft, ParamsAreValidated) {
  EXPECT_THROW(MakeEnv("craft", {"depth=0"}), ConfigError);
  EXPECT_THROW(MakeEnv("craft", {"depth=5"}), ConfigError);
  EXPECT_THROW(MakeEnv("craft", {"distractors=-1"}), ConfigError);
  EXPECT_THROW(MakeEnv("craft", {"distractors=11"}), ConfigError);
  EXPECT_THROW(MakeEnv("craft", {"extra_recipes=5"}), ConfigError);
  EXPECT_THROW(MakeEnv("craft", {"step_limit=6"}), ConfigError);  // longest depth-2 plan is 7
  EXPECT_THROW(MakeEnv("craft", {"success_reward=0"}), ConfigError);
  EXPECT_THROW(MakeEnv("craft", {"step_cost=-0.1"}), ConfigError);
  EXPECT_THROW(MakeEnv("craft", {"dept=2"}), ConfigError);
  EXPECT_EQ(MakeEnv("craft")->Info().step_limit, 28);
  EXPECT_EQ(MakeEnv("craft", {"depth=1"})->Info().step_limit, 12);
  EXPECT_EQ(MakeEnv("craft", {"depth=4"})->Info().step_limit, 84);
  EXPECT_EQ(MakeEnv("craft", {"step_limit=7"})->Info().step_limit, 7);
}

TEST(Craft, ZeroStepCostStillSolves) {
  auto s = MakeEnv("craft", {"step_cost=0"})->NewState(1);
  auto* oracle = dynamic_cast<OracleState*>(s.get());
  EXPECT_DOUBLE_EQ(oracle->OptimalReturn(), 1.0);
  EXPECT_EQ(oracle->OptimalActions().size(),
            s->LegalActions().size());  // nothing is lost by waiting
}

}  // namespace
}  // namespace rlid::envs

// arcgrid: pinned grids and hand-checked operation results, the 1-op vs
// 2-op task split, group laws of the geometric operations, dead ends, the
// BFS oracle against brute-force search over action sequences, and
// parameter validation.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <optional>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/rng.h"
#include "envs/api/env.h"
#include "envs/api/menu_state.h"
#include "tests/envs/env_test_util.h"

namespace rlid::envs {
namespace {

StepOutcome Do(State& s, const std::string& text) {
  auto res = s.Compile(text);
  EXPECT_TRUE(res.valid()) << text << ": " << res.reason;
  if (!res.valid()) return {};
  return s.Apply(res.action);
}

OracleState& Oracle(State& s) { return dynamic_cast<OracleState&>(s); }

using testing::Words;

TEST(ArcGrid, PinnedSeed0WithHandCheckedOperations) {
  auto s = MakeEnv("arcgrid")->NewState(0);
  // Golden texts: a change here changes every experiment on arcgrid.
  EXPECT_EQ(s->Observation(),
            "Goal: make the grid equal the target.\nGrid (3x3):\n100\n800\n404\nTarget "
            "(3x3):\n404\n008\n001");
  // Input rows 100 / 800 / 404; each result below was worked out by hand.
  std::vector<std::pair<std::string, std::string>> want = {
      {"rotate clockwise", "481/000/400"},
      {"rotate counterclockwise", "004/000/184"},
      {"flip horizontally", "001/008/404"},
      {"flip vertically", "404/800/100"},
      {"transpose", "184/000/004"},
      {"gravity down", "100/800/404"},
      {"gravity up", "104/800/400"},
      {"gravity left", "100/800/440"},
      {"gravity right", "001/008/044"},
      {"fill background with 1", "111/811/414"},
      {"fill background with 4", "144/844/444"},
      {"fill background with 8", "188/888/484"},
      {"recolour 1 to 4", "400/800/404"},
      {"recolour 1 to 8", "800/800/404"},
      {"recolour 4 to 1", "100/800/101"},
      {"recolour 4 to 8", "100/800/808"},
      {"recolour 8 to 1", "100/100/404"},
      {"recolour 8 to 4", "100/400/404"}};
  Menu m = s->CompileMenu();
  ASSERT_EQ(m.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    EXPECT_EQ(m.items[i].command, want[i].first);
    EXPECT_EQ(m.items[i].afterstate, "Grid becomes 3x3: " + want[i].second) << want[i].first;
  }
  EXPECT_EQ(m.items[5].same_afterstate_as, -1);      // gravity down changes nothing, but the
  EXPECT_EQ(m.items[5].afterstate_hash, s->Hash());  // afterstate is the state itself
  // The target is the input turned by 180 degrees: two flips (or two turns).
  EXPECT_NEAR(Oracle(*s).OptimalReturn(), 0.98, 1e-12);
  std::set<std::string> best;
  for (ActionId a : Oracle(*s).OptimalActions()) best.insert(m.items[m.IndexOfAction(a)].command);
  EXPECT_EQ(best, (std::set<std::string>{"rotate clockwise", "rotate counterclockwise",
                                         "flip horizontally", "flip vertically"}));
  EXPECT_DOUBLE_EQ(Do(*s, "mirror horizontally").reward, -0.01);
  auto out = Do(*s, "I will flip upside down");
  EXPECT_TRUE(out.success);
  EXPECT_NEAR(out.reward, 0.99, 1e-12);
}

TEST(ArcGrid, CropChangesTheShape) {
  auto s = MakeEnv("arcgrid")->NewState(3);
  EXPECT_EQ(
      s->Observation(),
      "Goal: make the grid equal the target.\nGrid (3x3):\n000\n061\n006\nTarget (2x2):\n61\n06");
  Menu m = s->CompileMenu();
  int crop = -1;
  for (size_t i = 0; i < m.size(); ++i)
    if (m.items[i].command == "crop to content") crop = static_cast<int>(i);
  ASSERT_GE(crop, 0);
  EXPECT_EQ(m.items[crop].afterstate, "Grid becomes 2x2: 61/06");
  EXPECT_EQ(Oracle(*s).OptimalActions(), std::vector<ActionId>{m.items[crop].action});
  auto out = Do(*s, "crop");
  EXPECT_TRUE(out.success);
  EXPECT_TRUE(out.terminal);
  EXPECT_NEAR(out.reward, 0.99, 1e-12);
  EXPECT_EQ(s->Observation(),
            "Solved: the grid equals the target.\nGrid (2x2):\n61\n06\nTarget (2x2):\n61\n06");
  // A cropped grid offers no crop; nothing here is offered after the end.
  EXPECT_TRUE(s->CompileMenu().items.empty());
}

TEST(ArcGrid, OneOperationTasksArePreviewable) {
  auto env = MakeEnv("arcgrid", {"min_ops=1", "max_ops=1"});
  for (uint64_t seed = 0; seed < 30; ++seed) {
    auto s = env->NewState(seed);
    EXPECT_NEAR(Oracle(*s).OptimalReturn(), 0.99, 1e-12);
    std::set<ActionId> winners;
    for (const auto& it : s->CompileMenu().items) {
      auto c = s->Clone();
      if (c->Apply(it.action).success) winners.insert(it.action);
    }
    EXPECT_FALSE(winners.empty()) << "seed " << seed;
    auto best = Oracle(*s).OptimalActions();
    EXPECT_EQ(std::set<ActionId>(best.begin(), best.end()), winners) << "seed " << seed;
  }
}

TEST(ArcGrid, FillAndRecolourCanIntroduceTaskColours) {
  auto env = MakeEnv("arcgrid", {"min_ops=1", "max_ops=1"});
  struct Case {
    uint64_t seed;
    const char* observation;
    const char* solution;
  } cases[] = {
      {8,
       "Goal: make the grid equal the target.\nGrid (3x3):\n005\n075\n077\nTarget "
       "(3x3):\n885\n875\n877",
       "fill background with 8"},
      {29,
       "Goal: make the grid equal the target.\nGrid (3x3):\n090\n300\n009\nTarget "
       "(3x3):\n090\n400\n009",
       "recolour 3 to 4"},
  };
  for (const auto& c : cases) {
    auto s = env->NewState(c.seed);
    EXPECT_EQ(s->Observation(), c.observation);
    Menu m = s->CompileMenu();
    auto best = Oracle(*s).OptimalActions();
    ASSERT_EQ(best.size(), 1u) << c.seed;
    EXPECT_EQ(m.items[m.IndexOfAction(best[0])].command, c.solution);
  }
}

TEST(ArcGrid, TwoOperationTasksAreNot) {
  auto env = MakeEnv("arcgrid", {"min_ops=2", "max_ops=2"});
  for (uint64_t seed = 0; seed < 30; ++seed) {
    auto s = env->NewState(seed);
    EXPECT_NEAR(Oracle(*s).OptimalReturn(), 0.98, 1e-12);
    for (const auto& it : s->CompileMenu().items) {
      auto c = s->Clone();
      EXPECT_FALSE(c->Apply(it.action).success) << "seed " << seed << " " << it.command;
    }
  }
}

TEST(ArcGrid, GeometricGroupLaws) {
  // Compose operations on clones and compare state hashes. Sequences that hit
  // the target end the episode early and are skipped.
  auto env = MakeEnv("arcgrid", {"min_ops=3", "max_ops=3"});
  auto run = [](const State& s, const std::vector<std::string>& cmds) -> std::optional<uint64_t> {
    auto c = s.Clone();
    for (const auto& cmd : cmds) {
      auto res = c->Compile(cmd);
      if (!res.valid()) return std::nullopt;
      if (c->Apply(res.action).terminal) return std::nullopt;
    }
    return c->Hash();
  };
  int checked = 0;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    auto s = env->NewState(seed);
    const uint64_t h = s->Hash();
    std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>> laws = {
        {{"rotate cw", "rotate cw", "rotate cw", "rotate cw"}, {}},
        {{"rotate cw", "rotate ccw"}, {}},
        {{"flip horizontal", "flip horizontal"}, {}},
        {{"flip vertical", "flip vertical"}, {}},
        {{"transpose", "transpose"}, {}},
        {{"rotate cw", "rotate cw"}, {"flip horizontal", "flip vertical"}},
        {{"rotate cw"}, {"transpose", "flip horizontal"}},
        {{"rotate ccw"}, {"flip horizontal", "transpose"}},
    };
    for (const auto& [lhs, rhs] : laws) {
      auto a = run(*s, lhs);
      auto b = rhs.empty() ? std::optional<uint64_t>(h) : run(*s, rhs);
      if (!a || !b) continue;
      EXPECT_EQ(*a, *b) << "seed " << seed << " " << lhs[0];
      ++checked;
    }
  }
  EXPECT_GT(checked, 140);
}

TEST(ArcGrid, DeadEndsRunToTheStepLimit) {
  // Seed 0: the target has background cells and no operation creates
  // background, so filling it is unrecoverable.
  auto s = MakeEnv("arcgrid")->NewState(0);
  EXPECT_DOUBLE_EQ(Do(*s, "fill background with 1").reward, -0.01);
  EXPECT_TRUE(Oracle(*s).OptimalActions().empty());
  EXPECT_NEAR(Oracle(*s).OptimalReturn(), -0.07, 1e-12);
  StepOutcome out;
  while (!s->IsTerminal()) out = s->Apply(s->LegalActions()[0]);
  EXPECT_TRUE(out.truncated);
  EXPECT_FALSE(out.success);
  EXPECT_EQ(s->StepCount(), 8);
}

// Whether some action sequence of at most `depth` steps from `s` succeeds.
bool Reaches(const State& s, int depth) {
  for (ActionId a : s.LegalActions()) {
    auto c = s.Clone();
    if (c->Apply(a).success) return true;
    if (depth > 1 && !c->IsTerminal() && Reaches(*c, depth - 1)) return true;
  }
  return false;
}

TEST(ArcGrid, OracleMatchesBruteForceSearch) {
  // Brute force has no dedupe and no dead-end pruning; random play reaches
  // plenty of dead ends (fills, merges, crops) to exercise the pruning.
  constexpr int kDepth = 3;
  int compared = 0, unreachable = 0;
  for (std::vector<std::string> params : std::vector<std::vector<std::string>>{
           {}, {"size=2"}, {"colours=1"}, {"size=4", "colours=2"}}) {
    auto env = MakeEnv("arcgrid", params);
    for (uint64_t seed = 0; seed < 8; ++seed) {
      auto s = env->NewState(seed);
      Rng rng(seed + 50);
      for (int step = 0; step < 4 && !s->IsTerminal(); ++step) {
        std::string where = fmt::format("{} seed {} step {}", fmt::join(params, " "), seed, step);
        int d = -1;
        for (int k = 1; k <= kDepth && d < 0; ++k)
          if (Reaches(*s, k)) d = k;
        double ret = Oracle(*s).OptimalReturn();
        if (d > 0) {
          EXPECT_NEAR(ret, 1.0 - 0.01 * d, 1e-12) << where;
          std::set<ActionId> first;
          for (ActionId a : s->LegalActions()) {
            auto c = s->Clone();
            if (c->Apply(a).success || (d > 1 && !c->IsTerminal() && Reaches(*c, d - 1)))
              first.insert(a);
          }
          auto best = Oracle(*s).OptimalActions();
          EXPECT_EQ(std::set<ActionId>(best.begin(), best.end()), first) << where;
          ++compared;
        } else {
          EXPECT_LT(ret, 1.0 - 0.01 * kDepth) << where;
          ++unreachable;
        }
        auto legal = s->LegalActions();
        s->Apply(legal[rng.UniformInt(legal.size())]);
      }
    }
  }
  EXPECT_GE(compared, 40);
  EXPECT_GE(unreachable, 20);
}

TEST(ArcGrid, SizesColoursAndOpsCounts) {
  for (std::vector<std::string> params :
       std::vector<std::vector<std::string>>{{"size=2", "colours=1"},
                                             {"size=4", "colours=4"},
                                             {"size=6", "colours=4", "max_ops=3"},
                                             {"colours=2", "min_ops=3", "max_ops=3"},
                                             {"min_ops=4", "max_ops=4"}}) {
    auto env = MakeEnv("arcgrid", params);
    for (uint64_t seed = 0; seed < 12; ++seed) {
      auto s = env->NewState(seed);
      double predicted = Oracle(*s).OptimalReturn();
      double ret = 0;
      bool success = false;
      while (!s->IsTerminal()) {
        ValidateMenu(s->CompileMenu());  // <= 26 items, distinct realisations
        auto best = Oracle(*s).OptimalActions();
        ASSERT_FALSE(best.empty()) << params[0] << " seed " << seed;
        auto out = s->Apply(best.back());
        ret += out.reward;
        success |= out.success;
      }
      EXPECT_TRUE(success);
      EXPECT_NEAR(ret, predicted, 1e-9) << params[0] << " seed " << seed;
    }
  }
}

TEST(ArcGrid, OpsParameterRestrictsTheMenu) {
  auto env = MakeEnv("arcgrid", {"ops=[\"rotate\", \"recolour\"]"});
  for (uint64_t seed = 0; seed < 10; ++seed) {
    auto s = env->NewState(seed);
    for (const auto& it : s->CompileMenu().items)
      EXPECT_TRUE(it.command.rfind("rotate", 0) == 0 || it.command.rfind("recolour", 0) == 0)
          << it.command;
  }
}

TEST(ArcGrid, ConciseTexts) {
  for (const char* size : {"size=3", "size=6"}) {
    auto env = MakeEnv("arcgrid", {size});
    int max_obs = 0, max_after = 0;
    for (uint64_t seed = 0; seed < 50; ++seed) {
      auto s = env->NewState(seed);
      max_obs = std::max(max_obs, Words(s->Observation()));
      for (const auto& it : s->CompileMenu().items)
        max_after = std::max(max_after, Words(it.afterstate));
    }
    if (std::string(size) == "size=3") {
      EXPECT_LE(max_obs, 30);
    }
    EXPECT_LE(max_after, 5);
  }
}

TEST(ArcGrid, ParamsAreValidated) {
  EXPECT_THROW(MakeEnv("arcgrid", {"size=1"}), ConfigError);
  EXPECT_THROW(MakeEnv("arcgrid", {"size=7"}), ConfigError);
  EXPECT_THROW(MakeEnv("arcgrid", {"colours=0"}), ConfigError);
  EXPECT_THROW(MakeEnv("arcgrid", {"colours=5"}), ConfigError);
  EXPECT_THROW(MakeEnv("arcgrid", {"min_ops=3"}), ConfigError);  // above max_ops = 2
  EXPECT_THROW(MakeEnv("arcgrid", {"max_ops=5"}), ConfigError);
  EXPECT_THROW(MakeEnv("arcgrid", {"step_limit=1"}), ConfigError);
  EXPECT_THROW(MakeEnv("arcgrid", {"ops=[\"spin\"]"}), ConfigError);
  EXPECT_THROW(MakeEnv("arcgrid", {"ops=[]"}), ConfigError);
  EXPECT_THROW(MakeEnv("arcgrid", {"success_reward=-1"}), ConfigError);
  EXPECT_THROW(MakeEnv("arcgrid", {"step_cost=nan"}), ConfigError);
  EXPECT_THROW(MakeEnv("arcgrid", {"sizes=3"}), ConfigError);
  EXPECT_THROW(MakeEnv("arcgrid", {"ops=[\"crop\", \"fill\"]"}),
               ConfigError);  // a filled grid has no move
  // Transposing twice is the identity: no task needs two transposes.
  EXPECT_THROW(MakeEnv("arcgrid", {"ops=[\"transpose\"]", "min_ops=2"}), ConfigError);
  EXPECT_EQ(MakeEnv("arcgrid")->Info().step_limit, 8);
  EXPECT_EQ(MakeEnv("arcgrid", {"max_ops=3"})->Info().step_limit, 12);
}

TEST(ArcGrid, ZeroStepCostKeepsEveryRecoverableAction) {
  auto s = MakeEnv("arcgrid", {"step_cost=0"})->NewState(0);
  EXPECT_DOUBLE_EQ(Oracle(*s).OptimalReturn(), 1.0);
  Menu m = s->CompileMenu();
  std::set<std::string> best;
  for (ActionId a : Oracle(*s).OptimalActions()) best.insert(m.items[m.IndexOfAction(a)].command);
  // Fills lose the background for good; every other action can be undone in time.
  EXPECT_EQ(best.count("fill background with 1"), 0u);
  EXPECT_EQ(best.count("rotate clockwise"), 1u);
  EXPECT_EQ(best.count("gravity down"), 1u);
}

}  // namespace
}  // namespace rlid::envs

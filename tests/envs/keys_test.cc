// keys: pinned texts, a scripted walkthrough of every action kind (locked
// doors, keys used up, containers hiding their contents, take/drop/put, goal),
// partial observability of facts, the generator's guarantees (solvable within
// the step limit, locks that matter), the oracle against exhaustive
// enumeration, menu-size bounds, and parameter validation.
#include <gtest/gtest.h>

#include <iterator>
#include <sstream>

#include "core/error.h"
#include "core/rng.h"
#include "core/strings.h"
#include "envs/api/env.h"
#include "envs/api/menu_state.h"
#include "envs/api/state_graph.h"
#include "tests/envs/env_test_util.h"

namespace rlid::envs {
namespace {

std::vector<std::string> Commands(const State& s) {
  std::vector<std::string> out;
  for (const auto& it : s.CompileMenu().items) out.push_back(it.command);
  return out;
}

// Applies the action `text` compiles to; fails the test if it is not on the menu.
StepOutcome Do(State& s, const std::string& text) {
  auto res = s.Compile(text);
  EXPECT_TRUE(res.valid()) << "'" << text << "': " << res.reason << "\n" << s.Observation();
  if (!res.valid()) return {};
  return s.Apply(res.action);
}

// "kitchen" from "... You are in the kitchen. ...".
std::string RoomOf(const std::string& obs) {
  const std::string marker = "You are in the ";
  size_t at = obs.find(marker);
  EXPECT_NE(at, std::string::npos) << obs;
  if (at == std::string::npos) return "";
  at += marker.size();
  return obs.substr(at, obs.find('.', at) - at);
}

TEST(Keys, PinnedObservationAndMenu) {
  // Golden texts: a change here changes every experiment on keys.
  auto env = MakeEnv("keys");
  auto s = env->NewState(3);
  EXPECT_EQ(s->Observation(),
            "Goal: put the mug on the bathroom shelf.\n"
            "You are in the pantry. The counter is empty. On the floor: the blue key.\n"
            "Doors lead to the bathroom (blue door, locked).\n"
            "You carry nothing.");
  Menu m = s->CompileMenu();
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m.items[0].command, "take the blue key");
  EXPECT_EQ(m.items[0].afterstate, "You carry the blue key.");
  EXPECT_EQ(m.items[0].realisations,
            (std::vector<std::string>{"take the blue key", "take blue key", "pick up the blue key",
                                      "get the blue key", "grab the blue key"}));

  auto s1 = env->NewState(1);
  EXPECT_EQ(s1->Observation(),
            "Goal: put the clock on the kitchen table.\n"
            "You are in the kitchen. The table is empty.\n"
            "Doors lead to the cellar, the hallway (blue door, locked) and the pantry.\n"
            "You carry nothing.");
  EXPECT_EQ(Commands(*s1), (std::vector<std::string>{"go to the cellar", "go to the pantry"}));
  EXPECT_EQ(dynamic_cast<FactSource*>(s1.get())->Facts(),
            (std::vector<std::string>{"a door joins the kitchen and the cellar",
                                      "a locked blue door joins the kitchen and the hallway",
                                      "a door joins the kitchen and the pantry"}));
}

// Seed 3: the blue key opens the pantry's only door; the mug is on the attic
// stool; the goal is the bathroom shelf. Detours exercise every action kind.
TEST(Keys, WalkthroughOfEveryActionKind) {
  auto s = MakeEnv("keys")->NewState(3);
  EXPECT_FALSE(s->Compile("go to the bathroom").valid());  // locked
  double ret = 0;
  auto step = [&](const std::string& text) {
    auto out = Do(*s, text);
    ret += out.reward;
    return out;
  };
  EXPECT_DOUBLE_EQ(step("take the blue key").reward, -0.01);
  EXPECT_EQ(Commands(*s), (std::vector<std::string>{"unlock the blue door", "drop the blue key",
                                                    "put the blue key on the counter"}));
  step("use the blue key");  // an alias of unlock
  // The key stays in the lock: carried nothing, and no key actions remain.
  EXPECT_EQ(s->Observation(),
            "Goal: put the mug on the bathroom shelf.\n"
            "You are in the pantry. The counter is empty.\n"
            "Doors lead to the bathroom.\n"
            "You carry nothing.");
  EXPECT_EQ(Commands(*s), (std::vector<std::string>{"go to the bathroom"}));
  step("go to the bathroom");
  step("attic");
  EXPECT_EQ(s->Observation(),
            "Goal: put the mug on the bathroom shelf.\n"
            "You are in the attic. On the stool: the mug. The trunk is closed.\n"
            "Doors lead to the bathroom and the kitchen.\n"
            "You carry nothing.");
  step("open the trunk");
  EXPECT_NE(s->Observation().find("The trunk is open and empty."), std::string::npos);
  step("pick up the mug");
  auto menu = s->CompileMenu();
  int put_in = menu.IndexOfAction(s->Compile("put the mug in the trunk").action);
  ASSERT_GE(put_in, 0);
  EXPECT_EQ(menu.items[put_in].afterstate, "The mug is in the attic trunk. You carry nothing.");
  auto out = step("put the mug in the trunk");
  EXPECT_FALSE(out.success);
  EXPECT_NE(s->Observation().find("The trunk is open: the mug."), std::string::npos);
  step("take the mug");
  step("go to the bathroom");
  out = step("drop the mug");  // the bathroom floor is not the shelf
  EXPECT_FALSE(out.success);
  EXPECT_NE(s->Observation().find("On the floor: the mug."), std::string::npos);
  step("take the mug");
  menu = s->CompileMenu();
  int put_on = menu.IndexOfAction(s->Compile("put the mug on the shelf").action);
  ASSERT_GE(put_on, 0);
  EXPECT_EQ(menu.items[put_on].afterstate, "The mug is on the bathroom shelf: goal reached.");
  out = step("put the mug on the bathroom shelf");
  EXPECT_TRUE(out.success);
  EXPECT_TRUE(out.terminal);
  EXPECT_DOUBLE_EQ(out.reward, 0.99);
  EXPECT_EQ(s->StepCount(),
            12);  // take, unlock, 2 moves, open, take, put, take, move, drop, take, put
  EXPECT_NEAR(ret, 1.0 - 12 * 0.01, 1e-12);
  EXPECT_EQ(s->Observation(), "Done: the mug is on the bathroom shelf.");
}

// Seed 2: the green key lies in the closed hallway cabinet.
TEST(Keys, ClosedContainersHideTheirContents) {
  auto s = MakeEnv("keys")->NewState(2);
  auto* facts = dynamic_cast<FactSource*>(s.get());
  EXPECT_EQ(s->Observation().find("green key"), std::string::npos);
  EXPECT_FALSE(s->Compile("take the green key").valid());
  auto before = facts->Facts();
  EXPECT_NE(std::find(before.begin(), before.end(), "there is a closed cabinet in the hallway"),
            before.end());
  Menu m = s->CompileMenu();
  int open = m.IndexOfAction(s->Compile("open the cabinet").action);
  ASSERT_GE(open, 0);
  EXPECT_EQ(m.items[open].afterstate, "The cabinet is open. You carry nothing.");  // no peeking
  Do(*s, "open the cabinet");
  EXPECT_NE(s->Observation().find("The cabinet is open: the green key."), std::string::npos);
  auto after = facts->Facts();
  EXPECT_NE(std::find(after.begin(), after.end(), "the green key is in the hallway cabinet"),
            after.end());
  Do(*s, "take the green key");
  Do(*s, "unlock the green door");
  EXPECT_TRUE(s->Compile("go to the pantry").valid());
}

// Facts describe what the current room shows, nothing elsewhere; the
// observation stays short.
TEST(Keys, FactsAndObservationStayInTheCurrentRoom) {
  auto env = MakeEnv("keys");
  size_t max_words = 0;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    auto s = env->NewState(seed);
    Rng rng(seed);
    while (!s->IsTerminal()) {
      const std::string obs = s->Observation();
      const std::string room = RoomOf(obs);
      for (const auto& f : dynamic_cast<FactSource*>(s.get())->Facts())
        EXPECT_NE(f.find("the " + room), std::string::npos) << f << " seen in the " << room;
      std::istringstream words(obs);
      max_words =
          std::max<size_t>(max_words, std::distance(std::istream_iterator<std::string>(words),
                                                    std::istream_iterator<std::string>()));
      auto legal = s->LegalActions();
      s->Apply(legal[rng.UniformInt(legal.size())]);
    }
  }
  EXPECT_LE(max_words, 70u);
}

TEST(Keys, EveryInstanceNeedsAKeyAndFitsTheStepLimit) {
  auto env = MakeEnv("keys");
  for (uint64_t seed = 0; seed < 200; ++seed) {
    auto s = env->NewState(seed);
    auto* o = dynamic_cast<OracleState*>(s.get());
    EXPECT_GT(o->OptimalReturn(), 1.0 - 0.01 * (env->Info().step_limit / 3) - 1e-9) << seed;
    bool unlocked = false;
    while (!s->IsTerminal()) {
      auto best = dynamic_cast<OracleState*>(s.get())->OptimalActions();
      ASSERT_FALSE(best.empty());
      unlocked |= best[0] >= 100 && best[0] < 200;  // every optimal path unlocks: follow one
      s->Apply(best[0]);
    }
    EXPECT_TRUE(unlocked) << "seed " << seed << ": the lock does not matter";
  }
  // A tight limit regenerates instances that fit it; an impossible one is a ConfigError.
  auto tight = MakeEnv("keys", {"step_limit=8"});
  for (uint64_t seed = 0; seed < 40; ++seed)
    EXPECT_GE(dynamic_cast<OracleState*>(tight->NewState(seed).get())->OptimalReturn(),
              1.0 - 0.08 - 1e-9);
  EXPECT_THROW(MakeEnv("keys", {"step_limit=2"})->NewState(0), ConfigError);
}

TEST(Keys, OracleMatchesExhaustiveEnumeration) {
  for (auto params :
       {std::vector<std::string>{}, std::vector<std::string>{"rooms=5", "locked_doors=2"},
        std::vector<std::string>{"locked_doors=0", "containers=3"}}) {
    testing::ExpectOracleMatchesEnumeration(*MakeEnv("keys", params), 4, 6,
                                            "keys " + Join(params, " "));
  }
}

TEST(Keys, LargeInstancesKeepValidMenus) {
  auto env = MakeEnv("keys", {"rooms=6", "locked_doors=2", "containers=3", "extra_doors=3"});
  size_t largest = 0;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    auto s = env->NewState(seed);
    Rng rng(seed);
    while (!s->IsTerminal()) {
      Menu m = s->CompileMenu();
      ValidateMenu(m);
      largest = std::max(largest, m.size());
      auto legal = s->LegalActions();
      s->Apply(legal[rng.UniformInt(legal.size())]);
    }
  }
  EXPECT_LE(largest, 23u);  // 5 doors + 3 containers + 3 items x (2 + 3)
}

TEST(Keys, ParamsAreValidated) {
  for (const char* bad : {"rooms=1", "rooms=11", "extra_doors=-1", "locked_doors=7", "containers=9",
                          "step_limit=0", "step_cost=-0.1", "success_reward=0", "room=4"})
    EXPECT_THROW(MakeEnv("keys", {bad}), ConfigError) << bad;
  // 3 rooms have 3 possible doors: a tree of 2 plus at most 1 more.
  EXPECT_THROW(MakeEnv("keys", {"rooms=3", "extra_doors=2"}), ConfigError);
  // Every door locked: the start room is sealed until its key is used.
  auto sealed = MakeEnv("keys", {"rooms=3", "extra_doors=1", "locked_doors=3"})->NewState(0);
  EXPECT_GT(dynamic_cast<OracleState*>(sealed.get())->OptimalReturn(), 0.0);
  EXPECT_THROW(MakeEnv("keys", {"rooms=3", "extra_doors=1", "locked_doors=4"}), ConfigError);
  // Up to 9 + 3 + 4 x 5 = 32 actions could be on one menu: more than 26.
  EXPECT_THROW(MakeEnv("keys", {"rooms=10", "locked_doors=3", "containers=3"}), ConfigError);
  auto two = MakeEnv("keys", {"rooms=2"})->NewState(5);  // extra_doors defaults to 0 there
  EXPECT_GT(dynamic_cast<OracleState*>(two.get())->OptimalReturn(), 0.0);
  EXPECT_EQ(MakeEnv("keys")->Info().step_limit, 40);
}

}  // namespace
}  // namespace rlid::envs

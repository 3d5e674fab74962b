// household: pinned texts, scripted walkthroughs, the preconditions every
// menu must respect (nothing to put with empty hands, closed receptacles hide
// their contents, appliances only where they stand), object state changes,
// the split partition (test seeds use held-out pairs, train seeds never do),
// the oracle against exhaustive enumeration, menu-size bounds, and parameter
// validation.
#include "envs/builtin/household.h"

#include <gtest/gtest.h>

#include <map>
#include <set>
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

// The command of the first optimal action.
std::string OracleCommand(const State& s) {
  auto best = dynamic_cast<const OracleState&>(s).OptimalActions();
  EXPECT_FALSE(best.empty()) << s.Observation();
  if (best.empty()) return "";
  Menu m = s.CompileMenu();
  return m.items[m.IndexOfAction(best[0])].command;
}

bool Has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The observation without its first line (the goal).
std::string Scene(const State& s) {
  const std::string obs = s.Observation();
  return obs.substr(obs.find('\n') + 1);
}

// The first seed >= from whose task is of `family`.
uint64_t SeedOf(const Env& env, const std::string& family, uint64_t from = 0) {
  for (uint64_t seed = from; seed < from + 1000; ++seed)
    if (household::TaskOf(*env.NewState(seed)).family == family) return seed;
  ADD_FAILURE() << "no " << family << " seed";
  return 0;
}

// "the kitchen" from "You are at the fridge in the kitchen." or "You are in the kitchen.".
std::string RoomOf(const std::string& obs) {
  size_t at = obs.find("You are ");
  EXPECT_NE(at, std::string::npos) << obs;
  if (at == std::string::npos) return "";
  size_t in = obs.find(" in the ", at);
  size_t start = in + 8;
  return obs.substr(start, obs.find('.', start) - start);
}

TEST(Household, PinnedObservationAndMenu) {
  // Golden texts: a change here changes every experiment on household.
  auto env = MakeEnv("household");
  auto s = env->NewState(2);
  EXPECT_EQ(s->Observation(),
            "Goal: put a clean kettle on the stove burner.\n"
            "You are in the bathroom. You see a towel holder, a toilet and a vanity.\n"
            "Other rooms: the kitchen.\n"
            "You hold nothing.");
  EXPECT_EQ(Commands(*s), (std::vector<std::string>{"go to the towel holder", "go to the toilet",
                                                    "go to the vanity", "go to the kitchen"}));
  Menu m = s->CompileMenu();
  EXPECT_EQ(m.items[0].afterstate,
            "You are at the towel holder in the bathroom. You hold nothing.");
  EXPECT_EQ(m.items[3].realisations,
            (std::vector<std::string>{"go to the kitchen", "kitchen", "go to kitchen",
                                      "enter the kitchen", "walk to the kitchen"}));
  EXPECT_EQ(dynamic_cast<FactSource*>(s.get())->Facts(),
            (std::vector<std::string>{"there is a towel holder in the bathroom",
                                      "there is a toilet in the bathroom",
                                      "there is a vanity in the bathroom"}));
  auto t = household::TaskOf(*s);
  EXPECT_EQ(t.family, "clean");
  EXPECT_EQ(t.object, "kettle");
  EXPECT_EQ(t.receptacle, "stove burner");
  EXPECT_FALSE(t.held_out_pair);  // seed 2 is a train seed

  Do(*s, "go to the kitchen");
  Do(*s, "go to the cabinet");
  EXPECT_EQ(s->Observation(),
            "Goal: put a clean kettle on the stove burner.\n"
            "You are at the cabinet in the kitchen. The cabinet is closed.\n"
            "You hold nothing.");
  EXPECT_EQ(Commands(*s),
            (std::vector<std::string>{"go to the sink basin", "go to the stove burner",
                                      "go to the bathroom", "open the cabinet"}));
  Do(*s, "open the cabinet");
  EXPECT_EQ(Scene(*s),
            "You are at the cabinet in the kitchen. The cabinet is open. In it: a dirty kettle.\n"
            "You hold nothing.");
  m = s->CompileMenu();
  EXPECT_EQ(m.items[4].command, "take the kettle from the cabinet");
  EXPECT_EQ(m.items[4].realisations,
            (std::vector<std::string>{"take the kettle from the cabinet", "take the kettle",
                                      "take kettle", "pick up the kettle", "grab the kettle",
                                      "take the dirty kettle"}));
  EXPECT_EQ(m.items[4].afterstate, "You hold the dirty kettle.");
  EXPECT_EQ(dynamic_cast<FactSource*>(s.get())->Facts(),
            (std::vector<std::string>{"the dirty kettle is in the cabinet in the kitchen"}));
}

// Seed 2 again, with detours: a dirty kettle on the stove burner is not the
// goal; cleaning it at the sink basin is.
TEST(Household, WalkthroughOfACleanTask) {
  auto s = MakeEnv("household")->NewState(2);
  double ret = 0;
  auto step = [&](const std::string& text) {
    auto out = Do(*s, text);
    ret += out.reward;
    return out;
  };
  EXPECT_FALSE(s->Compile("take the kettle").valid());  // not here, and not seen
  step("kitchen");
  step("walk to the cabinet");
  EXPECT_FALSE(s->Compile("take the kettle").valid());  // closed
  step("look in the cabinet");
  EXPECT_DOUBLE_EQ(step("pick up the kettle").reward, -0.01);
  EXPECT_FALSE(s->Compile("take the kettle").valid());  // one hand
  step("go to the stove burner");
  auto out = step("put the kettle on the stove burner");
  EXPECT_FALSE(out.success);
  EXPECT_EQ(Scene(*s),
            "You are at the stove burner in the kitchen. On the stove burner: a dirty kettle.\n"
            "You hold nothing.");
  step("take the dirty kettle");
  step("go to the sink basin");
  EXPECT_EQ(Scene(*s),
            "You are at the sink basin in the kitchen. In the sink basin: a dirty plate.\n"
            "You hold a dirty kettle.");
  Menu m = s->CompileMenu();
  const auto& clean = m.items[m.IndexOfAction(s->Compile("wash the kettle").action)];
  EXPECT_EQ(clean.command, "clean the kettle with the sink basin");
  EXPECT_EQ(clean.afterstate, "You clean the kettle. You hold the kettle.");
  step("wash the kettle");
  EXPECT_TRUE(Has(Scene(*s), "You hold a kettle."));
  EXPECT_FALSE(s->Compile("clean the kettle").valid());  // already clean
  step("go to the stove burner");
  m = s->CompileMenu();
  EXPECT_EQ(m.items[m.IndexOfAction(s->Compile("put down the kettle").action)].afterstate,
            "The clean kettle is on the stove burner: goal reached.");
  out = step("place the kettle on the stove burner");
  EXPECT_TRUE(out.success);
  EXPECT_TRUE(out.terminal);
  EXPECT_DOUBLE_EQ(out.reward, 0.99);
  EXPECT_EQ(s->StepCount(), 11);
  EXPECT_NEAR(ret, 1.0 - 11 * 0.01, 1e-12);
  EXPECT_EQ(s->Observation(), "Done: the clean kettle is on the stove burner.");
}

// Random play over many instances: every menu respects the preconditions the
// observation implies.
TEST(Household, PreconditionsHoldOnEveryMenu) {
  for (auto params : {std::vector<std::string>{}, std::vector<std::string>{"distractors=4"},
                      std::vector<std::string>{"rooms=3", "receptacles=5", "distractors=3"},
                      std::vector<std::string>{"tasks=[\"slice\"]", "distractors=3"}}) {
    auto env = MakeEnv("household", params);
    int holding_steps = 0, closed_steps = 0, appliance_steps = 0;
    for (uint64_t seed = 0; seed < 40; ++seed) {
      auto s = env->NewState(seed);
      Rng rng(seed);
      while (!s->IsTerminal()) {
        const std::string obs = s->Observation();
        const bool empty_hands = Has(obs, "You hold nothing.");
        const bool entrance = !Has(obs, "You are at the ");
        const bool closed = Has(obs, " is closed.");
        holding_steps += !empty_hands;
        closed_steps += closed;
        for (const std::string& c : Commands(*s)) {
          SCOPED_TRACE(c + "\n" + obs);
          const std::string verb = c.substr(0, c.find(' '));
          if (entrance) EXPECT_EQ(verb, "go");
          if (empty_hands) {
            for (const char* v : {"put", "heat", "cool", "clean", "slice"}) EXPECT_NE(verb, v);
          } else {
            EXPECT_NE(verb, "take");
          }
          if (closed) {
            EXPECT_NE(verb, "take");
            EXPECT_NE(verb, "put");
          }
          if (verb == "take") {  // only what the observation shows here
            const std::string object = c.substr(9, c.find(" from the ") - 9);
            EXPECT_TRUE(Has(obs, " " + object + ".") || Has(obs, " " + object + ",") ||
                        Has(obs, " " + object + " and"));
          }
          if (verb == "heat" || verb == "cool" || verb == "clean") {
            ++appliance_steps;
            const std::string with = c.substr(c.find(" with the ") + 10);
            EXPECT_TRUE(Has(obs, "You are at the " + with + " in the "));
            if (verb == "heat") EXPECT_TRUE(with == "microwave" || with == "stove burner");
            if (verb == "cool") EXPECT_EQ(with, "fridge");
            if (verb == "clean") EXPECT_EQ(with, "sink basin");
          }
          if (verb == "slice") EXPECT_TRUE(Has(obs, "You hold a knife."));
          if (verb == "open") EXPECT_TRUE(closed);
          if (verb == "close") EXPECT_TRUE(Has(obs, " is open"));
          if (c == "turn on the desk lamp") EXPECT_TRUE(Has(obs, "The desk lamp is off."));
          if (c == "turn off the desk lamp") EXPECT_TRUE(Has(obs, "The desk lamp is on."));
        }
        auto legal = s->LegalActions();
        s->Apply(legal[rng.UniformInt(legal.size())]);
      }
    }
    EXPECT_GT(holding_steps, 100);
    EXPECT_GT(closed_steps, 20);
    EXPECT_GT(appliance_steps, 10);
  }
}

// Following the oracle: whenever it opens a receptacle, what is inside was not
// shown (nor takeable, nor named by the afterstate) before, and is after.
TEST(Household, ClosedReceptaclesHideTheirContents) {
  auto env = MakeEnv("household");
  int checked = 0;
  for (uint64_t seed = 0; seed < 60; ++seed) {
    auto s = env->NewState(seed);
    const std::string object = household::TaskOf(*s).object;
    auto* facts = dynamic_cast<FactSource*>(s.get());
    while (!s->IsTerminal()) {
      const std::string cmd = OracleCommand(*s);
      if (StartsWith(cmd, "open the ") && !Has(s->Observation(), "You hold a")) {
        const std::string rec = cmd.substr(9);
        EXPECT_FALSE(Has(Scene(*s), object)) << s->Observation();
        EXPECT_FALSE(s->Compile("take the " + object).valid());
        for (const auto& f : facts->Facts()) EXPECT_FALSE(Has(f, object)) << f;
        Menu m = s->CompileMenu();
        const auto& item = m.items[m.IndexOfAction(s->Compile(cmd).action)];
        EXPECT_EQ(item.afterstate, "The " + rec + " is open. You hold nothing.");
        Do(*s, cmd);
        if (Has(Scene(*s), object)) {  // it was in there
          EXPECT_TRUE(Has(s->Observation(), "The " + rec + " is open. In it: "))
              << s->Observation();
          EXPECT_TRUE(s->Compile("take the " + object).valid());
          bool fact = false;
          for (const auto& f : facts->Facts()) fact = fact || Has(f, object);
          EXPECT_TRUE(fact);
          ++checked;
        }
        continue;
      }
      Do(*s, cmd);
    }
  }
  EXPECT_GE(checked, 10);
}

// The appliances change the held object's state, and the observation says so.
TEST(Household, AppliancesChangeObjectStates) {
  auto env = MakeEnv("household");
  struct Case {
    std::string family, verb, before, after;
  };
  for (const Case& c : {Case{"heat", "heat", "You hold a", "You hold a hot "},
                        Case{"cool", "cool", "You hold a", "You hold a cold "},
                        Case{"clean", "clean", "You hold a dirty ", "You hold a"},
                        Case{"slice", "slice", "You hold a knife.", "sliced "}}) {
    SCOPED_TRACE(c.family);
    for (uint64_t from : {0, 200, 400}) {
      const uint64_t seed = SeedOf(*env, c.family, from);
      auto s = env->NewState(seed);
      const std::string object = household::TaskOf(*s).object;
      bool used = false;
      while (!s->IsTerminal()) {
        const std::string cmd = OracleCommand(*s);
        if (StartsWith(cmd, c.verb + " ")) {
          EXPECT_TRUE(Has(s->Observation(), c.before)) << s->Observation();
          if (c.verb == "clean") EXPECT_TRUE(Has(s->Observation(), "dirty " + object));
          Do(*s, cmd);
          used = true;
          const std::string scene = Scene(*s);
          if (c.verb == "slice") {
            EXPECT_TRUE(Has(scene, "sliced " + object)) << scene;
          } else {
            EXPECT_TRUE(Has(scene, c.after)) << scene;
            EXPECT_TRUE(Has(scene, " " + object + ".\n") || Has(scene, " " + object + "."))
                << scene;
          }
          if (c.verb == "clean") EXPECT_FALSE(Has(scene, "You hold a dirty")) << scene;
          // The action is gone: nothing left to change.
          for (const auto& cc : Commands(*s))
            EXPECT_FALSE(StartsWith(cc, c.verb + " the " + object));
          continue;
        }
        Do(*s, cmd);
      }
      EXPECT_TRUE(used) << c.family << " seed " << seed;
      EXPECT_TRUE(Has(s->Observation(), "Done: the ")) << s->Observation();
    }
  }
}

// Heat then cool: the object ends cold, not hot; cool then heat: hot.
TEST(Household, CoolingUndoesHeating) {
  auto env = MakeEnv("household", {"tasks=[\"heat\"]", "rooms=1", "receptacles=6"});
  int checked = 0;
  for (uint64_t seed = 0; seed < 40 && checked < 3; ++seed) {
    auto s = env->NewState(seed);
    const std::string obs = s->Observation();
    if (!Has(obs, "a fridge") || !Has(obs, "a microwave")) continue;
    const std::string object = household::TaskOf(*s).object;
    while (!Has(s->Observation(), "You hold a")) Do(*s, OracleCommand(*s));
    Do(*s, "go to the microwave");
    Do(*s, "heat the " + object + " with the microwave");
    EXPECT_TRUE(Has(Scene(*s), "You hold a hot ")) << Scene(*s);
    Do(*s, "go to the fridge");
    Do(*s, "cool the " + object);
    EXPECT_TRUE(Has(Scene(*s), "You hold a cold ")) << Scene(*s);
    EXPECT_FALSE(Has(Scene(*s), "hot")) << Scene(*s);
    Do(*s, "go to the microwave");
    Do(*s, "warm the " + object);
    EXPECT_TRUE(Has(Scene(*s), "You hold a hot ")) << Scene(*s);
    // Heating a hot object is not on the menu.
    EXPECT_FALSE(s->Compile("heat the " + object).valid());
    ++checked;
  }
  EXPECT_EQ(checked, 3);
}

// A light task: the lamp must be on, at its receptacle, with the object in hand.
TEST(Household, LookingUnderTheLampNeedsAllThree) {
  auto env = MakeEnv("household");
  const uint64_t seed = SeedOf(*env, "light");
  auto s = env->NewState(seed);
  const auto task = household::TaskOf(*s);
  // Walk the oracle's way to the object, take it, and keep it.
  while (!Has(s->Observation(), "You hold a")) Do(*s, OracleCommand(*s));
  // Go to the lamp's room (if it is another one), then to its receptacle.
  const std::string lamp_rec = task.receptacle;
  if (!s->Compile("go to the " + lamp_rec).valid())
    for (const std::string room : {"living room", "bedroom"}) {
      if (!s->Compile("go to the " + room).valid()) continue;
      auto there = s->Clone();
      Do(*there, "go to the " + room);
      if (there->Compile("go to the " + lamp_rec).valid()) {
        Do(*s, "go to the " + room);
        break;
      }
    }
  Do(*s, "go to the " + lamp_rec);
  EXPECT_TRUE(Has(s->Observation(), "The desk lamp is off."));
  Do(*s, "put the " + task.object + " on the " + lamp_rec);  // not holding: no success
  auto out = Do(*s, "turn on the desk lamp");
  EXPECT_FALSE(out.success);
  EXPECT_TRUE(Has(s->Observation(), "The desk lamp is on."));
  out = Do(*s, "take the " + task.object);
  EXPECT_TRUE(out.success);
  EXPECT_EQ(s->Observation(), "Done: you look at the " + task.object + " under the desk lamp.");
}

TEST(Household, SplitUsesUnseenPairs) {
  // The partition is fixed: about a fifth of the pairs are held out.
  const auto all = household::AllObjectReceptacle();
  const auto held = household::HeldOutObjectReceptacle();
  const double share = static_cast<double>(held.size()) / all.size();
  EXPECT_GT(share, 0.18);
  EXPECT_LT(share, 0.3);
  for (const auto& p : held) EXPECT_TRUE(std::binary_search(all.begin(), all.end(), p));
  // Golden: a change here changes what "unseen" means in every experiment.
  EXPECT_TRUE(std::binary_search(
      held.begin(), held.end(), std::make_pair(std::string("mug"), std::string("coffee machine"))));
  EXPECT_EQ(held.size(), 58u);
  EXPECT_EQ(household::HeldOutFamilyObject().size(), 20u);

  for (int rooms = 1; rooms <= 4; ++rooms) {
    auto env = MakeEnv("household", {fmt::format("rooms={}", rooms)});
    const uint64_t seeds = rooms == 2 ? 2000 : 400;
    std::set<std::pair<std::string, std::string>> train_pairs, test_pairs, train_fo;
    std::map<std::string, int> train_families, test_families;
    for (uint64_t seed = 0; seed < seeds; ++seed) {
      const auto t = household::TaskOf(*env->NewState(seed));
      if (SplitOf(seed) == Split::kTrain) {
        EXPECT_FALSE(t.held_out_pair) << seed << ": " << t.object << " / " << t.receptacle;
        EXPECT_FALSE(t.held_out_family) << seed << ": " << t.family << " / " << t.object;
        train_pairs.emplace(t.object, t.receptacle);
        train_fo.emplace(t.family, t.object);
        ++train_families[t.family];
      } else {
        EXPECT_TRUE(t.held_out_pair) << seed << ": " << t.object << " / " << t.receptacle;
        EXPECT_TRUE(
            std::binary_search(held.begin(), held.end(), std::make_pair(t.object, t.receptacle)));
        test_pairs.emplace(t.object, t.receptacle);
        ++test_families[t.family];
      }
    }
    for (const auto& p : test_pairs) EXPECT_EQ(train_pairs.count(p), 0u);
    const auto fo = household::HeldOutFamilyObject();
    for (const auto& p : fo) EXPECT_EQ(train_fo.count(p), 0u);
    // Every family occurs in both splits (rooms = 1 has no lamp to look under).
    const size_t families = rooms == 1 ? 5 : 6;
    EXPECT_EQ(train_families.size(), families) << rooms << " rooms";
    EXPECT_EQ(test_families.size(), families) << rooms << " rooms";
    // The task lists agree with the seeds.
    for (const auto& t : household::TasksOf(Split::kTrain, rooms))
      EXPECT_FALSE(t.held_out_pair || t.held_out_family);
    for (const auto& t : household::TasksOf(Split::kTest, rooms)) EXPECT_TRUE(t.held_out_pair);
  }
}

// Along random walks (checked every `every` steps, so that later states --
// a distractor in hand, receptacles closed again -- are covered too), the
// oracle agrees with exhaustive enumeration: the optimal return and the set
// of optimal actions. The step limit is raised so that truncation, which
// SolveByEnumeration does not model, never comes first.
void ExpectOracleMatchesEnumeration(std::vector<std::string> params, uint64_t seeds, int steps,
                                    int every) {
  const std::string what = "household " + Join(params, " ");
  params.push_back("step_limit=1000");
  auto env = MakeEnv("household", params);
  for (uint64_t seed = 0; seed < seeds; ++seed) {
    auto s = env->NewState(seed);
    Rng rng(seed + 17);
    for (int step = 0; step < steps && !s->IsTerminal(); ++step) {
      if (step % every == 0) {
        auto* oracle = dynamic_cast<OracleState*>(s.get());
        Solution sol = SolveByEnumeration(*s);
        EXPECT_NEAR(oracle->OptimalReturn(), sol.optimal_return, 1e-9) << what << " seed " << seed;
        auto mine = oracle->OptimalActions();
        EXPECT_EQ(std::set<ActionId>(mine.begin(), mine.end()),
                  std::set<ActionId>(sol.optimal_actions.begin(), sol.optimal_actions.end()))
            << what << " seed " << seed << " step " << step << "\n"
            << s->Observation();
      }
      auto legal = s->LegalActions();
      s->Apply(legal[rng.UniformInt(legal.size())]);
    }
  }
}

TEST(Household, OracleMatchesExhaustiveEnumeration) {
  ExpectOracleMatchesEnumeration({"distractors=0"}, 6, 12, 4);
  ExpectOracleMatchesEnumeration({"rooms=1", "distractors=2"}, 5, 24, 6);
  ExpectOracleMatchesEnumeration({"tasks=[\"slice\"]", "rooms=1", "distractors=1"}, 5, 24, 6);
  ExpectOracleMatchesEnumeration({"tasks=[\"light\"]"}, 4, 16, 4);
  ExpectOracleMatchesEnumeration(
      {"tasks=[\"heat\", \"cool\", \"clean\"]", "rooms=1", "receptacles=4", "distractors=1"}, 4, 16,
      4);
}

TEST(Household, OptimalSolutionsFitTheStepLimit) {
  auto env = MakeEnv("household");
  const int limit = env->Info().step_limit;
  EXPECT_EQ(limit, 40);
  int longest = 0;
  for (uint64_t seed = 0; seed < 2000; ++seed) {
    auto s = env->NewState(seed);
    const double ret = dynamic_cast<OracleState*>(s.get())->OptimalReturn();
    const int steps = static_cast<int>(std::lround((1.0 - ret) / 0.01));
    EXPECT_GE(steps, 2) << seed;
    longest = std::max(longest, steps);
  }
  EXPECT_LE(3 * longest, limit);
  // A tight limit regenerates instances that fit it; an impossible one is a ConfigError.
  auto tight = MakeEnv("household", {"step_limit=5"});
  for (uint64_t seed = 0; seed < 40; ++seed)
    EXPECT_GE(dynamic_cast<OracleState*>(tight->NewState(seed).get())->OptimalReturn(),
              1.0 - 0.05 - 1e-9);
  EXPECT_THROW(MakeEnv("household", {"step_limit=1"})->NewState(0), ConfigError);
}

TEST(Household, HashIsTheStateNotTheHistory) {
  auto env = MakeEnv("household");
  for (uint64_t seed = 0; seed < 20; ++seed) {
    auto s = env->NewState(seed);
    const uint64_t start = s->Hash();
    const std::string room = RoomOf(s->Observation());
    // At a receptacle: another state. Then to another room and back to this
    // one's entrance: the start again, though three steps were taken.
    auto c = s->Clone();
    const auto cmds = Commands(*c);
    Do(*c, cmds[0]);  // a receptacle of this room
    EXPECT_NE(c->Hash(), start);
    std::string other;  // another room
    for (const auto& cmd : cmds)
      for (const std::string r : {"kitchen", "living room", "bedroom", "bathroom"})
        if (cmd == "go to the " + r) other = cmd;
    if (other.empty()) continue;  // one room
    Do(*c, other);
    Do(*c, "go to the " + room);
    EXPECT_EQ(c->Hash(), start) << seed;
    EXPECT_EQ(c->Observation(), s->Observation());
    EXPECT_EQ(c->StepCount(), 3);
  }
}

TEST(Household, FactsAndObservationStayLocal) {
  auto env = MakeEnv("household", {"rooms=3", "distractors=3"});
  size_t max_words = 0;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    auto s = env->NewState(seed);
    Rng rng(seed);
    while (!s->IsTerminal()) {
      const std::string obs = s->Observation();
      const std::string room = RoomOf(obs);
      for (const auto& f : dynamic_cast<FactSource*>(s.get())->Facts())
        EXPECT_TRUE(Has(f, "the " + room)) << f << " seen in the " << room;
      max_words = std::max<size_t>(max_words, testing::Words(obs));
      auto legal = s->LegalActions();
      s->Apply(legal[rng.UniformInt(legal.size())]);
    }
  }
  EXPECT_LE(max_words, 60u);
}

TEST(Household, MenusStayWithinTheBound) {
  // 6 receptacles + 4 rooms + 16 distractors = 26 without the knife.
  auto env = MakeEnv("household", {"rooms=4", "receptacles=6", "distractors=16",
                                   "tasks=[\"pick\", \"clean\", \"heat\", \"cool\", \"light\"]"});
  auto knife = MakeEnv("household", {"rooms=4", "receptacles=6", "distractors=15"});
  for (const Env* e : {env.get(), knife.get()}) {
    size_t largest = 0;
    for (uint64_t seed = 0; seed < 20; ++seed) {
      auto s = e->NewState(seed);
      Rng rng(seed);
      while (!s->IsTerminal()) {
        Menu m = s->CompileMenu();
        ValidateMenu(m);
        largest = std::max(largest, m.size());
        auto legal = s->LegalActions();
        s->Apply(legal[rng.UniformInt(legal.size())]);
      }
    }
    EXPECT_LE(largest, 26u);
    EXPECT_GE(largest, 12u);
  }
}

TEST(Household, ParamsAreValidated) {
  for (const char* bad :
       {"rooms=0", "rooms=5", "receptacles=2", "receptacles=7", "distractors=-1", "distractors=17",
        "step_limit=0", "step_cost=-0.1", "success_reward=0", "room=2", "tasks=[]",
        "tasks=[\"fly\"]", "tasks=[\"pick\", \"pick\"]", "tasks=\"pick\""})
    EXPECT_THROW(MakeEnv("household", {bad}), ConfigError) << bad;
  // Up to 6 + 4 + 16 + 1 (the knife) = 27 actions could be on one menu.
  try {
    MakeEnv("household", {"rooms=4", "receptacles=6", "distractors=16"});
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_TRUE(Has(e.what(), "up to 27 actions; a menu holds at most 26")) << e.what();
  }
  EXPECT_NO_THROW(MakeEnv("household", {"rooms=4", "receptacles=6", "distractors=15"}));
  // One room is a kitchen: no lamp to look under.
  EXPECT_THROW(MakeEnv("household", {"rooms=1", "tasks=[\"light\"]"}), ConfigError);
  auto kitchen = MakeEnv("household", {"rooms=1"});
  for (uint64_t seed = 0; seed < 50; ++seed)
    EXPECT_NE(household::TaskOf(*kitchen->NewState(seed)).family, "light");
  auto only = MakeEnv("household", {"tasks=[\"cool\"]"});
  for (uint64_t seed = 0; seed < 50; ++seed)
    EXPECT_EQ(household::TaskOf(*only->NewState(seed)).family, "cool");
  EXPECT_EQ(MakeEnv("household")->Info().step_limit, 40);
}

}  // namespace
}  // namespace rlid::envs

// maze: pinned texts, the map as a faithful picture of the walls, moves and
// rewards, truncation, the BFS oracle against exhaustive enumeration, partial
// observability, facts, and parameter validation.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <deque>
#include <set>

#include "core/error.h"
#include "core/rng.h"
#include "core/strings.h"
#include "envs/api/env.h"
#include "envs/api/menu_state.h"
#include "envs/api/state_graph.h"
#include "tests/envs/env_test_util.h"

namespace rlid::envs {
namespace {

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  size_t start = 0;
  for (size_t nl; (nl = text.find('\n', start)) != std::string::npos; start = nl + 1)
    out.push_back(text.substr(start, nl - start));
  out.push_back(text.substr(start));
  return out;
}

// The map rows of an observation (the lines after "Map ...").
std::vector<std::string> MapOf(const std::string& obs) {
  auto lines = Lines(obs);
  for (size_t i = 0; i < lines.size(); ++i)
    if (lines[i].rfind("Map", 0) == 0) return {lines.begin() + i + 1, lines.end()};
  return {};
}

// Every "(row,col)" in `text`, 0-based.
std::vector<std::pair<int, int>> Positions(const std::string& text) {
  std::vector<std::pair<int, int>> out;
  for (size_t i = text.find('('); i != std::string::npos; i = text.find('(', i + 1)) {
    int r = 0, c = 0;
    if (std::sscanf(text.c_str() + i, "(%d,%d)", &r, &c) == 2) out.emplace_back(r - 1, c - 1);
  }
  return out;
}

// The first "(row,col)" right after `prefix`, 0-based.
std::pair<int, int> PosAfter(const std::string& text, const std::string& prefix) {
  size_t at = text.find(prefix + "(");
  EXPECT_NE(at, std::string::npos) << "no '" << prefix << "(' in " << text;
  if (at == std::string::npos) return {-1, -1};
  auto pos = Positions(text.substr(at + prefix.size()));
  return pos.empty() ? std::make_pair(-1, -1) : pos.front();
}

TEST(Maze, PinnedObservationAndMenu) {
  // Golden texts: a change here changes every experiment on maze.
  auto s = MakeEnv("maze")->NewState(0);
  EXPECT_EQ(s->Observation(),
            "Exit at (3,4). You are at (2,1). Open: north, east, south.\n"
            "Map (@ you, X exit, # wall):\n"
            "...#.....\n"
            ".#.#.####\n"
            "@........\n"
            ".#.#####.\n"
            ".#.#..X..\n"
            ".#.#.###.\n"
            ".#.#.....\n"
            ".#.#.#.#.\n"
            "...#...#.");
  Menu m = s->CompileMenu();
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m.items[0].command, "go north");
  EXPECT_EQ(m.items[0].afterstate, "(1,1): open east, south; exit 2 south, 3 east.");
  EXPECT_EQ(m.items[1].command, "go east");
  EXPECT_EQ(m.items[1].afterstate, "(2,2): open north, east, south, west; exit 1 south, 2 east.");
  EXPECT_EQ(m.items[2].command, "go south");
  EXPECT_EQ(m.items[2].afterstate, "(3,1): open north, south; exit 3 east.");
  EXPECT_EQ(m.items[2].realisations,
            (std::vector<std::string>{"go south", "south", "s", "move south", "walk south",
                                      "head south", "go down"}));
}

TEST(Maze, PinnedPartialView) {
  auto s = MakeEnv("maze", {"size=4", "view_radius=1"})->NewState(1);
  EXPECT_EQ(s->Observation(),
            "Exit at (1,2). You are at (1,1). Open: south.\n"
            "Map (@ you, X exit, # wall, ? unseen):\n"
            "@#X????\n"
            ".###???\n"
            "...????\n"
            "?#?#???\n"
            "???????\n"
            "???????\n"
            "???????");
  Menu m = s->CompileMenu();
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m.items[0].afterstate, "(2,1): open north, east, south; exit 1 north, 1 east.");
}

// The map shows every wall: right size, the stated positions, the expected
// number of openings (spanning tree + round(extra * non-tree walls)), all
// cells connected, and the menu equal to the openings around '@'.
TEST(Maze, MapIsAFaithfulPictureOfTheWalls) {
  for (double extra : {0.0, 0.25, 1.0}) {
    for (int n = 2; n <= 7; ++n) {
      auto env = MakeEnv("maze", {fmt::format("size={}", n), fmt::format("extra_edges={}", extra)});
      for (uint64_t seed = 0; seed < 10; ++seed) {
        auto s = env->NewState(seed);
        const std::string obs = s->Observation();
        auto map = MapOf(obs);
        ASSERT_EQ(map.size(), static_cast<size_t>(2 * n - 1)) << obs;
        auto [er, ec] = PosAfter(obs, "Exit at ");
        auto [pr, pc] = PosAfter(obs, "You are at ");
        EXPECT_EQ(map[2 * er][2 * ec], 'X');
        EXPECT_EQ(map[2 * pr][2 * pc], '@');
        int openings = 0;
        for (int y = 0; y < 2 * n - 1; ++y)
          for (int x = 0; x < 2 * n - 1; ++x) {
            ASSERT_EQ(map[y].size(), static_cast<size_t>(2 * n - 1));
            if ((x + y) % 2 == 1) openings += map[y][x] == '.';
            if (x % 2 == 1 && y % 2 == 1) {
              EXPECT_EQ(map[y][x], '#');
            }
          }
        const int tree = n * n - 1, non_tree = (n - 1) * (n - 1);
        EXPECT_EQ(openings, tree + static_cast<int>(std::lround(extra * non_tree))) << obs;
        // Connectivity over the drawn passages.
        std::set<std::pair<int, int>> seen = {{0, 0}};
        std::deque<std::pair<int, int>> queue = {{0, 0}};
        while (!queue.empty()) {
          auto [r, c] = queue.front();
          queue.pop_front();
          const int dr[] = {-1, 0, 1, 0}, dc[] = {0, 1, 0, -1};
          for (int d = 0; d < 4; ++d) {
            int nr = r + dr[d], nc = c + dc[d];
            if (nr < 0 || nc < 0 || nr >= n || nc >= n || map[2 * r + dr[d]][2 * c + dc[d]] != '.')
              continue;
            if (seen.insert({nr, nc}).second) queue.push_back({nr, nc});
          }
        }
        EXPECT_EQ(seen.size(), static_cast<size_t>(n * n)) << obs;
        std::vector<std::string> want;
        if (pr > 0 && map[2 * pr - 1][2 * pc] == '.') want.push_back("go north");
        if (pc < n - 1 && map[2 * pr][2 * pc + 1] == '.') want.push_back("go east");
        if (pr < n - 1 && map[2 * pr + 1][2 * pc] == '.') want.push_back("go south");
        if (pc > 0 && map[2 * pr][2 * pc - 1] == '.') want.push_back("go west");
        std::vector<std::string> got;
        for (const auto& it : s->CompileMenu().items) got.push_back(it.command);
        EXPECT_EQ(got, want) << obs;
      }
    }
  }
}

TEST(Maze, OracleWalkPaysStepCostsAndTheExitReward) {
  auto s = MakeEnv("maze")->NewState(0);
  auto* oracle = dynamic_cast<OracleState*>(s.get());
  ASSERT_NE(oracle, nullptr);
  // Seed 0: (2,1) -> (3,4) is 6 moves (east x4, south, west), so 1 - 6 * 0.01.
  EXPECT_NEAR(oracle->OptimalReturn(), 0.94, 1e-12);
  double ret = 0;
  int steps = 0;
  while (!s->IsTerminal()) {
    auto best = dynamic_cast<OracleState*>(s.get())->OptimalActions();
    ASSERT_EQ(best.size(), 1u);  // a single shortest path here
    Menu m = s->CompileMenu();
    std::string after = m.items[m.IndexOfAction(best[0])].afterstate;
    auto out = s->Apply(best[0]);
    ++steps;
    ret += out.reward;
    if (out.success) {
      EXPECT_NEAR(out.reward, 0.99, 1e-12);
      EXPECT_EQ(after, "(3,4): the exit.");
      EXPECT_EQ(s->Observation(), "You reached the exit at (3,4).");
    } else {
      EXPECT_NEAR(out.reward, -0.01, 1e-12);
      EXPECT_EQ(PosAfter(s->Observation(), "You are at "), PosAfter(after, ""));
    }
  }
  EXPECT_EQ(steps, 6);
  EXPECT_NEAR(ret, 0.94, 1e-12);
}

TEST(Maze, StepLimitTruncatesAndTheOracleKnowsIt) {
  auto env = MakeEnv("maze", {"step_limit=4", "success_reward=2", "step_cost=0.5"});
  EXPECT_EQ(env->Info().step_limit, 4);
  int out_of_reach = 0;
  for (uint64_t seed = 0; seed < 20; ++seed) {
    auto s = env->NewState(seed);
    auto* o = dynamic_cast<OracleState*>(s.get());
    // The start is placed within the limit: solvable, 2 - 0.5 * d with d in 1..4.
    double r0 = o->OptimalReturn();
    EXPECT_TRUE(r0 == 1.5 || r0 == 1.0 || r0 == 0.5 || r0 == 0.0) << r0;
    // Always take a move that is not optimal when there is one.
    double ret = 0;
    StepOutcome out;
    while (!s->IsTerminal()) {
      auto best = dynamic_cast<OracleState*>(s.get())->OptimalActions();
      auto legal = s->LegalActions();
      ActionId pick = legal[0];
      for (ActionId a : legal)
        if (std::find(best.begin(), best.end(), a) == best.end()) pick = a;
      out = s->Apply(pick);
      ret += out.reward;
      auto* so = dynamic_cast<OracleState*>(s.get());
      if (!s->IsTerminal() && so->OptimalActions().empty()) {
        // Out of reach in the steps left: every continuation pays step costs only.
        EXPECT_DOUBLE_EQ(so->OptimalReturn(), -0.5 * (4 - s->StepCount()));
        ++out_of_reach;
      }
    }
    if (!out.success) {
      EXPECT_TRUE(out.truncated);
      EXPECT_EQ(s->StepCount(), 4);
      EXPECT_DOUBLE_EQ(ret, -2.0);
    }
  }
  EXPECT_GT(out_of_reach, 0);
}

TEST(Maze, OracleMatchesExhaustiveEnumeration) {
  for (auto params :
       {std::vector<std::string>{}, std::vector<std::string>{"size=6", "extra_edges=0.5"}}) {
    testing::ExpectOracleMatchesEnumeration(*MakeEnv("maze", params), 6, 8,
                                            "maze " + Join(params, " "));
  }
}

TEST(Maze, PartialViewHidesFarCellsAndFactsStayInView) {
  auto env = MakeEnv("maze", {"size=6", "view_radius=1"});
  for (uint64_t seed = 0; seed < 6; ++seed) {
    auto s = env->NewState(seed);
    Rng rng(seed);
    for (int step = 0; step < 10 && !s->IsTerminal(); ++step) {
      const std::string obs = s->Observation();
      auto [pr, pc] = PosAfter(obs, "You are at ");
      auto map = MapOf(obs);
      for (int r = 0; r < 6; ++r)
        for (int c = 0; c < 6; ++c) {
          bool near = std::abs(r - pr) <= 1 && std::abs(c - pc) <= 1;
          char ch = map[2 * r][2 * c];
          if (ch == 'X' || ch == '@') continue;
          EXPECT_EQ(ch, near ? '.' : '?') << obs;
        }
      for (const auto& fact : dynamic_cast<FactSource*>(s.get())->Facts()) {
        for (auto [r, c] : Positions(fact)) {
          EXPECT_LE(std::abs(r - pr), 1) << fact << " seen from " << obs;
          EXPECT_LE(std::abs(c - pc), 1) << fact << " seen from " << obs;
        }
      }
      auto legal = s->LegalActions();
      s->Apply(legal[rng.UniformInt(legal.size())]);
    }
  }
}

TEST(Maze, FactsNameEveryInnerWallAndDeadEnd) {
  // Read off the pinned seed-0 map by hand: 40 inner passages - (24 tree + 4
  // loops) = 12 walls; (1,5) and (5,5) are the only cells with one opening.
  auto s = MakeEnv("maze")->NewState(0);
  EXPECT_EQ(
      dynamic_cast<FactSource*>(s.get())->Facts(),
      (std::vector<std::string>{"wall between (1,2) and (1,3)", "wall between (1,4) and (2,4)",
                                "(1,5) is a dead end", "wall between (1,5) and (2,5)",
                                "wall between (2,3) and (3,3)", "wall between (2,4) and (3,4)",
                                "wall between (3,1) and (3,2)", "wall between (3,2) and (3,3)",
                                "wall between (3,4) and (4,4)", "wall between (4,1) and (4,2)",
                                "wall between (4,2) and (4,3)", "wall between (5,2) and (5,3)",
                                "wall between (5,4) and (5,5)", "(5,5) is a dead end"}));
}

TEST(Maze, CompileUnderstandsDirections) {
  auto s = MakeEnv("maze")->NewState(0);  // open: north (0), east (1), south (2)
  EXPECT_EQ(s->Compile("go up").action, 0);
  EXPECT_EQ(s->Compile("N").action, 0);
  EXPECT_EQ(s->Compile("I will head east.").action, 1);
  EXPECT_EQ(s->Compile("Action: south").action, 2);
  EXPECT_FALSE(s->Compile("go west").valid());  // a wall
  EXPECT_FALSE(s->Compile("north or south").valid());
}

TEST(Maze, ParamsAreValidated) {
  for (const char* bad :
       {"size=1", "size=13", "extra_edges=1.5", "extra_edges=-0.1", "view_radius=-1",
        "step_limit=0", "step_cost=-1", "success_reward=0", "sise=5"})
    EXPECT_THROW(MakeEnv("maze", {bad}), ConfigError) << bad;
  EXPECT_EQ(MakeEnv("maze")->Info().step_limit, 75);
  EXPECT_EQ(MakeEnv("maze", {"size=4"})->Info().step_limit, 48);
  EXPECT_EQ(MakeEnv("maze", {"size=4", "step_limit=30"})->Info().step_limit, 30);
}

}  // namespace
}  // namespace rlid::envs

// Helpers shared by the per-environment tests.
#pragma once

#include <gtest/gtest.h>

#include <set>
#include <sstream>
#include <string>

#include "core/rng.h"
#include "envs/api/env.h"
#include "envs/api/state_graph.h"

namespace rlid::envs::testing {

// Whitespace-separated words in s.
inline int Words(const std::string& s) {
  std::istringstream is(s);
  std::string w;
  int n = 0;
  while (is >> w) ++n;
  return n;
}

// Along a random walk of at most `steps` moves from each of seeds 0..seeds-1,
// the env's oracle agrees with exhaustive enumeration of the state graph:
// the optimal return, and the set of optimal actions.
inline void ExpectOracleMatchesEnumeration(const Env& env, uint64_t seeds, int steps,
                                           const std::string& what) {
  for (uint64_t seed = 0; seed < seeds; ++seed) {
    auto s = env.NewState(seed);
    Rng rng(seed);
    for (int step = 0; step < steps && !s->IsTerminal(); ++step) {
      auto* oracle = dynamic_cast<OracleState*>(s.get());
      ASSERT_NE(oracle, nullptr) << what << " has no oracle";
      Solution sol = SolveByEnumeration(*s);
      EXPECT_NEAR(oracle->OptimalReturn(), sol.optimal_return, 1e-9) << what << " seed " << seed;
      auto mine = oracle->OptimalActions();
      EXPECT_EQ(std::set<ActionId>(mine.begin(), mine.end()),
                std::set<ActionId>(sol.optimal_actions.begin(), sol.optimal_actions.end()))
          << what << " seed " << seed << " step " << step;
      auto legal = s->LegalActions();
      s->Apply(legal[rng.UniformInt(legal.size())]);
    }
  }
}

}  // namespace rlid::envs::testing

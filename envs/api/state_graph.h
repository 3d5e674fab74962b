// Exact enumeration of the reachable state graph of a deterministic env
// instance (Boost.Graph: states as vertices, menu actions as edges), optimal
// values by value iteration, and GraphViz export. Also the generic oracle by
// exhaustive enumeration (optimal actions = argmax of r + V(child)) that the
// env tests check the built-in envs' own oracles against.
#pragma once

#include <boost/graph/adjacency_list.hpp>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include "envs/api/env.h"

namespace rlid::envs {

struct StateVertex {
  uint64_t hash = 0;
  std::string text;  // observation (only when enumerated with texts)
  bool terminal = false;
  bool success = false;  // reached by a successful final step
};
struct StateEdge {
  ActionId action = kNoAction;
  std::string command;
  double reward = 0.0;
};
using StateGraphImpl =
    boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS, StateVertex, StateEdge>;

struct StateGraph {
  StateGraphImpl graph;
  size_t root = 0;
  bool complete = true;  // false when max_states cut the enumeration
  size_t num_states() const { return boost::num_vertices(graph); }
  size_t num_edges() const { return boost::num_edges(graph); }
};

// BFS over LegalActions()+Clone()+Apply(), merging states by Hash(). The step
// limit is ignored (states are identified without their step counter).
// `keep_going(states)` is asked every 1024 new states; false stops the
// enumeration (complete = false), e.g. at a deadline.
StateGraph EnumerateStates(const State& root, size_t max_states, bool with_text = false,
                           const std::function<bool(size_t states)>& keep_going = {});
// V(v) = max_a [r(v,a) + gamma * V(child)], V(terminal) = 0, by value iteration.
std::vector<double> OptimalValues(const StateGraph& g, double gamma = 1.0);
// DOT text with observations (truncated) as vertex labels and commands as edge labels.
void WriteDot(const StateGraph& g, std::ostream& os);

// The generic oracle: enumerates the graph from `state` and returns the
// optimal actions and optimal return. Throws ConfigError if the instance has
// more than max_states reachable states. No env plays by it (it walks the
// full state graph through the State API, and does not model truncation): it
// is the reference the env tests (tests/envs) hold env-specific oracles to,
// such as the one of envs/api/shortest_path_oracle.h.
struct Solution {
  std::vector<ActionId> optimal_actions;
  double optimal_return = 0.0;
  bool solvable = false;  // some success state is reachable
};
Solution SolveByEnumeration(const State& state, size_t max_states = 200000);

}  // namespace rlid::envs

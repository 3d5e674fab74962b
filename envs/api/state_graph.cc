#include "envs/api/state_graph.h"

#include <boost/graph/graphviz.hpp>
#include <fmt/format.h>

#include <cmath>
#include <deque>
#include <memory>
#include <ostream>
#include <unordered_map>

#include "core/error.h"

namespace rlid::envs {

StateGraph EnumerateStates(const State& root, size_t max_states, bool with_text,
                           const std::function<bool(size_t states)>& keep_going) {
  StateGraph sg;
  auto& g = sg.graph;
  std::unordered_map<uint64_t, size_t> index;
  std::deque<std::pair<size_t, std::unique_ptr<State>>> frontier;
  auto add_vertex = [&](const State& s, bool success) {
    StateVertex v;
    v.hash = s.Hash();
    v.terminal = s.IsTerminal();
    v.success = success;
    if (with_text) v.text = s.Observation();
    size_t id = boost::add_vertex(v, g);
    index.emplace(v.hash, id);
    return id;
  };
  sg.root = add_vertex(root, false);
  frontier.emplace_back(sg.root, root.Clone());
  while (!frontier.empty()) {
    auto [vid, state] = std::move(frontier.front());
    frontier.pop_front();
    if (state->IsTerminal()) continue;
    std::unordered_map<ActionId, std::string> commands;
    if (with_text)
      for (const auto& item : state->CompileMenu().items) commands[item.action] = item.command;
    for (ActionId a : state->LegalActions()) {
      auto child = state->Clone();
      StepOutcome out = child->Apply(a);
      // A truncation is an artefact of the clone's step counter, not the game.
      bool terminal = out.terminal && !out.truncated;
      uint64_t h = child->Hash();
      auto it = index.find(h);
      size_t cid;
      if (it != index.end()) {
        cid = it->second;
      } else {
        if (boost::num_vertices(g) >= max_states) {
          sg.complete = false;
          continue;
        }
        if (keep_going && boost::num_vertices(g) % 1024 == 0 &&
            !keep_going(boost::num_vertices(g))) {
          sg.complete = false;
          return sg;
        }
        cid = add_vertex(*child, out.success);
        g[cid].terminal = terminal;
        // States first reached beyond the episode's remaining step budget are
        // kept as leaves: no episode from `root` can explore past them.
        if (!child->IsTerminal()) frontier.emplace_back(cid, std::move(child));
      }
      StateEdge e{a, commands.empty() ? std::string() : commands.at(a), out.reward};
      boost::add_edge(vid, cid, e, g);
    }
  }
  return sg;
}

std::vector<double> OptimalValues(const StateGraph& sg, double gamma) {
  const auto& g = sg.graph;
  size_t n = boost::num_vertices(g);
  std::vector<double> v(n, 0.0);
  // Bellman updates until no value changes (Bellman-Ford bound n iterations).
  for (size_t iter = 0; iter <= n + 1; ++iter) {
    bool changed = false;
    for (size_t u = 0; u < n; ++u) {
      if (g[u].terminal) continue;
      double best = -INFINITY;
      for (auto [e, end] = boost::out_edges(u, g); e != end; ++e)
        best = std::max(best, g[*e].reward + gamma * v[boost::target(*e, g)]);
      if (best == -INFINITY) best = 0.0;  // dead end
      if (std::abs(best - v[u]) > 1e-12) {
        v[u] = best;
        changed = true;
      }
    }
    if (!changed) break;
  }
  return v;
}

void WriteDot(const StateGraph& sg, std::ostream& os) {
  const auto& g = sg.graph;
  auto clip = [](std::string s) {
    for (char& c : s)
      if (c == '\n') c = ' ';
    if (s.size() > 60) s = s.substr(0, 57) + "...";
    return s;
  };
  os << "digraph states {\n  node [shape=box, fontsize=9];\n";
  for (size_t u = 0; u < boost::num_vertices(g); ++u) {
    std::string label = g[u].text.empty() ? fmt::format("{:016x}", g[u].hash) : clip(g[u].text);
    std::string style = g[u].success ? ", style=filled, fillcolor=palegreen"
                        : u == sg.root ? ", style=filled, fillcolor=lightblue"
                                       : "";
    os << fmt::format("  s{} [label={}{}];\n", u, boost::escape_dot_string(label), style);
  }
  for (auto [e, end] = boost::edges(g); e != end; ++e) {
    const auto& ep = g[*e];
    std::string label = ep.command.empty() ? fmt::format("a{}", ep.action) : ep.command;
    if (ep.reward != 0) label += fmt::format(" ({:+g})", ep.reward);
    os << fmt::format("  s{} -> s{} [label={}];\n", boost::source(*e, g), boost::target(*e, g),
                      boost::escape_dot_string(label));
  }
  os << "}\n";
}

Solution SolveByEnumeration(const State& state, size_t max_states) {
  Solution sol;
  if (state.IsTerminal()) return sol;
  StateGraph sg = EnumerateStates(state, max_states);
  if (!sg.complete)
    throw ConfigError(fmt::format("the instance has more than {} reachable states", max_states),
                      "use a smaller instance (e.g. --set env.size=...) or an env-specific oracle");
  auto v = OptimalValues(sg);
  const auto& g = sg.graph;
  for (size_t u = 0; u < boost::num_vertices(g); ++u) sol.solvable |= g[u].success;
  double best = -INFINITY;
  std::vector<std::pair<ActionId, double>> q;
  for (auto [e, end] = boost::out_edges(sg.root, g); e != end; ++e) {
    double qa = g[*e].reward + v[boost::target(*e, g)];
    q.emplace_back(g[*e].action, qa);
    best = std::max(best, qa);
  }
  for (auto [a, qa] : q)
    if (qa >= best - 1e-9) sol.optimal_actions.push_back(a);
  sol.optimal_return = v[sg.root];
  return sol;
}

}  // namespace rlid::envs

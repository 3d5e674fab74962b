// The oracle (and the menu) household and keys share, for deterministic envs where every
// step costs the same and success ends the episode (ShortestPathStep): steps
// to success of every world reachable from the start (enumerated forwards,
// searched backwards from the goals), built once per instance, and what
// OptimalActions()/OptimalReturn() make of them.
#pragma once

#include <cstdint>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "core/check.h"
#include "envs/api/env.h"
#include "envs/api/menu_state.h"

namespace rlid::envs {

// Steps to success (-1: never) of every world the search reached, by key.
// Non-copyable; a layout holds one (mutable) and its states share it.
class GoalDistances {
 public:
  // On the first call, enumerates every world reachable from `start` and
  // searches backwards from the successful ones; later calls return at once
  // (thread-safe: a concurrent caller waits for the first). The search's model:
  //   key(w) -> uint64_t    injective on the worlds searched
  //   success(w) -> bool    the goal holds (such a world is not expanded)
  //   moves(w, out)         fills `out` (a std::vector<ActionId>) with w's moves
  //   next(w, a) -> World   the world after move a, as the search sees it
  // `start` and next() may give abstractions of the env's worlds, provided the
  // distance depends on nothing they drop.
  template <class World, class Key, class Success, class Moves, class Next>
  void BuildOnce(const World& start, Key key, Success success, Moves moves, Next next) {
    std::call_once(once_, [&] {
      std::vector<World> worlds = {start};
      std::vector<std::vector<int>> parents(1);
      std::vector<int> goals;
      std::vector<ActionId> legal;
      index_.emplace(key(start), 0);
      for (size_t u = 0; u < worlds.size(); ++u) {
        if (success(worlds[u])) {
          goals.push_back(static_cast<int>(u));
          continue;
        }
        moves(worlds[u], legal);
        for (ActionId a : legal) {
          World child = next(worlds[u], a);
          auto [it, inserted] = index_.emplace(key(child), static_cast<int>(worlds.size()));
          if (inserted) {
            worlds.push_back(child);
            parents.emplace_back();
          }
          parents[it->second].push_back(static_cast<int>(u));
        }
      }
      dist_ = Backward(parents, goals);
    });
  }
  // Steps to success (-1: never) of the world with this key. InternalError
  // when the search did not reach it (or has not run).
  int Distance(uint64_t key) const;
  // Worlds the search reached (0 before it has run).
  size_t size() const { return dist_.size(); }

 private:
  // Breadth-first search from `goals` along `parents` (per world, the worlds
  // with a move into it): each world's steps to the nearest goal, -1 if none.
  static std::vector<int> Backward(const std::vector<std::vector<int>>& parents,
                                   const std::vector<int>& goals);

  std::once_flag once_;
  std::unordered_map<uint64_t, int> index_;  // key -> world
  std::vector<int> dist_;                    // per world
};

// The transition these oracles assume, for a layout `m` as below: move `a`
// costs step_cost, and reaching the goal earns success_reward and ends the
// episode.
template <class Layout, class World>
StepOutcome ShortestPathStep(const Layout& m, World& w, ActionId a) {
  StepOutcome out;
  out.reward = -m.params.step_cost;
  if (m.ApplyMove(w, a)) {
    out.reward += m.params.success_reward;
    out.terminal = out.success = true;
  }
  return out;
}

// The menu of world `w`: m.LegalMoves(w, moves) in order, each as spec(a)
// (an ActionSpec). At most kMaxMenuSize moves.
template <class Layout, class World, class Spec>
std::vector<ActionSpec> ShortestPathMenu(const Layout& m, const World& w, Spec spec) {
  std::vector<ActionId> moves;
  m.LegalMoves(w, moves);
  RLID_CHECK_LE(moves.size(), static_cast<size_t>(kMaxMenuSize));
  std::vector<ActionSpec> out;
  out.reserve(moves.size());
  for (ActionId a : moves) out.push_back(spec(a));
  return out;
}

// OptimalActions() and OptimalReturn() of a non-terminal state in world `w`
// with `remaining` steps left, for a layout `m` that gives
//   m.Distance(w) -> int              steps to success, -1: never
//   m.LegalMoves(w, out)              the legal moves (std::vector<ActionId>)
//   m.ApplyMove(w&, a) -> bool        applies a move; whether the goal now holds
//   m.params.success_reward, m.params.step_cost
// The optimal actions are the moves one step closer to success; none when
// success is out of reach in the steps left.
template <class Layout, class World>
std::vector<ActionId> ShortestPathActions(const Layout& m, const World& w, int remaining) {
  std::vector<ActionId> out;
  const int d = m.Distance(w);
  if (d < 0 || d > remaining) return out;
  std::vector<ActionId> moves;
  m.LegalMoves(w, moves);
  for (ActionId a : moves) {
    World child = w;
    const bool success = m.ApplyMove(child, a);
    if ((success ? 0 : m.Distance(child)) == d - 1) out.push_back(a);
  }
  return out;
}
// success_reward - step_cost x d; when success is out of reach in the steps
// left, truncation comes first: -step_cost x remaining.
template <class Layout, class World>
double ShortestPathReturn(const Layout& m, const World& w, int remaining) {
  const int d = m.Distance(w);
  if (d < 0 || d > remaining) return -m.params.step_cost * remaining;
  return m.params.success_reward - m.params.step_cost * d;
}

}  // namespace rlid::envs

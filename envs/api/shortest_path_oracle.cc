// GoalDistances: the table lookup and the backward breadth-first search; the
// forward enumeration is a template in the header.
#include "envs/api/shortest_path_oracle.h"

#include <deque>

#include "core/check.h"

namespace rlid::envs {

int GoalDistances::Distance(uint64_t key) const {
  auto it = index_.find(key);
  RLID_CHECK(it != index_.end(), "world not reachable from the initial state");
  return dist_[it->second];
}

std::vector<int> GoalDistances::Backward(const std::vector<std::vector<int>>& parents,
                                         const std::vector<int>& goals) {
  std::vector<int> d(parents.size(), -1);
  std::deque<int> queue;
  for (int g : goals) {
    d[g] = 0;
    queue.push_back(g);
  }
  while (!queue.empty()) {
    const int v = queue.front();
    queue.pop_front();
    for (int u : parents[v])
      if (d[u] < 0) {
        d[u] = d[v] + 1;
        queue.push_back(u);
      }
  }
  return d;
}

}  // namespace rlid::envs

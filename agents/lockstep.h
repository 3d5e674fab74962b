// The lockstep schedule shared by the decision and token rollouts: up to
// num_envs episodes play at once, and each round prepares the next step of
// every episode of one slot group so that one model forward serves them all.
// Internal to agents/ (see rollout_internal.h for the Slot it schedules).
#pragma once

#include <cstdint>
#include <deque>
#include <utility>
#include <vector>

#include "agents/rollout_internal.h"

namespace rlid::agents::internal {

// Up to num_envs episodes play at once; a finished one leaves its slot to the
// next spec in the queue, and the result keeps the order of the spec list
// (episodes an env failure dropped are left out). An env whose states step
// concurrently (EnvInfo::concurrency > 1) gets two groups of slots that take
// turns, so one group's env steps overlap the other group's model forward;
// otherwise there is one group.
class Lockstep {
 public:
  Lockstep(AgentContext& ctx, const std::vector<EpisodeSpec>& specs, envs::Split split,
           policy::Plane plane);
  int groups() const { return static_cast<int>(active_.size()); }
  bool Running() const;
  // The slots of group g now playing (pending steps included).
  std::vector<Slot*> Active(int g);
  // Starts queued episodes while group g has free slots; returns its slots.
  std::vector<Slot*> Fill(int g, Budget& budget);
  // Moves finished episodes (no step pending) out of their slots.
  void Retire(Budget& budget);
  // The played episodes in spec order, dropped ones left out; once !Running().
  std::vector<EpisodeData> Finished();

 private:
  // Books a finished (or broken) episode of spec `idx`; a broken one with
  // retries left goes back to the front of the queue.
  void Count(size_t idx, Slot& s, Budget& budget);

  AgentContext& ctx_;
  const std::vector<EpisodeSpec>& specs_;
  envs::Split split_;
  policy::Plane plane_;
  std::vector<EpisodeData> finished_;
  std::vector<bool> dropped_;
  std::vector<int> attempts_;  // plays of each spec so far (the current one included)
  std::deque<size_t> queue_;
  std::vector<int> capacity_;
  std::vector<std::vector<std::pair<size_t, Slot>>> active_;
  int64_t local_ids_ = 0;
  int64_t retired_ = 0;
};

// The episodes of lockstep group g that act now, each with its prepared step:
// finished asynchronous steps are filed, finished episodes retired and free
// lanes refilled first (env time). None act: retired again, both empty.
struct GroupSteps {
  std::vector<Slot*> slots;
  std::vector<StepData> steps;
};
GroupSteps PrepareGroup(AgentContext& ctx, Lockstep& lockstep, int g, policy::Plane plane,
                        Budget& budget, double* env_seconds);

}  // namespace rlid::agents::internal

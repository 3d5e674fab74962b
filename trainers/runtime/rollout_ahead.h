// Asynchronous rollouts with bounded staleness (docs/async.md). With
// s = trainer.max_staleness, the batch iteration i trains on is played with
// the weights of version b(i) = max(0, i - s), where version v is the policy
// after v updates. A worker thread plays batch i + s with a copy of version i
// while the learner updates on batch i, so a rollout and an update overlap;
// the learner waits only for whichever is slower.
//
// Which weights, seeds and streams a batch is played with depend only on i and
// s, never on timing: an asynchronous run is as reproducible as a synchronous
// one. With s = 0 every batch is played on the learner's thread, on the
// learner's own model and rollout engine, when it is taken: the synchronous
// loop, unchanged. The worker runs only between Take and Join, inside one
// iteration, so evaluation, checkpoints and the Comm stay on the learner's
// thread and never race with it.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "agents/rollout.h"
#include "policy/model/model.h"
#include "policy/reading/sampler.h"
#include "trainers/runtime/dist.h"

namespace rlid::trainers {

// One iteration's train episodes and how they were played.
struct PlayedBatch {
  int64_t iteration = 0;  // the iteration that trains on it
  int64_t version = 0;    // the weights it was played with (policy after `version` updates)
  std::vector<agents::EpisodeData> episodes;  // what the update learns from
  // Played and recorded but not learned from (DAPO's zero-variance groups,
  // moved here by the trainer's Complete).
  std::vector<agents::EpisodeData> dropped;
  agents::Budget spent;  // the work of playing it (the first round's, with DAPO)
  double seconds = 0;    // wall time of playing it
};

class RolloutAhead {
 public:
  // Plays the train episodes of iteration agent.iteration with agent.model and
  // agent.sampler (the weights of the batch's version; agent.policy_version is
  // that version), spending into `budget`. It may run on the worker's thread:
  // it must not use the Comm, the learner's model or anything the learner's
  // update touches.
  using Play = std::function<std::vector<agents::EpisodeData>(agents::AgentContext& agent,
                                                              agents::Budget& budget)>;

  // `model` is the learner's policy (its weights are version "current").
  RolloutAhead(int64_t max_staleness, policy::TransformerLM model);
  ~RolloutAhead();  // waits for the worker (its error, if any, is dropped)
  RolloutAhead(const RolloutAhead&) = delete;
  RolloutAhead& operator=(const RolloutAhead&) = delete;

  int64_t max_staleness() const { return s_; }
  // b(i) = max(0, i - s).
  int64_t VersionOf(int64_t iteration) const;

  // The batch of iteration agent.iteration (the learner's weights are that
  // version): played now, on this thread, unless the worker played it ahead;
  // its work is added to `budget`. Then starts the worker on every batch of
  // iterations up to agent.iteration + s and below `iterations` that is not
  // played yet, each with the weights of its version. Call Join() before the
  // learner uses the env, the memory bank or the store's ids itself.
  // ConfigError when a batch needs weights this object does not hold (a
  // resumed checkpoint written with a smaller max_staleness).
  PlayedBatch Take(const agents::AgentContext& agent, int64_t iterations, agents::Budget& budget,
                   const Play& play);
  // Waits for the worker; rethrows its error. Returns the seconds waited.
  double Join();
  // Waits for the worker and drops what it played and any error it hit: for
  // a learner that is leaving the iteration by an exception of its own.
  void Abandon() noexcept;

  // Checkpoints (--resume), after the update of the last iteration taken: the
  // weight versions the later batches are played with, other than the current
  // one (behaviour_v<N>.pt; nothing when the run is synchronous).
  void Save(const std::string& dir) const;
  // Reads what Save wrote (nothing when the run was synchronous).
  void Load(const std::string& dir);

 private:
  agents::AgentContext BehaviourAgent(const agents::AgentContext& learner, int64_t iteration);
  PlayedBatch PlayOne(const agents::AgentContext& learner, int64_t iteration, const Play& play);

  int64_t s_;
  int64_t last_taken_ = -1;
  policy::TransformerLM model_;
  std::map<int64_t, policy::TransformerLM> versions_;  // version -> frozen copy of its weights
  std::map<int64_t, PlayedBatch> ahead_;               // iteration -> batch played ahead
  std::unique_ptr<policy::TextSampler> sampler_;       // the behaviour weights' rollout engine
  std::future<void> worker_;
};

// Abandon()s the worker when the scope is left while it still runs (an
// exception in the learner's update), so it never outlives what it reads.
class JoinOnExit {
 public:
  explicit JoinOnExit(RolloutAhead& ahead) : ahead_(ahead) {}
  ~JoinOnExit() { ahead_.Abandon(); }
  JoinOnExit(const JoinOnExit&) = delete;
  JoinOnExit& operator=(const JoinOnExit&) = delete;

 private:
  RolloutAhead& ahead_;
};

// With max_staleness > 0: async/version_lag (the iteration minus the batch's
// version), async/rollout_s (seconds playing the batch, ahead or not) and
// async/wait_s (how long the learner waited for the worker), the last two the
// slowest rank's. Nothing when the run is synchronous.
std::vector<std::pair<std::string, double>> AsyncMetrics(int64_t max_staleness, int64_t iteration,
                                                         const PlayedBatch& batch, double wait_s,
                                                         Comm& comm);

}  // namespace rlid::trainers

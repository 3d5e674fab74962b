// Internals of agents/rollout.h shared by the decision, token and scripted
// rollouts: one episode's playing state (Slot) and the bookkeeping every step
// goes through (episode_slot.cc), and the sampling of free text after a batch
// of prompts (text_sampling.cc). The lockstep scheduler is in lockstep.h. Not
// part of the public API.
//
// Contract: a Slot is created by StartEpisode, gets each step from PrepareStep
// and books it with CountAttempt, then ApplyInvalid / StartChoice (or
// ApplyChoice) and FileStep; FinishEpisode or DropEpisode ends it. These
// functions only book what they are given (budget counters, returns, memory
// writes, env transitions); they draw from no random stream but the slot's own.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agents/rollout.h"
#include "core/error.h"
#include "core/rng.h"

namespace rlid::agents::internal {

// ---- one episode's state and its steps (episode_slot.cc) -----------------------

struct Slot {
  EpisodeData data;
  std::unique_ptr<envs::State> state;
  Rng label_rng{0}, action_rng{0}, realisation_rng{0};
  int turns = 0;    // agent decisions so far, invalid answers included
  int retries = 0;  // consecutive invalid answers at the current state
  bool done = false;
  bool dropped = false;             // an env failure ended it (retried, dropped or rethrown)
  std::optional<EnvError> failure;  // that failure
  // Cut by the step limit: the next lockstep readout reads V(s_T), then the episode ends.
  bool needs_value = false;
  // A step whose action an AsyncState is applying (filed when it finishes).
  std::optional<StepData> pending;
};

// Sets every episode's mode (how its actions were chosen).
std::vector<EpisodeData> WithMode(std::vector<EpisodeData> episodes, EpisodeMode mode);

// A new episode of `spec`: its store id (ctx.episode_ids, else ++local_ids),
// env state, memory episode and the "labels"/"actions"/"wordings" streams (the
// last draws realisations; its name is historical and seeds it, so it stays).
Slot StartEpisode(AgentContext& ctx, const EpisodeSpec& spec, envs::Split split,
                  policy::Plane plane, int64_t& local_ids);

// Facts the new state makes observable go into memory (step t's key).
void WriteFacts(AgentContext& ctx, Slot& s, int t);

// Menu (+ seeded permutation), memory retrieval and prompt for the next step.
// A slot waiting for its bootstrap value gets the prompt of the cut state.
StepData PrepareStep(AgentContext& ctx, Slot& s, policy::Plane plane);

// Marks the episode done and collects its new memory items.
void FinishEpisode(AgentContext& ctx, Slot& s);

// A decision attempt: every one is an env step for the budget, valid or not.
void CountAttempt(Slot& s, Budget& budget);

// Applies a valid choice (step.item, step.action set) to the env and books it
// without filing the step (scripted play).
void ApplyChoice(AgentContext& ctx, Slot& s, StepData& step);

// An attempt that named no action (token-plane text that compiled to nothing,
// the decision plane's off-menu outcome): the [trainer.invalid] rule.
void ApplyInvalid(AgentContext& ctx, Slot& s, StepData& step, std::string reason,
                  Budget& budget);

// Ends the step's episode after step_limit decisions (both planes count turns,
// invalid answers included), then files the step. A cut decision-plane episode
// waits for one more readout of V(s_T) when the context asks for it.
void FileStep(AgentContext& ctx, Slot& s, StepData&& step);

// Applies a valid choice and files the step; an AsyncState only starts the
// transition, and the step waits in s.pending until FinishPending.
void StartChoice(AgentContext& ctx, Slot& s, StepData&& step);

// Files the steps whose env transitions were in flight (AsyncState).
void FinishPending(AgentContext& ctx, const std::vector<Slot*>& slots);

// Ends an episode an env failure broke: its memory items are discarded and
// the rollout's result leaves it out (Lockstep::Retire counts it).
void DropEpisode(AgentContext& ctx, Slot& s, const EnvError& e);

// Whether an EnvError ends only its episode (to be retried or dropped)
// rather than the rollout: [env] retries > 0 or on_error = "drop_episode".
bool CatchesEnvErrors(const envs::EnvInfo& info);

// What becomes of a play an env failure broke, its `attempts`-th: true when it
// is to be played again (after the retry's back-off wait; budget counts it),
// false when it is dropped (budget counts it). Throws the failure when the
// retries are spent and the env stops runs on errors.
bool RetryOrDrop(const envs::EnvInfo& info, const Slot& s, int attempts, Budget& budget);

// Runs `f` on a slot's env work; when CatchesEnvErrors an EnvError ends the
// slot's episode instead of the rollout. Returns false when it did.
template <class F>
bool Guarded(AgentContext& ctx, Slot& s, F&& f) {
  if (!CatchesEnvErrors(ctx.env->Info())) {
    f();
    return true;
  }
  try {
    f();
    return true;
  } catch (const EnvError& e) {
    DropEpisode(ctx, s, e);
    return false;
  }
}

// ---- free text after a batch of prompts (text_sampling.cc) ---------------------

// Decoding settings for one rollout call: temperature 0 when greedy, and a
// token limit (0: the sampler's own); the previous settings come back after.
class SamplerScope {
 public:
  SamplerScope(policy::RolloutEngine* sampler, bool greedy, int max_new_tokens);
  ~SamplerScope();
  SamplerScope(const SamplerScope&) = delete;
  SamplerScope& operator=(const SamplerScope&) = delete;

 private:
  policy::RolloutEngine* sampler_;
  policy::SamplerOptions saved_;
};

// Samples one text per step after its prompt (token-plane answers, or the
// decision plane's scratchpads) into each step's SampledText,
// and books the sampler's work. Identical prompts (e.g. a group at its first
// step) share one encoding: they are bucketed by how many steps show them.
// Every text draws from its step's sample_seed and `stream`.
void SampleTexts(AgentContext& ctx, const std::vector<StepData*>& steps, const policy::StopRule& stop,
                 const char* stream, Budget& budget);

}  // namespace rlid::agents::internal

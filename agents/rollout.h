// Rollouts: an agent plays episodes on N environments at once. Decision plane:
// every step batches the N prompts into ONE label-readout forward and samples
// an action from p(a|s). Token plane: the rollout engine samples free text
// that the env compiles into an action or an invalid answer. Both planes use
// the same prompt renderer, memory bank and store records (interface
// matching); every random stream derives from (run seed, episode stream).
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "agents/budget.h"
#include "core/config.h"
#include "core/rng.h"
#include "envs/api/env.h"
#include "memory/memory_bank.h"
#include "memory/records.h"
#include "policy/model/model.h"
#include "policy/reading/prompt.h"
#include "policy/reading/readout.h"
#include "policy/reading/sampler.h"

namespace rlid::agents {

// Which realisations of each item the readout marginalises into p(a|s)
// ([readout] realisations): all (the label and every realisation) | labels.
enum class RealisationSet { kAll, kLabels };
constexpr auto Spellings(RealisationSet) {
  return ModeNames<RealisationSet>({{RealisationSet::kAll, "all"}, {RealisationSet::kLabels, "labels"}});
}

// What a token-plane answer that compiles to no action does ([trainer.invalid] rule).
enum class InvalidRule { kPenaltyRetry, kPenaltyNoop, kEnd };
constexpr auto Spellings(InvalidRule) {
  return ModeNames<InvalidRule>({{InvalidRule::kPenaltyRetry, "penalty_retry"},
                                 {InvalidRule::kPenaltyNoop, "penalty_noop"},
                                 {InvalidRule::kEnd, "end"}});
}

struct ReadoutConfig {
  RealisationSet realisations = RealisationSet::kAll;
  // menu: p(a|s) renormalised over the K menu items; other: K + 1 outcomes, the
  // off-menu mass 1 - Σ_a p(a|s) being an outcome of its own that plays as an
  // invalid answer ([trainer.invalid]). Sampling, the PPO ratio, KL and entropy
  // all use this one distribution (policy::DecisionDistribution).
  policy::Normalisation normalisation = policy::Normalisation::kMenu;
  // Compute the common prompt prefix of a readout batch once (the same numbers
  // up to float rounding; fewer FLOPs in budget/*). Opt-in, so that runs
  // reproduce earlier ones bit for bit unless asked.
  bool share_prefix = false;
  void Load(ConfigNode n);
  bool off_menu_outcome() const { return normalisation == policy::Normalisation::kOther; }
};

// What to do with a token-plane answer that compiles to no action.
struct InvalidConfig {
  InvalidRule rule = InvalidRule::kPenaltyRetry;
  double penalty = -0.1;               // reward of an invalid answer
  int max_retries = 2;                 // penalty_retry: extra tries at the same state
  void Load(ConfigNode n);
};

struct EpisodeSpec {
  uint64_t env_seed = 0;
  uint64_t stream = 0;  // index of this episode's RNG streams (unique within a run)
  int group = -1;       // episodes sharing an env seed (group advantages)
};

// What the decision plane read at a step: the rollout readout, which in the
// decision plane is also the training forward (policy::Readout).
struct DecisionRead {
  std::vector<float> log_p;  // per menu item (unnormalised with "other")
  float log_p_other = 0;     // log of the off-menu mass (outcome K with "other")
  std::vector<std::vector<float>> realisation_logp;  // per item, per realisation (label first)
  float value = 0, candidate_mass = 0, row_entropy = 0, menu_entropy = 0;
  std::vector<float> afterstate_values;
  // The reference policy's decision distribution (K or K + 1 outcomes, as
  // policy::DecisionDistribution), when a reference is set.
  std::vector<float> ref_log_p;
  // Sum of p(a|s) over the oracle's optimal items (AgentContext::oracle_probs
  // and an env with an oracle); < 0 when not measured.
  double p_optimal = -1;
  // With [prompt] reasoning (think-then-decide): the sampled scratchpad z is
  // the step's SampledText, the readout reads the menu at prompt ++ z ++
  // readout_suffix, and think_logp is log π(z|s) read in that same pass.
  std::vector<policy::TokenId> readout_suffix;  // empty: no scratchpad
  float think_logp = 0;
};

// Free text sampled at a step: the token plane's answer, or the decision
// plane's scratchpad.
struct SampledText {
  std::vector<policy::TokenId> response;
  std::vector<float> rollout_logp;  // per response token, rollout engine
  std::vector<float> train_logp;    // per response token, training forward (filled by the trainer)
  std::vector<float> ref_logp;      // per response token, reference model (trainer; if one)
  std::string response_text;
};

// One decision attempt of an episode: what the agent saw, what it read or
// sampled (by plane), and the outcome.
struct StepData {
  int t = 0;
  // The random stream of this turn's sampled text (answer or scratchpad): from
  // (run seed, the episode's stream, t) only, so the text does not depend on
  // the batch the step was sampled in.
  uint64_t sample_seed = 0;
  std::string observation;
  policy::RenderedPrompt prompt;
  envs::Menu menu;                        // as shown (labels may be permuted)
  std::vector<memory::Retrieved> memory;  // items in the prompt
  // The episode's earlier steps the prompt showed (prompt.history_steps), oldest first.
  std::vector<policy::HistoryTurn> history;
  uint64_t state_hash = 0;  // env State::Hash() before acting
  DecisionRead decision;    // decision plane (empty in the token plane)
  SampledText text;         // token plane, and the decision plane's scratchpad
  // Outcome.
  int item = -1;                       // chosen menu index (-1: invalid)
  envs::ActionId action = envs::kNoAction;
  // The realisation that produced the action: token plane, what the free text
  // compiled through; decision plane, a draw from π(y | s, a) over the chosen
  // item's realisations (the episode's "wordings" stream, a historical name).
  // Empty when invalid.
  std::string realisation;
  int optimal = -1;  // 1/0: the action was/was not one of the oracle's; -1: no oracle
  bool invalid = false;
  std::string invalid_reason;
  double reward = 0;
  bool terminal = false;
};

// How an episode's actions were chosen (episodes.mode: a train-split episode
// the policy sampled is a "rollout", a test-split one an evaluation).
enum class EpisodeMode { kSampled, kGreedy, kScripted };

struct EpisodeData {
  int64_t id = 0;  // store episode id
  EpisodeSpec spec;
  envs::Split split = envs::Split::kTrain;
  EpisodeMode mode = EpisodeMode::kSampled;
  policy::Plane plane = policy::Plane::kDecision;
  std::vector<StepData> steps;
  std::vector<memory::MemoryItem> new_items;
  double ret = 0;
  bool success = false, truncated = false;
  int invalid_steps = 0;
  // Plays of this episode: 1, or 1 + the retries an env failure caused (each
  // retry replays it from reset; only the last, complete play is kept).
  int attempts = 1;
  // V(s_T) of the state where the step limit cut the episode (decision plane,
  // AgentContext::bootstrap_truncated); NaN when not read (terminal episodes).
  double bootstrap_value = std::numeric_limits<double>::quiet_NaN();
};

// Everything a rollout needs; pointers are non-owning.
struct AgentContext {
  const envs::Env* env = nullptr;
  policy::TransformerLM model{nullptr};      // the policy (decision readout, token scoring)
  policy::TransformerLM ref_model{nullptr};  // frozen reference for KL (optional)
  policy::RolloutEngine* sampler = nullptr;  // token plane rollout engine ([sampler] engine)
  const policy::PromptRenderer* renderer = nullptr;
  ReadoutConfig readout;
  InvalidConfig invalid;
  memory::MemoryBank* bank = nullptr;   // memory (optional)
  // Memory pass of these episodes (memory::EpisodeScope::pass): 0 for training;
  // each evaluation call sets a fresh bank->NewPass() so it reads only its own items.
  int64_t memory_pass = 0;
  memory::IdAllocator* episode_ids = nullptr;  // store ids (a local counter when null)
  int64_t run_id = 0;
  uint64_t seed = 0;  // run seed
  int64_t policy_version = 0;
  int64_t iteration = 0;
  int num_envs = 16;               // episodes played in lockstep (readout batch size)
  bool afterstate_values = false;  // read the afterstate critic in the same pass
  bool oracle_probs = false;       // fill decision.p_optimal (evaluation; needs an OracleState)
  // [env] show_steps_left: observations end with "Steps left: N." (the time
  // limit is then part of the state, and a cut is terminal for the critic).
  bool show_steps_left = false;
  // Decision plane: when the step limit cuts an episode (and the steps left
  // are not shown), read V(s_T) in the next lockstep readout for bootstrapping.
  bool bootstrap_truncated = false;
  StageTimes* times = nullptr;  // adds readout / env seconds here (optional)
  // Called after each episode ends with (episodes ended, episodes in the call)
  // (optional; progress lines of long evaluations).
  std::function<void(int64_t, int64_t)> on_episode_end;
};

// The observation of `state` as the agent reads it after `turns` decisions.
std::string ObservationText(const envs::State& state, int turns, int step_limit,
                            bool show_steps_left);

// Plays every spec (num_envs at a time, refilling slots as episodes end).
// greedy: argmax outcome (evaluation); otherwise sampled from the decision
// distribution (K menu items, + the off-menu outcome with normalisation
// "other", which plays as an invalid answer under ctx.invalid). Both planes
// count every decision attempt as an env step and cut an episode after
// step_limit decisions (EpisodeData::truncated).
// An env whose states are AsyncState (external envs) applies actions while the
// rollout goes on; with EnvInfo::concurrency > 1 two halves of the slots take
// turns so env steps overlap model forwards. An EnvError breaks only the
// episode it hit when the env has [env] retries (it is played again from
// reset, same seed and streams, up to that many times: budget.episodes_retried,
// EpisodeData::attempts) or on_error = "drop_episode" (once retries are spent,
// the result leaves it out: budget.episodes_dropped). Otherwise it propagates.
// With [prompt] reasoning every step first samples a scratchpad z with
// ctx.sampler (greedy: temperature 0) until a token that ends the line, at most
// prompt.max_think_tokens tokens, then reads the menu conditioned on it; the
// budget counts z's tokens and the sampling forwards.
// Throws NumericError (naming the tensor and ctx.iteration) when the readout
// returns a non-finite log p(a|s) or value (the policy's weights are broken)
// or the env a non-finite reward; nothing of that batch is returned.
std::vector<EpisodeData> RunDecisionEpisodes(AgentContext& ctx, const std::vector<EpisodeSpec>& specs,
                                             envs::Split split, bool greedy, Budget& budget);

// Where a decision-plane scratchpad ends: at end-of-text or at a token whose
// text holds a newline (the token is kept: π(z|s) includes stopping there).
// For an engine that does not call back per token, the rule lists those tokens.
policy::StopRule EndOfThought(const policy::Tokenizer& tok, const policy::RolloutEngine* engine = nullptr);
// The tokens whose text holds a newline, and the tokenizer's stop tokens.
std::vector<policy::TokenId> LineEndTokens(const policy::Tokenizer& tok);

// Token plane: the sampler generates each answer; invalid answers follow
// ctx.invalid. greedy uses temperature 0.
std::vector<EpisodeData> RunTokenEpisodes(AgentContext& ctx, const std::vector<EpisodeSpec>& specs,
                                          envs::Split split, bool greedy, Budget& budget);

// A token-plane answer -> the menu item it names: the grammar of
// docs/free_text.md on the menu as shown (labels as permuted), then, for text
// it rejects, the env's own compiler when the state has one (TextCompiler).
envs::CompileResult CompileAnswer(const envs::State& state, const envs::Menu& shown,
                                  std::string_view text);

// A scripted policy (oracle demonstrations, random play): picks the menu
// index to take from the state and the step as the agent sees it.
using Chooser = std::function<int(const envs::State& state, const StepData& step, Rng& rng)>;
// The rollout policy's decision distribution of a step: log_p, plus
// log_p_other as outcome K with normalisation "other".
std::vector<float> DecisionLogP(const StepData& step, const ReadoutConfig& readout);
// The index of the step's outcome in that distribution (K for the off-menu outcome).
int DecisionOutcome(const StepData& step);

// Plays specs with the same prompts/memory/records as the agent, choosing by
// `choose` (its Rng is the episode's "scripted" stream). Used by `rlid sft`.
// With [prompt] reasoning each step carries the env's worked reasoning
// (envs::ReasoningOracle) as its scratchpad; ConfigError when the env has none.
std::vector<EpisodeData> RunScriptedEpisodes(AgentContext& ctx, const std::vector<EpisodeSpec>& specs,
                                             envs::Split split, const Chooser& choose, Budget& budget);

// The readout input of a step (prompt, realisations, afterstate branches); a step
// with a scratchpad reads at prompt ++ z ++ readout_suffix with z scored.
policy::ReadoutRequest ReadoutRequestFor(const policy::PromptRenderer& renderer, const StepData& step,
                                         const ReadoutConfig& readout, bool afterstates);
policy::ReadoutOptions ReadoutOptionsFor(const ReadoutConfig& readout, bool afterstates);

// The store record of an episode (steps, menus with probabilities, reads, items).
memory::EpisodeRecord ToRecord(const EpisodeData& e, const AgentContext& ctx);

}  // namespace rlid::agents

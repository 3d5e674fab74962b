// The menu-environment API. An Env makes States from seeds; a State compiles
// itself into a Menu of executable actions (label, canonical command, accepted
// realisations, afterstate) and compiles free text into an action or an `invalid`
// result. Everything an agent sees is text; everything an env does is
// deterministic given its seed. No LibTorch here: envs stay fast to
// build and are tested without it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/config.h"
#include "core/registry.h"
#include "envs/api/menu.h"

namespace rlid::envs {

struct StepOutcome {
  double reward = 0.0;
  bool terminal = false;   // the episode is over (success, failure or step limit)
  bool success = false;    // the task was solved by this step
  bool truncated = false;  // ended by the step limit, not by the task
};

// Seeds are split by parity: even seeds are train, odd seeds are test, so the
// two splits can never share a seed. Index i of a split maps to seed 2i(+1).
enum class Split { kTrain = 0, kTest = 1 };
const char* SplitName(Split s);
Split ParseSplit(std::string_view name);  // "train" | "test"; ConfigError otherwise
inline Split SplitOf(uint64_t seed) { return seed % 2 == 0 ? Split::kTrain : Split::kTest; }
inline uint64_t SplitSeed(Split s, uint64_t index) { return 2 * index + static_cast<uint64_t>(s); }

class State {
 public:
  virtual ~State() = default;
  // What a person (or the model) reads about the current state, goal included.
  virtual std::string Observation() const = 0;
  // Ids of the executable actions, in menu order; empty when terminal.
  virtual std::vector<ActionId> LegalActions() const = 0;
  // The executable actions with default labels A, B, C, ... in env order and
  // their afterstates (Clone()+Apply(); this state is not changed).
  virtual Menu CompileMenu() const = 0;
  // Applies a legal action. An illegal id is an InternalError (callers pass
  // menu actions). After a terminal outcome no further Apply is allowed.
  virtual StepOutcome Apply(ActionId action) = 0;
  virtual bool IsTerminal() const = 0;
  // Free text -> action of the default-labelled menu, or invalid with a reason.
  virtual CompileResult Compile(std::string_view text) const = 0;
  virtual std::unique_ptr<State> Clone() const = 0;
  // Canonical id of the state (the step counter is not part of it).
  virtual uint64_t Hash() const = 0;
  // Decisions taken so far in this episode.
  virtual int StepCount() const = 0;
};

// Facts about a game that do not depend on the instance.
struct EnvInfo {
  std::string name;
  std::string summary;
  int step_limit = 0;         // episodes are truncated after this many decisions
  bool deterministic = true;  // transitions and rewards are functions of (state, action)
  // An EnvError from this env's states ends only the episode it hit (which is
  // dropped from the rollout) instead of the run: external envs' [env] on_error.
  bool drop_failed_episodes = false;
  // An episode an EnvError broke is played again from reset (same seed, same
  // random streams) up to this many times before drop_failed_episodes decides;
  // the i-th retry waits i * retry_backoff_s seconds first ([env] retries).
  int episode_retries = 0;
  double retry_backoff_s = 0.0;
  // What the env says about itself (a JSON object: name, version, packages),
  // recorded with each run; "" when it says nothing.
  std::string metadata;
  // How many of this env's states can step at the same time (an external env's
  // worker processes). Above 1, rollouts alternate two halves of their episodes
  // so that one half's env steps overlap the other half's model forward.
  int concurrency = 1;
};

class Env {
 public:
  static constexpr const char* kRegistryKind = "environment";
  virtual ~Env() = default;
  virtual EnvInfo Info() const = 0;
  // Rules of the game, shown at the top of every prompt.
  virtual std::string Instructions() const = 0;
  virtual std::unique_ptr<State> NewState(uint64_t seed) const = 0;
};

// Factories receive the [env] section (minus `name`) and read their parameters.
using EnvRegistry = Registry<Env, ConfigNode>;

// The built-in envs (envs/builtin/), which run with their default
// parameters, sorted. Tests, fuzzers and benchmarks that sweep "every env"
// use this list; the external stack's envs need a program or a package.
std::vector<std::string> BuiltInEnvNames();

// Registers a built-in env (at the bottom of its own .cc file) and lists it
// in BuiltInEnvNames().
struct BuiltInEnv {
  BuiltInEnv(std::string name, std::string summary, EnvRegistry::Factory factory);
};

// Makes the env named by [env].name with its parameters.
std::unique_ptr<Env> MakeEnv(ConfigNode env_section);
// Makes an env by name with parameter overrides "key=value" (for tests and the CLI).
std::unique_ptr<Env> MakeEnv(std::string_view name, const std::vector<std::string>& params = {});

// ---- optional capabilities (query with dynamic_cast) ---------------------------

// A State that knows the optimal actions from itself.
class OracleState {
 public:
  virtual ~OracleState() = default;
  // All actions that keep the optimal return reachable; empty if terminal/unsolvable.
  virtual std::vector<ActionId> OptimalActions() const = 0;
  // The return of optimal play from here (rewards of future steps, undiscounted).
  virtual double OptimalReturn() const = 0;
};

// A State that the step limit can cut: after a cut (IsTerminal() by the limit,
// not by the task) it still shows the menu the agent would have seen, so a
// critic can read V(s_T) to bootstrap the return of the cut episode.
class CutState {
 public:
  virtual ~CutState() = default;
  // True when the step limit ended the episode and the task did not.
  virtual bool WasCut() const = 0;
  // The menu of this state ignoring the cut; InternalError unless WasCut().
  virtual Menu MenuAtCut() const = 0;
};

// A State whose Apply can be split in two, so that the transitions of many
// states run at once (an external env's worker processes) while the caller
// does other work, e.g. the model's forward for other episodes. Between
// StartApply and FinishApply the state must not be used otherwise.
class AsyncState {
 public:
  virtual ~AsyncState() = default;
  // Sends the legal action `action`; returns at once.
  virtual void StartApply(ActionId action) = 0;
  // Waits for the outcome of the pending StartApply (what Apply would return).
  virtual StepOutcome FinishApply() = 0;
};

// A State with a free-text compiler of its own beyond the menu grammar of
// docs/free_text.md (an external env's `compile`). Callers ask it only for
// text the grammar rejected on the menu as shown, so labels keep the meaning
// the (possibly permuted) menu gives them.
class TextCompiler {
 public:
  virtual ~TextCompiler() = default;
  // An action of LegalActions() (item = its default-menu index) or invalid with a reason.
  virtual CompileResult CompileText(std::string_view text) const = 0;
};

// A State that exposes facts it makes observable (for memory write policies),
// e.g. "the red key is in the kitchen".
class FactSource {
 public:
  virtual ~FactSource() = default;
  virtual std::vector<std::string> Facts() const = 0;
};

}  // namespace rlid::envs

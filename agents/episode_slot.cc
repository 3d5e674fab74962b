// One episode's playing state and the bookkeeping every rollout step goes
// through, whatever chose the action (decision readout, token-plane text, a
// scripted chooser): prompts, env transitions, invalid answers, the step
// limit, memory writes and dropped episodes. Declared in agents/rollout_internal.h.
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <thread>

#include "agents/rollout_internal.h"
#include "core/check.h"
#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"

namespace rlid::agents {

std::string ObservationText(const envs::State& state, int turns, int step_limit,
                            bool show_steps_left) {
  std::string text = state.Observation();
  if (show_steps_left) text += fmt::format("\nSteps left: {}.", std::max(0, step_limit - turns));
  return text;
}

namespace internal {
namespace {

// 1/0 when the env has an oracle: is `action` one of its optimal actions here.
int OptimalFlag(const envs::State& state, envs::ActionId action) {
  auto* oracle = dynamic_cast<const envs::OracleState*>(&state);
  if (!oracle) return -1;
  if (action == envs::kNoAction) return 0;
  auto best = oracle->OptimalActions();
  return std::find(best.begin(), best.end(), action) != best.end() ? 1 : 0;
}

// Books the outcome of a valid choice (step.item, step.action set) that the env applied.
void FinishChoice(AgentContext& ctx, Slot& s, StepData& step, const envs::StepOutcome& out) {
  if (!std::isfinite(out.reward))
    throw NumericError(
        fmt::format("non-finite reward {} from env '{}' at iteration {} (env seed {}, step {})",
                    out.reward, ctx.env->Info().name, ctx.iteration, s.data.spec.env_seed, step.t),
        "the environment produced NaN/Inf; check its reward parameters ([env] section)");
  s.retries = 0;
  step.reward = out.reward;
  step.terminal = out.terminal;
  s.data.ret += out.reward;
  s.data.success = s.data.success || out.success;
  s.data.truncated = out.truncated;
  if (!out.terminal) WriteFacts(ctx, s, step.t + 1);
}

}  // namespace

std::vector<EpisodeData> WithMode(std::vector<EpisodeData> episodes, EpisodeMode mode) {
  for (auto& e : episodes) e.mode = mode;
  return episodes;
}

Slot StartEpisode(AgentContext& ctx, const EpisodeSpec& spec, envs::Split split,
                  policy::Plane plane, int64_t& local_ids) {
  Slot s;
  s.data.spec = spec;
  s.data.split = split;
  s.data.plane = plane;
  s.data.id = ctx.episode_ids ? ctx.episode_ids->Next() : ++local_ids;
  s.state = ctx.env->NewState(spec.env_seed);
  if (ctx.bank && ctx.bank->config().enabled)
    ctx.bank->BeginEpisode(s.data.id, {envs::SplitName(split), spec.env_seed, ctx.memory_pass});
  s.label_rng = Rng::Stream(ctx.seed, "labels", spec.stream);
  s.action_rng = Rng::Stream(ctx.seed, "actions", spec.stream);
  // The realisation stream keeps its historical name "wordings": the name seeds
  // the stream, so renaming it would change every seeded run's draws.
  s.realisation_rng = Rng::Stream(ctx.seed, "wordings", spec.stream);
  return s;
}

void WriteFacts(AgentContext& ctx, Slot& s, int t) {
  if (!ctx.bank || !ctx.bank->config().enabled) return;
  auto* facts = dynamic_cast<const envs::FactSource*>(s.state.get());
  if (!facts) return;
  for (const auto& f : facts->Facts())
    ctx.bank->Write(f, memory::MemoryKind::kObservation, {ctx.run_id, s.data.id, t},
                    ctx.policy_version);
}

StepData PrepareStep(AgentContext& ctx, Slot& s, policy::Plane plane) {
  StepData step;
  step.t = static_cast<int>(s.data.steps.size());
  step.sample_seed = Rng::DeriveSeed(ctx.seed, "turn", s.data.spec.stream, static_cast<uint64_t>(step.t));
  step.observation =
      ObservationText(*s.state, s.turns, ctx.env->Info().step_limit, ctx.show_steps_left);
  step.state_hash = s.state->Hash();
  if (s.needs_value && s.state->IsTerminal()) {
    auto* cut = dynamic_cast<const envs::CutState*>(s.state.get());
    RLID_CHECK(cut && cut->WasCut(), "bootstrap value requested for a state that was not cut");
    step.menu = cut->MenuAtCut();
  } else {
    step.menu = s.state->CompileMenu();
  }
  if (ctx.renderer->config().label_order == policy::LabelOrder::kShuffle) envs::ShuffleMenu(step.menu, s.label_rng);
  std::vector<std::string> memory_texts;
  if (ctx.bank && ctx.bank->config().enabled) {
    step.memory = ctx.bank->Retrieve(step.observation, s.data.id);
    for (const auto& r : step.memory) memory_texts.push_back(r.item.content);
  }
  const size_t n = std::min(s.data.steps.size(), static_cast<size_t>(ctx.renderer->config().history_steps));
  for (size_t i = s.data.steps.size() - n; i < s.data.steps.size(); ++i) {
    const StepData& before = s.data.steps[i];
    step.history.push_back({before.observation, before.item >= 0 ? before.menu.items[before.item].command : ""});
  }
  step.prompt = ctx.renderer->Render(ctx.env->Instructions(), step.observation, memory_texts,
                                     step.menu, plane, step.history);
  return step;
}

void FinishEpisode(AgentContext& ctx, Slot& s) {
  s.done = true;
  if (ctx.bank && ctx.bank->config().enabled) s.data.new_items = ctx.bank->EndEpisode(s.data.id);
}

void CountAttempt(Slot& s, Budget& budget) {
  budget.env_steps += 1;
  budget.samples_generated += 1;
  s.turns += 1;
}

void ApplyChoice(AgentContext& ctx, Slot& s, StepData& step) {
  step.optimal = OptimalFlag(*s.state, step.action);
  FinishChoice(ctx, s, step, s.state->Apply(step.action));
}

void ApplyInvalid(AgentContext& ctx, Slot& s, StepData& step, std::string reason,
                  Budget& budget) {
  step.invalid = true;
  step.invalid_reason = std::move(reason);
  step.optimal = OptimalFlag(*s.state, envs::kNoAction);
  step.reward = ctx.invalid.penalty;
  s.data.ret += step.reward;
  s.data.invalid_steps += 1;
  budget.invalid_steps += 1;
  s.retries += 1;
  step.terminal = ctx.invalid.rule == InvalidRule::kEnd ||
                  (ctx.invalid.rule == InvalidRule::kPenaltyRetry && s.retries > ctx.invalid.max_retries);
}

namespace {

// Whether the state where a truncated episode ended can still be read for
// V(s_T): a live state (rlid's step limit cut it), or one the env cut that
// says what its menu was (an external env that sent no menu at the cut is
// bootstrapped as terminal).
bool CutReadable(const envs::State& state) {
  if (!state.IsTerminal()) return true;
  const auto* cut = dynamic_cast<const envs::CutState*>(&state);
  return cut && cut->WasCut();
}

}  // namespace

void FileStep(AgentContext& ctx, Slot& s, StepData&& step) {
  if (!step.terminal && s.turns >= ctx.env->Info().step_limit) {
    step.terminal = true;
    s.data.truncated = true;
  }
  const bool done = step.terminal;
  s.data.steps.push_back(std::move(step));
  if (!done) return;
  if (s.data.truncated && ctx.bootstrap_truncated && !ctx.show_steps_left && CutReadable(*s.state))
    s.needs_value = true;
  else
    FinishEpisode(ctx, s);
}

void StartChoice(AgentContext& ctx, Slot& s, StepData&& step) {
  step.optimal = OptimalFlag(*s.state, step.action);
  if (auto* async = dynamic_cast<envs::AsyncState*>(s.state.get())) {
    async->StartApply(step.action);
    s.pending = std::move(step);
    return;
  }
  FinishChoice(ctx, s, step, s.state->Apply(step.action));
  FileStep(ctx, s, std::move(step));
}

void DropEpisode(AgentContext& ctx, Slot& s, const EnvError& e) {
  spdlog::warn("env failure in episode {} (env seed {}, after {} steps): {}", s.data.id,
               s.data.spec.env_seed, s.data.steps.size(), e.what());
  if (ctx.bank && ctx.bank->config().enabled) ctx.bank->DiscardEpisode(s.data.id);
  s.pending.reset();
  s.dropped = s.done = true;
  s.failure = e;
}

bool CatchesEnvErrors(const envs::EnvInfo& info) {
  return info.drop_failed_episodes || info.episode_retries > 0;
}

bool RetryOrDrop(const envs::EnvInfo& info, const Slot& s, int attempts, Budget& budget) {
  if (attempts <= info.episode_retries) {
    spdlog::warn("playing episode {} (env seed {}) again from reset: retry {} of {}", s.data.id,
                 s.data.spec.env_seed, attempts, info.episode_retries);
    budget.episodes_retried += 1;
    if (info.retry_backoff_s > 0)
      std::this_thread::sleep_for(std::chrono::duration<double>(attempts * info.retry_backoff_s));
    return true;
  }
  if (!info.drop_failed_episodes) {
    RLID_CHECK(s.failure.has_value(), "a broken episode without its failure");
    throw *s.failure;
  }
  budget.episodes_dropped += 1;
  return false;
}

void FinishPending(AgentContext& ctx, const std::vector<Slot*>& slots) {
  for (Slot* s : slots) {
    if (!s->pending) continue;
    Guarded(ctx, *s, [&] {
      StepData step = std::move(*s->pending);
      s->pending.reset();
      FinishChoice(ctx, *s, step, dynamic_cast<envs::AsyncState&>(*s->state).FinishApply());
      FileStep(ctx, *s, std::move(step));
    });
  }
}

}  // namespace internal
}  // namespace rlid::agents

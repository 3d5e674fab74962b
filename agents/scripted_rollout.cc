// Scripted rollouts (RunScriptedEpisodes): a Chooser such as an env oracle
// or random play picks each action, one episode at a time, with the prompts,
// memory and records of the agent's own rollouts (`rlid sft` demonstrations).
#include <fmt/format.h>

#include "agents/rollout.h"
#include "agents/rollout_internal.h"
#include "core/check.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/rng.h"
#include "envs/api/reasoning_oracle.h"

namespace rlid::agents {

using internal::Slot;

namespace {

// [prompt] reasoning: the env's worked reasoning becomes the step's scratchpad
// z, read before the answer prefix. ConfigError when the env writes none.
void AttachWorkedReasoning(const AgentContext& ctx, const envs::State& state, StepData& step) {
  auto* worked = dynamic_cast<const envs::ReasoningOracle*>(&state);
  if (!worked)
    throw ConfigError(
        fmt::format("prompt.reasoning: env '{}' writes no worked reasoning for "
                    "demonstrations (it is not an envs::ReasoningOracle)",
                    ctx.env->Info().name),
        "warm-start without reasoning (prompt.reasoning = false in the sft run), or use an "
        "env with oracle reasoning such as arith");
  step.text.response_text = worked->OracleReasoning();
  step.text.response = ctx.renderer->ThoughtTokens(step.text.response_text);
  step.decision.readout_suffix = ctx.renderer->AnswerPrefixTokens();
}

// Plays one episode to its end, every action chosen by `choose`.
void PlayScripted(AgentContext& ctx, Slot& s, const Chooser& choose, Rng& rng, Budget& budget) {
  const bool think = ctx.renderer->config().reasoning;
  while (!s.state->IsTerminal()) {
    ThrowIfInterrupted();
    StepData step = internal::PrepareStep(ctx, s, policy::Plane::kDecision);
    step.item = choose(*s.state, step, rng);
    RLID_CHECK(step.item >= 0 && step.item < static_cast<int>(step.menu.size()),
               "scripted choice out of range");
    step.action = step.menu.items[step.item].action;
    step.realisation = step.menu.items[step.item].label;
    if (think) AttachWorkedReasoning(ctx, *s.state, step);
    internal::CountAttempt(s, budget);
    internal::ApplyChoice(ctx, s, step);
    s.data.steps.push_back(std::move(step));
  }
}

}  // namespace

std::vector<EpisodeData> RunScriptedEpisodes(AgentContext& ctx,
                                             const std::vector<EpisodeSpec>& specs,
                                             envs::Split split, const Chooser& choose,
                                             Budget& budget) {
  RLID_CHECK(ctx.env && ctx.renderer, "incomplete agent context");
  std::vector<EpisodeData> out;
  int64_t local_ids = 0;
  const envs::EnvInfo info = ctx.env->Info();
  for (const auto& spec : specs) {
    Slot s;
    for (int attempt = 1;; ++attempt) {
      s = Slot{};
      s.data.spec = spec;
      Rng rng = Rng::Stream(ctx.seed, "scripted", spec.stream);
      try {
        s = internal::StartEpisode(ctx, spec, split, policy::Plane::kDecision, local_ids);
        s.data.attempts = attempt;
        internal::WriteFacts(ctx, s, 0);
        PlayScripted(ctx, s, choose, rng, budget);
        break;
      } catch (const EnvError& e) {
        if (!internal::CatchesEnvErrors(info)) throw;
        internal::DropEpisode(ctx, s, e);
        if (!internal::RetryOrDrop(info, s, attempt, budget)) break;
      }
    }
    if (s.dropped) continue;
    internal::FinishEpisode(ctx, s);
    budget.episodes += 1;
    out.push_back(std::move(s.data));
  }
  return internal::WithMode(std::move(out), EpisodeMode::kScripted);
}

}  // namespace rlid::agents

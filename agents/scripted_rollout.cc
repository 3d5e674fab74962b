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
#include "envs/reasoning_oracle.h"

namespace rlid::agents {

using namespace internal;

std::vector<EpisodeData> RunScriptedEpisodes(AgentContext& ctx,
                                             const std::vector<EpisodeSpec>& specs,
                                             envs::Split split, const Chooser& choose,
                                             Budget& budget) {
  RLID_CHECK(ctx.env && ctx.renderer, "incomplete agent context");
  std::vector<EpisodeData> out;
  int64_t local_ids = 0;
  const bool drop = ctx.env->Info().drop_failed_episodes;
  const bool think = ctx.renderer->config().reasoning;
  for (const auto& spec : specs) {
    Slot s;
    s.data.spec = spec;
    Rng rng = Rng::Stream(ctx.seed, "scripted", spec.stream);
    try {
      s = StartEpisode(ctx, spec, split, policy::Plane::kDecision, local_ids);
      WriteFacts(ctx, s, 0);
      while (!s.state->IsTerminal()) {
        ThrowIfInterrupted();
        StepData step = PrepareStep(ctx, s, policy::Plane::kDecision);
        step.item = choose(*s.state, step, rng);
        RLID_CHECK(step.item >= 0 && step.item < static_cast<int>(step.menu.size()),
                   "scripted choice out of range");
        step.action = step.menu.items[step.item].action;
        step.realisation = step.menu.items[step.item].label;
        if (think) {  // the worked reasoning as the step's scratchpad
          auto* worked = dynamic_cast<const envs::ReasoningOracle*>(s.state.get());
          if (!worked)
            throw ConfigError(
                fmt::format("prompt.reasoning: env '{}' writes no worked reasoning for "
                            "demonstrations (it is not an envs::ReasoningOracle)",
                            ctx.env->Info().name),
                "warm-start without reasoning (prompt.reasoning = false in the sft run), or use an "
                "env with oracle reasoning such as arith");
          step.response_text = worked->OracleReasoning();
          step.response = ctx.renderer->ThoughtTokens(step.response_text);
          step.readout_suffix = ctx.renderer->AnswerPrefixTokens();
        }
        CountAttempt(s, budget);
        ApplyChoice(ctx, s, step);
        s.data.steps.push_back(std::move(step));
      }
    } catch (const EnvError& e) {
      if (!drop) throw;
      DropEpisode(ctx, s, e);
      budget.episodes_dropped += 1;
      continue;
    }
    FinishEpisode(ctx, s);
    budget.episodes += 1;
    out.push_back(std::move(s.data));
  }
  return WithMode(std::move(out), EpisodeMode::kScripted);
}

}  // namespace rlid::agents

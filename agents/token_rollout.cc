// Token-plane rollouts (RunTokenEpisodes): every lockstep round samples one
// free-text answer per episode with the agent's rollout engine, and the env's
// menu (or its own compiler) turns the text into an action or an invalid
// answer under [trainer.invalid].
#include <fmt/format.h>

#include <optional>

#include "agents/lockstep.h"
#include "agents/rollout.h"
#include "agents/rollout_internal.h"
#include "core/check.h"
#include "core/interrupt.h"

namespace rlid::agents {

using internal::Slot;

namespace {

// Where a token-plane answer ends: at end-of-text, or at the end of the answer
// line (with [prompt] reasoning, the first line end after the last answer
// prefix). Every such end is a line-end token (the rule's `at` for an engine
// that does not call back per token).
policy::StopRule EndOfAnswer(const policy::Tokenizer& tok, bool reasoning, std::string prefix,
                             const policy::RolloutEngine& engine) {
  policy::StopFn done = [&tok, reasoning, prefix = std::move(prefix)](const std::vector<policy::TokenId>& gen) {
    if (gen.empty()) return false;
    if (tok.IsStop(gen.back())) return true;
    if (!reasoning) return tok.DecodeToken(gen.back()).find('\n') != std::string::npos;
    std::string text = tok.Decode(gen, /*skip_special=*/true);
    size_t at = text.rfind(prefix);
    return at != std::string::npos && text.find('\n', at) != std::string::npos;
  };
  if (engine.calls_back()) return {std::move(done)};
  return {std::move(done), LineEndTokens(tok)};
}

// Plays the step's sampled answer: the action it compiles to, or an invalid answer.
void PlayAnswer(AgentContext& ctx, Slot& s, StepData& step, Budget& budget) {
  internal::CountAttempt(s, budget);
  const auto res = CompileAnswer(*s.state, step.menu, step.text.response_text);
  if (!res.valid()) {
    internal::ApplyInvalid(ctx, s, step, res.reason, budget);
    internal::FileStep(ctx, s, std::move(step));
    return;
  }
  step.item = res.item;
  step.action = res.action;
  step.realisation = res.matched;
  internal::StartChoice(ctx, s, std::move(step));
}

}  // namespace

envs::CompileResult CompileAnswer(const envs::State& state, const envs::Menu& shown,
                                  std::string_view text) {
  envs::CompileResult res = shown.Compile(text);
  if (res.valid()) return res;
  const auto* own = dynamic_cast<const envs::TextCompiler*>(&state);
  if (!own) return res;
  envs::CompileResult theirs = own->CompileText(text);
  if (!theirs.valid()) {
    theirs.reason = fmt::format("{}; the env's own compiler: {}", res.reason, theirs.reason);
    return theirs;
  }
  theirs.item = shown.IndexOfAction(theirs.action);
  RLID_CHECK(theirs.item >= 0, "the env compiled an answer to action {}, which the menu lacks",
             theirs.action);
  return theirs;
}

std::vector<EpisodeData> RunTokenEpisodes(AgentContext& ctx, const std::vector<EpisodeSpec>& specs,
                                          envs::Split split, bool greedy, Budget& budget) {
  RLID_CHECK(ctx.env && ctx.renderer && ctx.sampler,
             "incomplete agent context (token plane needs a sampler)");
  torch::NoGradGuard no_grad;
  const auto& prompt = ctx.renderer->config();
  const policy::StopRule stop =
      EndOfAnswer(ctx.renderer->tokenizer(), prompt.reasoning, prompt.answer_prefix, *ctx.sampler);

  internal::Lockstep lockstep(ctx, specs, split, policy::Plane::kToken);
  // Greedy evaluation decodes at temperature 0; the training options come back after.
  internal::SamplerScope scope(ctx.sampler, greedy, 0);

  double* readout_seconds = ctx.times ? &ctx.times->readout : nullptr;
  double* env_seconds = ctx.times ? &ctx.times->env : nullptr;
  while (lockstep.Running()) {
    for (int g = 0; g < lockstep.groups(); ++g) {
      ThrowIfInterrupted();  // between steps: every finished episode is whole
      auto [slots, steps] =
          internal::PrepareGroup(ctx, lockstep, g, policy::Plane::kToken, budget, env_seconds);
      if (slots.empty()) continue;
      std::optional<StageTimer> sampling(std::in_place, readout_seconds);
      std::vector<StepData*> pointers;
      for (auto& st : steps) pointers.push_back(&st);
      internal::SampleTexts(ctx, pointers, stop, "sampler", budget);
      sampling.reset();

      StageTimer timer(env_seconds);
      for (size_t b = 0; b < slots.size(); ++b) {
        Slot& s = *slots[b];
        StepData& step = steps[b];
        internal::Guarded(ctx, s, [&] { PlayAnswer(ctx, s, step, budget); });
      }
      lockstep.Retire(budget);
    }
  }
  return internal::WithMode(lockstep.Finished(),
                            greedy ? EpisodeMode::kGreedy : EpisodeMode::kSampled);
}

}  // namespace rlid::agents

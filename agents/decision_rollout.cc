// Decision-plane rollouts (RunDecisionEpisodes): every lockstep round batches
// the group's prompts into ONE label-readout forward (after an optional
// sampled scratchpad) and picks each episode's outcome from p(a|s). Also the
// readout input of a step and the decision distribution a trainer reads back.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "agents/lockstep.h"
#include "agents/rollout.h"
#include "agents/rollout_internal.h"
#include "core/check.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "policy/reading/menu_request.h"

namespace rlid::agents {

using internal::Slot;

namespace {

constexpr const char* kOffMenuReason =
    "off-menu: the draw fell on the mass outside every menu realisation (readout normalisation "
    "'other')";

// Sum of probs over the menu items the oracle calls optimal; -1 without an oracle.
double OptimalMass(const envs::State& state, const envs::Menu& menu,
                   const std::vector<double>& probs) {
  auto* oracle = dynamic_cast<const envs::OracleState*>(&state);
  if (!oracle) return -1;
  double mass = 0;
  for (envs::ActionId a : oracle->OptimalActions()) {
    int k = menu.IndexOfAction(a);
    if (k >= 0) mass += probs[k];
  }
  return mass;
}

// [prompt] reasoning: samples the scratchpad z of every step but those of
// slots waiting for a cut state's bootstrap value, and sets each one's
// readout_suffix (the readout then reads at prompt ++ z ++ suffix).
void SampleThoughts(AgentContext& ctx, const std::vector<Slot*>& slots,
                    std::vector<StepData>& steps, const policy::StopRule& end_of_line,
                    Budget& budget) {
  std::vector<StepData*> thinking;
  for (size_t b = 0; b < slots.size(); ++b)
    if (!slots[b]->needs_value) thinking.push_back(&steps[b]);
  if (!thinking.empty()) internal::SampleTexts(ctx, thinking, end_of_line, "think", budget);
  for (StepData* st : thinking)
    st->decision.readout_suffix = ctx.renderer->AfterThought(st->text.response_text);
}

// One group's readout, on the CPU: the requests (row b = steps[b]) and the
// policy's outputs per row; ref_log_p only with a reference model, after only
// with afterstate values.
struct GroupReadout {
  std::vector<policy::ReadoutRequest> reqs;
  torch::Tensor dist, wlogp, value, mass, rowh, menuh, after, ref_log_p, log_p_other, span;
};

// The rollout forward of a group's steps (and the reference's, when set),
// booked in the budget. Throws NumericError on a non-finite log p(a|s) or value.
GroupReadout ReadGroup(AgentContext& ctx, const std::vector<StepData>& steps,
                       const policy::ReadoutOptions& ropts, Budget& budget) {
  GroupReadout r;
  for (const StepData& step : steps) {
    r.reqs.push_back(ReadoutRequestFor(*ctx.renderer, step, ctx.readout, ctx.afterstate_values));
    budget.prompt_tokens += static_cast<int64_t>(r.reqs.back().prompt.size());
  }
  ComputeScope compute(budget.rollout, {ctx.model, ctx.ref_model});
  auto rb = policy::Readout(ctx.model, r.reqs, ropts);
  if (ctx.ref_model) {
    auto ref = policy::Readout(ctx.ref_model, r.reqs, ropts);
    r.ref_log_p = policy::DecisionDistribution(ref).log_p.to(torch::kCPU);
  }
  auto dd = policy::DecisionDistribution(rb);
  r.dist = dd.log_p.to(torch::kCPU).contiguous();
  r.log_p_other = rb.log_p_other.to(torch::kCPU);
  r.span = rb.span_logp.to(torch::kCPU);
  r.wlogp = rb.realisation_logp.to(torch::kCPU).contiguous();
  r.value = rb.value.to(torch::kCPU), r.mass = rb.candidate_mass.to(torch::kCPU);
  r.rowh = rb.row_entropy.to(torch::kCPU), r.menuh = rb.menu_entropy.to(torch::kCPU);
  if (ctx.afterstate_values) r.after = rb.afterstate_value.to(torch::kCPU);
  auto mask = dd.mask.to(torch::kCPU);
  if (!(torch::isfinite(r.dist) | ~mask).all().item<bool>() ||
      !torch::isfinite(r.value).all().item<bool>())
    throw NumericError(
        fmt::format("non-finite policy output (log p(a|s) or value) in the rollout readout "
                    "at iteration {}",
                    ctx.iteration),
        "the policy's weights are broken; lower the learning rate or resume from the last "
        "checkpoint");
  return r;
}

// Copies row b of the readout into the step (K = the step's menu size;
// `outcomes` = K, + 1 with the off-menu outcome) and returns p over the outcomes.
std::vector<double> TakeRow(StepData& step, const GroupReadout& r, size_t b, int outcomes) {
  const int K = static_cast<int>(step.menu.size());
  DecisionRead& d = step.decision;
  std::vector<double> probs(outcomes);
  for (int k = 0; k < outcomes; ++k) probs[k] = std::exp(r.dist[b][k].item<double>());
  for (int k = 0; k < K; ++k) {
    d.log_p.push_back(r.dist[b][k].item<float>());
    std::vector<float> words;
    for (size_t w = 0; w < r.reqs[b].realisations[k].size(); ++w)
      words.push_back(r.wlogp[b][k][w].item<float>());
    d.realisation_logp.push_back(std::move(words));
    if (r.after.defined()) d.afterstate_values.push_back(r.after[b][k].item<float>());
  }
  if (r.ref_log_p.defined())
    for (int k = 0; k < outcomes; ++k) d.ref_log_p.push_back(r.ref_log_p[b][k].item<float>());
  d.log_p_other = r.log_p_other[b].item<float>();
  d.think_logp = r.span[b].item<float>();
  d.value = r.value[b].item<float>();
  d.candidate_mass = r.mass[b].item<float>();
  d.row_entropy = r.rowh[b].item<float>();
  d.menu_entropy = r.menuh[b].item<float>();
  return probs;
}

// Plays outcome `choice` of the step's readout: the off-menu outcome (K) is an
// invalid answer; a menu item is said in a realisation drawn from π(y | s, a).
void PlayOutcome(AgentContext& ctx, Slot& s, StepData& step, const std::vector<double>& probs,
                 int choice, Budget& budget) {
  if (ctx.oracle_probs) step.decision.p_optimal = OptimalMass(*s.state, step.menu, probs);
  internal::CountAttempt(s, budget);
  if (choice == static_cast<int>(step.menu.size())) {
    internal::ApplyInvalid(ctx, s, step, kOffMenuReason, budget);
    internal::FileStep(ctx, s, std::move(step));
    return;
  }
  step.item = choice;
  step.action = step.menu.items[choice].action;
  // The realisation said, y ~ π(y | s, a): a draw over this item's realisations.
  const auto& words = step.decision.realisation_logp[choice];
  std::vector<double> wp;
  for (float w : words) wp.push_back(std::isfinite(w) ? std::exp(static_cast<double>(w)) : 0);
  const size_t w = s.realisation_rng.Categorical(wp);
  const auto& item = step.menu.items[choice];
  step.realisation = w == 0 ? item.label : item.realisations.at(w - 1);
  internal::StartChoice(ctx, s, std::move(step));
}

// Row b of the readout decides the slot's step: a slot waiting for its
// bootstrap value takes V(s_T) and ends; otherwise the argmax outcome (greedy)
// or a draw from the slot's "actions" stream is played.
void Decide(AgentContext& ctx, Slot& s, StepData& step, const GroupReadout& r, size_t b,
            bool greedy, Budget& budget) {
  if (s.needs_value) {  // the cut state's value, then the episode ends
    s.data.bootstrap_value = r.value[b].item<double>();
    internal::FinishEpisode(ctx, s);
    return;
  }
  const int outcomes =
      static_cast<int>(step.menu.size()) + (ctx.readout.off_menu_outcome() ? 1 : 0);
  const std::vector<double> probs = TakeRow(step, r, b, outcomes);
  const int choice =
      greedy ? static_cast<int>(std::max_element(probs.begin(), probs.end()) - probs.begin())
             : static_cast<int>(s.action_rng.Categorical(probs));
  internal::Guarded(ctx, s, [&] { PlayOutcome(ctx, s, step, probs, choice, budget); });
}

}  // namespace

policy::ReadoutRequest ReadoutRequestFor(const policy::PromptRenderer& renderer,
                                         const StepData& step, const ReadoutConfig& readout,
                                         bool afterstates) {
  policy::ReadoutRequest r = policy::MenuReadoutRequest(renderer, step.prompt.tokens, step.menu,
                                                        readout.realisations == RealisationSet::kAll);
  const auto& suffix = step.decision.readout_suffix;
  if (!suffix.empty()) {  // think-then-decide: read after z, score z
    r.scored_begin = static_cast<int64_t>(r.prompt.size());
    r.prompt.insert(r.prompt.end(), step.text.response.begin(), step.text.response.end());
    r.scored_end = static_cast<int64_t>(r.prompt.size());
    r.prompt.insert(r.prompt.end(), suffix.begin(), suffix.end());
  }
  if (afterstates) r.afterstates = renderer.AfterstateBranches(step.menu);
  return r;
}

policy::ReadoutOptions ReadoutOptionsFor(const ReadoutConfig& readout, bool afterstates) {
  policy::ReadoutOptions o;
  o.normalisation = readout.normalisation;
  o.afterstate_values = afterstates;
  o.share_prefix = readout.share_prefix;
  return o;
}

std::vector<EpisodeData> RunDecisionEpisodes(AgentContext& ctx,
                                             const std::vector<EpisodeSpec>& specs,
                                             envs::Split split, bool greedy, Budget& budget) {
  RLID_CHECK(ctx.env && ctx.renderer && ctx.model, "incomplete agent context");
  torch::NoGradGuard no_grad;
  ctx.model->eval();
  double* readout_seconds = ctx.times ? &ctx.times->readout : nullptr;
  double* env_seconds = ctx.times ? &ctx.times->env : nullptr;
  const policy::ReadoutOptions ropts = ReadoutOptionsFor(ctx.readout, ctx.afterstate_values);
  const bool think = ctx.renderer->config().reasoning;
  std::optional<internal::SamplerScope> sampler_scope;
  policy::StopRule end_of_line;
  if (think) {
    if (!ctx.sampler)
      throw ConfigError("prompt.reasoning in the decision plane needs the agent's sampler",
                        "build the agent with Run::Agent (it sets one up for reasoning prompts)");
    sampler_scope.emplace(ctx.sampler, greedy, ctx.renderer->config().max_think_tokens);
    end_of_line = EndOfThought(ctx.renderer->tokenizer(), ctx.sampler);
  }

  internal::Lockstep lockstep(ctx, specs, split, policy::Plane::kDecision);
  while (lockstep.Running()) {
    for (int g = 0; g < lockstep.groups(); ++g) {
      ThrowIfInterrupted();  // between steps: every finished episode is whole
      // One readout forward for every active episode of this group.
      auto [slots, steps] =
          internal::PrepareGroup(ctx, lockstep, g, policy::Plane::kDecision, budget, env_seconds);
      if (slots.empty()) continue;
      GroupReadout readout;
      {
        StageTimer timer(readout_seconds);
        if (think) SampleThoughts(ctx, slots, steps, end_of_line, budget);
        readout = ReadGroup(ctx, steps, ropts, budget);
      }
      StageTimer timer(env_seconds);
      for (size_t b = 0; b < slots.size(); ++b)
        Decide(ctx, *slots[b], steps[b], readout, b, greedy, budget);
      lockstep.Retire(budget);
    }
  }
  return internal::WithMode(lockstep.Finished(),
                            greedy ? EpisodeMode::kGreedy : EpisodeMode::kSampled);
}

std::vector<policy::TokenId> LineEndTokens(const policy::Tokenizer& tok) {
  std::vector<policy::TokenId> out;
  for (int64_t id = 0; id < tok.VocabSize(); ++id) {
    const auto t = static_cast<policy::TokenId>(id);
    if (tok.IsStop(t) || tok.DecodeToken(t).find('\n') != std::string::npos) out.push_back(t);
  }
  return out;
}

policy::StopRule EndOfThought(const policy::Tokenizer& tok, const policy::RolloutEngine* engine) {
  policy::StopFn done = [&tok](const std::vector<policy::TokenId>& gen) {
    return !gen.empty() &&
           (tok.IsStop(gen.back()) || tok.DecodeToken(gen.back()).find('\n') != std::string::npos);
  };
  if (engine && !engine->calls_back()) return {std::move(done), LineEndTokens(tok)};
  return {std::move(done)};
}

std::vector<float> DecisionLogP(const StepData& step, const ReadoutConfig& readout) {
  std::vector<float> out = step.decision.log_p;
  if (readout.off_menu_outcome()) out.push_back(step.decision.log_p_other);
  return out;
}

int DecisionOutcome(const StepData& step) {
  return step.item >= 0 ? step.item : static_cast<int>(step.decision.log_p.size());
}

}  // namespace rlid::agents

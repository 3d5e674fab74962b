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

namespace rlid::agents {

using namespace internal;

namespace {

constexpr const char* kOffMenuReason =
    "off-menu: the draw fell on the mass outside every menu wording (readout normalisation "
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

}  // namespace

policy::ReadoutRequest ReadoutRequestFor(const policy::PromptRenderer& renderer,
                                         const StepData& step, const ReadoutConfig& readout,
                                         bool afterstates) {
  policy::ReadoutRequest r;
  r.prompt = step.prompt.tokens;
  if (!step.readout_suffix.empty()) {  // think-then-decide: read after z, score z
    r.scored_begin = static_cast<int64_t>(r.prompt.size());
    r.prompt.insert(r.prompt.end(), step.response.begin(), step.response.end());
    r.scored_end = static_cast<int64_t>(r.prompt.size());
    r.prompt.insert(r.prompt.end(), step.readout_suffix.begin(), step.readout_suffix.end());
  }
  r.realisations = renderer.Realisations(step.menu, readout.realisations == "all");
  if (afterstates) r.afterstates = renderer.AfterstateBranches(step.menu);
  r.end_token = renderer.tokenizer().eos_id();
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
  const bool other = ctx.readout.off_menu_outcome();
  const bool think = ctx.renderer->config().reasoning;
  std::optional<SamplerScope> sampler_scope;
  policy::StopFn end_of_line;
  if (think) {
    if (!ctx.sampler)
      throw ConfigError("prompt.reasoning in the decision plane needs the agent's sampler",
                        "build the agent with Run::Agent (it sets one up for reasoning prompts)");
    sampler_scope.emplace(ctx.sampler, greedy, ctx.renderer->config().max_think_tokens);
    end_of_line = EndOfThought(ctx.renderer->tokenizer());
  }

  Lockstep lockstep(ctx, specs, split, policy::Plane::kDecision);
  while (lockstep.Running()) {
    for (int g = 0; g < lockstep.groups(); ++g) {
      ThrowIfInterrupted();  // between steps: every finished episode is whole
      // One readout forward for every active episode of this group.
      auto [slots, steps] =
          PrepareGroup(ctx, lockstep, g, policy::Plane::kDecision, budget, env_seconds);
      if (slots.empty()) continue;
      std::vector<policy::ReadoutRequest> reqs;
      torch::Tensor dist, wlogp, value, mass, rowh, menuh, after, ref_log_p, log_p_other, span;
      {
        StageTimer timer(readout_seconds);
        if (think) {  // the scratchpads (not for a cut state's bootstrap value)
          std::vector<StepData*> thinking;
          for (size_t b = 0; b < slots.size(); ++b)
            if (!slots[b]->needs_value) thinking.push_back(&steps[b]);
          if (!thinking.empty()) SampleTexts(ctx, thinking, end_of_line, "think", budget);
          for (StepData* st : thinking) st->readout_suffix = ctx.renderer->AfterThought(st->response_text);
        }
        for (const StepData& step : steps) {
          reqs.push_back(ReadoutRequestFor(*ctx.renderer, step, ctx.readout, ctx.afterstate_values));
          budget.prompt_tokens += static_cast<int64_t>(reqs.back().prompt.size());
        }
        auto rb = policy::Readout(ctx.model, reqs, ropts);
        budget.rollout.AddForward(ctx.model->config(), rb.cost);
        if (ctx.ref_model) {
          auto ref = policy::Readout(ctx.ref_model, reqs, ropts);
          budget.rollout.AddForward(ctx.ref_model->config(), ref.cost);
          ref_log_p = policy::DecisionDistribution(ref).log_p.to(torch::kCPU);
        }
        auto dd = policy::DecisionDistribution(rb);
        dist = dd.log_p.to(torch::kCPU).contiguous();
        log_p_other = rb.log_p_other.to(torch::kCPU);
        span = rb.span_logp.to(torch::kCPU);
        wlogp = rb.realisation_logp.to(torch::kCPU).contiguous();
        value = rb.value.to(torch::kCPU), mass = rb.candidate_mass.to(torch::kCPU);
        rowh = rb.row_entropy.to(torch::kCPU), menuh = rb.menu_entropy.to(torch::kCPU);
        if (ctx.afterstate_values) after = rb.afterstate_value.to(torch::kCPU);
        auto mask = dd.mask.to(torch::kCPU);
        if (!(torch::isfinite(dist) | ~mask).all().item<bool>() ||
            !torch::isfinite(value).all().item<bool>())
          throw NumericError(
              fmt::format("non-finite policy output (log p(a|s) or value) in the rollout readout "
                          "at iteration {}",
                          ctx.iteration),
              "the policy's weights are broken; lower the learning rate or resume from the last "
              "checkpoint");
      }

      StageTimer timer(env_seconds);
      for (size_t b = 0; b < slots.size(); ++b) {
        Slot& s = *slots[b];
        StepData& step = steps[b];
        if (s.needs_value) {  // the cut state's value, then the episode ends
          s.data.bootstrap_value = value[b].item<double>();
          FinishEpisode(ctx, s);
          continue;
        }
        const int K = static_cast<int>(step.menu.size());
        const int outcomes = K + (other ? 1 : 0);
        std::vector<double> probs(outcomes);
        for (int k = 0; k < outcomes; ++k) probs[k] = std::exp(dist[b][k].item<double>());
        for (int k = 0; k < K; ++k) {
          step.log_p.push_back(dist[b][k].item<float>());
          std::vector<float> words;
          for (size_t w = 0; w < reqs[b].realisations[k].size(); ++w)
            words.push_back(wlogp[b][k][w].item<float>());
          step.wording_logp.push_back(std::move(words));
          if (after.defined()) step.afterstate_values.push_back(after[b][k].item<float>());
        }
        if (ref_log_p.defined())
          for (int k = 0; k < outcomes; ++k)
            step.ref_log_p.push_back(ref_log_p[b][k].item<float>());
        step.log_p_other = log_p_other[b].item<float>();
        step.think_logp = span[b].item<float>();
        step.value = value[b].item<float>();
        step.candidate_mass = mass[b].item<float>();
        step.row_entropy = rowh[b].item<float>();
        step.menu_entropy = menuh[b].item<float>();
        const int choice =
            greedy ? static_cast<int>(std::max_element(probs.begin(), probs.end()) - probs.begin())
                   : static_cast<int>(s.action_rng.Categorical(probs));
        Guarded(ctx, s, [&] {
          if (ctx.oracle_probs) step.p_optimal = OptimalMass(*s.state, step.menu, probs);
          CountAttempt(s, budget);
          if (choice == K) {
            ApplyInvalid(ctx, s, step, kOffMenuReason, budget);
            FileStep(ctx, s, std::move(step));
            return;
          }
          step.item = choice;
          step.action = step.menu.items[choice].action;
          // The wording said, y ~ π(y | s, a): a draw over this item's wordings.
          const auto& words = step.wording_logp[choice];
          std::vector<double> wp;
          for (float w : words) wp.push_back(std::isfinite(w) ? std::exp(static_cast<double>(w)) : 0);
          const size_t w = s.wording_rng.Categorical(wp);
          const auto& item = step.menu.items[choice];
          step.realisation = w == 0 ? item.label : item.realisations.at(w - 1);
          StartChoice(ctx, s, std::move(step));
        });
      }
      lockstep.Retire(budget);
    }
  }
  return WithMode(lockstep.Finished(), greedy ? EpisodeMode::kGreedy : EpisodeMode::kSampled);
}

policy::StopFn EndOfThought(const policy::Tokenizer& tok) {
  return [&tok](const std::vector<policy::TokenId>& gen) {
    return !gen.empty() &&
           (tok.IsStop(gen.back()) || tok.DecodeToken(gen.back()).find('\n') != std::string::npos);
  };
}

std::vector<float> DecisionLogP(const StepData& step, const ReadoutConfig& readout) {
  std::vector<float> out = step.log_p;
  if (readout.off_menu_outcome()) out.push_back(step.log_p_other);
  return out;
}

int DecisionOutcome(const StepData& step) {
  return step.item >= 0 ? step.item : static_cast<int>(step.log_p.size());
}

}  // namespace rlid::agents

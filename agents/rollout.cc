#include "agents/rollout.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <optional>

#include "core/check.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/log.h"
#include "core/rng.h"
#include "envs/reasoning_oracle.h"

namespace rlid::agents {

void ReadoutConfig::Load(ConfigNode n) {
  n.GetEnum("realisations", realisations, {"all", "labels"},
            "wordings marginalised into p(a|s): label + every realisation, or the label only");
  n.GetEnum("normalisation", normalisation, {"menu", "other"},
            "renormalise over the menu, or keep the off-menu mass as an explicit outcome");
  n.Get("share_prefix", share_prefix,
        "compute a readout batch's common prompt prefix once (same numbers up to float "
        "rounding, fewer FLOPs)");
}

void InvalidConfig::Load(ConfigNode n) {
  n.GetEnum("rule", rule, {"penalty_retry", "penalty_noop", "end"},
            "token plane: what an answer that compiles to no action does");
  n.Get("penalty", penalty, "reward of an invalid answer");
  n.Get("max_retries", max_retries,
        "penalty_retry: extra tries at the same state before the episode ends",
        IntRange::NonNegative());
}

namespace {

struct Slot {
  EpisodeData data;
  std::unique_ptr<envs::State> state;
  Rng label_rng{0}, action_rng{0}, wording_rng{0};
  int turns = 0;    // agent decisions so far, invalid answers included
  int retries = 0;  // consecutive invalid answers at the current state
  bool done = false;
  bool dropped = false;  // an env failure ended it ([env] on_error = "drop_episode")
  // Cut by the step limit: the next lockstep readout reads V(s_T), then the episode ends.
  bool needs_value = false;
  // A step whose action an AsyncState is applying (filed when it finishes).
  std::optional<StepData> pending;
};

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
  s.wording_rng = Rng::Stream(ctx.seed, "wordings", spec.stream);
  return s;
}

// Facts the new state makes observable go into memory.
void WriteFacts(AgentContext& ctx, Slot& s, int t) {
  if (!ctx.bank || !ctx.bank->config().enabled) return;
  auto* facts = dynamic_cast<const envs::FactSource*>(s.state.get());
  if (!facts) return;
  for (const auto& f : facts->Facts())
    ctx.bank->Write(f, memory::MemoryKind::kObservation, {ctx.run_id, s.data.id, t},
                    ctx.policy_version);
}

// Menu (+ seeded permutation), memory retrieval and prompt for the next step.
// A slot waiting for its bootstrap value gets the prompt of the cut state.
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
  if (ctx.renderer->config().label_order == "shuffle") envs::ShuffleMenu(step.menu, s.label_rng);
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

// 1/0 when the env has an oracle: is `action` one of its optimal actions here.
int OptimalFlag(const envs::State& state, envs::ActionId action) {
  auto* oracle = dynamic_cast<const envs::OracleState*>(&state);
  if (!oracle) return -1;
  if (action == envs::kNoAction) return 0;
  auto best = oracle->OptimalActions();
  return std::find(best.begin(), best.end(), action) != best.end() ? 1 : 0;
}

// A decision attempt: every one is an env step for the budget, valid or not.
void CountAttempt(Slot& s, Budget& budget) {
  budget.env_steps += 1;
  budget.samples_generated += 1;
  s.turns += 1;
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

// Applies a valid choice to the env and books it (scripted play).
void ApplyChoice(AgentContext& ctx, Slot& s, StepData& step) {
  step.optimal = OptimalFlag(*s.state, step.action);
  FinishChoice(ctx, s, step, s.state->Apply(step.action));
}

// An attempt that named no action (token-plane text that compiled to nothing,
// the decision plane's off-menu outcome): the [trainer.invalid] rule.
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
  step.terminal = ctx.invalid.rule == "end" ||
                  (ctx.invalid.rule == "penalty_retry" && s.retries > ctx.invalid.max_retries);
}

// Ends the step's episode after step_limit decisions (both planes count turns,
// invalid answers included), then files the step. A cut decision-plane episode
// waits for one more readout of V(s_T) when the context asks for it.
void FileStep(AgentContext& ctx, Slot& s, StepData&& step) {
  if (!step.terminal && s.turns >= ctx.env->Info().step_limit) {
    step.terminal = true;
    s.data.truncated = true;
  }
  const bool done = step.terminal;
  s.data.steps.push_back(std::move(step));
  if (!done) return;
  if (s.data.truncated && ctx.bootstrap_truncated && !ctx.show_steps_left)
    s.needs_value = true;
  else
    FinishEpisode(ctx, s);
}

// Applies a valid choice and files the step; an AsyncState only starts the
// transition, and the step waits in s.pending until FinishPending.
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

// Ends an episode an env failure broke: its memory items are discarded and
// the rollout's result leaves it out (Lockstep::Retire counts it).
void DropEpisode(AgentContext& ctx, Slot& s, const EnvError& e) {
  spdlog::warn("dropping episode {} (env seed {}, after {} steps): {}", s.data.id,
               s.data.spec.env_seed, s.data.steps.size(), e.what());
  if (ctx.bank && ctx.bank->config().enabled) ctx.bank->DiscardEpisode(s.data.id);
  s.pending.reset();
  s.dropped = s.done = true;
}

// Runs `f` on a slot's env work; under [env] on_error = "drop_episode" an
// EnvError drops the slot's episode instead of ending the rollout. Returns
// false when it did.
template <class F>
bool Guarded(AgentContext& ctx, Slot& s, F&& f) {
  if (!ctx.env->Info().drop_failed_episodes) {
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

// Files the steps whose env transitions were in flight (AsyncState).
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

// The lockstep schedule shared by both planes: up to num_envs episodes play at
// once; a finished one leaves its slot to the next spec in the queue, and the
// result keeps the order of the spec list (episodes an env failure dropped are
// left out). An env whose states step concurrently (EnvInfo::concurrency > 1)
// gets two groups of slots that take turns, so one group's env steps overlap
// the other group's model forward; otherwise there is one group.
class Lockstep {
 public:
  Lockstep(AgentContext& ctx, const std::vector<EpisodeSpec>& specs, envs::Split split,
           policy::Plane plane)
      : ctx_(ctx), specs_(specs), split_(split), plane_(plane), finished_(specs.size()),
        dropped_(specs.size(), false) {
    for (size_t i = 0; i < specs.size(); ++i) queue_.push_back(i);
    const int slots = std::max(1, ctx.num_envs);
    const int groups = ctx.env->Info().concurrency > 1 && slots > 1 ? 2 : 1;
    for (int g = 0; g < groups; ++g) capacity_.push_back(slots / groups + (g < slots % groups));
    active_.resize(groups);
    for (int g = 0; g < groups; ++g) active_[g].reserve(capacity_[g]);
  }
  int groups() const { return static_cast<int>(active_.size()); }
  bool Running() const {
    if (!queue_.empty()) return true;
    for (const auto& g : active_)
      if (!g.empty()) return true;
    return false;
  }
  // The slots of group g now playing (pending steps included).
  std::vector<Slot*> Active(int g) {
    std::vector<Slot*> out;
    for (auto& [idx, s] : active_[g]) out.push_back(&s);
    return out;
  }
  // Starts queued episodes while group g has free slots; returns its slots.
  std::vector<Slot*> Fill(int g, Budget& budget) {
    while (static_cast<int>(active_[g].size()) < capacity_[g] && !queue_.empty()) {
      const size_t idx = queue_.front();
      queue_.pop_front();
      Slot s;
      try {
        s = StartEpisode(ctx_, specs_[idx], split_, plane_, local_ids_);
        WriteFacts(ctx_, s, 0);
      } catch (const EnvError& e) {
        if (!ctx_.env->Info().drop_failed_episodes) throw;
        s.data.spec = specs_[idx];
        DropEpisode(ctx_, s, e);
        Count(idx, s, budget);
        continue;
      }
      active_[g].emplace_back(idx, std::move(s));
    }
    return Active(g);
  }
  // Moves finished episodes (no step pending) out of their slots.
  void Retire(Budget& budget) {
    for (auto& group : active_) {
      for (auto it = group.begin(); it != group.end();) {
        Slot& s = it->second;
        if (!s.done || s.pending) {
          ++it;
          continue;
        }
        Count(it->first, s, budget);
        it = group.erase(it);
      }
    }
  }
  std::vector<EpisodeData> Finished() {
    RLID_CHECK(!Running(), "Finished() while episodes are still playing");
    std::vector<EpisodeData> out;
    out.reserve(finished_.size());
    for (size_t i = 0; i < finished_.size(); ++i)
      if (!dropped_[i]) out.push_back(std::move(finished_[i]));
    return out;
  }

 private:
  // Books a finished (or dropped) episode of spec `idx`.
  void Count(size_t idx, Slot& s, Budget& budget) {
    if (s.dropped) {
      budget.episodes_dropped += 1;
      dropped_[idx] = true;
    } else {
      budget.episodes += 1;
      finished_[idx] = std::move(s.data);
    }
    ++retired_;
    if (ctx_.on_episode_end) ctx_.on_episode_end(retired_, static_cast<int64_t>(specs_.size()));
  }

  AgentContext& ctx_;
  const std::vector<EpisodeSpec>& specs_;
  envs::Split split_;
  policy::Plane plane_;
  std::vector<EpisodeData> finished_;
  std::vector<bool> dropped_;
  std::deque<size_t> queue_;
  std::vector<int> capacity_;
  std::vector<std::vector<std::pair<size_t, Slot>>> active_;
  int64_t local_ids_ = 0;
  int64_t retired_ = 0;
};

// The episodes of lockstep group g that act now, each with its prepared step:
// finished asynchronous steps are filed, finished episodes retired and free
// lanes refilled first (env time). None act: retired again, both empty.
struct GroupSteps {
  std::vector<Slot*> slots;
  std::vector<StepData> steps;
};
GroupSteps PrepareGroup(AgentContext& ctx, Lockstep& lockstep, int g, policy::Plane plane,
                        Budget& budget, double* env_seconds) {
  GroupSteps out;
  {
    StageTimer timer(env_seconds);
    FinishPending(ctx, lockstep.Active(g));
    lockstep.Retire(budget);
    for (Slot* s : lockstep.Fill(g, budget)) {
      if (s->done || s->pending) continue;
      Guarded(ctx, *s, [&] {
        out.steps.push_back(PrepareStep(ctx, *s, plane));
        out.slots.push_back(s);
      });
    }
  }
  if (out.slots.empty()) lockstep.Retire(budget);
  return out;
}

// Decoding settings for one rollout call: temperature 0 when greedy, and a
// token limit (0: the sampler's own); the previous settings come back after.
class SamplerScope {
 public:
  SamplerScope(policy::TextSampler* sampler, bool greedy, int max_new_tokens)
      : sampler_(sampler), saved_(sampler->options()) {
    auto o = saved_;
    if (greedy) o.temperature = 0;
    if (max_new_tokens > 0) o.max_new_tokens = max_new_tokens;
    sampler_->SetOptions(o);
  }
  ~SamplerScope() { sampler_->SetOptions(saved_); }
  SamplerScope(const SamplerScope&) = delete;
  SamplerScope& operator=(const SamplerScope&) = delete;

 private:
  policy::TextSampler* sampler_;
  policy::SamplerOptions saved_;
};

// Samples one text per step after its prompt (token-plane answers, or the
// decision plane's scratchpads) into response / rollout_logp / response_text,
// and books the sampler's work. Identical prompts (e.g. a group at its first
// step) share one encoding: they are bucketed by how many steps show them.
// Every text draws from its step's sample_seed and `stream`.
void SampleTexts(AgentContext& ctx, const std::vector<StepData*>& steps, const policy::StopFn& stop,
                 const char* stream, Budget& budget) {
  const auto& tok = ctx.renderer->tokenizer();
  std::map<uint64_t, std::vector<size_t>> by_prompt;
  for (size_t b = 0; b < steps.size(); ++b) by_prompt[steps[b]->prompt.hash].push_back(b);
  std::map<size_t, std::vector<uint64_t>> by_count;
  for (const auto& [h, members] : by_prompt) by_count[members.size()].push_back(h);
  const int64_t before_prompt = ctx.sampler->prompt_tokens_encoded();
  const int64_t before_gen = ctx.sampler->tokens_generated();
  const policy::ForwardCost before_cost = ctx.sampler->cost();
  for (const auto& [count, hashes] : by_count) {
    std::vector<std::vector<policy::TokenId>> prompts;
    std::vector<uint64_t> row_seeds;
    for (uint64_t h : hashes) {
      prompts.push_back(steps[by_prompt[h][0]]->prompt.tokens);
      for (size_t member : by_prompt[h]) row_seeds.push_back(Rng::DeriveSeed(steps[member]->sample_seed, stream));
    }
    auto results = ctx.sampler->Sample(prompts, static_cast<int>(count), stop, row_seeds);
    for (size_t p = 0; p < hashes.size(); ++p) {
      const auto& members = by_prompt[hashes[p]];
      for (size_t j = 0; j < members.size(); ++j) {
        StepData& step = *steps[members[j]];
        const auto& r = results[p][j];
        step.response = r.tokens;
        step.rollout_logp = r.logprobs;
        step.response_text = tok.Decode(r.tokens, /*skip_special=*/true);
      }
    }
  }
  budget.prompt_tokens += ctx.sampler->prompt_tokens_encoded() - before_prompt;
  budget.generated_tokens += ctx.sampler->tokens_generated() - before_gen;
  budget.rollout.AddForward(ctx.sampler->engine()->config(),
                            policy::Difference(ctx.sampler->cost(), before_cost));
}

constexpr const char* kOffMenuReason =
    "off-menu: the draw fell on the mass outside every menu wording (readout normalisation "
    "'other')";

}  // namespace

std::string ObservationText(const envs::State& state, int turns, int step_limit,
                            bool show_steps_left) {
  std::string text = state.Observation();
  if (show_steps_left) text += fmt::format("\nSteps left: {}.", std::max(0, step_limit - turns));
  return text;
}

// ---- decision plane ---------------------------------------------------------------

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

// ---- scripted -------------------------------------------------------------------------

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

// ---- token plane ------------------------------------------------------------------

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
  const auto& tok = ctx.renderer->tokenizer();
  const bool reasoning = ctx.renderer->config().reasoning;
  const std::string prefix = ctx.renderer->config().answer_prefix;

  // Stop at end-of-text, or at the end of the answer line.
  policy::StopFn stop = [&](const std::vector<policy::TokenId>& gen) {
    if (gen.empty()) return false;
    if (tok.IsStop(gen.back())) return true;
    if (!reasoning) return tok.DecodeToken(gen.back()).find('\n') != std::string::npos;
    std::string text = tok.Decode(gen, /*skip_special=*/true);
    size_t at = text.rfind(prefix);
    return at != std::string::npos && text.find('\n', at) != std::string::npos;
  };

  Lockstep lockstep(ctx, specs, split, policy::Plane::kToken);
  // Greedy evaluation decodes at temperature 0; the training options come back after.
  SamplerScope scope(ctx.sampler, greedy, 0);

  double* readout_seconds = ctx.times ? &ctx.times->readout : nullptr;
  double* env_seconds = ctx.times ? &ctx.times->env : nullptr;
  while (lockstep.Running()) {
    for (int g = 0; g < lockstep.groups(); ++g) {
      ThrowIfInterrupted();  // between steps: every finished episode is whole
      auto [slots, steps] = PrepareGroup(ctx, lockstep, g, policy::Plane::kToken, budget, env_seconds);
      if (slots.empty()) continue;
      std::optional<StageTimer> sampling(std::in_place, readout_seconds);
      std::vector<StepData*> pointers;
      for (auto& st : steps) pointers.push_back(&st);
      SampleTexts(ctx, pointers, stop, "sampler", budget);
      sampling.reset();

      StageTimer timer(env_seconds);
      for (size_t b = 0; b < slots.size(); ++b) {
        Slot& s = *slots[b];
        StepData& step = steps[b];
        Guarded(ctx, s, [&] {
          CountAttempt(s, budget);
          const auto res = CompileAnswer(*s.state, step.menu, step.response_text);
          if (!res.valid()) {
            ApplyInvalid(ctx, s, step, res.reason, budget);
            FileStep(ctx, s, std::move(step));
            return;
          }
          step.item = res.item;
          step.action = res.action;
          step.realisation = res.matched;
          StartChoice(ctx, s, std::move(step));
        });
      }
      lockstep.Retire(budget);
    }
  }
  return WithMode(lockstep.Finished(), greedy ? EpisodeMode::kGreedy : EpisodeMode::kSampled);
}

// ---- records ------------------------------------------------------------------------

memory::EpisodeRecord ToRecord(const EpisodeData& e, const AgentContext& ctx) {
  memory::EpisodeRecord r;
  r.id = e.id;
  r.run_id = ctx.run_id;
  r.env = ctx.env->Info().name;
  r.seed = e.spec.env_seed;
  r.split = envs::SplitName(e.split);
  r.mode = e.mode == EpisodeMode::kScripted ? "scripted"
           : e.split == envs::Split::kTrain ? "rollout"
           : e.mode == EpisodeMode::kGreedy ? "greedy"
                                            : "sampled";
  r.plane = policy::PlaneName(e.plane);
  r.policy_version = ctx.policy_version;
  r.iteration = ctx.iteration;
  r.ret = e.ret;
  r.success = e.success;
  r.length = static_cast<int>(e.steps.size());
  r.truncated = e.truncated;
  r.new_items = e.new_items;
  const bool decision = e.plane == policy::Plane::kDecision;
  for (const auto& s : e.steps) {
    memory::StepRecord sr;
    sr.t = s.t;
    sr.observation = s.observation;
    sr.prompt = s.prompt.text;
    sr.prompt_hash = s.prompt.hash;
    sr.prompt_tokens = static_cast<int>(s.prompt.tokens.size());
    sr.action = s.invalid ? -1 : s.action;
    if (s.item >= 0) {
      sr.label = s.menu.items[s.item].label;
      sr.command = s.menu.items[s.item].command;
    }
    sr.reward = s.reward;
    sr.invalid = s.invalid;
    sr.invalid_reason = s.invalid_reason;
    sr.history_steps = static_cast<int>(s.history.size());
    sr.realisation = s.realisation;
    sr.state_hash = s.state_hash;
    if (s.item >= 0) sr.afterstate_hash = s.menu.items[s.item].afterstate_hash;
    sr.optimal = s.optimal;
    if (decision) {
      // log p(a|s), or with a scratchpad the joint log π(z|s) + log p(a|s,z).
      if (s.item >= 0 && static_cast<size_t>(s.item) < s.log_p.size())
        sr.logp_rollout = sr.logp_train = s.log_p[s.item] + s.think_logp;
      else if (s.invalid)  // the off-menu outcome
        sr.logp_rollout = sr.logp_train = s.log_p_other + s.think_logp;
      if (!s.log_p.empty()) sr.value = s.value;
      if (!s.readout_suffix.empty()) {  // the scratchpad is the step's generated text
        sr.generated_text = s.response_text;
        sr.generated_tokens = static_cast<int>(s.response.size());
      }
    } else {
      sr.generated_text = s.response_text;
      sr.generated_tokens = static_cast<int>(s.response.size());
      double roll = 0, train = 0;
      for (float v : s.rollout_logp) roll += v;
      for (float v : s.train_logp) train += v;
      sr.logp_rollout = roll;
      if (!s.train_logp.empty()) sr.logp_train = train;
    }
    for (size_t k = 0; k < s.menu.items.size(); ++k) {
      const auto& it = s.menu.items[k];
      memory::MenuItemRecord m;
      m.position = static_cast<int>(k);
      m.action = it.action;
      m.label = it.label;
      m.command = it.command;
      m.afterstate = it.afterstate;
      if (decision && k < s.log_p.size()) {
        m.probability = std::exp(static_cast<double>(s.log_p[k]));
        const auto& words = s.wording_logp[k];
        for (size_t w = 0; w < words.size(); ++w) {
          std::string text =
              w == 0 ? it.label : (w - 1 < it.realisations.size() ? it.realisations[w - 1] : "");
          m.realisations.push_back({text, std::exp(static_cast<double>(words[w]))});
        }
      }
      sr.menu.push_back(std::move(m));
    }
    sr.reads = memory::ToReads(s.memory);
    r.steps.push_back(std::move(sr));
  }
  return r;
}

}  // namespace rlid::agents

// Store records of played episodes (ToRecord): what memory/records.h writes for
// every episode and step, the menus with their probabilities and the memory
// reads. The rollout's own data stays in EpisodeData; this is the one place
// that decides how it looks in the store.
#include <cmath>

#include "agents/rollout.h"

namespace rlid::agents {
namespace {

// episodes.mode: a train-split episode the policy sampled is a "rollout".
std::string RecordMode(const EpisodeData& e) {
  return e.mode == EpisodeMode::kScripted ? "scripted"
         : e.split == envs::Split::kTrain ? "rollout"
         : e.mode == EpisodeMode::kGreedy ? "greedy"
                                          : "sampled";
}

// The step's log-probabilities and value under the decision readout.
void DecisionFields(const StepData& s, memory::StepRecord& sr) {
  // log p(a|s), or with a scratchpad the joint log π(z|s) + log p(a|s,z).
  const DecisionRead& d = s.decision;
  if (s.item >= 0 && static_cast<size_t>(s.item) < d.log_p.size())
    sr.logp_rollout = sr.logp_train = d.log_p[s.item] + d.think_logp;
  else if (s.invalid)  // the off-menu outcome
    sr.logp_rollout = sr.logp_train = d.log_p_other + d.think_logp;
  if (!d.log_p.empty()) sr.value = d.value;
  if (!d.readout_suffix.empty()) {  // the scratchpad is the step's generated text
    sr.generated_text = s.text.response_text;
    sr.generated_tokens = static_cast<int>(s.text.response.size());
  }
}

// The step's answer text and its summed log-probabilities (rollout engine,
// and the training forward once the trainer filled train_logp).
void TokenFields(const StepData& s, memory::StepRecord& sr) {
  const SampledText& x = s.text;
  sr.generated_text = x.response_text;
  sr.generated_tokens = static_cast<int>(x.response.size());
  double roll = 0, train = 0;
  for (float v : x.rollout_logp) roll += v;
  for (float v : x.train_logp) train += v;
  sr.logp_rollout = roll;
  if (!x.train_logp.empty()) sr.logp_train = train;
}

// The menu as shown; decision-plane items carry p(a|s) and p of each realisation.
std::vector<memory::MenuItemRecord> MenuRecords(const StepData& s, bool decision) {
  std::vector<memory::MenuItemRecord> out;
  for (size_t k = 0; k < s.menu.items.size(); ++k) {
    const auto& it = s.menu.items[k];
    memory::MenuItemRecord m;
    m.position = static_cast<int>(k);
    m.action = it.action;
    m.label = it.label;
    m.command = it.command;
    m.afterstate = it.afterstate;
    if (decision && k < s.decision.log_p.size()) {
      m.probability = std::exp(static_cast<double>(s.decision.log_p[k]));
      const auto& words = s.decision.realisation_logp[k];
      for (size_t w = 0; w < words.size(); ++w) {
        std::string text =
            w == 0 ? it.label : (w - 1 < it.realisations.size() ? it.realisations[w - 1] : "");
        m.realisations.push_back({text, std::exp(static_cast<double>(words[w]))});
      }
    }
    out.push_back(std::move(m));
  }
  return out;
}

// One step's record: what every step stores, then its plane's fields and menu.
memory::StepRecord StepRecordOf(const StepData& s, bool decision) {
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
  if (decision)
    DecisionFields(s, sr);
  else
    TokenFields(s, sr);
  sr.menu = MenuRecords(s, decision);
  sr.reads = memory::ToReads(s.memory);
  return sr;
}

}  // namespace

memory::EpisodeRecord ToRecord(const EpisodeData& e, const AgentContext& ctx) {
  memory::EpisodeRecord r;
  r.id = e.id;
  r.run_id = ctx.run_id;
  r.env = ctx.env->Info().name;
  r.seed = e.spec.env_seed;
  r.split = envs::SplitName(e.split);
  r.mode = RecordMode(e);
  r.plane = policy::PlaneName(e.plane);
  r.policy_version = ctx.policy_version;
  r.iteration = ctx.iteration;
  r.ret = e.ret;
  r.success = e.success;
  r.length = static_cast<int>(e.steps.size());
  r.truncated = e.truncated;
  r.attempts = e.attempts;
  r.new_items = e.new_items;
  const bool decision = e.plane == policy::Plane::kDecision;
  for (const auto& s : e.steps) r.steps.push_back(StepRecordOf(s, decision));
  return r;
}

}  // namespace rlid::agents

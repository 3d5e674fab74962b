// Budget counters and stage timers of rollouts and training.
#include "agents/budget.h"

#include <type_traits>

namespace rlid::agents {
namespace {

// Visits every counter of a budget as (metric key, field): the one list that
// Metrics, FromMetrics and += share, so a new counter cannot be half-wired.
template <class B, class F>
void ForEachCounter(B& b, F&& f) {
  f("budget/episodes", b.episodes);
  f("budget/episodes_dropped", b.episodes_dropped);
  f("budget/episodes_retried", b.episodes_retried);
  f("budget/env_steps", b.env_steps);
  f("budget/invalid_steps", b.invalid_steps);
  f("budget/prompt_tokens", b.prompt_tokens);
  f("budget/generated_tokens", b.generated_tokens);
  f("budget/samples_generated", b.samples_generated);
  f("budget/samples_used", b.samples_used);
  f("budget/tokens_used", b.tokens_used);
  f("budget/groups_generated", b.groups_generated);
  f("budget/groups_kept", b.groups_kept);
  auto stage = [&](const char* name, auto& s) {
    const std::string p = std::string("budget/") + name;
    f(p + "_forwards", s.forwards);
    f(p + "_backwards", s.backwards);
    f(p + "_tokens", s.tokens);
    f(p + "_flops", s.flops);
  };
  stage("rollout", b.rollout);
  stage("update", b.update);
  stage("eval", b.eval);
  stage("diagnostic", b.diagnostic);
  f("budget/wall_seconds", b.wall_seconds);
  f("budget/engine_sync_seconds", b.engine_sync_seconds);
}

}  // namespace

void BookWork(StageCompute& stage, const policy::ModelConfig& config, const policy::ForwardCost& work) {
  stage.forwards += work.calls;
  stage.tokens += work.tokens;
  stage.flops += config.ForwardFlops(work);
}

ComputeScope::ComputeScope(StageCompute& stage, std::initializer_list<policy::TransformerLM> models,
                           Pass pass)
    : stage_(stage), pass_(pass) {
  for (const auto& m : models)
    if (m) start_.emplace_back(m, m->work());
}

ComputeScope::~ComputeScope() {
  const bool backward = pass_ == Pass::kForwardBackward;
  bool worked = false;
  for (const auto& [model, start] : start_) {
    const policy::ForwardCost done = policy::Difference(model->work(), start);
    worked = worked || done.tokens > 0;
    stage_.forwards += done.calls;
    stage_.tokens += done.tokens;
    stage_.flops += (backward ? 3.0 : 1.0) * model->config().ForwardFlops(done);
  }
  if (backward && worked) stage_.backwards += 1;
}

StageCompute& StageCompute::operator+=(const StageCompute& o) {
  forwards += o.forwards;
  backwards += o.backwards;
  tokens += o.tokens;
  flops += o.flops;
  return *this;
}

Budget& Budget::operator+=(const Budget& o) {
  std::vector<double> theirs;
  ForEachCounter(o, [&](const std::string&, const auto& v) { theirs.push_back(static_cast<double>(v)); });
  size_t i = 0;
  ForEachCounter(*this, [&](const std::string&, auto& v) {
    v += static_cast<std::remove_reference_t<decltype(v)>>(theirs[i++]);
  });
  return *this;
}

std::vector<std::pair<std::string, double>> Budget::Metrics() const {
  std::vector<std::pair<std::string, double>> out;
  ForEachCounter(*this,
                 [&](const std::string& k, const auto& v) { out.emplace_back(k, static_cast<double>(v)); });
  out.emplace_back("budget/flops", TrainingFlops());
  out.emplace_back("budget/tokens_processed", static_cast<double>(TokensProcessed()));
  out.emplace_back("budget/forward_passes", static_cast<double>(rollout.forwards + update.forwards));
  out.emplace_back("budget/backward_passes", static_cast<double>(rollout.backwards + update.backwards));
  return out;
}

Budget Budget::FromMetrics(const std::map<std::string, double>& metrics) {
  Budget b;
  ForEachCounter(b, [&](const std::string& k, auto& v) {
    auto it = metrics.find(k);
    if (it != metrics.end()) v = static_cast<std::remove_reference_t<decltype(v)>>(it->second);
  });
  return b;
}

void StageTimes::AddUnclaimedToUpdate(const StageTimes& before, double seconds) {
  update += seconds - (readout - before.readout) - (env - before.env) - (logging - before.logging);
}

std::vector<std::pair<std::string, double>> StageTimes::Delta(const StageTimes& since) const {
  return {{"time/readout_s", readout - since.readout},
          {"time/env_s", env - since.env},
          {"time/update_s", update - since.update},
          {"time/logging_s", logging - since.logging},
          {"time/eval_s", eval - since.eval},
          {"time/checkpoint_s", checkpoint - since.checkpoint}};
}

}  // namespace rlid::agents

// `rlid audit`: runs the checks (trainers/analysis/audit/, one file each) and
// formats their report.
#include "trainers/analysis/audit.h"

#include <fmt/format.h>

#include <algorithm>
#include <functional>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "core/progress.h"
#include "trainers/analysis/audit/audit_internal.h"

namespace rlid::trainers {

using audit_internal::AppendGreedyThoughts;
using audit_internal::AuditState;
using audit_internal::CollectStates;
using audit_internal::DistinctRequest;
using audit_internal::Finite;
using audit_internal::LabelBias;
using audit_internal::Marginalisation;
using audit_internal::PpoGradient;
using audit_internal::RaoBlackwell;
using audit_internal::Teaching;

// Before the checks: what one readout with its gradient costs on this machine
// (the checks' unit of work: each runs many per state) and what makes the
// audit cheaper.
void LogAuditCost(policy::TransformerLM& model, const policy::PromptRenderer& renderer,
                  const std::vector<AuditState>& states, const AuditOptions& options,
                  int64_t checks) {
  const double t0 = MonotonicSeconds();
  auto rb = policy::Readout(model, {DistinctRequest(renderer, states.front())}, {policy::Normalisation::kMenu, false});
  if (rb.log_p.requires_grad()) {
    torch::where(torch::isfinite(rb.log_p), rb.log_p, torch::zeros_like(rb.log_p)).sum().backward();
    for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
  }
  const double unit = MonotonicSeconds() - t0;
  spdlog::info(
      "audit: {} check(s) on {} state(s), {} Monte-Carlo draws each (rao_blackwell), "
      "ppo_gradient in float64; one readout with its gradient takes {} here (the checks run "
      "many per state). Cheaper: fewer states (--states), fewer draws (--mc-samples), or only "
      "some checks (--only)",
      checks, states.size(), options.mc_samples, FormatDuration(unit));
}

std::vector<AuditCheck> RunAudit(policy::TransformerLM model,
                                 const policy::PromptRenderer& renderer, const envs::Env& env,
                                 const AuditOptions& options) {
  static const std::vector<std::string> kIds = {"finite",       "marginalisation", "rao_blackwell",
                                                "ppo_gradient", "teaching",        "label_bias"};
  for (const auto& id : options.only)
    if (std::find(kIds.begin(), kIds.end(), id) == kIds.end())
      throw ConfigError(fmt::format("unknown audit check '{}'", id),
                        "checks: finite, marginalisation, rao_blackwell, ppo_gradient, teaching, "
                        "label_bias");
  auto want = [&](const std::string& id) {
    return options.only.empty() ||
           std::find(options.only.begin(), options.only.end(), id) != options.only.end();
  };
  model->eval();
  policy::TransformerLM ref = options.reference_model.is_empty() ? model : options.reference_model;
  ref->eval();
  std::vector<AuditCheck> out;
  out.push_back(Finite(model));
  if (!out[0].passed) {
    for (size_t i = 1; i < kIds.size(); ++i)
      if (want(kIds[i])) {
        AuditCheck s{kIds[i], kIds[i]};
        s.skipped = true;
        s.note = "Not run: the model's weights are not finite (check 'finite').";
        out.push_back(s);
      }
    return out;
  }
  auto states = CollectStates(env, renderer, options.states, options.seed);
  if (renderer.config().reasoning) AppendGreedyThoughts(model, renderer, states);
  int64_t wanted = 0;
  for (size_t i = 1; i < kIds.size(); ++i) wanted += want(kIds[i]);
  if (options.progress && !states.empty()) LogAuditCost(model, renderer, states, options, wanted);
  Progress progress("audit checks", wanted, options.progress, /*every_s=*/0);
  auto run = [&](const std::string& id, const std::function<AuditCheck()>& check) {
    if (!want(id)) return;
    out.push_back(check());
    progress.Update(static_cast<int64_t>(out.size()) - 1,
                    fmt::format("({} {})", id, out.back().skipped ? "skipped" : out.back().passed ? "passed" : "failed"));
  };
  run("marginalisation", [&] { return Marginalisation(model, ref, renderer, states); });
  run("rao_blackwell",
      [&] { return RaoBlackwell(model, ref, renderer, states, options.mc_samples, options.seed); });
  run("ppo_gradient", [&] { return PpoGradient(model, renderer, states, options.seed); });
  run("teaching", [&] { return Teaching(model, renderer, states); });
  run("label_bias", [&] { return LabelBias(model, renderer, states, env, options.seed); });
  return out;
}

bool Failed(const AuditCheck& c) { return !c.skipped && !c.informational && !c.passed; }

int CountFailed(const std::vector<AuditCheck>& checks) {
  return static_cast<int>(std::count_if(checks.begin(), checks.end(), Failed));
}

std::string FormatAudit(const std::vector<AuditCheck>& checks) {
  std::string out;
  int i = 0;
  for (const auto& c : checks) {
    const char* verdict = c.skipped         ? "SKIPPED"
                          : c.informational ? "INFO"
                                            : (c.passed ? "PASS" : "FAIL");
    out += fmt::format("{}. {}  [{}]\n", i++, c.title, verdict);
    size_t w = 0;
    for (const auto& [k, v] : c.numbers) w = std::max(w, k.size());
    for (const auto& [k, v] : c.numbers) out += fmt::format("   {:<{}}  {}\n", k, w, v);
    if (!c.note.empty()) out += "   " + c.note + "\n";
    out += "\n";
  }
  return out;
}

}  // namespace rlid::trainers

#include "trainers/runtime/diagnostics.h"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <regex>
#include <vector>

#include "agents/budget.h"
#include "core/error.h"
#include "core/log.h"
#include "core/strings.h"

namespace rlid::trainers {

void EpisodeTally::Add(const agents::EpisodeData& e) {
  episodes += 1;
  successes += e.success ? 1 : 0;
  steps += static_cast<int64_t>(e.steps.size());
  for (const auto& s : e.steps) {
    if (!s.invalid) continue;
    invalid_steps += 1;
    invalid_reasons[InvalidReasonKind(s.invalid_reason)] += 1;
  }
}

std::string InvalidReasonKind(const std::string& reason) {
  static const std::regex kQuoted("'[^']*'"), kBracketed("\\([^)]*\\)"), kLabel("\\b[A-Z]\\b"),
      kDigits("[0-9]+");
  std::string kind = std::regex_replace(reason, kQuoted, "'…'");
  kind = std::regex_replace(kind, kBracketed, "(…)");
  kind = std::regex_replace(kind, kLabel, "X");
  return std::regex_replace(kind, kDigits, "N");
}

std::optional<std::string> InvalidAnswersWarning(const EpisodeTally& rollouts) {
  // Every answer invalid says enough at any count; a majority needs a few to mean anything.
  if (rollouts.steps == 0 || rollouts.InvalidRate() <= 0.5) return std::nullopt;
  if (rollouts.steps < kMinAnswersToWarn && rollouts.invalid_steps < rollouts.steps)
    return std::nullopt;
  std::vector<std::pair<int64_t, std::string>> kinds;
  for (const auto& [kind, n] : rollouts.invalid_reasons) kinds.push_back({n, kind});
  std::sort(kinds.begin(), kinds.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  std::vector<std::string> top;
  for (size_t i = 0; i < std::min<size_t>(3, kinds.size()); ++i)
    top.push_back(fmt::format("\"{}\" ({})", kinds[i].second, kinds[i].first));
  return fmt::format(
      "{:.0f}% of the token plane's {} answers this iteration were invalid; commonest: {}. The "
      "policy has not learnt the answer format. A small model may not learn to write the "
      "commands: warm-start it on labels (sft.answer = \"label\"), or with more demonstrations "
      "(sft.episodes); check what counts as an answer in docs/free_text.md (docs/training.md, "
      "\"Bringing up a new env\")",
      100 * rollouts.InvalidRate(), rollouts.steps, Join(top, ", "));
}

std::optional<std::string> DemonstrationsWarning(double demo_success, double random_action_frac) {
  // random_action_frac = 1 demonstrates the answer format only, failing by design.
  if (demo_success >= 0.5 || random_action_frac >= 1) return std::nullopt;
  return fmt::format(
      "the warm start's demonstrations succeed in only {:.0f}% of their episodes (the oracle "
      "with sft.random_action_frac = {:g}): behaviour cloning copies failing play. Lower "
      "sft.random_action_frac, or check the env's oracle and step limit (`rlid env check`)",
      100 * demo_success, random_action_frac);
}

OracleReference MeasureOracle(agents::AgentContext ctx, int64_t episodes) {
  OracleReference ref;
  if (episodes <= 0 || ctx.renderer->config().reasoning) return ref;
  std::unique_ptr<envs::State> probe;
  try {
    probe = ctx.env->NewState(envs::SplitSeed(envs::Split::kTrain, 0));
  } catch (const EnvError& e) {
    // Measured nothing; the rollouts meet the failure under the env's on_error rule.
    spdlog::warn("could not measure how the env's oracle plays: {}", e.what());
    return ref;
  }
  if (!dynamic_cast<const envs::OracleState*>(probe.get())) return ref;
  // Side-effect free: no store ids, no memory, no progress callbacks.
  ctx.episode_ids = nullptr;
  ctx.bank = nullptr;
  ctx.on_episode_end = nullptr;
  ctx.times = nullptr;
  std::vector<agents::EpisodeSpec> specs;
  for (int64_t i = 0; i < episodes; ++i)
    specs.push_back({envs::SplitSeed(envs::Split::kTrain, static_cast<uint64_t>(i)),
                     (uint64_t{1} << 42) + static_cast<uint64_t>(i)});
  agents::Chooser oracle = [](const envs::State& state, const agents::StepData& step, Rng& rng) {
    const auto best = dynamic_cast<const envs::OracleState&>(state).OptimalActions();
    if (best.empty()) return static_cast<int>(rng.UniformInt(step.menu.size()));
    return std::max(0, step.menu.IndexOfAction(best[rng.UniformInt(best.size())]));
  };
  agents::Budget scratch;
  EpisodeTally tally;
  for (const auto& e : agents::RunScriptedEpisodes(ctx, specs, envs::Split::kTrain, oracle, scratch))
    tally.Add(e);
  ref.episodes = tally.episodes;
  ref.success = tally.SuccessRate();
  ref.mean_length = tally.MeanLength();
  return ref;
}

std::optional<std::string> EarlyEndWarning(const EpisodeTally& rollouts, const OracleReference& oracle) {
  if (oracle.episodes == 0 || rollouts.episodes < 8 || oracle.success <= 0) return std::nullopt;
  if (rollouts.SuccessRate() >= 0.5 * oracle.success) return std::nullopt;
  if (rollouts.MeanLength() >= 0.5 * oracle.mean_length) return std::nullopt;
  return fmt::format(
      "the policy's episodes end after {:.1f} steps on average and succeed {:.0f}% of the time; "
      "the env's oracle takes {:.1f} steps and succeeds {:.0f}% on train seeds. Something makes "
      "ending early pay: a per-step cost larger than what success is worth to a weak policy, an "
      "action that ends the episode without a penalty, or trainer.invalid.rule = \"end\" "
      "(docs/training.md, \"Bringing up a new env\")",
      rollouts.MeanLength(), 100 * rollouts.SuccessRate(), oracle.mean_length, 100 * oracle.success);
}

}  // namespace rlid::trainers

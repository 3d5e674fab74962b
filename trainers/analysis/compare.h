// `rlid compare`: decision-plane and token-plane arms trained from ONE shared
// warm-start checkpoint, on the same env, prompt renderer, memory settings and
// seeds, each stopped by the same budget (env steps, FLOPs or wall-clock
// seconds, counted by the same rules in both planes). Results come back from
// the run's SQLite store and become a summary table, a verdict with a
// confidence interval, learning curves (gnuplot SVG/PNG, from the warm-start
// point at 0 env steps, with the chance level) and a self-contained report.html.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"
#include "trainers/runtime/budget_kind.h"
#include "trainers/analysis/stats.h"

namespace rlid::trainers {

struct ArmSpec {
  std::string name;
  std::string algorithm;
  std::vector<std::string> sets;  // arm-specific overrides (reported)
};

// Which test evaluation a comparison reports: the greedy (argmax) policy or the sampled one.
enum class SuccessMetric { kGreedy, kSampled };
constexpr auto Spellings(SuccessMetric) {
  return ModeNames<SuccessMetric>({{SuccessMetric::kGreedy, "greedy"}, {SuccessMetric::kSampled, "sampled"}});
}

struct CompareConfig {
  std::vector<ArmSpec> arms;
  std::vector<uint64_t> seeds = {1, 2};
  BudgetKind budget = BudgetKind::kEnvSteps;  // env_steps | flops | wall_seconds
  double budget_value = 2000;
  int64_t max_iterations = 1000;   // safety cap; the budget should stop each arm first
  double success_threshold = 0.8;  // for "env steps to reach"
  SuccessMetric success_metric = SuccessMetric::kGreedy;  // the evaluation the table and curves use
  std::string warm_start = "sft";  // sft (run rlid sft once) | none | <checkpoint dir>
  int64_t chance_episodes = 1024;  // test episodes of the uniform-random menu policy
  bool plots = true;               // gnuplot curves (skipped with a warning when gnuplot is absent)
  void Load(ConfigNode n);
};

struct CurvePoint {
  int64_t iteration = 0;  // -1: the warm start, before any update
  double env_steps = 0, wall = 0, flops = 0, success = 0, success_sampled = 0, ret = 0;
};

struct ArmSeedResult {
  std::string arm, algorithm, plane;
  uint64_t seed = 0;
  int64_t run_id = 0;
  int64_t iterations = 0;
  std::vector<CurvePoint> curve;  // evaluation points, the warm start first
  double final_success = 0, final_return = 0, final_success_sampled = 0;
  int64_t eval_episodes = 0;       // test episodes behind each success rate
  double steps_to_threshold = -1;  // env steps at the first evaluation >= threshold (-1: never)
  double env_steps = 0, wall = 0, flops = 0, tokens_processed = 0;
  double rollout_flops = 0, update_flops = 0;
  double generated_tokens = 0, invalid_rate = 0;
  double samples_generated = 0, samples_used = 0;
  double grad_snr = -1;  // mean per-episode gradient SNR over measurements (-1: not measured)
};

struct ArmSummary {
  std::string arm, algorithm, plane;
  int seeds = 0;
  SuccessEstimate success;  // final test success over seeds (with test noise)
  double return_mean = 0;
  double steps_to_threshold = -1;  // mean over seeds that reached it
  int reached = 0;                 // seeds that reached the threshold
  // Means over seeds of what each run used.
  double env_steps = 0, flops = 0, tokens_processed = 0, generated_tokens = 0, wall = 0,
         invalid_rate = 0;
  double grad_snr = -1;
};

struct CompareResult {
  std::string run_dir, warm_start, report, table;
  CompareConfig config;
  std::vector<ArmSeedResult> runs;
  std::vector<ArmSummary> arms;
  double chance = -1;   // test success of the uniform-random menu policy (-1: not measured)
  std::string verdict;  // which arm won and whether the interval separates them, said plainly
};

CompareResult RunCompare(const std::string& config_path, const std::vector<std::string>& sets,
                         const std::string& out_dir, bool quiet = false);

// One run's learning curve and final numbers, read back from its metrics in
// the store `db` (`sampled`: the sampled policy's test success, else greedy).
ArmSeedResult Collect(const std::string& db, int64_t run_id, const ArmSpec& arm,
                      const std::string& plane, uint64_t seed, double threshold, bool sampled);

// Per arm: the mean over seeds of every run's final numbers.
std::vector<ArmSummary> Summarise(const std::vector<ArmSeedResult>& runs,
                                  const std::vector<ArmSpec>& arms);

// " (+4.2%)": how far `used` went past the matched budget when the budget
// counts `kind` (a run stops at the first iteration that reaches it); "" otherwise.
std::string Overshoot(const CompareConfig& cc, double used, BudgetKind kind);

// The terminal table (also embedded in the report). with_wall = false leaves
// out the wall-clock column (the one number that differs between reruns).
std::string FormatSummaryTable(const std::vector<ArmSummary>& arms, const CompareConfig& cfg,
                               bool with_wall = true);

// The verdict: best arm by mean success vs the runner-up, with the 95% Welch
// interval of the gap ("tie" when it includes 0; a single seed makes no claim).
std::string Verdict(const std::vector<ArmSummary>& arms, const std::string& env, double chance);

}  // namespace rlid::trainers

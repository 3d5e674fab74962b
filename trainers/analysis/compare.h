// `rlid compare`: decision-plane and token-plane arms trained from ONE shared
// warm-start checkpoint, on the same env, prompt renderer, memory settings and
// seeds, each stopped by the same budget (env steps, wall-clock or training
// FLOPs). Results come back from the run's SQLite store, become a summary
// table, learning curves (gnuplot SVG/PNG) and a self-contained report.html.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/config.h"

namespace rlid::trainers {

struct ArmSpec {
  std::string name;
  std::string algorithm;
  std::vector<std::string> sets;  // arm-specific overrides (reported)
};

struct CompareConfig {
  std::vector<ArmSpec> arms;
  std::vector<uint64_t> seeds = {1, 2};
  std::string budget = "env_steps";  // env_steps | wall_clock | flops
  double budget_value = 2000;
  int64_t max_iterations = 1000;   // safety cap; the budget should stop each arm first
  double success_threshold = 0.8;  // for "env steps to reach"
  std::string success_metric =
      "greedy";  // greedy | sampled: which test evaluation the table and curves use
  std::string warm_start = "sft";  // sft (run rlid sft once) | none | <checkpoint dir>
  bool plots = true;               // gnuplot curves (skipped with a warning when gnuplot is absent)
  void Load(ConfigNode n);
};

struct CurvePoint {
  int64_t iteration = 0;
  double env_steps = 0, wall = 0, flops = 0, success = 0, success_sampled = 0, ret = 0;
};

struct ArmSeedResult {
  std::string arm, algorithm, plane;
  uint64_t seed = 0;
  int64_t run_id = 0;
  int64_t iterations = 0;
  std::vector<CurvePoint> curve;  // evaluation points
  double final_success = 0, final_return = 0, final_success_sampled = 0;
  double steps_to_threshold = -1;  // env steps at the first evaluation >= threshold (-1: never)
  double env_steps = 0, wall = 0, flops = 0;
  double generated_tokens = 0, forward_passes = 0, prompt_tokens = 0, invalid_rate = 0;
  double samples_generated = 0, samples_used = 0;
  double grad_var = -1;  // mean per-sample gradient variance (-1: not measured)
  double grad_var_all_action = -1;
};

struct ArmSummary {
  std::string arm, algorithm, plane;
  int seeds = 0;
  double success_mean = 0, success_std = 0, return_mean = 0;
  double steps_to_threshold = -1;  // mean over seeds that reached it
  int reached = 0;                 // seeds that reached the threshold
  double generated_tokens = 0, forward_passes = 0, invalid_rate = 0, wall = 0, env_steps = 0,
         flops = 0;
  double grad_var = -1, grad_var_all_action = -1;
};

struct CompareResult {
  std::string run_dir, warm_start, report, table;
  CompareConfig config;
  std::vector<ArmSeedResult> runs;
  std::vector<ArmSummary> arms;
  std::string verdict;  // which arm won, said plainly
};

CompareResult RunCompare(const std::string& config_path, const std::vector<std::string>& sets,
                         const std::string& out_dir, bool quiet = false);

// The terminal table (also embedded in the report).
std::string FormatSummaryTable(const std::vector<ArmSummary>& arms, const CompareConfig& cfg);

}  // namespace rlid::trainers

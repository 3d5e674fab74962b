// Rendering of `rlid compare` (and `rlid report`) results: learning-curve
// plots (gnuplot) and the self-contained report.html. Pure presentation over
// CompareResult.
#pragma once

#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "trainers/analysis/compare.h"

namespace rlid::trainers {

struct ReportInputs {
  std::string env_name, config_path, label_order;
  std::vector<std::string> sets;
  bool show_afterstates = true, memory_enabled = false;
  int64_t eval_episodes = 0;
  std::vector<std::pair<std::string, std::vector<std::string>>> arm_diffs;  // per arm, in arm order
  std::vector<std::filesystem::path> plots;                                 // SVG files to inline
  double total_seconds = 0;
};

// "section.key = value" lines of resolved config `b` that differ from `a`
// (seed, algorithm and init excluded: they differ by design).
std::vector<std::string> ConfigDiff(const std::string& a, const std::string& b);

// Writes <arm>.dat curve files into `dir` (the k-th evaluation averaged over
// seeds, the warm start at 0 first) and renders success vs env steps, vs
// training FLOPs and vs wall-clock as SVG + PNG, with the chance level as a
// dashed line when chance >= 0. Returns the SVGs (empty when gnuplot is missing).
std::vector<std::filesystem::path> RenderPlots(const std::filesystem::path& dir,
                                               const std::vector<ArmSeedResult>& runs,
                                               const std::vector<ArmSpec>& arms,
                                               SuccessMetric metric, double chance);

std::string RenderReportHtml(const CompareResult& result, const ReportInputs& in);

// `rlid report DIR`: the same results table and curves for the runs of any run
// directory (`runs`: one line per run, listed at the top).
std::string RenderRunReportHtml(const CompareResult& result, const std::vector<std::filesystem::path>& plots,
                                const std::vector<std::string>& runs);

}  // namespace rlid::trainers

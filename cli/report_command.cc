// `rlid report RUN_DIR`: the learning curves and summary of the runs in a run
// directory (train runs, a comparison's arm x seed runs, or both), rendered
// by the same table and plots as `rlid compare`'s report.html, from the
// metrics in its store alone.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <regex>

#include "cli/command.h"
#include "core/error.h"
#include "memory/query.h"
#include "memory/store.h"
#include "trainers/analysis/compare.h"
#include "trainers/analysis/report.h"

namespace rlid::cli {
namespace {

namespace fs = std::filesystem;

// `algorithm = '...'` of a run's resolved config ("" when absent).
std::string AlgorithmOf(const std::string& config_toml) {
  static const std::regex kAlgorithm(R"(\nalgorithm = '([^']*)')");
  std::smatch m;
  return std::regex_search(config_toml, m, kAlgorithm) ? m[1].str() : "";
}

class ReportCommand : public Command {
 public:
  void Setup(CLI::App& app) override {
    app.add_option("dir", dir_, "run directory (rlid train / compare --out, or runs/latest)")
        ->required()
        ->check(CLI::ExistingDirectory);
    app.add_option("--out", out_, "HTML file to write (default: DIR/run_report.html)");
    app.add_option("--metric", metric_, "test success shown: sampled | greedy")
        ->check(CLI::IsMember({"sampled", "greedy"}))
        ->capture_default_str();
    app.add_option("--threshold", threshold_, "success level for 'env steps to reach'")
        ->check(CLI::Range(0.0, 1.0))
        ->capture_default_str();
    app.footer(
        "The metrics behind it, as CSV: rlid sql DIR --csv \"SELECT run_id, iteration, key, value "
        "FROM metrics ORDER BY run_id, key, iteration\"");
    app.callback([this] { Run(); });
  }

 private:
  void Run() {
    const fs::path db = fs::path(dir_) / memory::kDatabaseFileName;
    if (!fs::is_regular_file(db))
      throw IoError(fmt::format("'{}' has no {}", dir_, memory::kDatabaseFileName),
                    "give a directory made by rlid train, sft or compare (e.g. runs/latest)");
    auto store = memory::Store::Open(db.string(), memory::Store::Mode::kReadOnly);
    const auto rows = store->Query(
        "SELECT r.id, r.name, r.arm, r.kind, r.seed, r.status, r.config_toml, "
        "(SELECT e.plane FROM episodes e WHERE e.run_id = r.id AND e.split = 'train' LIMIT 1), "
        "(SELECT e.env FROM episodes e WHERE e.run_id = r.id LIMIT 1) "
        "FROM runs r WHERE r.kind IN ('train', 'compare') ORDER BY r.id");
    if (rows.rows.empty())
      throw ConfigError(fmt::format("'{}' holds no train or compare runs", dir_),
                        "rlid report shows training curves; rlid sql DIR \"SELECT * FROM runs\" "
                        "lists what is there");
    trainers::CompareResult result;
    result.run_dir = dir_;
    auto& cc = result.config;
    cc.success_metric = metric_;
    cc.success_threshold = threshold_;
    cc.budget = "";  // no matched budget to measure an overshoot against
    std::vector<std::string> listed;
    std::string env;
    for (const auto& row : rows.rows) {
      const auto id = static_cast<int64_t>(memory::NumericValue(row[0]));
      const auto text = [&](size_t i) {
        return std::holds_alternative<std::string>(row[i]) ? std::get<std::string>(row[i]) : "";
      };
      const std::string kind = text(3), plane = text(7).empty() ? "?" : text(7);
      const std::string algorithm = AlgorithmOf(text(6));
      // A comparison's seeds of one arm average into one row; train runs stay apart.
      const std::string arm = kind == "compare" ? text(2) : fmt::format("{} (run {})", text(1), id);
      if (env.empty()) env = text(8);
      auto known = std::find_if(cc.arms.begin(), cc.arms.end(), [&](const auto& a) { return a.name == arm; });
      const trainers::ArmSpec spec = known != cc.arms.end() ? *known : trainers::ArmSpec{arm, algorithm, {}};
      if (known == cc.arms.end()) cc.arms.push_back(spec);
      const auto seed = static_cast<uint64_t>(memory::NumericValue(row[4]));
      result.runs.push_back(
          trainers::Collect(db.string(), id, spec, plane, seed, threshold_, metric_ == "sampled"));
      listed.push_back(fmt::format("run {}: {} {} ({}, {} plane, seed {}), {}", id, kind, text(1),
                                   algorithm, plane, seed, text(5)));
    }
    result.arms = trainers::Summarise(result.runs, cc.arms);
    result.table = trainers::FormatSummaryTable(result.arms, cc);
    result.verdict = trainers::Verdict(result.arms, env.empty() ? "?" : env, -1);
    const fs::path out = out_.empty() ? fs::path(dir_) / "run_report.html" : fs::path(out_);
    const fs::path plots_dir = out.parent_path() / (out.stem().string() + "_plots");
    const auto plots = trainers::RenderPlots(plots_dir, result.runs, cc.arms, metric_, -1);
    std::ofstream f(out);
    if (!f) throw IoError(fmt::format("cannot write '{}'", out.string()), "is the directory writable?");
    f << trainers::RenderRunReportHtml(result, plots, listed);
    std::cout << result.table << "\n" << result.verdict << "\nreport " << out.string() << "\n";
  }

  std::string dir_, out_, metric_ = "sampled";
  double threshold_ = 0.8;
};

const Registrar<CommandRegistry> kRegister(
    "report", "a run directory's learning curves and summary as HTML (compare's renderer)",
    [] { return std::make_unique<ReportCommand>(); });

}  // namespace
}  // namespace rlid::cli

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
#include "core/file_io.h"
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

// The report's path before anything is written: its directory must exist
// (rlid makes none), and a file already there must be a regular file or a
// symlink (replaced) — a FIFO, device or directory is refused.
void CheckReportPath(const fs::path& out) {
  std::error_code ec;
  const fs::path parent = out.parent_path().empty() ? fs::path(".") : out.parent_path();
  if (!fs::is_directory(parent, ec))
    throw IoError(
        fmt::format("--out '{}': the directory '{}' does not exist", out.string(), parent.string()),
        "create it first, or give a path in an existing directory");
  const auto st = fs::symlink_status(out, ec);
  if (!ec && fs::exists(st) && !fs::is_regular_file(st) && !fs::is_symlink(st))
    throw IoError(fmt::format("--out '{}' exists and is not a regular file", out.string()),
                  "name a new .html file or an old report to replace");
}

class ReportCommand : public Command {
 public:
  void Setup(CLI::App& app) override {
    app.add_option("dir", dir_, "run directory (rlid train / compare --out, or runs/latest)")
        ->required()
        ->check(CLI::ExistingDirectory);
    app.add_option("--out", out_, "HTML file to write (default: DIR/run_report.html)");
    metric_opt_ = app.add_option("--metric", metric_,
                                 "test success shown: greedy | sampled (default: the comparison's "
                                 "compare.success_metric, else greedy, as rlid compare)")
                      ->check(CLI::IsMember({"sampled", "greedy"}));
    threshold_opt_ = app.add_option("--threshold", threshold_,
                                    "success level for 'env steps to reach' (default: the "
                                    "comparison's compare.success_threshold, else 0.8)")
                         ->check(CLI::Range(0.0, 1.0));
    app.footer(
        "The metrics behind it, as CSV: rlid sql DIR --csv \"SELECT run_id, iteration, key, value "
        "FROM metrics ORDER BY run_id, key, iteration\"");
    app.callback([this] { Run(); });
  }

 private:
  // compare's defaults, then a comparison's own settings (its compare.toml),
  // then the flags: the report shows what `rlid compare` showed.
  void ReadDefaults() {
    trainers::CompareConfig cc;
    const fs::path saved = fs::path(dir_) / "compare.toml";
    std::error_code ec;
    if (fs::is_regular_file(saved, ec)) {
      Config c = Config::FromFile(saved.string());
      c.Root().Section("compare").MarkAllUsed();
      cc.Load(c.Root().Section("compare"));
    }
    if (metric_opt_->count() == 0) metric_ = NameOf(cc.success_metric);
    if (threshold_opt_->count() == 0) threshold_ = cc.success_threshold;
    if (fs::is_regular_file(saved, ec)) {  // the matched budget, for the table's overshoot
      budget_ = cc.budget;
      budget_value_ = cc.budget_value;
    }
  }

  // The chance level `rlid compare` measured ("(chance 0.250)" in summary.txt), or -1.
  double ChanceOf() const {
    static const std::regex kChance(R"(\(chance ([0-9.]+)\))");
    std::ifstream in(fs::path(dir_) / "summary.txt");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::smatch m;
    return std::regex_search(text, m, kChance) ? std::stod(m[1].str()) : -1.0;
  }

  void Run() {
    ReadDefaults();
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
    cc.success_metric = *ParseMode<trainers::SuccessMetric>(metric_);  // IsMember-checked
    cc.success_threshold = threshold_;
    cc.budget = budget_;  // a comparison's matched budget (train runs: budget_value 0, no overshoot)
    cc.budget_value = budget_value_;
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
          trainers::Collect(db.string(), id, spec, plane, seed, threshold_, cc.success_metric == trainers::SuccessMetric::kSampled));
      listed.push_back(fmt::format("run {}: {} {} ({}, {} plane, seed {}), {}", id, kind, text(1),
                                   algorithm, plane, seed, text(5)));
    }
    result.arms = trainers::Summarise(result.runs, cc.arms);
    result.table = trainers::FormatSummaryTable(result.arms, cc);
    result.chance = ChanceOf();
    result.verdict = trainers::Verdict(result.arms, env.empty() ? "?" : env, result.chance);
    const fs::path out = out_.empty() ? fs::path(dir_) / "run_report.html" : fs::path(out_);
    CheckReportPath(out);
    const fs::path plots_dir = out.parent_path() / (out.stem().string() + "_plots");
    const auto plots =
        trainers::RenderPlots(plots_dir, result.runs, cc.arms, cc.success_metric, result.chance);
    // A symlink at `out` is replaced, never followed.
    ReplaceFile(out.string(), trainers::RenderRunReportHtml(result, plots, listed), "report");
    std::cout << result.table << "\n" << result.verdict << "\nreport " << out.string() << "\n";
  }

  std::string dir_, out_, metric_;
  trainers::BudgetKind budget_ = trainers::BudgetKind::kEnvSteps;
  double threshold_ = 0, budget_value_ = 0;
  CLI::Option *metric_opt_ = nullptr, *threshold_opt_ = nullptr;
};

const Registrar<CommandRegistry> kRegister(
    "report", "a run directory's learning curves and summary as HTML (compare's renderer)",
    [] { return std::make_unique<ReportCommand>(); });

}  // namespace
}  // namespace rlid::cli

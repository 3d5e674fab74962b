// `rlid compare CONFIG` and `rlid audit --checkpoint C --env E`.
#include <fmt/format.h>

#include <filesystem>
#include <iostream>

#include "cli/command.h"
#include "cli/dist_job.h"
#include "core/error.h"
#include "policy/model/checkpoint.h"
#include "trainers/runtime/experiment.h"
#include "trainers/analysis/audit.h"
#include "trainers/analysis/compare.h"

namespace rlid::cli {
namespace {

class CompareCommand : public Command {
 public:
  void Setup(CLI::App& app) override {
    app.add_option("config", config_, "experiment TOML with a [compare] section")
        ->required()
        ->check(CLI::ExistingFile);
    app.add_option("--set", sets_, "override a config key for every arm (repeatable)");
    app.add_option("--out", out_, "run directory (default: runs/<name>-compare-<timestamp>)");
    app.add_flag("--quiet", quiet_, "no progress lines");
    job_.Add(app);
    app.callback([this] {
      // [run] dist_* and device come from the base config (the arms share them).
      auto base = trainers::ExperimentConfig::Load(config_, WithGlobalOverrides(sets_));
      if (!job_.Enter(*base)) return;  // this process launched the ranks
      auto r = trainers::RunCompare(config_, WithGlobalOverrides(sets_), out_, quiet_);
      if (!job_.lead()) return;
      std::cout << "\n" << r.table << "\n" << r.verdict << "\n\n";
      std::cout << fmt::format(
          "budget: {} = {:g} per arm and seed; seeds: {}; all arms started from {}\n",
          NameOf(r.config.budget), r.config.budget_value, r.config.seeds.size(), r.warm_start);
      std::cout << "report: " << std::filesystem::absolute(r.report).string() << "\n";
    });
  }

 private:
  std::string config_, out_;
  std::vector<std::string> sets_;
  bool quiet_ = false;
  DistJob job_;
};

class AuditCommand : public Command {
 public:
  void Setup(CLI::App& app) override {
    app.add_option("--checkpoint", checkpoint_, "checkpoint directory")->required();
    env_.Add(app, /*with_seed=*/false);
    app.add_option("--states", opts_.states, "test states to check on")->capture_default_str();
    app.add_option("--mc-samples", opts_.mc_samples, "Monte-Carlo draws per state (Rao-Blackwell)")
        ->capture_default_str();
    app.add_option("--seed", opts_.seed, "seed for states, advantages and draws")
        ->capture_default_str();
    app.add_option("--only", opts_.only,
                   "run only these checks (marginalisation, rao_blackwell, ppo_gradient, teaching, "
                   "label_bias); 'finite' (every weight is finite) always runs");
    app.callback([this] {
      auto ck = policy::LoadCheckpoint(checkpoint_);
      auto env = env_.Make();
      policy::PromptRenderer renderer(policy::PromptConfig{}, ck.tokenizer);
      opts_.progress = true;
      auto checks = trainers::RunAudit(ck.model, renderer, *env, opts_);
      std::cout << trainers::FormatAudit(checks);
      const int failed = trainers::CountFailed(checks);
      std::cout << (failed ? fmt::format("{} check(s) FAILED\n", failed) : "all checks passed\n");
      if (failed)
        throw NumericError(fmt::format("{} audit check(s) failed", failed),
                           "see the numbers above");
    });
  }

 private:
  std::string checkpoint_;
  EnvOptions env_;
  trainers::AuditOptions opts_;
};

const Registrar<CommandRegistry> kCompare(
    "compare", "compare decision- and token-plane arms under a matched budget",
    [] { return std::make_unique<CompareCommand>(); });
const Registrar<CommandRegistry> kAudit("audit",
                                        "check the decision-plane theory on a checkpoint and env",
                                        [] { return std::make_unique<AuditCommand>(); });

}  // namespace
}  // namespace rlid::cli

// `rlid train`, `rlid sft`: run an experiment config, warm-start by
// behaviour cloning (`rlid eval` is cli/eval_command.cc).
#include <fmt/format.h>

#include <filesystem>
#include <iostream>

#include "cli/command.h"
#include "cli/dist_job.h"
#include "cli/eval_command.h"
#include "core/error.h"
#include "core/log.h"
#include "core/progress.h"
#include "memory/writer_lock.h"
#include "policy/model/checkpoint.h"
#include "trainers/algorithms/sft.h"
#include "trainers/runtime/resume_config.h"
#include "trainers/runtime/run.h"
#include "trainers/runtime/train_run.h"
#include "trainers/runtime/trainer.h"

namespace rlid::cli {
namespace {

using trainers::ExperimentConfig;

// The config file, its --set overrides and the run directory of a command.
struct ExperimentArgs {
  std::string config;
  std::vector<std::string> sets;
  std::string out;
  void Add(CLI::App& app) {
    app.add_option("config", config, "experiment TOML (see configs/)")
        ->required()
        ->check(CLI::ExistingFile);
    app.add_option("--set", sets, "override a config key, e.g. --set trainer.lr=1e-4 (repeatable)");
    app.add_option("--out", out, "run directory (default: runs/<name>-<timestamp>)");
  }
};

class TrainCommand : public Command {
 public:
  void Setup(CLI::App& app) override {
    opts_.Add(app);
    app.add_flag("--resume", resume_,
                 "continue the run in --out from its last checkpoint, under the run's own "
                 "config.toml (--set may change only how long it runs and how often it "
                 "evaluates and saves)");
    app.add_flag("--metrics-only", metrics_only_,
                 "record runs, metrics and checkpoints but not episodes/steps/menus/memory reads");
    job_.Add(app);
    app.footer("trainers: " + Join(trainers::TrainerRegistry::Global().Names(), ", "));
    app.callback([this] { Run(); });
  }

 private:
  void Run() {
    if (resume_ && opts_.out.empty())
      throw ConfigError("--resume needs --out DIR (the run directory to continue)");
    // A resumed run continues under its own config.toml (trainers/runtime/resume_config.h).
    auto cfg = resume_ ? trainers::LoadResumeConfig(opts_.out, opts_.config,
                                                    WithGlobalOverrides(opts_.sets))
                       : ExperimentConfig::Load(opts_.config, WithGlobalOverrides(opts_.sets));
    // Refused before any rank starts (rank 0 checks again, for hand-started jobs).
    if (!resume_ && !opts_.out.empty() && trainers::DistEnv::FromEnvironment().world_size == 1)
      trainers::RefuseExistingRun(opts_.out, trainers::RunKind::kTrain);
    if (!job_.Enter(*cfg)) return;  // this process launched the ranks, which did the work
    const auto [r, dir] =
        trainers::TrainRun(*cfg, {.out = opts_.out, .resume = resume_, .record = !metrics_only_});
    if (!job_.lead()) return;
    std::cout << fmt::format("\n{} finished {} iterations in {}\n", cfg->trainer.algorithm,
                             r.iterations, dir);
    PrintEval("test (greedy)", r.final_greedy);
    if (cfg->trainer.eval_sampled) PrintEval("test (sampled)", r.final_sampled);
    std::cout << "checkpoint " << r.final_checkpoint << "\n";
  }
  ExperimentArgs opts_;
  DistJob job_;
  bool resume_ = false, metrics_only_ = false;
};

class SftCommand : public Command {
 public:
  void Setup(CLI::App& app) override {
    opts_.Add(app);
    app.callback([this] {
      auto cfg = ExperimentConfig::Load(opts_.config, WithGlobalOverrides(opts_.sets));
      trainers::Run s(*cfg, {.out_dir = opts_.out, .kind = trainers::RunKind::kSft, .arm = "sft", .new_run_directory = true});
      auto r = trainers::RunSft(s);
      s.End("completed");
      std::cout << fmt::format(
          "\nsft: {} decisions from {} oracle episodes (demo success {:.2f}), final loss {:.4f}\n",
          r.examples, cfg->sft.episodes, r.demo_success, r.final_loss);
      PrintEval("decision plane (greedy)", r.decision_greedy);
      PrintEval("token plane (greedy)", r.token_greedy);
      std::cout << "checkpoint " << r.checkpoint << "\n";
    });
  }

 private:
  ExperimentArgs opts_;
};

const Registrar<CommandRegistry> kTrain("train", "train a policy from an experiment config",
                                        [] { return std::make_unique<TrainCommand>(); });
const Registrar<CommandRegistry> kSft("sft", "warm start by behaviour cloning from env oracles",
                                      [] { return std::make_unique<SftCommand>(); });

}  // namespace
}  // namespace rlid::cli

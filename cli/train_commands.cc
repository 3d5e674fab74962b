// `rlid train`, `rlid sft`, `rlid eval`: run an experiment config, warm-start
// by behaviour cloning, evaluate a checkpoint on test seeds.
#include <fmt/format.h>

#include <filesystem>
#include <iostream>

#include "cli/command.h"
#include "cli/dist_job.h"
#include "core/error.h"
#include "core/log.h"
#include "core/progress.h"
#include "memory/writer_lock.h"
#include "policy/checkpoint.h"
#include "trainers/algorithms/run.h"
#include "trainers/algorithms/sft.h"
#include "trainers/algorithms/trainer.h"

namespace rlid::cli {
namespace {

using trainers::ExperimentConfig;

struct RunOptions {
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

void PrintEval(const char* what, const trainers::EvalResult& r) {
  std::string p_optimal = r.p_optimal >= 0 ? fmt::format("  p(optimal) {:.3f}", r.p_optimal) : "";
  std::cout << fmt::format(
      "{:<22} success {:.3f}  return {:+.3f}  length {:.1f}  invalid {:.3f}{}  ({} test "
      "episodes)\n",
      what, r.success, r.ret, r.length, r.invalid_rate, p_optimal, r.episodes);
}

class TrainCommand : public Command {
 public:
  void Setup(CLI::App& app) override {
    opts_.Add(app);
    app.add_flag("--resume", resume_, "continue the run in --out from its last checkpoint");
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
    auto cfg = ExperimentConfig::Load(opts_.config, WithGlobalOverrides(opts_.sets));
    if (!job_.Enter(*cfg)) return;  // this process launched the ranks, which did the work
    auto trainer = trainers::TrainerRegistry::Global().Make(cfg->trainer.algorithm);
    trainers::Run s(*cfg, {.out_dir = opts_.out,
                           .kind = "train",
                           .arm = cfg->trainer.algorithm,
                           .resume = resume_,
                           .record = !metrics_only_});
    auto r = trainers::Train(s, *trainer, {resume_, false});
    s.End("completed");
    if (!job_.lead()) return;
    std::cout << fmt::format("\n{} finished {} iterations in {}\n", cfg->trainer.algorithm,
                             r.iterations, s.dir);
    PrintEval("test (greedy)", r.final_greedy);
    if (cfg->trainer.eval_sampled) PrintEval("test (sampled)", r.final_sampled);
    std::cout << "checkpoint " << r.final_checkpoint << "\n";
  }
  RunOptions opts_;
  DistJob job_;
  bool resume_ = false, metrics_only_ = false;
};

class SftCommand : public Command {
 public:
  void Setup(CLI::App& app) override {
    opts_.Add(app);
    app.callback([this] {
      auto cfg = ExperimentConfig::Load(opts_.config, WithGlobalOverrides(opts_.sets));
      trainers::Run s(*cfg, {.out_dir = opts_.out, .kind = "sft", .arm = "sft"});
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
  RunOptions opts_;
};

class EvalCommand : public Command {
 public:
  void Setup(CLI::App& app) override {
    app.add_option("--checkpoint", checkpoint_, "checkpoint directory")->required();
    app.add_option("--config", config_,
                   "experiment TOML for prompt/readout/memory settings (optional)");
    app.add_option("--env", env_, "environment (overrides the config)");
    app.add_option("--episodes", episodes_, "test episodes")->capture_default_str();
    app.add_option("--plane", plane_, "decision | token")
        ->check(CLI::IsMember({"decision", "token"}))
        ->capture_default_str();
    app.add_flag("--sampled", sampled_, "sample actions instead of greedy");
    app.add_option("--set", sets_, "config override (repeatable), e.g. --set env.size=6");
    app.add_option("--out", out_,
                   "run directory for the evaluation records (default: the run that wrote the "
                   "checkpoint, as a new `runs` row of kind 'eval'; a new runs/<name>-<timestamp> "
                   "for a model of no run or a run another process is writing)");
    app.callback([this] { Run(); });
  }

 private:
  void Run() {
    std::vector<std::string> sets = sets_;
    sets.push_back("policy.init=" + checkpoint_);
    if (!env_.empty()) sets.push_back("env.name=" + env_);
    auto cfg = ExperimentConfig::Load(config_, WithGlobalOverrides(sets));
    std::string out = out_;
    bool shared = false;
    if (out.empty()) {
      // Records go next to the training run's own, unless that run is live.
      out = trainers::RunDirectoryOf(checkpoint_);
      if (!out.empty()) {
        try {
          memory::WriterLock probe((std::filesystem::path(out) / memory::kDatabaseFileName).string());
          shared = true;
        } catch (const IoError& e) {
          spdlog::warn("{}; the evaluation gets a run directory of its own", e.what());
          out.clear();
        }
      }
    }
    trainers::Run s(*cfg, {.out_dir = out, .kind = "eval", .arm = plane_, .shared_directory = shared});
    const auto plane = plane_ == "decision" ? policy::Plane::kDecision : policy::Plane::kToken;
    agents::AgentContext agent = s.Agent(plane, 0);
    Progress progress(fmt::format("eval ({} plane)", plane_), episodes_);
    agent.on_episode_end = [&](int64_t done, int64_t) { progress.Update(done); };
    auto r = trainers::Evaluate(agent, plane, episodes_, !sampled_, s.budget, &s.recorder());
    s.recorder().Metrics(0, {{"eval/success", r.success}, {"eval/return", r.ret},
                             {"eval/episodes", static_cast<double>(r.episodes)}});
    for (const auto& kv : s.budget.Metrics()) s.recorder().Metrics(0, {kv});
    s.End("completed");
    PrintEval(fmt::format("{} plane ({})", plane_, sampled_ ? "sampled" : "greedy").c_str(), r);
    std::cout << "records in " << s.dir << " (runs.id " << s.run_id << ", kind 'eval')\n";
  }
  std::string checkpoint_, config_, env_, plane_ = "decision", out_;
  std::vector<std::string> sets_;
  int64_t episodes_ = 64;
  bool sampled_ = false;
};

const Registrar<CommandRegistry> kTrain("train", "train a policy from an experiment config",
                                        [] { return std::make_unique<TrainCommand>(); });
const Registrar<CommandRegistry> kSft("sft", "warm start by behaviour cloning from env oracles",
                                      [] { return std::make_unique<SftCommand>(); });
const Registrar<CommandRegistry> kEval("eval", "evaluate a checkpoint on test seeds",
                                       [] { return std::make_unique<EvalCommand>(); });

}  // namespace
}  // namespace rlid::cli

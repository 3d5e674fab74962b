// `rlid eval`: a checkpoint on test seeds, under the config its run trained
// with (env parameters, prompt, readout, memory) unless the command line says
// otherwise — every departure is logged, and the stored `runs` row (kind
// 'eval') keeps the resolved config, [env] included.
#include "cli/eval_command.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <iostream>
#include <map>
#include <regex>
#include <sstream>

#include "cli/command.h"
#include "core/error.h"
#include "core/log.h"
#include "core/progress.h"
#include "memory/store.h"
#include "memory/writer_lock.h"
#include "policy/model/checkpoint.h"
#include "trainers/runtime/run.h"

namespace rlid::cli {

namespace fs = std::filesystem;

void PrintEval(const std::string& what, const trainers::EvalResult& r) {
  std::string p_optimal = r.p_optimal >= 0 ? fmt::format("  p(optimal) {:.3f}", r.p_optimal) : "";
  std::cout << fmt::format(
      "{:<22} success {:.3f}  return {:+.3f}  length {:.1f}  invalid {:.3f}{}  ({} test "
      "episodes)\n",
      what, r.success, r.ret, r.length, r.invalid_rate, p_optimal, r.episodes);
}

namespace {

using trainers::ExperimentConfig;

bool IsTableHeader(const std::string& line) { return !line.empty() && line[0] == '['; }
bool IsEnvHeader(const std::string& line) {
  return line.rfind("[env]", 0) == 0 || line.rfind("[env.", 0) == 0;
}

// Splits a resolved config (ExperimentConfig's ResolvedToml: one header per
// table at the start of a line) into its [env] tables and everything else.
std::pair<std::string, std::string> SplitEnvTables(const std::string& toml) {
  std::istringstream in(toml);
  std::string env, rest;
  bool in_env = false;
  for (std::string line; std::getline(in, line);) {
    if (IsTableHeader(line)) in_env = IsEnvHeader(line);
    (in_env ? env : rest) += line + "\n";
  }
  return {env, rest};
}

// `key = value` lines of the [env] tables, comments dropped: "name = 'maze', size = 3".
std::string EnvSummary(const std::string& resolved) {
  std::istringstream in(SplitEnvTables(resolved).first);
  std::vector<std::string> kv;
  static const std::regex kLine(R"(^([A-Za-z0-9_.]+) = (.*?)\s*(#.*)?$)");
  std::smatch m;
  for (std::string line; std::getline(in, line);)
    if (std::regex_match(line, m, kLine)) kv.push_back(m[1].str() + " = " + m[2].str());
  return Join(kv, ", ");
}

// The env name in the [env] table of a resolved config ("" when absent).
std::string EnvNameOf(const std::string& resolved) {
  std::istringstream in(SplitEnvTables(resolved).first);
  static const std::regex kName(R"(^name = '([^']*)'.*$)");
  std::smatch m;
  for (std::string line; std::getline(in, line);)
    if (std::regex_match(line, m, kName)) return m[1].str();
  return "";
}

struct TrainingConfig {
  std::string toml;    // resolved config of the run that wrote the checkpoint ("" = none)
  std::string source;  // where it was read, for messages
};

// The checkpoint's own record (rlid.json extra.config_toml), else the
// config.toml of the run directory holding it (checkpoints of older rlid).
TrainingConfig TrainingConfigOf(const std::string& checkpoint) {
  std::error_code ec;
  if (fs::is_regular_file(fs::path(checkpoint) / "rlid.json", ec)) {
    const auto meta = policy::ReadCheckpointMeta(checkpoint);
    const auto& extra = meta.value("extra", nlohmann::json::object());
    if (extra.contains("config_toml"))
      return {extra["config_toml"].get<std::string>(), checkpoint + "/rlid.json"};
  }
  const std::string run_dir = trainers::RunDirectoryOf(checkpoint);
  const fs::path config = fs::path(run_dir) / "config.toml";
  if (!run_dir.empty() && fs::is_regular_file(config, ec)) {
    Config c = Config::FromFile(config.string());  // size-checked read
    return {c.DocumentToml(), config.string()};
  }
  return {};
}

// The keys of a config's [env] (DocumentValues: "env.KEY" -> TOML text) that
// would start a program: an external env's command and cwd, an OpenEnv app to
// serve, a Gymnasium class to import. rlid's own envs and adapters name none.
std::vector<std::string> ProgramKeys(const std::map<std::string, std::string>& values) {
  auto value = [&](const std::string& key) {
    const auto it = values.find(key);
    return it == values.end() ? std::string() : it->second;
  };
  std::string name = value("env.name");  // TOML text: a quoted string
  if (name.size() >= 2 && (name.front() == '"' || name.front() == '\''))
    name = name.substr(1, name.size() - 2);
  std::vector<std::string> keys;
  if (name == "external") keys = {"env.command", "env.cwd"};
  if (name == "openenv") keys = {"env.server"};
  if (name == "gymnasium" && value("env.id").find(':') != std::string::npos) keys = {"env.id"};
  std::erase_if(keys, [&](const std::string& k) { return value(k).empty(); });
  return keys;
}

// A checkpoint is data: the programs its recorded config names run only when
// the user gives them (--config, --set env.KEY) or trusts the checkpoint.
void RefuseRecordedPrograms(const Config& recorded, const Config& resolved,
                            const std::string& source) {
  const auto was = recorded.DocumentValues(), now = resolved.DocumentValues();
  std::vector<std::string> kept;
  for (const std::string& key : ProgramKeys(now))
    if (const auto it = was.find(key); it != was.end() && it->second == now.at(key))
      kept.push_back(fmt::format("{} = {}", key, it->second));
  if (kept.empty()) return;
  throw ConfigError(
      fmt::format("eval: the training config recorded in {} would start a program: {}; a "
                  "checkpoint is data, and rlid does not run what it names",
                  source, fmt::join(kept, "; ")),
      "pass the env yourself (--config FILE, or --set env.KEY=VALUE for each key above), or add "
      "--trust-checkpoint if you trust where this checkpoint came from");
}

class EvalCommand : public Command {
 public:
  void Setup(CLI::App& app) override {
    app.add_option("--checkpoint", checkpoint_, "checkpoint directory")->required();
    app.add_option("--config", config_,
                   "experiment TOML to evaluate under instead of the checkpoint's own training "
                   "config (env parameters, prompt, readout, memory)");
    app.add_option("--env", env_,
                   "environment; another env than the checkpoint's runs with its default "
                   "parameters (logged)");
    app.add_option("--episodes", episodes_, "test episodes")->capture_default_str();
    app.add_option("--plane", plane_, "decision | token")
        ->check(CLI::IsMember({"decision", "token"}))
        ->capture_default_str();
    app.add_flag("--sampled", sampled_, "sample actions instead of greedy");
    app.add_option("--dtype", dtype_, "weights: float32 | bfloat16 (sets policy.dtype)")
        ->check(CLI::IsMember({"float32", "bfloat16"}));
    app.add_option("--set", sets_,
                   "config override (repeatable, logged), e.g. --set env.size=6");
    app.add_flag("--trust-checkpoint", trust_,
                 "run the programs the checkpoint's recorded env names (an external env's "
                 "command, an OpenEnv server app, a Gymnasium class); refused without it");
    app.add_option("--out", out_,
                   "run directory for the evaluation records (default: the run that wrote the "
                   "checkpoint, as a new `runs` row of kind 'eval'; a new runs/<name>-<timestamp> "
                   "for a model of no run or a run another process is writing)");
    app.callback([this] { Run(); });
  }

 private:
  // The evaluation's config: the checkpoint's training config (or --config),
  // then --env, --set and policy.init = the checkpoint. Validated before any
  // weights load.
  std::unique_ptr<ExperimentConfig> ResolveConfig() {
    TrainingConfig trained = config_.empty() ? TrainingConfigOf(checkpoint_) : TrainingConfig{};
    std::vector<std::string> sets;
    std::string base = trained.toml;
    if (!config_.empty()) {
      spdlog::info("eval: under --config {} (the checkpoint's training config is not used)", config_);
    } else if (trained.toml.empty()) {
      spdlog::warn(
          "eval: {} records no training config: the env runs with its default parameters (give "
          "--config with the training config, or --set env.KEY=VALUE, to match how it was trained)",
          checkpoint_);
      if (!env_.empty()) sets.push_back("run.name=eval-" + env_);
    } else if (const std::string trained_env = EnvNameOf(trained.toml);
               !env_.empty() && env_ != trained_env) {
      spdlog::warn("eval: --env {}: the checkpoint was trained on {}; {} runs with its default "
                   "parameters",
                   env_, trained_env, env_);
      base = SplitEnvTables(trained.toml).second;
    } else {
      spdlog::info("eval: under the checkpoint's training config ({})", trained.source);
    }
    if (!env_.empty()) sets.push_back("env.name=" + env_);
    for (const auto& s : sets_) {
      sets.push_back(s);
      if (!trained.toml.empty()) spdlog::info("eval: --set {} overrides the training config", s);
    }
    if (!dtype_.empty()) sets.push_back("policy.dtype=" + dtype_);
    sets.push_back("policy.init=" + checkpoint_);
    sets = WithGlobalOverrides(sets);
    Config c = !config_.empty() ? Config::FromFile(config_)
               : base.empty()   ? Config()
                                : Config::FromString(base, trained.source);
    c.ApplyOverrides(sets);
    const bool recorded_env =
        config_.empty() && !base.empty() && base != SplitEnvTables(base).second;
    if (recorded_env && !trust_)
      RefuseRecordedPrograms(Config::FromString(base, trained.source), c, trained.source);
    return ExperimentConfig::FromConfig(std::move(c));
  }

  // Where the records go, and whether that directory is another run's.
  std::pair<std::string, bool> RecordsDirectory() const {
    std::string out = out_.empty() ? trainers::RunDirectoryOf(checkpoint_) : out_;
    if (out.empty() || !trainers::HoldsRun(out)) return {out_, false};
    // Records go next to that run's own, unless that run is live.
    try {
      memory::WriterLock probe((fs::path(out) / memory::kDatabaseFileName).string());
      return {out, true};
    } catch (const IoError& e) {
      if (!out_.empty()) throw;
      spdlog::warn("{}; the evaluation gets a run directory of its own", e.what());
      return {"", false};
    }
  }

  void Run() {
    auto cfg = ResolveConfig();
    const std::string env_used = EnvSummary(cfg->raw.ResolvedToml());
    spdlog::info("eval: env {}", env_used);
    const auto [out, shared] = RecordsDirectory();
    trainers::Run s(*cfg, {.out_dir = out, .kind = trainers::RunKind::kEval, .arm = plane_, .shared_directory = shared});
    const auto plane = plane_ == "decision" ? policy::Plane::kDecision : policy::Plane::kToken;
    agents::AgentContext agent = s.Agent(plane, 0);
    Progress progress(fmt::format("eval ({} plane)", plane_), episodes_);
    agent.on_episode_end = [&](int64_t done, int64_t) { progress.Update(done); };
    auto r = trainers::Evaluate(agent, plane, episodes_, !sampled_, s.budget, &s.recorder());
    s.recorder().Metrics(0, {{"eval/success", r.success}, {"eval/return", r.ret},
                             {"eval/episodes", static_cast<double>(r.episodes)}});
    for (const auto& kv : s.budget.Metrics()) s.recorder().Metrics(0, {kv});
    s.End("completed");
    std::cout << "env " << env_used << "\n";
    PrintEval(fmt::format("{} plane ({})", plane_, sampled_ ? "sampled" : "greedy"), r);
    std::cout << "records in " << s.dir << " (runs.id " << s.run_id << ", kind 'eval')\n";
  }
  std::string checkpoint_, config_, env_, plane_ = "decision", out_, dtype_;
  std::vector<std::string> sets_;
  int64_t episodes_ = 64;
  bool sampled_ = false, trust_ = false;
};

const Registrar<CommandRegistry> kEval("eval", "evaluate a checkpoint on test seeds",
                                       [] { return std::make_unique<EvalCommand>(); });

}  // namespace
}  // namespace rlid::cli

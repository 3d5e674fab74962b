// The `rlid` entry point: global flags, subcommands from the registry, errors
// to exit codes (1 generic, 2 config/usage, 3 i/o, 4 internal, 5 numeric).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <iostream>
#include <optional>
#include <thread>

#include "cli/command.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/log.h"
#include "core/strings.h"
#include "envs/api/env.h"
#include "policy/model/runtime.h"

namespace rlid::cli {

void EnvOptions::Add(CLI::App& app, bool with_seed) {
  app.add_option("--env", env, "environment name (rlid env list)")->capture_default_str();
  if (with_seed) app.add_option("--seed", seed, "instance seed (even = train, odd = test)")->capture_default_str();
  app.add_option("--set", sets, "override, e.g. --set env.size=9 (repeatable)");
  app.add_option("--config", config, "take [env] from this TOML config");
}

namespace {
// --threads as given on the command line (nullopt when absent).
std::optional<int>& ThreadsFlag() {
  static std::optional<int> threads;
  return threads;
}
}  // namespace

std::optional<int> GlobalThreads() { return ThreadsFlag(); }

std::vector<std::string> WithGlobalOverrides(std::vector<std::string> sets) {
  if (ThreadsFlag()) sets.push_back(fmt::format("run.threads={}", *ThreadsFlag()));
  return sets;
}

Config LoadConfig(const std::string& path, const std::vector<std::string>& sets) {
  Config cfg = path.empty() ? Config() : Config::FromFile(path);
  cfg.ApplyOverrides(sets);
  return cfg;
}

std::unique_ptr<envs::Env> EnvOptions::Make() const {
  Config cfg = LoadConfig(config, {});
  if (!env.empty()) {
    cfg.ApplyOverride("env.name=" + env);
  } else if (!cfg.Root().Section("env").Has("name")) {
    throw ConfigError("no environment given",
                      fmt::format("pass --env NAME (one of: {}) or --config FILE with an [env] name",
                                  fmt::join(envs::EnvRegistry::Global().Names(), ", ")));
  }
  for (const auto& s : sets) cfg.ApplyOverride(StartsWith(s, "env.") ? s : "env." + s);
  auto made = envs::MakeEnv(cfg.Root().Section("env"));
  cfg.CheckAllUsed("env");  // other sections of a full experiment config are not ours
  return made;
}

namespace {

// The stop as the interrupted command should tell it: only `rlid train` has a
// run to resume; sft, eval and compare marked theirs interrupted; the others
// made no run at all.
Error InterruptedFor(CLI::App& app, const Interrupted& e) {
  const auto subs = app.get_subcommands();
  const std::string command = subs.empty() ? "" : subs.front()->get_name();
  if (command == "train") return Error(e.what(), e.hint());
  const std::string stopped = "stopped by " + SignalName(e.signal());
  if (command == "sft" || command == "eval" || command == "compare")
    return Error(
        stopped + ": what was recorded so far is committed and the run is marked interrupted",
        "run the command again (with a new --out) to redo it; only `rlid train` resumes");
  return Error(stopped + ": rlid " + command + " did not finish");
}

int Run(CLI::App& app, std::vector<std::unique_ptr<Command>>& keep, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return 0;
  } catch (const CLI::ParseError& e) {
    // Prints help or the parse error. CLI11's own codes (100+) are not rlid's:
    // --help and --version are 0, a file argument that does not exist is an
    // I/O error (3), every other parse error a usage error (2).
    if (app.exit(e) == 0) return 0;
    const std::string what = e.what();
    if (what.find("does not exist") != std::string::npos ||
        what.find("not readable") != std::string::npos)
      return 3;
    return 2;
  }
}

}  // namespace

namespace {
std::vector<std::string>& MutableCliArgs() {
  static std::vector<std::string> args;
  return args;
}
}  // namespace

const std::vector<std::string>& CliArgs() { return MutableCliArgs(); }

int RunCli(int argc, char** argv) {
  MutableCliArgs().assign(argv + std::min(argc, 1), argv + argc);
  InstallInterruptHandlers();
  CLI::App app{"rlid: reinforcement learning for language agents in the decision plane"};
  app.require_subcommand(1);
  app.fallthrough();  // global flags (--threads, --log-level) also work after the subcommand
  // rlid's version, then the LibTorch it runs on and the devices it sees.
  app.set_version_flag("--version", [] {
    return "rlid " + VersionString() + "\n" + policy::RuntimeReport();
  });
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "trace|debug|info|warn|error|off")->capture_default_str();
  std::vector<std::unique_ptr<Command>> commands;
  for (const auto& [name, entry] : CommandRegistry::Global().entries()) {
    CLI::App* sub = app.add_subcommand(name, entry.summary);
    commands.push_back(entry.factory());
    commands.back()->Setup(*sub);
  }
  int threads = 0;
  CLI::Option* threads_opt =
      app.add_option("--threads", threads,
                     "LibTorch intra-op threads (0 = one per core); overrides a config's run.threads")
          ->capture_default_str();
  ThreadsFlag().reset();
  app.parse_complete_callback([&] {
    SetupLogging(log_level);
    policy::SetNumThreads(threads);
    if (threads_opt->count() > 0) ThreadsFlag() = threads;
  });
  try {
    return Run(app, commands, argc, argv);
  } catch (const Interrupted& e) {
    std::cerr << FormatError(InterruptedFor(app, e)) << std::endl;
    return e.exit_code();
  } catch (const Error& e) {
    std::cerr << FormatError(e) << std::endl;
    return e.exit_code();
  } catch (const std::exception& e) {
    std::cerr << "internal error: " << e.what() << std::endl;
    return 4;
  }
}

int RunCli(const std::vector<std::string>& args) {
  std::vector<std::string> all = {"rlid"};
  all.insert(all.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : all) argv.push_back(a.data());
  return RunCli(static_cast<int>(argv.size()), argv.data());
}

}  // namespace rlid::cli

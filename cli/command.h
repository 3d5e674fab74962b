// CLI plumbing: every subcommand is a Command registered by name at the bottom
// of its own file; RunCli builds the CLI11 app from the registry, runs the
// chosen command, and turns rlid::Error into a message and a non-zero exit code.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/registry.h"

namespace rlid::envs {
class Env;
}

namespace rlid::cli {

class Command {
 public:
  static constexpr const char* kRegistryKind = "command";
  virtual ~Command() = default;
  // Adds options/subcommands to `app` (already named and described) and sets
  // the callback(s). The Command object outlives parsing and the callback.
  virtual void Setup(CLI::App& app) = 0;
};
using CommandRegistry = Registry<Command>;

// Parses argv, runs the command, returns the process exit code.
int RunCli(int argc, char** argv);
int RunCli(const std::vector<std::string>& args);  // args without argv[0]
// The arguments of the running RunCli call, without argv[0] (the --nproc
// launcher starts its ranks with them).
const std::vector<std::string>& CliArgs();

// Options shared by commands that take an environment:
//   --env NAME --seed S --set env.key=value ... [--config FILE]
struct EnvOptions {
  std::string env;  // empty: take [env].name from --config
  uint64_t seed = 0;
  std::vector<std::string> sets;
  std::string config;
  void Add(CLI::App& app, bool with_seed = true);
  // Builds the env; [env] comes from --config if given, then --env/--set.
  std::unique_ptr<envs::Env> Make() const;
};

// Reads a config file (or an empty one), applies --set overrides.
Config LoadConfig(const std::string& path, const std::vector<std::string>& sets);

// `rlid --threads N` as given on the command line (nullopt when absent): the
// one intra-op thread count every command uses (before or after the subcommand).
std::optional<int> GlobalThreads();

// `sets` followed by the config overrides that global flags given on the
// command line imply: `rlid --threads N ...` appends "run.threads=N", so the
// flag beats the config's run.threads (and the resolved config records it).
std::vector<std::string> WithGlobalOverrides(std::vector<std::string> sets);

}  // namespace rlid::cli

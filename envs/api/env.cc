#include "envs/api/env.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>

#include "core/error.h"
#include "core/strings.h"

namespace rlid::envs {

const char* SplitName(Split s) { return s == Split::kTrain ? "train" : "test"; }

Split ParseSplit(std::string_view name) {
  if (name == "train") return Split::kTrain;
  if (name == "test") return Split::kTest;
  throw ConfigError(fmt::format("unknown split '{}'", name), "use 'train' or 'test'");
}

namespace {

std::vector<std::string>& BuiltInNames() {
  static std::vector<std::string> names;
  return names;
}

}  // namespace

BuiltInEnv::BuiltInEnv(std::string name, std::string summary, EnvRegistry::Factory factory) {
  BuiltInNames().push_back(name);
  EnvRegistry::Global().Add(std::move(name), std::move(summary), std::move(factory));
}

std::vector<std::string> BuiltInEnvNames() {
  std::vector<std::string> out = BuiltInNames();
  std::sort(out.begin(), out.end());
  return out;
}

std::unique_ptr<Env> MakeEnv(ConfigNode env_section) {
  std::string name;
  env_section.Get("name", name, "registered environment name (rlid env list)");
  if (name.empty())
    throw ConfigError(fmt::format("{}: [env] needs a 'name'", env_section.Where()),
                      fmt::format("known environments: {}",
                                  fmt::join(EnvRegistry::Global().Names(), ", ")));
  return EnvRegistry::Global().Make(name, env_section);
}

std::unique_ptr<Env> MakeEnv(std::string_view name, const std::vector<std::string>& params) {
  Config cfg;
  cfg.ApplyOverride(fmt::format("env.name={}", name));
  for (const auto& p : params) cfg.ApplyOverride(StartsWith(p, "env.") ? p : "env." + p);
  auto env = MakeEnv(cfg.Root().Section("env"));
  cfg.CheckAllUsed();
  return env;
}

}  // namespace rlid::envs

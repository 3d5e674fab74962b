#include "trainers/runtime/resume_config.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <filesystem>
#include <map>

#include "core/config.h"
#include "core/error.h"
#include "core/log.h"
#include "core/strings.h"

namespace rlid::trainers {
namespace fs = std::filesystem;

const std::set<std::string>& ResumeChangeableKeys() {
  // How long the run goes, how often it evaluates and saves, and how many
  // threads it uses. Evaluation episodes have seeds of their own, so these
  // never change the training episodes or updates.
  static const std::set<std::string> keys = {
      "trainer.iterations", "trainer.budget_value",  "trainer.checkpoint_every",
      "trainer.eval_every", "trainer.eval_episodes", "trainer.eval_sampled",
      "run.threads",        "run.keep_checkpoints",  "run.optimizer_state",
      "run.dist_timeout_s"};
  return keys;
}

namespace {

// The key of a --set assignment ("trainer.iterations=30" -> "trainer.iterations").
std::string KeyOf(const std::string& assignment) {
  return std::string(Trim(std::string_view(assignment).substr(0, assignment.find('='))));
}

// Keys `given` sets to another value than the run's own document holds.
std::vector<std::string> DifferingKeys(const Config& given, const Config& run) {
  const auto ours = run.DocumentValues();
  std::vector<std::string> out;
  for (const auto& [key, value] : given.DocumentValues()) {
    const auto it = ours.find(key);
    if (it == ours.end() || it->second != value) out.push_back(key);
  }
  return out;
}

}  // namespace

std::unique_ptr<ExperimentConfig> LoadResumeConfig(const std::string& run_dir,
                                                   const std::string& given_config,
                                                   const std::vector<std::string>& sets) {
  const fs::path stored = fs::path(run_dir) / "config.toml";
  std::error_code ec;
  if (!fs::is_regular_file(stored, ec))
    throw IoError(fmt::format("--resume: '{}' has no config.toml", run_dir),
                  "resume a run directory that `rlid train` wrote (--out DIR of that run)");
  const Config before = Config::FromFile(stored.string());
  if (!given_config.empty()) {
    const std::vector<std::string> differ = DifferingKeys(Config::FromFile(given_config), before);
    if (!differ.empty())
      spdlog::warn(
          "--resume: {} differs from the run's config ({}) in {}; the run continues as it was "
          "configured",
          given_config, stored.string(), fmt::join(differ, ", "));
  }
  Config after = Config::FromFile(stored.string());
  after.ApplyOverrides(sets);
  const auto old_values = before.DocumentValues(), new_values = after.DocumentValues();
  for (const auto& s : sets) {
    const std::string key = KeyOf(s);
    const auto was = old_values.find(key), now = new_values.find(key);
    const std::string from = was == old_values.end() ? "(default)" : was->second;
    const std::string to = now == new_values.end() ? "?" : now->second;
    if (from == to) continue;
    if (!ResumeChangeableKeys().count(key))
      throw ConfigError(
          fmt::format("--resume: --set {} would change {} from {} to {}; a resumed run continues "
                      "exactly as it was configured",
                      s, key, from, to),
          fmt::format("a resume may change only {}; start a new run (another --out) to change {}",
                      fmt::join(ResumeChangeableKeys(), ", "), key));
    spdlog::info("--resume: {} = {} (was {}), as --set asks", key, to, from);
  }
  return ExperimentConfig::FromConfig(std::move(after));
}

}  // namespace rlid::trainers

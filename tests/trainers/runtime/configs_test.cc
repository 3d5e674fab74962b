// Every config shipped in configs/ loads (unknown keys, bad values and
// missing trainers are errors), so a renamed key cannot silently break the
// examples the README and the docs point at. Compare configs also validate
// their [compare] section.
#include <gtest/gtest.h>

#include <filesystem>

#include "core/config.h"
#include "trainers/analysis/compare.h"
#include "trainers/runtime/experiment.h"
#include "tests/test_paths.h"

namespace rlid::trainers {
namespace {

namespace fs = std::filesystem;

TEST(ShippedConfigs, EveryConfigLoads) {
  // Configs are written for the repository root (external envs' commands are
  // relative to it).
  const fs::path before = fs::current_path();
  fs::current_path(RLID_SOURCE_DIR);
  int n = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(RLID_SOURCE_DIR) / "configs")) {
    if (entry.path().extension() != ".toml") continue;
    SCOPED_TRACE(entry.path().string());
    ++n;
    EXPECT_NO_THROW({
      auto cfg = ExperimentConfig::Load(entry.path().string(), {});
      Config raw = Config::FromFile(entry.path().string());
      if (raw.Root().Has("compare")) {
        CompareConfig c;
        c.Load(raw.Root().Section("compare"));
        EXPECT_FALSE(c.arms.empty());
      }
    });
  }
  fs::current_path(before);
  EXPECT_GE(n, 8) << "configs/ lost its examples";
}

}  // namespace
}  // namespace rlid::trainers

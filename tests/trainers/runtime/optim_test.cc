// OptimConfig::Load: every optimiser key is checked against its range, and the
// error names the key, the range, the value and where it was set.
#include "trainers/runtime/optim.h"

#include <gtest/gtest.h>

#include <string>

#include "core/config.h"
#include "core/error.h"

namespace rlid::trainers {
namespace {

// The ConfigError message of `rlid train --set trainer.<assignment>` ("" if it loads).
std::string SetError(const std::string& assignment) {
  Config cfg;
  cfg.ApplyOverride("trainer." + assignment);
  OptimConfig o;
  try {
    o.Load(cfg.Root().Section("trainer"));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(OptimConfig, RejectsValuesOutsideTheirRange) {
  const std::pair<const char*, const char*> cases[] = {
      {"lr=0", "'trainer.lr' must be > 0, found 0"},
      {"lr=-1e-3", "'trainer.lr' must be > 0, found -0.001"},
      {"lr=inf", "'trainer.lr' must be a finite number, found inf"},
      {"lr=nan", "'trainer.lr' must be a finite number, found nan"},
      {"warmup_steps=-1", "'trainer.warmup_steps' must be >= 0, found -1"},
      {"min_lr_frac=1.5", "'trainer.min_lr_frac' must be in [0, 1], found 1.5"},
      {"weight_decay=-0.1", "'trainer.weight_decay' must be >= 0, found -0.1"},
      {"adam_beta1=2", "'trainer.adam_beta1' must be in [0, 1), found 2"},
      {"adam_beta2=1", "'trainer.adam_beta2' must be in [0, 1), found 1"},
      {"adam_eps=0", "'trainer.adam_eps' must be > 0, found 0"},
      {"max_grad_norm=-1", "'trainer.max_grad_norm' must be >= 0, found -1"},
  };
  for (const auto& [set, want] : cases) {
    const std::string msg = SetError(set);
    const std::string key = std::string(set).substr(0, std::string(set).find('='));
    EXPECT_EQ(msg.rfind("--set trainer." + key + ": ", 0), 0u) << set << ": " << msg;
    EXPECT_NE(msg.find(want), std::string::npos) << set << ": " << msg;
  }
  for (const char* ok : {"lr=1e-3", "warmup_steps=0", "min_lr_frac=0", "min_lr_frac=1",
                         "adam_beta1=0", "max_grad_norm=0"})
    EXPECT_EQ(SetError(ok), "") << ok;
}

}  // namespace
}  // namespace rlid::trainers

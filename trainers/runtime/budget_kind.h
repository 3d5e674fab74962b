// What a run's budget counts (trainer.budget, compare.budget): a mode of its
// own so that `rlid compare` and its report read it without the experiment's
// config. agents/budget.h keeps the counters.
#pragma once

#include "core/modes.h"

namespace rlid::trainers {

// What stops a run (trainer.budget; compare.budget allows all but kIterations).
enum class BudgetKind { kIterations, kEnvSteps, kWallSeconds, kFlops };
constexpr auto Spellings(BudgetKind) {
  using B = BudgetKind;
  return ModeNames<B>({{B::kIterations, "iterations"},
                       {B::kEnvSteps, "env_steps"},
                       {B::kWallSeconds, "wall_seconds"},
                       {B::kFlops, "flops"}});
}

}  // namespace rlid::trainers

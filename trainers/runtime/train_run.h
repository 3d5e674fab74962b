// One training run from a config, the way `rlid train` and rlid.train() start
// it: the run directory (new, or the one resumed), the trainer registered as
// trainer.algorithm, the loop (Train), and the run's row marked completed.
#pragma once

#include <string>

#include "trainers/runtime/experiment.h"
#include "trainers/runtime/trainer.h"

namespace rlid::trainers {

struct TrainRunOptions {
  std::string out;      // run directory (empty: runs/<name>-<timestamp>)
  bool resume = false;  // continue the run in `out` from its last checkpoint
  bool record = true;   // false: metrics and checkpoints only (--metrics-only)
};

struct TrainRunResult {
  TrainResult result;
  std::string run_dir;
};

TrainRunResult TrainRun(const ExperimentConfig& cfg, const TrainRunOptions& opt);

}  // namespace rlid::trainers

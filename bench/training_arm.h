// One training session driven iteration by iteration as trainers::Train does,
// without evaluation or checkpoints, with the time of each stage booked the
// way Train books it (StageTimes::AddUnclaimedToUpdate). Used by the
// benchmarks that time training (`rlid bench train`, `rlid bench model`).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "agents/budget.h"
#include "trainers/runtime/iteration.h"
#include "trainers/runtime/trainer.h"

namespace rlid::bench {

// The config of a training benchmark: `algorithm` on `env` (default
// parameters) with a tiny model, `episodes` per iteration all in lockstep,
// `iterations` iterations, `threads` LibTorch threads, then `sets` applied.
std::unique_ptr<trainers::ExperimentConfig> BenchTrainConfig(const std::string& env,
                                                             const std::string& algorithm,
                                                             int64_t iterations, int64_t episodes,
                                                             int threads,
                                                             const std::vector<std::string>& sets);

class TrainingArm {
 public:
  // A run in `dir` (kind "bench"); record = false stores metrics only.
  TrainingArm(const trainers::ExperimentConfig& cfg, const std::string& dir, bool record);
  ~TrainingArm();  // ends the run row as completed
  // One iteration; returns its mean train return (equal across arms when the
  // trajectories are).
  double Iteration(int64_t it);
  // Forgets what the iterations so far measured (after a warm-up).
  void Reset();

  std::unique_ptr<trainers::Trainer> trainer;
  std::unique_ptr<trainers::Run> session;
  std::unique_ptr<trainers::IterationRunner> runner;  // plays and learns with `trainer`
  agents::StageTimes times;  // of the iterations since Reset()
  double seconds = 0;        // their wall-clock
  double decisions = 0;      // their charts/decisions
  double writer_busy0 = 0;   // the writer's busy seconds at Reset()
};

}  // namespace rlid::bench

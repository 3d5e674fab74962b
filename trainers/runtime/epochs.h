// The update's outer loop, the same for every RL trainer: up to `epochs`
// passes over the iteration's batch, each cut into minibatches, one optimiser
// step per minibatch, and an early stop once an epoch's mean KL between the
// weights before and after a step exceeds trainer.target_kl. The trainer
// states only how a batch is cut and what one step does.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

namespace rlid::trainers {

// One epoch's minibatches, as indices into the job's batch.
using Minibatches = std::vector<std::vector<size_t>>;

struct EpochCount {
  int64_t epochs = 0;  // epochs run (the last one may have tripped target_kl)
  int64_t steps = 0;   // optimiser steps taken
};

// Calls `cut` once per epoch (so a seeded shuffle draws one permutation per
// epoch, in order) and `step` once per minibatch; `step` returns that step's
// job-wide KL estimate. After an epoch whose mean KL exceeds target_kl (> 0;
// 0 = never) no further epoch runs. A pending interrupt (Ctrl-C) throws
// between steps, never inside one, so a checkpoint holds whole iterations.
EpochCount RunEpochs(int64_t epochs, double target_kl, const std::function<Minibatches()>& cut,
                     const std::function<double(const std::vector<size_t>&)>& step);

}  // namespace rlid::trainers

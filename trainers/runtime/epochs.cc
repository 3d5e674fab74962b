#include "trainers/runtime/epochs.h"

#include "core/interrupt.h"

namespace rlid::trainers {

EpochCount RunEpochs(int64_t epochs, double target_kl, const std::function<Minibatches()>& cut,
                     const std::function<double(const std::vector<size_t>&)>& step) {
  EpochCount count;
  for (int64_t epoch = 0; epoch < epochs; ++epoch) {
    double epoch_kl = 0;
    int64_t epoch_steps = 0;
    for (const auto& minibatch : cut()) {
      ThrowIfInterrupted();
      epoch_kl += step(minibatch);
      ++epoch_steps;
    }
    ++count.epochs;
    count.steps += epoch_steps;
    if (target_kl > 0 && epoch_steps > 0 && epoch_kl / static_cast<double>(epoch_steps) > target_kl)
      break;
  }
  return count;
}

}  // namespace rlid::trainers

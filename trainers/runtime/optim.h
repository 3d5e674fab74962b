// The optimiser step shared by every trainer: AdamW with global-norm gradient
// clipping and an LR schedule, plus the non-finite guard that stops training
// with a message naming the tensor and iteration instead of writing NaN
// weights. Optimiser state is saved with checkpoints for exact --resume.
#pragma once

#include <torch/torch.h>

#include <memory>
#include <string>

#include "core/config.h"
#include "policy/model/model.h"

namespace rlid::trainers {

// How the learning rate decays after warm-up (trainer.lr_schedule).
enum class LrSchedule { kConstant, kLinear, kCosine };
constexpr auto Spellings(LrSchedule) {
  return ModeNames<LrSchedule>(
      {{LrSchedule::kConstant, "constant"}, {LrSchedule::kLinear, "linear"}, {LrSchedule::kCosine, "cosine"}});
}

struct OptimConfig {
  double lr = 3e-4;                   // peak learning rate
  LrSchedule schedule = LrSchedule::kConstant;  // decays to min_lr_frac * lr
  int64_t warmup_steps = 0;  // linear warm-up (in schedule steps: iterations for RL, steps for SFT)
  double min_lr_frac = 0.1;  // floor of the decaying schedules
  double weight_decay = 0.0;  // AdamW decoupled weight decay
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  double max_grad_norm = 1.0;  // global-norm clipping (0 = off)
  void Load(ConfigNode n);
};

// The parameters training changes: those with requires_grad, in model order
// (every weight for full fine-tuning; the LoRA adapters and the value head
// when adapters are attached).
struct NamedTensors {
  std::vector<std::string> names;
  std::vector<torch::Tensor> tensors;
};
NamedTensors TrainableParameters(policy::TransformerLM& model);

// LR at schedule step `step` of `total_steps` (trainers schedule by iteration).
double LearningRate(const OptimConfig& cfg, int64_t step, int64_t total_steps);

// Throws NumericError("non-finite <name> at iteration <it>") if t has NaN/Inf.
void CheckFinite(const torch::Tensor& t, const std::string& name, int64_t iteration);

class Optimizer {
 public:
  // total_steps: length of the LR schedule in schedule steps.
  Optimizer(std::vector<torch::Tensor> params, OptimConfig cfg, int64_t total_steps,
            std::vector<std::string> param_names = {});
  void ZeroGrad();
  // Checks gradients are finite (NumericError naming the first bad one and
  // `iteration`), clips, sets the LR of `schedule_step`, steps. Returns the
  // pre-clip global gradient norm.
  double Step(int64_t schedule_step, int64_t iteration);
  int64_t steps() const { return steps_; }
  double current_lr() const { return lr_; }
  void Save(const std::string& path) const;
  void Load(const std::string& path);

 private:
  std::vector<torch::Tensor> params_;
  std::vector<std::string> names_;
  OptimConfig cfg_;
  int64_t total_steps_;
  int64_t steps_ = 0;
  double lr_ = 0;
  std::unique_ptr<torch::optim::AdamW> adam_;
};

}  // namespace rlid::trainers

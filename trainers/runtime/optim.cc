#include "trainers/runtime/optim.h"

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <sstream>

#include "core/error.h"
#include "core/file_io.h"

namespace rlid::trainers {

void OptimConfig::Load(ConfigNode n) {
  n.Get("lr", lr, "peak learning rate", Range::Positive());
  n.GetEnum("lr_schedule", schedule, "learning-rate schedule");
  n.Get("warmup_steps", warmup_steps, "linear warm-up optimiser steps", IntRange::NonNegative());
  n.Get("min_lr_frac", min_lr_frac, "floor of decaying schedules, as a fraction of lr",
        Range::Unit());
  n.Get("weight_decay", weight_decay, "AdamW decoupled weight decay", Range::NonNegative());
  n.Get("adam_beta1", beta1, "AdamW beta1", Range::Unit().OpenHigh());
  n.Get("adam_beta2", beta2, "AdamW beta2", Range::Unit().OpenHigh());
  n.Get("adam_eps", eps, "AdamW epsilon", Range::Positive());
  n.Get("max_grad_norm", max_grad_norm, "global gradient-norm clip (0 = off)",
        Range::NonNegative());
}

NamedTensors TrainableParameters(policy::TransformerLM& model) {
  NamedTensors out;
  for (auto& p : model->named_parameters()) {
    if (!p.value().requires_grad()) continue;
    out.names.push_back(p.key());
    out.tensors.push_back(p.value());
  }
  return out;
}

double LearningRate(const OptimConfig& cfg, int64_t step, int64_t total_steps) {
  if (cfg.warmup_steps > 0 && step < cfg.warmup_steps)
    return cfg.lr * static_cast<double>(step + 1) / static_cast<double>(cfg.warmup_steps);
  if (cfg.schedule == LrSchedule::kConstant || total_steps <= cfg.warmup_steps) return cfg.lr;
  double progress =
      std::clamp(static_cast<double>(step - cfg.warmup_steps) /
                     static_cast<double>(std::max<int64_t>(1, total_steps - cfg.warmup_steps)),
                 0.0, 1.0);
  double floor = cfg.min_lr_frac * cfg.lr;
  if (cfg.schedule == LrSchedule::kLinear) return cfg.lr - (cfg.lr - floor) * progress;
  return floor + 0.5 * (cfg.lr - floor) * (1.0 + std::cos(M_PI * progress));
}

void CheckFinite(const torch::Tensor& t, const std::string& name, int64_t iteration) {
  if (!t.defined()) return;
  if (!torch::isfinite(t.detach()).all().item<bool>())
    throw NumericError(
        fmt::format("non-finite {} at iteration {}", name, iteration),
        "weights were not updated; lower the learning rate, check rewards, or resume "
        "from the last checkpoint");
}

Optimizer::Optimizer(std::vector<torch::Tensor> params, OptimConfig cfg, int64_t total_steps,
                     std::vector<std::string> param_names)
    : params_(std::move(params)),
      names_(std::move(param_names)),
      cfg_(cfg),
      total_steps_(total_steps) {
  adam_ = std::make_unique<torch::optim::AdamW>(params_, torch::optim::AdamWOptions(cfg_.lr)
                                                             .betas({cfg_.beta1, cfg_.beta2})
                                                             .eps(cfg_.eps)
                                                             .weight_decay(cfg_.weight_decay));
  lr_ = LearningRate(cfg_, 0, total_steps_);
}

void Optimizer::ZeroGrad() { adam_->zero_grad(); }

double Optimizer::Step(int64_t schedule_step, int64_t iteration) {
  double sq = 0.0;
  for (size_t i = 0; i < params_.size(); ++i) {
    const auto& g = params_[i].grad();
    if (!g.defined()) continue;
    double n = g.detach().pow(2).sum().item<double>();
    if (!std::isfinite(n))
      CheckFinite(
          g, "gradient of " + (i < names_.size() ? names_[i] : fmt::format("parameter #{}", i)),
          iteration);
    sq += n;
  }
  double norm = std::sqrt(sq);
  if (cfg_.max_grad_norm > 0 && norm > cfg_.max_grad_norm) {
    double scale = cfg_.max_grad_norm / (norm + 1e-6);
    torch::NoGradGuard ng;
    for (auto& p : params_)
      if (p.grad().defined()) p.grad().mul_(scale);
  }
  lr_ = LearningRate(cfg_, schedule_step, total_steps_);
  for (auto& group : adam_->param_groups()) group.options().set_lr(lr_);
  adam_->step();
  ++steps_;
  return norm;
}

void Optimizer::Save(const std::string& path) const {
  torch::serialize::OutputArchive archive;
  adam_->save(archive);
  archive.write("rlid_steps", torch::tensor(steps_));
  // Serialised in memory, then written with checked writes: torch's own file
  // writer aborts the process when the disk fills up.
  std::ostringstream bytes;
  archive.save_to(bytes);
  WriteWholeFile(path, bytes.view(), "optimizer state");
}

void Optimizer::Load(const std::string& path) {
  if (!std::filesystem::exists(path))
    throw IoError(fmt::format("optimizer state '{}' not found", path),
                  "resume needs a checkpoint written by rlid train");
  torch::serialize::InputArchive archive;
  archive.load_from(path);
  adam_->load(archive);
  torch::Tensor steps;
  archive.read("rlid_steps", steps);
  steps_ = steps.item<int64_t>();
}

}  // namespace rlid::trainers

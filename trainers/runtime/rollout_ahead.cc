// Asynchronous rollouts (see rollout_ahead.h): a map of weight versions, the
// batches played ahead, and one worker started per iteration.
#include "trainers/runtime/rollout_ahead.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <utility>

#include "core/clock.h"
#include "core/error.h"
#include "core/file_io.h"
#include "policy/model/checkpoint.h"

namespace rlid::trainers {

namespace fs = std::filesystem;

namespace {

std::string VersionFile(const std::string& dir, int64_t version) {
  return (fs::path(dir) / fmt::format("behaviour_v{}.pt", version)).string();
}

// Every tensor of a model, in a fixed order (parameters, then buffers).
std::vector<torch::Tensor> Tensors(policy::TransformerLM& model) {
  std::vector<torch::Tensor> out = model->parameters();
  for (const auto& b : model->buffers()) out.push_back(b);
  return out;
}

}  // namespace

RolloutAhead::RolloutAhead(int64_t max_staleness, policy::TransformerLM model)
    : s_(max_staleness), model_(std::move(model)) {
  if (s_ < 0) throw InternalError(fmt::format("max_staleness must be >= 0, found {}", s_));
}

RolloutAhead::~RolloutAhead() { Abandon(); }

void RolloutAhead::Abandon() noexcept {
  if (!worker_.valid()) return;
  try {
    worker_.get();
  } catch (const std::exception& e) {
    spdlog::debug("rollout worker ended with: {}", e.what());
  } catch (...) {
  }
  ahead_.clear();
}

int64_t RolloutAhead::VersionOf(int64_t iteration) const {
  return std::max<int64_t>(0, iteration - s_);
}

agents::AgentContext RolloutAhead::BehaviourAgent(const agents::AgentContext& learner,
                                                  int64_t iteration) {
  const int64_t version = VersionOf(iteration);
  auto it = versions_.find(version);
  if (it == versions_.end())
    throw ConfigError(
        fmt::format("iteration {} trains on episodes played with the weights of version {} "
                    "(trainer.max_staleness = {}), which this run does not hold",
                    iteration, version, s_),
        "a checkpoint keeps the versions its own max_staleness needs: resume with the "
        "max_staleness the run was started with");
  agents::AgentContext a = learner;
  a.model = it->second;
  a.iteration = iteration;
  a.policy_version = version;
  a.times = nullptr;  // the learner's stage clock is not the worker's
  a.on_episode_end = nullptr;
  if (learner.sampler) {
    if (!sampler_)
      sampler_ = std::make_unique<policy::TextSampler>(model_->config(), learner.sampler->options(),
                                                       model_->parameters().front().device());
    sampler_->SyncWeights(a.model);
    a.sampler = sampler_.get();
  }
  return a;
}

PlayedBatch RolloutAhead::PlayOne(const agents::AgentContext& learner, int64_t iteration,
                                  const Play& play) {
  PlayedBatch out;
  out.iteration = iteration;
  out.version = VersionOf(iteration);
  const double t0 = MonotonicSeconds();
  agents::AgentContext a = BehaviourAgent(learner, iteration);
  out.episodes = play(a, out.spent);
  out.seconds = MonotonicSeconds() - t0;
  return out;
}

PlayedBatch RolloutAhead::Take(const agents::AgentContext& agent, int64_t iterations,
                               agents::Budget& budget, const Play& play) {
  if (worker_.valid()) throw InternalError("RolloutAhead::Take while the worker runs: call Join()");
  const int64_t i = agent.iteration;
  last_taken_ = i;
  // The learner's weights now are version i; batches up to i + s may be played with them.
  if (s_ > 0 && !versions_.count(i)) versions_.emplace(i, policy::CloneModel(model_));
  PlayedBatch out;
  if (auto it = ahead_.find(i); it != ahead_.end()) {
    out = std::move(it->second);
    ahead_.erase(it);
  } else if (VersionOf(i) == i) {
    // On-policy: the synchronous loop, on the learner's own model and engine.
    agents::AgentContext a = agent;
    a.policy_version = i;
    out.iteration = out.version = i;
    const double t0 = MonotonicSeconds();
    out.episodes = play(a, out.spent);
    out.seconds = MonotonicSeconds() - t0;
  } else {
    out = PlayOne(agent, i, play);  // a batch missing after --resume, played with its old weights
  }
  budget += out.spent;
  // Versions no later batch is played with.
  while (!versions_.empty() && versions_.begin()->first < VersionOf(i + 1))
    versions_.erase(versions_.begin());

  std::vector<int64_t> todo;
  for (int64_t j = i + 1; j <= i + s_ && j < iterations; ++j)
    if (!ahead_.count(j)) todo.push_back(j);
  if (todo.empty()) return out;
  // The behaviour contexts are built on the worker (each syncs the shared
  // engine to its version just before its batch); `agent` is copied.
  worker_ = std::async(std::launch::async, [this, agent, todo, play] {
    torch::NoGradGuard no_grad;
    for (int64_t j : todo) ahead_.emplace(j, PlayOne(agent, j, play));
  });
  return out;
}

double RolloutAhead::Join() {
  if (!worker_.valid()) return 0.0;
  const double t0 = MonotonicSeconds();
  worker_.get();  // rethrows the worker's error
  return MonotonicSeconds() - t0;
}

void RolloutAhead::Save(const std::string& dir) const {
  for (const auto& [version, model] : versions_) {
    if (version < VersionOf(last_taken_ + 1) || version > last_taken_) continue;
    policy::TransformerLM m = model;
    std::ostringstream bytes;  // checked writes (torch's file writer aborts on a full disk)
    torch::save(Tensors(m), bytes);
    WriteWholeFile(VersionFile(dir, version), bytes.view(), "behaviour weights");
  }
}

void RolloutAhead::Load(const std::string& dir) {
  versions_.clear();
  ahead_.clear();
  if (!fs::is_directory(dir)) return;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    int64_t version = 0;
    if (std::sscanf(name.c_str(), "behaviour_v%" SCNd64 ".pt", &version) != 1) continue;
    policy::TransformerLM m = policy::CloneModel(model_);
    std::vector<torch::Tensor> saved;
    torch::load(saved, entry.path().string());
    std::vector<torch::Tensor> mine = Tensors(m);
    if (saved.size() != mine.size())
      throw IoError(fmt::format("{}: {} tensors, the model has {}", entry.path().string(),
                                saved.size(), mine.size()),
                    "the checkpoint belongs to another model; start a new run");
    torch::NoGradGuard no_grad;
    for (size_t k = 0; k < mine.size(); ++k) mine[k].copy_(saved[k]);
    versions_.emplace(version, m);
  }
}

std::vector<std::pair<std::string, double>> AsyncMetrics(int64_t max_staleness, int64_t iteration,
                                                         const PlayedBatch& batch, double wait_s,
                                                         Comm& comm) {
  if (max_staleness == 0) return {};
  return {{"async/version_lag", static_cast<double>(iteration - batch.version)},
          {"async/rollout_s", comm.Max(batch.seconds, "rollout seconds")},
          {"async/wait_s", comm.Max(wait_s, "worker wait")}};
}

}  // namespace rlid::trainers

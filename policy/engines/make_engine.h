// Builds the rollout engine [sampler] engine names, for a model that trains.
#pragma once

#include <memory>
#include <string>

#include "policy/engines/engine_config.h"
#include "policy/reading/rollout_engine.h"
#include "policy/model/model.h"

namespace rlid::policy {

struct EngineContext {
  std::string dir;        // where the engine writes served weights and its log (run dir / "engine")
  uint64_t seed = 0;      // the run seed (vLLM's --seed)
  int64_t version = 0;    // the policy version the model's weights are now
};

// "rlid": a TextSampler copy of `model` on `device`. "vllm": starts a vLLM
// server on the model's base weights (LoRA runs hot-load each version's
// adapter; full-parameter runs restart or reload). "openai": the user's server.
// Every engine serves `model`'s weights as ctx.version when this returns
// (probed for server engines). EngineError when a server cannot start or fails
// the probe; ConfigError for settings the engine cannot run.
std::unique_ptr<RolloutEngine> MakeRolloutEngine(const EngineConfig& cfg, const SamplerOptions& options,
                                                 TransformerLM& model, const EngineContext& ctx);

}  // namespace rlid::policy

// How a server engine comes to serve the trainer's weights, version by
// version. Each strategy writes what the server reads (a PEFT adapter
// directory, or a full Hugging Face model directory) under its own directory
// and tells the server; ServerEngine::Sync then probes that the server serves
// what was asked (probe.h).
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "policy/reading/rollout_engine.h"
#include "policy/engines/server_engine.h"

namespace rlid::policy {

class WeightSync {
 public:
  virtual ~WeightSync() = default;
  // Makes the server serve `model`'s weights as `version`; returns where
  // requests for them go from now on. Sets report.restarted when it had to
  // restart the server. EngineError when the server refuses.
  virtual ServerTarget Apply(TransformerLM& model, int64_t version, const ServerTarget& current,
                             EngineSync& report) = 0;
  // Whether the served weights follow the trainer (false: NoSync).
  virtual bool follows() const { return true; }
};

// The server keeps its own weights ([sampler.openai] sync = "none"): for a
// server that cannot load new weights, or an engine that evaluates a fixed model.
class NoSync : public WeightSync {
 public:
  ServerTarget Apply(TransformerLM&, int64_t, const ServerTarget& current, EngineSync&) override {
    return current;
  }
  bool follows() const override { return false; }
};

// LoRA runs: every version's adapter is written in PEFT's layout to
// dir/v<version> and hot-loaded under the name "<prefix>-v<version>"
// (vLLM's /v1/load_lora_adapter); the previous version is unloaded and its
// directory removed once the new one serves, and the last one is unloaded
// when the engine goes (a server shared by several runs keeps no adapter of
// a finished one). The prefix names this process and the time it started
// the engine, so runs sharing a server never reuse a name. The server must
// see `dir` (same host or a shared filesystem).
class LoraSync : public WeightSync {
 public:
  LoraSync(std::string dir, std::string prefix, double timeout_s);
  ~LoraSync() override;
  ServerTarget Apply(TransformerLM& model, int64_t version, const ServerTarget& current,
                     EngineSync& report) override;

 private:
  std::string dir_, prefix_;
  double timeout_s_;
  ServerTarget server_;     // where the loaded adapter is
  std::string loaded_;      // the adapter name now served ("" = none yet)
  std::string loaded_dir_;  // and its directory
};

// Full-parameter runs: the merged weights are written as a Hugging Face model
// directory, then `load(dir)` makes the server serve it (vLLM: a restart on
// that directory, or an in-place reload) and returns the new target.
class FullWeightSync : public WeightSync {
 public:
  using Load = std::function<ServerTarget(const std::string& model_dir, EngineSync& report)>;
  // `served` is the directory the server was started on (WriteServedModel's, merged):
  // a version whose files equal the served ones byte for byte is not loaded again
  // (the first sync of a run, before any update, costs no restart).
  FullWeightSync(std::string dir, Load load, std::string served = "");
  ServerTarget Apply(TransformerLM& model, int64_t version, const ServerTarget& current,
                     EngineSync& report) override;

 private:
  std::string dir_;
  Load load_;
  std::string served_dir_;  // removed once the next version serves
};

// Writes the base weights of `model` (LoRA adapters left out; merged when
// `merge`) as a Hugging Face model directory `dir` that vLLM and transformers
// load (config.json, model.safetensors in float32).
void WriteServedModel(TransformerLM& model, const std::string& dir, bool merge);

}  // namespace rlid::policy

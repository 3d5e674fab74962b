// Checkpoints: a directory with config.json (Hugging Face model config),
// model.safetensors (HF tensor names + rlid's value head), tokenizer.json and
// rlid.json (format version, code version, caller metadata). Written
// atomically (temp dir + rename), so a crash never leaves a half checkpoint.
// Loading checks the format version and every tensor's shape, and also
// accepts plain HF model directories (no rlid.json; value head initialised).
#pragma once

#include <functional>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "policy/model.h"
#include "policy/tokenizer.h"

namespace rlid::policy {

constexpr int kCheckpointFormatVersion = 1;

struct LoadedCheckpoint {
  TransformerLM model{nullptr};
  Tokenizer tokenizer;          // the byte-level placeholder when has_tokenizer is false
  bool has_tokenizer = false;
  nlohmann::json meta;          // rlid.json ("extra" holds the caller's metadata)
  nlohmann::json hf_config;     // config.json as found
  std::string dir;
  std::vector<std::string> weight_files;  // safetensors files read
};

struct LoadOptions {
  torch::Dtype dtype = torch::kFloat32;  // parameters (the value head stays float32)
  bool require_tokenizer = true;         // IoError when tokenizer.json is missing
};

// `extra` is stored under rlid.json's "extra". `write_more(tmp_dir)` may add
// files (optimizer state, trainer state) before the directory is published.
void SaveCheckpoint(const std::string& dir, TransformerLM& model, const Tokenizer& tokenizer,
                    const nlohmann::json& extra = nlohmann::json::object(),
                    const std::function<void(const std::string& tmp_dir)>& write_more = {});

// Loads onto `device`: model.safetensors, or the shards named by
// model.safetensors.index.json (F32/BF16/F16 on disk, converted to
// opt.dtype while read, straight into the parameters: no random
// initialisation, no second copy of the weights). IoError for missing/corrupt
// files; ConfigError for a newer format version, an unsupported config, a
// missing, unexpected or mis-shaped tensor (named).
LoadedCheckpoint LoadCheckpoint(const std::string& dir, torch::Device device = torch::kCPU,
                                const LoadOptions& opt = {});

// Copies weights from `src` into `dst` (same config); used for reference and
// rollout-engine copies.
void CopyWeights(TransformerLM& src, TransformerLM& dst);
// A deep copy of a model (same device; parameters in `dtype`, default the
// source's; the value head keeps its dtype), detached from autograd.
TransformerLM CloneModel(TransformerLM& src, std::optional<torch::Dtype> dtype = std::nullopt);

}  // namespace rlid::policy

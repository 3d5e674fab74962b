// Checkpoints: a directory with config.json (Hugging Face model config),
// model.safetensors (HF tensor names + rlid's value head), tokenizer.json and
// rlid.json (format version, code version, caller metadata). Written
// atomically (temp dir + rename), so a crash never leaves a half checkpoint.
// Loading checks the format version and every tensor's shape, and also
// accepts plain HF model directories (no rlid.json; value head initialised).
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "policy/model.h"
#include "policy/tokenizer.h"

namespace rlid::policy {

constexpr int kCheckpointFormatVersion = 1;

struct LoadedCheckpoint {
  TransformerLM model{nullptr};
  Tokenizer tokenizer;
  nlohmann::json meta;  // rlid.json ("extra" holds the caller's metadata)
  std::string dir;
};

// `extra` is stored under rlid.json's "extra". `write_more(tmp_dir)` may add
// files (optimizer state, trainer state) before the directory is published.
void SaveCheckpoint(const std::string& dir, TransformerLM& model, const Tokenizer& tokenizer,
                    const nlohmann::json& extra = nlohmann::json::object(),
                    const std::function<void(const std::string& tmp_dir)>& write_more = {});

// Loads onto `device`. IoError for missing/corrupt files, ConfigError for a
// newer format version or mismatched shapes.
LoadedCheckpoint LoadCheckpoint(const std::string& dir, torch::Device device = torch::kCPU);

// Copies weights from `src` into `dst` (same config); used for reference and
// rollout-engine copies.
void CopyWeights(TransformerLM& src, TransformerLM& dst);
// A deep copy of a model (same device/dtype), detached from autograd.
TransformerLM CloneModel(TransformerLM& src);

}  // namespace rlid::policy

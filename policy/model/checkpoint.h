// Checkpoints: a directory with config.json (Hugging Face model config),
// model.safetensors (HF tensor names + rlid's value head), tokenizer.json and
// rlid.json (format version, code version, caller metadata). A model with LoRA
// adapters is saved as a PEFT adapter directory instead (adapter_config.json,
// adapter_model.safetensors, value_head.safetensors, tokenizer, rlid.json):
// the frozen base is not copied; adapter_config.json names it. Written
// atomically (temp dir + rename), so a crash never leaves a half checkpoint.
// Loading checks the format version and every tensor's shape, and also
// accepts plain HF model directories (no rlid.json; value head zero) and PEFT
// adapter directories whose base_model_name_or_path is a local directory.
#pragma once

#include <functional>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "policy/model/model.h"
#include "policy/tokenizer/tokenizer.h"

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
  std::string base_dir;  // an adapter checkpoint's base model directory (empty otherwise)
};

// The value head of an adapter checkpoint (PEFT's files carry adapters only).
inline constexpr const char* kValueHeadFile = "value_head.safetensors";

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

struct ExportOptions {
  bool merge = false;                    // fold LoRA adapters into the base weights
  torch::Dtype dtype = torch::kFloat32;  // of the written weights (float32 or bfloat16)
};
// Writes a directory for Hugging Face tools (no rlid.json, no value head):
// a plain model directory (config.json, model.safetensors, tokenizer files)
// that transformers' from_pretrained loads, or, for a model with LoRA adapters
// and !merge, a PEFT adapter directory (adapter_config.json naming the base,
// adapter_model.safetensors, tokenizer files). `out_dir` must not exist or be
// empty (IoError otherwise); it is published atomically.
void ExportModel(LoadedCheckpoint& ck, const std::string& out_dir, const ExportOptions& opt = {});

// True for the names SaveCheckpoint/ExportModel give a directory before it is
// published ("iter_000003.tmp-4242", "...old-4242"): a crash can leave one
// behind, and it is never a checkpoint (LoadCheckpoint refuses it).
bool IsUnpublishedCheckpointName(const std::string& name);
// Removes the unpublished directories in `dir` whose writing process no longer
// exists (those of a live process are left alone); returns how many.
int RemoveOrphanCheckpoints(const std::string& dir);

// rlid.json of a checkpoint written by rlid (format version checked); IoError
// when it is missing or unreadable.
nlohmann::json ReadCheckpointMeta(const std::string& dir);

// Copies weights from `src` into `dst` (same config), by name. When only
// `src` has LoRA adapters, `dst` receives the merged weights (it then computes
// what `src` does). ConfigError when `dst` has a parameter `src` lacks.
void CopyWeights(TransformerLM& src, TransformerLM& dst);
// Reads a checkpoint's trained weights into `model` in place (resume): the
// adapters and value head of an adapter checkpoint, or every tensor of a full
// one. ConfigError when the checkpoint and the model do not match.
void RestoreWeights(const std::string& dir, TransformerLM& model);
// A deep copy of a model (same device; parameters in `dtype`, default the
// source's; the value head keeps its dtype), detached from autograd.
TransformerLM CloneModel(TransformerLM& src, std::optional<torch::Dtype> dtype = std::nullopt);

}  // namespace rlid::policy

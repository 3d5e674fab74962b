// LoRA adapters on a TransformerLM, in PEFT's layout so PEFT and rlid read
// each other's adapters:
//   adapter_config.json        peft_type LORA, r, lora_alpha, lora_dropout,
//                              target_modules, base_model_name_or_path
//   adapter_model.safetensors  base_model.model.<HF name>.lora_A.weight [r, in]
//                              base_model.model.<HF name>.lora_B.weight [out, r]
// The base stays frozen (in any dtype, e.g. bf16); the adapters (float32, or
// float64 for a float64 model) and the value head are the only parameters
// with requires_grad, so they are all an optimiser built from
// TrainableParameters() sees.
#pragma once

#include <functional>
#include <string>

#include "policy/model/model.h"

namespace rlid::policy {

// Tensor-name prefix PEFT writes in adapter_model.safetensors.
inline constexpr const char* kPeftPrefix = "base_model.model.";

// Attaches adapters to every projection named in cfg.target_modules, with
// PEFT's initialisation: lora_A ~ U(-1/sqrt(in), 1/sqrt(in)) (kaiming-uniform
// with a = sqrt(5)), drawn from `seed`; lora_B = 0, so the model computes
// exactly what it did before. Freezes every other parameter except the value
// head and records cfg in model->lora(). Call after the base weights are in
// place (InitWeights would overwrite the adapters). ConfigError for a config
// that fails LoraConfig::Validate or a model that already has adapters.
void AttachLora(TransformerLM& model, const LoraConfig& cfg, uint64_t seed);

// The entries of `targets` this model has a projection for, in their order:
// what AttachLora adapts ([policy.lora]'s defaults name projections only some
// families have, e.g. Qwen3.5's linear attention).
std::vector<std::string> PresentTargets(TransformerLM& model,
                                        const std::vector<std::string>& targets);

// Calls fn(name, tensor) for every parameter of the Hugging Face model (no
// lora_* tensors; the value head only when include_value_head), with each
// adapter folded into its weight (LinearImpl::MergedWeight). One merged
// tensor exists at a time.
void ForEachMergedParameter(TransformerLM& model,
                            const std::function<void(const std::string&, const torch::Tensor&)>& fn,
                            bool include_value_head = false);

// A model without adapters whose parameters are `model`'s base parameters
// (the same storage, no copy; the value head is a frozen copy): the policy
// with its adapters switched off, which is the KL reference of a LoRA run.
// Valid while `model` lives and its base stays frozen.
TransformerLM ShareBaseWeights(TransformerLM& model);

// True when `dir` holds adapter_config.json.
bool IsAdapterDirectory(const std::string& dir);
// Reads adapter_config.json. ConfigError naming the field for what rlid cannot
// run exactly (another peft_type, DoRA, rsLoRA and PEFT's other LoRA variants
// such as aLoRA, bias training, per-layer ranks, modules_to_save, excluded or
// replicated layers, an init_lora_weights with which PEFT rewrites the base on
// load, target modules other than the seven projections). A full module name
// in target_modules ("model.layers.0.self_attn.q_proj", as PEFT saves
// "all-linear") counts as its last component.
LoraConfig ReadAdapterConfig(const std::string& dir);
// Writes adapter_config.json and adapter_model.safetensors (the adapters in
// float32) into `dir`. The model must have adapters.
void SaveAdapter(const std::string& dir, TransformerLM& model);
// Reads adapter_model.safetensors into the model's attached adapters (shapes
// checked; a missing or unexpected tensor is a ConfigError naming it). The
// target_modules entries the adapters were read with
// (LoraConfig::peft_target_modules, from dir's adapter_config.json) must
// select every adapted projection by PEFT's rule (the name, or a suffix after
// a dot): a projection adapted in some layers only is a ConfigError.
void LoadAdapterWeights(const std::string& dir, TransformerLM& model);

}  // namespace rlid::policy

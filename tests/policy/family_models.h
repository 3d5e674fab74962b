// Tiny configs of the families beyond Qwen3 / Llama, written as a config.json
// states them and read by ModelConfig::FromJson, so that tests which must hold
// for every architecture rlid runs (readout = per-realisation scoring, KV cache =
// recomputation, shared prefix = plain) also run where a window shorter than
// the test's sequences hides keys (Mistral: every layer; Gemma 3: some, with
// their own RoPE base) and where a recurrent layer cannot be masked (Qwen3.5:
// a Gated DeltaNet layer, then a gated full-attention layer) and where each token
// takes its own route (Qwen3-MoE: a sparse layer of 4 experts, top 2, then a dense one).
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "policy/model/config.h"
#include "policy/model/model.h"

namespace rlid::testing {

// "qwen3" (no window: the default model), "mistral", "gemma3_text", "qwen3_5_text"
// or "qwen3_moe"; the tiny preset's sizes (D 128, 2 layers, 2 heads of 64, 1 KV
// head), tied embeddings.
inline policy::ModelConfig FamilyConfig(const std::string& family, int64_t vocab, int64_t window = 4) {
  nlohmann::json j = {{"model_type", family},   {"vocab_size", vocab},       {"hidden_size", 128},
                      {"intermediate_size", 384}, {"num_hidden_layers", 2},  {"num_attention_heads", 2},
                      {"num_key_value_heads", 1}, {"head_dim", 64},          {"max_position_embeddings", 4096},
                      {"tie_word_embeddings", true}};
  if (family == "mistral") j["sliding_window"] = window;
  if (family == "gemma3_text") {
    j["sliding_window"] = window;
    j["layer_types"] = {"sliding_attention", "full_attention"};
    j["query_pre_attn_scalar"] = 48;
    j["final_logit_softcapping"] = 30.0;
    j["rope_parameters"] = {
        {"full_attention", {{"rope_type", "linear"}, {"factor", 2.0}, {"rope_theta", 1e6}}},
        {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", 1e4}}}};
  }
  if (family == "qwen3_5_text") {
    j["layer_types"] = {"linear_attention", "full_attention"};
    j["linear_num_key_heads"] = 2, j["linear_num_value_heads"] = 4;  // grouped value heads
    j["linear_key_head_dim"] = 32, j["linear_value_head_dim"] = 24;
    j["linear_conv_kernel_dim"] = 4;
    j["rope_parameters"] = {
        {"rope_type", "default"}, {"rope_theta", 1e6}, {"partial_rotary_factor", 0.25}};
  }
  if (family == "qwen3_moe") {
    j["num_experts"] = 4, j["num_experts_per_tok"] = 2, j["moe_intermediate_size"] = 96;
    j["norm_topk_prob"] = true, j["mlp_only_layers"] = {1};
  }
  return policy::ModelConfig::FromJson(j);
}

// Parameters a test may scale up to sharpen a random model's distributions:
// not norms (their gain stays 1), not Gated DeltaNet's decay rates (A_log,
// dt_bias), which would make every recurrent state forget at once.
inline bool SharpenableWeight(const std::string& name) {
  for (const char* keep : {"norm", "A_log", "dt_bias"})
    if (name.find(keep) != std::string::npos) return false;
  return true;
}

// A model of `cfg` initialised from `seed`, its sharpenable weights scaled by
// `scale` (sharper distributions than InitWeights' near-uniform ones).
inline policy::TransformerLM SharpenedModel(const policy::ModelConfig& cfg, uint64_t seed, double scale) {
  policy::TransformerLM m(cfg);
  m->InitWeights(seed);
  torch::NoGradGuard ng;
  for (auto& p : m->named_parameters())
    if (SharpenableWeight(p.key())) p.value().mul_(scale);
  return m;
}

}  // namespace rlid::testing

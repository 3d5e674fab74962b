// The decoder's architecture as numbers and flags (ModelConfig), read from
// [policy] or a Hugging Face config.json and written back, and the work a
// forward did (ForwardCost) with the FLOPs it stands for. Free of LibTorch.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/config.h"

namespace rlid::policy {

// The work of model forwards, counted from what was actually computed (padding
// excluded), so both planes' FLOPs come from one formula (ModelConfig::ForwardFlops).
// The model counts it itself (TransformerLMImpl::work()): every forward adds
// what its AttentionMask stands for, Logits() and Value() the rows they read.
struct ForwardCost {
  int64_t calls = 0;            // model forward calls
  int64_t tokens = 0;           // token positions fed to the model (unpadded)
  int64_t attention_pairs = 0;  // (query, key) pairs attended, summed over the fed tokens
  int64_t logit_rows = 0;       // positions projected onto the vocabulary
  int64_t value_rows = 0;       // positions read by the value head
  ForwardCost& operator+=(const ForwardCost& o);
};
// a - b, field by field (the work done between two readings of a counter).
ForwardCost Difference(const ForwardCost& a, const ForwardCost& b);
// Pairs of a causal self-attention over n tokens: n (n + 1) / 2.
inline int64_t CausalPairs(int64_t n) { return n * (n + 1) / 2; }

// Rotary position embedding scaling, as Hugging Face's rope_parameters /
// rope_scaling: "default" (none), "linear" (positions / factor), "llama3"
// (Llama-3.1 wavelength bands) or "yarn" (NTK-by-parts + attention scale).
struct RopeScaling {
  std::string type = "default";
  double factor = 1.0;                 // linear, llama3, yarn
  int64_t original_max_position = 0;   // llama3 (required), yarn (0: max_position)
  double low_freq_factor = 1.0;        // llama3
  double high_freq_factor = 4.0;       // llama3
  double beta_fast = 32.0, beta_slow = 1.0;  // yarn
  double attention_factor = 0.0;       // yarn; 0: derived from factor (and mscale)
  double mscale = 0.0, mscale_all_dim = 0.0;  // yarn (DeepSeek style), 0: unset
  bool truncate = true;                // yarn: integer correction range
  nlohmann::json ToJson(double theta) const;  // HF rope dict (rope_type, rope_theta, ...)
};

struct ModelConfig {
  std::string preset = "tiny";       // tiny | small | base | custom (fields below override)
  int64_t vocab_size = 1024;         // set from the tokenizer when a model is created
  int64_t hidden_size = 128;         // D
  int64_t intermediate_size = 384;   // SwiGLU width
  int64_t num_layers = 2;
  int64_t num_heads = 2;             // query heads
  int64_t num_kv_heads = 1;          // key/value heads (GQA); divides num_heads
  int64_t head_dim = 64;             // explicit, may differ from D / num_heads
  double rope_theta = 10000.0;
  RopeScaling rope;                  // frequency scaling (HF rope_type)
  double rms_norm_eps = 1e-6;
  bool qk_norm = true;               // Qwen3 q/k RMSNorm
  bool attention_bias = false;       // Qwen2 q/k/v biases
  bool output_bias = false;          // o_proj bias (Llama/Qwen3 with attention_bias = true)
  bool tie_embeddings = true;        // lm_head shares embed_tokens.weight
  int64_t max_position = 4096;       // longest sequence the model accepts
  std::string source_dtype = "float32";  // dtype of the weights on disk (informational)

  // Families beyond Qwen3 / Qwen2 / Llama, set by FromJson from config.json's
  // model_type ([policy] does not set them; a fresh model keeps the defaults).
  std::string family;                // "" (qwen3 / qwen2 / llama by the flags), mistral,
                                     // gemma3_text, qwen3_5_text, qwen3_moe
  int64_t sliding_window = 0;        // a sliding layer's query at position q sees keys at
                                     // positions k with q - k < sliding_window (0: none)
  std::vector<bool> sliding;         // per layer: slides (empty: no layer does)
  double local_rope_theta = 0.0;     // RoPE base of sliding layers, unscaled (Gemma 3); 0: the global rope
  bool unit_offset_norm = false;     // RMSNorm scales by (1 + w), w zero at init (Gemma)
  bool sandwich_norm = false;        // norms after attention and before/after the MLP (Gemma 3)
  double embed_scale = 1.0;          // token embeddings are multiplied by this (Gemma: sqrt(D))
  std::string activation = "silu";   // MLP gate: silu (SwiGLU) or gelu_tanh (GeGLU)
  double query_scale = 0.0;          // attention score scale; 0: 1 / sqrt(head_dim)
  double final_logit_softcap = 0.0;  // logits = c tanh(logits / c) with c this (0: off)
  bool IsSliding(int64_t layer) const {
    return sliding_window > 0 && layer < static_cast<int64_t>(sliding.size()) && sliding[layer];
  }

  // Qwen3.5 (qwen3_5_text): hybrid layers, most of them Gated DeltaNet linear
  // attention (GatedDeltaNetImpl: policy/model/model.h, linear_attention.cc), the rest full attention with a
  // sigmoid output gate and partial rotary embeddings.
  std::vector<bool> linear;        // per layer: Gated DeltaNet (empty: no layer is)
  int64_t linear_key_heads = 0;    // query/key heads of the delta rule (divide the value heads)
  int64_t linear_value_heads = 0;  // value heads: one recurrent state [key_dim, value_dim] each
  int64_t linear_key_dim = 0;      // per-head key width
  int64_t linear_value_dim = 0;    // per-head value width
  int64_t linear_conv_kernel = 0;  // causal depthwise conv1d width over q, k, v
  bool attn_output_gate = false;   // q_proj also yields a gate: out = attn * sigmoid(gate)
  double partial_rotary = 1.0;     // fraction of head_dim RoPE rotates (the rest passes)
  bool IsLinear(int64_t layer) const {
    return layer < static_cast<int64_t>(linear.size()) && linear[layer];
  }
  bool HasLinearLayers() const;
  // Dimensions RoPE rotates: head_dim * partial_rotary, even.
  int64_t RotaryDim() const;
  // The conv's channels (q, k and v of every head): 2 * key heads * key_dim + value heads *
  // value_dim.
  int64_t LinearConvChannels() const {
    return 2 * linear_key_heads * linear_key_dim + linear_value_heads * linear_value_dim;
  }

  // Qwen3-MoE (qwen3_moe): a sparse layer's MLP is a router ("mlp.gate", [num_experts, D], no
  // bias) over num_experts SwiGLU experts of width moe_intermediate_size ("mlp.experts.<e>").
  // Each token runs the experts_per_token experts of highest softmax probability (softmax
  // over all experts in float32), weighted by those probabilities (renormalised to sum 1 with
  // norm_topk_prob). Dense layers keep the intermediate_size MLP.
  int64_t num_experts = 0;           // 0: no layer is sparse
  int64_t experts_per_token = 0;     // top-k
  int64_t moe_intermediate_size = 0;
  bool norm_topk_prob = false;
  std::vector<bool> sparse;          // per layer: MoE (empty: no layer is)
  bool IsSparse(int64_t layer) const {
    return layer < static_cast<int64_t>(sparse.size()) && sparse[layer];
  }
  bool HasSparseLayers() const;

  // Reads [policy] (preset first, then explicit fields).
  void Load(ConfigNode n);
  void ApplyPreset(const std::string& name);
  void Validate() const;  // ConfigError on inconsistent sizes
  // HF family with these flags: qwen3 (q/k norm), qwen2 (q/k/v biases only), else llama.
  std::string ModelType() const;
  // HF config.json in the layout every transformers version reads (top-level
  // rope_theta / rope_scaling / torch_dtype; Qwen3.5 as transformers 5 writes
  // it) and back. FromJson accepts Qwen3, Qwen2, Llama, Mistral, Gemma 3
  // (gemma3_text) and Qwen3.5 (qwen3_5_text, or the text_config of a qwen3_5
  // checkpoint) in both the current (rope_parameters, dtype, layer_types) and
  // the older layout; anything it cannot run exactly (MoE, Qwen's sliding
  // windows, other rope types and activations, MLP biases, attention
  // soft-capping) is a ConfigError naming the field.
  nlohmann::json ToJson() const;
  static ModelConfig FromJson(const nlohmann::json& j);
  // RoPE inverse frequencies [RotaryDim() / 2] after scaling, and the factor cos/sin
  // are multiplied by (yarn's attention scale; 1 otherwise).
  std::vector<double> RopeInvFreq() const;
  // Sliding layers' inverse frequencies: local_rope_theta unscaled, or RopeInvFreq().
  std::vector<double> LocalRopeInvFreq() const;
  double RopeAttentionScale() const;
  int64_t NumParameters() const;
  // Weights of layer `layer`'s matmuls that one token multiplies: its mixer's projections
  // (q, k, v, o; or Gated DeltaNet's in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, out_proj)
  // and the MLP (a sparse layer: the router and experts_per_token experts). With
  // all_experts, every expert of a sparse layer (the weights stored, not those used).
  int64_t LayerMatmulParameters(int64_t layer = 0, bool all_experts = false) const;
  // FLOPs of forwards that did `cost` (a multiply-add = 2 FLOPs):
  //   2 * Σ_layers LayerMatmulParameters(l) * tokens  (projections + MLP; active experts only)
  // + 4 * (full-attention layers) * num_heads * head_dim * attention_pairs  (QK^T and AV)
  // + 6 * (linear layers) * value heads * key_dim * value_dim * tokens
  //                                  (the delta rule's read, correction and write per token)
  // + 2 * vocab_size * hidden_size * logit_rows                    (vocabulary projection)
  // + 2 * hidden_size * value_rows                                 (value head).
  // Norms, RoPE, softmax, the conv and embedding lookups are not counted. A
  // backward pass is counted as twice its forward.
  double ForwardFlops(const ForwardCost& cost) const;
};

}  // namespace rlid::policy

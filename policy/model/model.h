// The decoder-only transformer LM, in the Hugging Face layouts of Qwen3, Qwen2,
// Llama, Mistral, Gemma 3 (text) and Qwen3.5 (text) so real checkpoints can be
// loaded: token embedding (optionally scaled), RMSNorm (w or 1 + w), RoPE (one
// table per kind of layer, whole or partial heads), grouped-query attention
// through LibTorch's SDPA with full or sliding-window layers, optional q/k
// RMSNorm and sigmoid output gate, Gated DeltaNet linear-attention layers
// (recurrent, policy/model/gated_delta.h), SwiGLU or GeGLU MLP, Gemma's
// sandwich norms, tied or untied head, explicit head_dim. Parameter names equal
// the HF names ("model.layers.0.self_attn.q_proj.weight"). A scalar value head on
// the final hidden state serves PPO. Callers pick the positions that need
// logits (Logits() on gathered hidden states) so the vocabulary projection is
// never computed for the whole sequence unless asked.
#pragma once

#include <torch/torch.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/config.h"
#include "policy/model/config.h"

namespace rlid::policy {

// The mask a forward attends with, and the work it stands for. Callers that
// build a mask from host-side lengths state its work (tokens that are not
// padding, visible (query, key) pairs of those tokens), so that counting never
// waits for the device. A bare mask tensor is counted by reading it (one host
// sync; tests and tools): every query row that sees some key is a token, and
// every visible pair counts.
struct AttentionMask {
  // NOLINTNEXTLINE(google-explicit-constructor): a bare mask converts implicitly
  AttentionMask(torch::Tensor bare) : mask(std::move(bare)) {}
  AttentionMask(torch::Tensor m, int64_t tokens, int64_t attention_pairs, int64_t calls = 1)
      : mask(std::move(m)), tokens(tokens), attention_pairs(attention_pairs), calls(calls) {}
  // Causal over right-padded rows of these lengths (TransformerLMImpl::CausalMask
  // of T columns, on `device`), with its work: Σ len tokens, Σ len (len + 1) / 2 pairs.
  static AttentionMask Causal(const std::vector<int64_t>& lengths, int64_t T,
                              const torch::Device& device);
  // The work of a forward of `batch` rows with this mask (no logit or value rows).
  ForwardCost Work(int64_t batch) const;

  torch::Tensor mask;            // [B or 1, 1, T, P + T] bool, true = may attend
  int64_t tokens = -1;           // -1: counted from `mask`
  int64_t attention_pairs = -1;  // -1: counted from `mask`
  // Passes this forward counts as: 1, or 0 for a prefix forward that the next
  // forward continues within the same pass (the shared-prefix readout).
  int64_t calls = 1;
  // How recurrent (Gated DeltaNet) layers read the new tokens; attention layers
  // only read `mask`. false: each row is a chain, its tokens (the query rows
  // that see their own key) fed in order; padding may precede a row's tokens
  // (left, only without a past) or follow them (right). true: the new-token
  // block mask[..., P:] is a forest, token i seeing exactly itself and its
  // ancestors, which precede it: every token continues its parent's state
  // (the call's starting state at a root), as the readout's trie does. A tree
  // call returns no present state.
  bool tree = false;
};

// What one layer carries from the tokens before: an attention layer's keys and
// values [B or 1, num_kv_heads, S, head_dim] (and, in sliding-window models,
// their positions [B or 1, S]); a recurrent layer's conv inputs [B or 1,
// channels, conv_kernel - 1] and delta-rule state [B or 1, value heads, key_dim,
// value_dim] (float32; float64 for a float64 model). A batch of 1 broadcasts
// over the query batch (shared-prefix forward).
struct LayerKV {
  torch::Tensor k, v;
  torch::Tensor pos;
  torch::Tensor conv, state;
  // Rows `index` of the batch (of every tensor that is there).
  LayerKV Rows(const torch::Tensor& index) const;
  // The batch size (1 when it broadcasts).
  int64_t Batch() const;
};
using PastKV = std::vector<LayerKV>;
// Tokens the past holds (its attention layers' key length; 0 for none).
int64_t PastLength(const PastKV* past);

struct ForwardOut {
  torch::Tensor hidden;  // [B, T, D] after the final norm
  PastKV present;        // past ++ this call's keys/values (only if requested)
};

// LoRA adapters (Hu et al. 2021) in PEFT's layout, read from [policy.lora]:
// each targeted projection gets lora_A [rank, in] and lora_B [out, rank] and
// computes x W^T + b + (alpha / rank) * B A dropout(x). See policy/model/lora.h.
struct LoraConfig {
  int64_t rank = 0;     // 0 = no adapters (every weight trains)
  double alpha = 32.0;  // scale = alpha / rank
  double dropout = 0.0; // on the adapter input, only in gradient forwards in train mode
  // Every projection by default (a model adapts those it has): attention, MLP
  // and Qwen3.5's linear attention.
  std::vector<std::string> target_modules = {"q_proj",    "k_proj",    "v_proj",    "o_proj",
                                             "gate_proj", "up_proj",   "down_proj", "in_proj_qkv",
                                             "in_proj_z", "in_proj_b", "in_proj_a", "out_proj"};
  std::string base_model;  // directory of the frozen base weights (PEFT's base_model_name_or_path)
  // adapter_config.json's target_modules entries as written (filled by
  // ReadAdapterConfig; empty for "all-linear" and for [policy.lora]): PEFT
  // adapts a module whose name is an entry or ends with "." + entry, and
  // LoadAdapterWeights checks that they select every adapted one.
  std::vector<std::string> peft_target_modules;
  bool enabled() const { return rank > 0; }
  double scale() const { return alpha / static_cast<double>(rank); }
  void Load(ConfigNode n);  // [policy.lora]
  void Validate() const;    // ConfigError naming the field
};

// y = x W^T + b with parameters "weight" [out, in] and "bias" [out]. Unlike
// torch::nn::Linear it allocates without initialising (a loaded checkpoint
// overwrites every value; TransformerLMImpl::InitWeights fills fresh models).
// With a LoRA adapter attached (AttachLora, policy/model/lora.h) it adds
// lora_scale * lora_B(lora_A(dropout(x))), computed in the adapters' dtype and
// cast to the output's.
class LinearImpl : public torch::nn::Module {
 public:
  LinearImpl(int64_t in, int64_t out, bool bias, torch::Dtype dtype);
  torch::Tensor forward(const torch::Tensor& x);
  // Registers lora_A [rank, in] and lora_B [out, rank] in `dtype`, uninitialised.
  void AddAdapter(int64_t rank, double scale, double dropout, torch::Dtype dtype);
  bool has_adapter() const { return lora_A != nullptr; }
  // W + scale * B A in W's dtype (W itself without an adapter), detached.
  torch::Tensor MergedWeight() const;
  torch::Tensor weight, bias;  // bias undefined when absent
  std::shared_ptr<LinearImpl> lora_A, lora_B;  // null without an adapter
  double lora_scale = 0.0, lora_dropout = 0.0;
};
TORCH_MODULE(Linear);

// Token embedding table "weight" [count, dim], allocated uninitialised.
class EmbeddingImpl : public torch::nn::Module {
 public:
  EmbeddingImpl(int64_t count, int64_t dim, torch::Dtype dtype);
  torch::Tensor forward(const torch::Tensor& ids);  // [B, T] -> [B, T, dim]
  torch::Tensor weight;
};
TORCH_MODULE(Embedding);

// RMSNorm with a learned scale named "weight": w, or (1 + w) with unit_offset (Gemma).
class RmsNormImpl : public torch::nn::Module {
 public:
  RmsNormImpl(int64_t dim, double eps, torch::Dtype dtype, bool unit_offset = false);
  torch::Tensor forward(const torch::Tensor& x);
  torch::Tensor weight;

 private:
  double eps_;
  bool unit_offset_;
};
TORCH_MODULE(RmsNorm);

// How the recurrent layers of one forward read its tokens (made once per
// forward from its AttentionMask, on the device; see AttentionMask::tree).
enum class RecurrentForm { kAuto, kChunked, kRecurrent };
struct RecurrentInputs {
  RecurrentForm form =
      RecurrentForm::kAuto;  // chains: auto = recurrent for one token, else chunked
  torch::Tensor valid;       // chains: [B, T] bool, real tokens; undefined: every token is
  torch::Tensor last;        // chains: [B] int64, the last real token (-1: none)
  torch::Tensor ancestors;   // trees: [B, T, T] bool, token j is token i or one of its ancestors
  torch::Tensor conv_index;  // trees: [B, T, K] int64, the conv window of token i as indices into
                             // [conv state (K - 1) ; tokens], oldest first
  bool tree() const { return ancestors.defined(); }
};

// What one decoder layer reads besides its input (made once per forward).
struct LayerInputs {
  torch::Tensor cos, sin;  // [B, 1, T, rotary dim] for this kind of layer
  torch::Tensor mask_add;  // [B|1, 1, T, P + T] additive attention mask
  const RecurrentInputs* recurrent = nullptr;
  torch::Tensor* routing = nullptr;  // receives a sparse layer's chosen experts [B, T, k]
};

// Grouped-query self-attention: q_proj, k_proj, v_proj, o_proj (+ q_norm, k_norm).
// With an output gate (Qwen3.5) q_proj yields per head [query ; gate] and the
// attention output is multiplied by sigmoid(gate) before o_proj. RoPE rotates
// the first rotary-dim channels of each head (all of them unless partial).
class AttentionImpl : public torch::nn::Module {
 public:
  AttentionImpl(const ModelConfig& cfg, torch::Dtype dtype);
  // x [B,T,D], cos/sin [B,1,T,rotary dim], additive mask [B|1,1,T,P+T] -> [B,T,D];
  // `kv_out` receives past ++ new keys/values.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& cos, const torch::Tensor& sin,
                        const torch::Tensor& mask_add, const LayerKV* past, LayerKV* kv_out);
  Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  RmsNorm q_norm{nullptr}, k_norm{nullptr};

 private:
  int64_t heads_, kv_heads_, head_dim_, rotary_dim_;
  bool output_gate_;
  double scale_;  // of the scores, folded into q
};
TORCH_MODULE(Attention);

// Gated DeltaNet linear attention (Yang et al. 2024), named as Qwen3.5's
// "linear_attn": in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, conv1d.weight
// [C, 1, K] (depthwise, causal, no bias, then silu), dt_bias, A_log, norm (a
// gated RMSNorm w * norm(o) * silu(z), weight w) and out_proj. Per value head
// a state S [key_dim, value_dim] follows the delta rule of gated_delta.h with
// q, k l2-normalised, beta = sigmoid(b), g = -exp(A_log) softplus(a + dt_bias).
class GatedDeltaNetImpl : public torch::nn::Module {
 public:
  GatedDeltaNetImpl(const ModelConfig& cfg, torch::Dtype dtype);
  // x [B,T,D] -> [B,T,D], starting from `past`'s conv inputs and state (zero
  // without); `state_out` receives the states after each row's last token (chains only).
  torch::Tensor forward(const torch::Tensor& x, const RecurrentInputs& in, const LayerKV* past,
                        LayerKV* state_out);
  Linear in_proj_qkv{nullptr}, in_proj_z{nullptr}, in_proj_b{nullptr}, in_proj_a{nullptr},
      out_proj{nullptr};
  std::shared_ptr<torch::nn::Module> conv1d;  // holds "weight"
  torch::Tensor conv_weight, dt_bias, A_log;
  RmsNorm norm{nullptr};

 private:
  int64_t key_heads_, value_heads_, key_dim_, value_dim_, kernel_;
};
TORCH_MODULE(GatedDeltaNet);

// SwiGLU: down(silu(gate(x)) * up(x)); GeGLU with gelu (tanh approximation) for silu.
// Its width is cfg.intermediate_size, or `width` when given (Qwen3-MoE's experts).
class MlpImpl : public torch::nn::Module {
 public:
  MlpImpl(const ModelConfig& cfg, torch::Dtype dtype, int64_t width = 0);
  torch::Tensor forward(const torch::Tensor& x);
  Linear gate_proj{nullptr}, up_proj{nullptr}, down_proj{nullptr};

 private:
  bool gelu_ = false;
};
TORCH_MODULE(Mlp);

// Qwen3-MoE's sparse MLP, named as transformers writes it ("mlp.gate.weight",
// "mlp.experts.<e>.gate_proj.weight", ...): router logits gate(x) in the model's dtype,
// softmax over the experts in ComputeType, the experts_per_token largest (renormalised with
// norm_topk_prob), cast back; each chosen expert's SwiGLU output times its weight, summed
// over experts in ascending order (as transformers adds them). One host read per forward
// (which experts any token chose).
class MoeImpl : public torch::nn::Module {
 public:
  MoeImpl(const ModelConfig& cfg, torch::Dtype dtype);
  // x [..., D] -> [..., D]; `routing`, when given, receives the chosen experts [..., k] (int64).
  torch::Tensor forward(const torch::Tensor& x, torch::Tensor* routing = nullptr);
  Linear gate{nullptr};
  torch::nn::ModuleList experts{nullptr};
  std::vector<Mlp> expert_list;

 private:
  int64_t top_k_;
  bool norm_topk_prob_;
};
TORCH_MODULE(Moe);

class DecoderLayerImpl : public torch::nn::Module {
 public:
  DecoderLayerImpl(const ModelConfig& cfg, int64_t layer, torch::Dtype dtype);
  torch::Tensor forward(const torch::Tensor& x, const LayerInputs& in, const LayerKV* past,
                        LayerKV* kv_out);
  // The MLP of this layer: dense, or (Qwen3-MoE's sparse layers) the experts; `routing`
  // receives a sparse layer's chosen experts.
  torch::Tensor Feedforward(const torch::Tensor& x, torch::Tensor* routing);
  // Llama / Qwen: x + mixer(input_ln(x)), then h + mlp(post_attention_ln(h)), the
  // mixer being self_attn or (Qwen3.5's linear layers) linear_attn. Gemma 3
  // (sandwich): x + post_attention_ln(attn(input_ln(x))), then
  // h + post_feedforward_ln(mlp(pre_feedforward_ln(h))).
  RmsNorm input_layernorm{nullptr}, post_attention_layernorm{nullptr};
  RmsNorm pre_feedforward_layernorm{nullptr}, post_feedforward_layernorm{nullptr};  // sandwich only
  Attention self_attn{nullptr};        // null in a linear layer
  GatedDeltaNet linear_attn{nullptr};  // null in an attention layer
  Mlp mlp{nullptr};  // null in a sparse layer
  Moe moe{nullptr};  // registered as "mlp" in a sparse layer, else null
};
TORCH_MODULE(DecoderLayer);

// "model": embed_tokens, layers, norm.
class DecoderImpl : public torch::nn::Module {
 public:
  DecoderImpl(const ModelConfig& cfg, torch::Dtype dtype);
  Embedding embed_tokens{nullptr};
  torch::nn::ModuleList layers{nullptr};
  RmsNorm norm{nullptr};
  std::vector<DecoderLayer> layer_list;
};
TORCH_MODULE(Decoder);

class TransformerLMImpl : public torch::nn::Module {
 public:
  // Parameters in `dtype` (the value head is always float32). With initialise
  // = false they are left uninitialised: the caller must overwrite every one
  // (checkpoint loading, weight copies), which avoids a random initialisation
  // that is thrown away and never touches pages the loader does not fill.
  explicit TransformerLMImpl(const ModelConfig& cfg, torch::Dtype dtype = torch::kFloat32,
                             bool initialise = true);

  // ids, positions: [B, T] int64. mask.mask: [B or 1, 1, T, P + T] bool (true =
  // may attend), where P is the past length (0 without past). Returns the
  // final hidden states; `present` is filled when return_present is true.
  // Adds mask.Work(B) to work().
  ForwardOut forward(const torch::Tensor& ids, const torch::Tensor& positions,
                     const AttentionMask& mask, const PastKV* past = nullptr,
                     bool return_present = false);
  // hidden [..., D] -> logits [..., V] (float32; float64 for a float64 model).
  // Adds the rows of `hidden` to work().logit_rows.
  torch::Tensor Logits(const torch::Tensor& hidden);
  // hidden [..., D] -> value [...]. Adds the rows to work().value_rows.
  torch::Tensor Value(const torch::Tensor& hidden);

  // Everything this model computed since it was made, as its forward, Logits
  // and Value calls count it: the one place compute is counted. Callers read
  // differences (agents::ComputeScope books them into a budget stage).
  // Activation checkpointing's recomputation is not counted (see ForwardFlops).
  const ForwardCost& work() const { return work_; }

  // Deterministic initialisation from a seed (independent of global RNG state).
  void InitWeights(uint64_t seed);
  const ModelConfig& config() const { return cfg_; }
  torch::Device device() const { return model->embed_tokens->weight.device(); }
  torch::Dtype dtype() const { return model->embed_tokens->weight.scalar_type(); }

  // Standard causal mask for right-padded batches: [B, 1, T, T], key j visible
  // to query i iff j <= i and j < length[b].
  static torch::Tensor CausalMask(const torch::Tensor& lengths, int64_t T);
  // Causal mask from a Hugging Face attention_mask [B, T] (1 = token, 0 =
  // padding, anywhere, e.g. on the left): [B, 1, T, T], key j visible to query
  // i iff j <= i and attention_mask[b][j] = 1.
  static torch::Tensor CausalMaskFromAttention(const torch::Tensor& attention_mask);

  // The delta-rule form recurrent layers compute chains with (tests compare
  // them): auto (recurrent for one token, chunked otherwise), chunked or recurrent.
  void set_recurrent_form(RecurrentForm form) { recurrent_form_ = form; }

  // Qwen3-MoE: with recording on, every forward leaves the experts each token chose in
  // routing(): one [B, T, experts_per_token] int64 tensor per sparse layer, in layer order
  // (empty without sparse layers). Off by default; switching it off drops what was kept.
  void set_record_routing(bool on) {
    record_routing_ = on;
    if (!on) routing_.clear();
  }
  const std::vector<torch::Tensor>& routing() const { return routing_; }

  // Activation checkpointing (policy.gradient_checkpointing): forwards that
  // build a gradient in train mode keep only each decoder layer's input and
  // recompute the layer during backward. Same gradients (dropout masks
  // included, on CPU), less memory, one more forward per backward.
  void set_checkpointing(bool on) { checkpointing_ = on; }
  bool checkpointing() const { return checkpointing_; }

  // ConfigError when a sequence reaches position `max_position_used` >=
  // max_position. forward() checks CPU positions itself; callers on an
  // accelerator check their host-side positions here, so that a forward never
  // waits for the device to report a maximum.
  void CheckPosition(int64_t max_position_used) const;

  // The LoRA adapters attached (policy::AttachLora), or nullopt.
  const std::optional<LoraConfig>& lora() const { return lora_; }
  void set_lora(std::optional<LoraConfig> c) { lora_ = std::move(c); }

  Decoder model{nullptr};
  Linear lm_head{nullptr};     // null when tied
  Linear value_head{nullptr};  // rlid's value head (not in HF files), float32

 private:
  ModelConfig cfg_;
  // cos/sin [B, 1, T, hd] of these positions under inverse frequencies `freqs`
  // (uploaded once per device and dtype into `cached`), times `scale`, in `dtype`.
  std::pair<torch::Tensor, torch::Tensor> Rotary(const torch::Tensor& positions,
                                                 const std::vector<double>& freqs,
                                                 torch::Tensor& cached, double scale,
                                                 torch::Dtype dtype);
  std::vector<double> inv_freq_;  // RoPE inverse frequencies after scaling
  torch::Tensor inv_freq_on_device_;  // inv_freq_ where the last forward ran (no upload per call)
  std::vector<double> local_inv_freq_;  // sliding layers' (Gemma 3: another base), else empty
  torch::Tensor local_inv_freq_on_device_;
  double rope_scale_ = 1.0;       // cos/sin scale (yarn)
  std::optional<LoraConfig> lora_;
  bool checkpointing_ = false;
  RecurrentForm recurrent_form_ = RecurrentForm::kAuto;
  bool record_routing_ = false;
  std::vector<torch::Tensor> routing_;
  ForwardCost work_;
};
TORCH_MODULE(TransformerLM);

// float32 for float32/bf16/f16 tensors, float64 for float64 (precision of reductions).
torch::Dtype ComputeType(torch::Dtype d);
// RMSNorm over the last dim: x * rsqrt(mean(x^2) + eps) * w (or * (1 + w) with
// unit_offset), in ComputeType(x).
torch::Tensor ApplyRmsNorm(const torch::Tensor& x, const torch::Tensor& w, double eps,
                           bool unit_offset = false);

}  // namespace rlid::policy

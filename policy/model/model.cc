#include "policy/model/model.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>

#include "core/check.h"
#include "core/error.h"

namespace rlid::policy {

// ---- modules --------------------------------------------------------------------

// Reductions (norms, softmax, logits) run in float32 for float32/bf16 weights
// and in float64 when the model is float64 (gradient checks).
torch::Dtype ComputeType(torch::Dtype d) { return d == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32; }

torch::Tensor ApplyRmsNorm(const torch::Tensor& x, const torch::Tensor& w, double eps,
                           bool unit_offset) {
  const auto ct = ComputeType(x.scalar_type());
  auto xf = x.to(ct);
  auto y = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return (y * (unit_offset ? w.to(ct) + 1.0 : w.to(ct))).to(x.scalar_type());
}

RmsNormImpl::RmsNormImpl(int64_t dim, double eps, torch::Dtype dtype, bool unit_offset)
    : eps_(eps), unit_offset_(unit_offset) {
  weight = register_parameter("weight", torch::empty({dim}, torch::TensorOptions().dtype(dtype)));
}

torch::Tensor RmsNormImpl::forward(const torch::Tensor& x) {
  return ApplyRmsNorm(x, weight, eps_, unit_offset_);
}

LayerKV LayerKV::Rows(const torch::Tensor& index) const {
  auto rows = [&](const torch::Tensor& t) { return t.defined() ? t.index_select(0, index) : t; };
  return {rows(k), rows(v), rows(pos), rows(conv), rows(state)};
}

int64_t LayerKV::Batch() const {
  for (const auto* t : {&k, &conv, &state})
    if (t->defined()) return t->size(0);
  return 0;
}

int64_t PastLength(const PastKV* past) {
  if (past == nullptr) return 0;
  for (const auto& layer : *past)
    if (layer.k.defined()) return layer.k.size(2);
  return 0;
}

LinearImpl::LinearImpl(int64_t in, int64_t out, bool bias, torch::Dtype dtype) {
  auto opts = torch::TensorOptions().dtype(dtype);
  weight = register_parameter("weight", torch::empty({out, in}, opts));
  if (bias) this->bias = register_parameter("bias", torch::empty({out}, opts));
}

namespace {
// True while a checkpointed layer runs its no-grad forward: it is a gradient
// forward whose graph is rebuilt in backward, so dropout acts as in one.
thread_local bool t_checkpointed_forward = false;
}  // namespace

torch::Tensor LinearImpl::forward(const torch::Tensor& x) {
  auto y = torch::nn::functional::linear(x, weight, bias);
  if (!lora_A) return y;
  auto h = x.to(lora_A->weight.scalar_type());
  if (lora_dropout > 0 && is_training() && (torch::GradMode::is_enabled() || t_checkpointed_forward))
    h = torch::dropout(h, lora_dropout, /*train=*/true);
  return y + (lora_B->forward(lora_A->forward(h)) * lora_scale).to(y.scalar_type());
}

void LinearImpl::AddAdapter(int64_t rank, double scale, double dropout, torch::Dtype dtype) {
  RLID_CHECK(!lora_A, "LinearImpl::AddAdapter: an adapter is already attached");
  lora_A = register_module("lora_A", std::make_shared<LinearImpl>(weight.size(1), rank, false, dtype));
  lora_B = register_module("lora_B", std::make_shared<LinearImpl>(rank, weight.size(0), false, dtype));
  lora_A->to(weight.device());
  lora_B->to(weight.device());
  lora_scale = scale;
  lora_dropout = dropout;
}

torch::Tensor LinearImpl::MergedWeight() const {
  torch::NoGradGuard no_grad;
  if (!lora_A) return weight.detach();
  const auto ct = lora_A->weight.scalar_type();
  auto delta = torch::matmul(lora_B->weight, lora_A->weight) * lora_scale;  // [out, in]
  return (weight.to(ct) + delta).to(weight.scalar_type());
}

EmbeddingImpl::EmbeddingImpl(int64_t count, int64_t dim, torch::Dtype dtype) {
  weight = register_parameter("weight", torch::empty({count, dim}, torch::TensorOptions().dtype(dtype)));
}

torch::Tensor EmbeddingImpl::forward(const torch::Tensor& ids) { return torch::embedding(weight, ids); }

namespace {
Linear MakeLinear(int64_t in, int64_t out, bool bias, torch::Dtype dtype) {
  return Linear(in, out, bias, dtype);
}

torch::Tensor RotateHalf(const torch::Tensor& x) {
  auto halves = x.chunk(2, -1);
  return torch::cat({-halves[1], halves[0]}, -1);
}
}  // namespace

AttentionImpl::AttentionImpl(const ModelConfig& cfg, torch::Dtype dt)
    : heads_(cfg.num_heads),
      kv_heads_(cfg.num_kv_heads),
      head_dim_(cfg.head_dim),
      rotary_dim_(cfg.RotaryDim()),
      output_gate_(cfg.attn_output_gate),
      scale_(cfg.query_scale > 0 ? cfg.query_scale
                                 : 1.0 / std::sqrt(static_cast<double>(cfg.head_dim))) {
  const int64_t q_out = heads_ * head_dim_ * (output_gate_ ? 2 : 1);
  q_proj = register_module("q_proj", MakeLinear(cfg.hidden_size, q_out, cfg.attention_bias, dt));
  k_proj = register_module("k_proj", MakeLinear(cfg.hidden_size, kv_heads_ * head_dim_, cfg.attention_bias, dt));
  v_proj = register_module("v_proj", MakeLinear(cfg.hidden_size, kv_heads_ * head_dim_, cfg.attention_bias, dt));
  o_proj = register_module("o_proj", MakeLinear(heads_ * head_dim_, cfg.hidden_size, cfg.output_bias, dt));
  if (cfg.qk_norm) {
    q_norm = register_module("q_norm", RmsNorm(head_dim_, cfg.rms_norm_eps, dt, cfg.unit_offset_norm));
    k_norm = register_module("k_norm", RmsNorm(head_dim_, cfg.rms_norm_eps, dt, cfg.unit_offset_norm));
  }
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& cos,
                                     const torch::Tensor& sin, const torch::Tensor& mask_add,
                                     const LayerKV* past, LayerKV* kv_out) {
  const int64_t B = x.size(0), T = x.size(1), G = heads_ / kv_heads_;
  auto q = q_proj(x);
  torch::Tensor gate;  // [B, T, H * hd]
  if (output_gate_) {
    auto parts = q.view({B, T, heads_, 2 * head_dim_}).chunk(2, -1);
    q = parts[0], gate = parts[1].reshape({B, T, heads_ * head_dim_});
  }
  q = q.reshape({B, T, heads_, head_dim_});
  auto k = k_proj(x).view({B, T, kv_heads_, head_dim_});
  auto v = v_proj(x).view({B, T, kv_heads_, head_dim_});
  if (q_norm) {
    q = q_norm(q);
    k = k_norm(k);
  }
  q = q.transpose(1, 2);  // [B, H, T, hd]
  k = k.transpose(1, 2);  // [B, Hkv, T, hd]
  v = v.transpose(1, 2);
  // The score scale (1/sqrt(hd) unless the family states one) is folded into q
  // ([B,H,T,hd]) rather than applied to the much larger score tensor ([B,H,T,S]).
  auto rotate = [&](const torch::Tensor& t) {
    if (rotary_dim_ == head_dim_) return t * cos + RotateHalf(t) * sin;
    auto r = t.slice(-1, 0, rotary_dim_);  // partial rotary: the rest passes unrotated
    return torch::cat({r * cos + RotateHalf(r) * sin, t.slice(-1, rotary_dim_)}, -1);
  };
  q = rotate(q) * scale_;
  k = rotate(k);
  if (past && past->k.defined()) {
    auto pk = past->k, pv = past->v;
    if (pk.size(0) != B) {
      pk = pk.expand({B, -1, -1, -1});
      pv = pv.expand({B, -1, -1, -1});
    }
    k = torch::cat({pk.to(k.scalar_type()), k}, 2);
    v = torch::cat({pv.to(v.scalar_type()), v}, 2);
  }
  if (kv_out) *kv_out = {k, v};
  // softmax(q k^T + mask) v through LibTorch's fused attention (flash/memory-
  // efficient kernels on CPU and CUDA, the math kernel otherwise): q [B, H, T, hd],
  // k, v [B, Hkv, S, hd], the additive mask [B|1, 1, T, S]; grouped-query heads
  // share their K/V head without copies (enable_gqa). q already carries the scale.
  auto out = at::scaled_dot_product_attention(q, k, v, mask_add.to(q.scalar_type()),
                                              /*dropout_p=*/0.0, /*is_causal=*/false,
                                              /*scale=*/1.0, /*enable_gqa=*/G > 1);
  out = out.transpose(1, 2).reshape({B, T, heads_ * head_dim_});
  if (output_gate_) out = out * torch::sigmoid(gate);
  return o_proj(out);
}

MlpImpl::MlpImpl(const ModelConfig& cfg, torch::Dtype dt, int64_t width)
    : gelu_(cfg.activation == "gelu_tanh") {
  const int64_t I = width > 0 ? width : cfg.intermediate_size;
  gate_proj = register_module("gate_proj", MakeLinear(cfg.hidden_size, I, false, dt));
  up_proj = register_module("up_proj", MakeLinear(cfg.hidden_size, I, false, dt));
  down_proj = register_module("down_proj", MakeLinear(I, cfg.hidden_size, false, dt));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  auto gate = gate_proj(x);
  return down_proj((gelu_ ? torch::gelu(gate, "tanh") : torch::silu(gate)) * up_proj(x));
}

MoeImpl::MoeImpl(const ModelConfig& cfg, torch::Dtype dt)
    : top_k_(cfg.experts_per_token), norm_topk_prob_(cfg.norm_topk_prob) {
  gate = register_module("gate", MakeLinear(cfg.hidden_size, cfg.num_experts, false, dt));
  experts = register_module("experts", torch::nn::ModuleList());
  for (int64_t e = 0; e < cfg.num_experts; ++e) {
    expert_list.push_back(Mlp(cfg, dt, cfg.moe_intermediate_size));
    experts->push_back(expert_list.back());
  }
}

torch::Tensor MoeImpl::forward(const torch::Tensor& x, torch::Tensor* routing) {
  const int64_t E = static_cast<int64_t>(expert_list.size());
  auto flat = x.reshape({-1, x.size(-1)});
  auto probs = torch::softmax(gate(flat).to(ComputeType(x.scalar_type())), -1);
  auto [weights, chosen] = probs.topk(top_k_, -1);  // [N, k]
  if (norm_topk_prob_) weights = weights / weights.sum(-1, /*keepdim=*/true);
  weights = weights.to(x.scalar_type());
  if (routing != nullptr) {
    auto shape = x.sizes().vec();
    shape.back() = top_k_;
    *routing = chosen.reshape(shape);
  }
  auto out = torch::zeros_like(flat);
  const auto counts = torch::bincount(chosen.flatten(), {}, E).cpu();
  const auto* count = counts.data_ptr<int64_t>();
  const auto by_slot = chosen.t();  // [k, N]: (slot, token) pairs in transformers' order
  for (int64_t e = 0; e < E; ++e) {
    if (count[e] == 0) continue;
    const auto pairs = torch::nonzero(by_slot == e);
    const auto slot = pairs.select(1, 0), token = pairs.select(1, 1);
    auto y = expert_list[e]->forward(flat.index_select(0, token)) *
             weights.index({token, slot}).unsqueeze(-1);
    out.index_add_(0, token, y);
  }
  return out.reshape(x.sizes());
}

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig& cfg, int64_t layer, torch::Dtype dt) {
  if (cfg.IsLinear(layer))
    linear_attn = register_module("linear_attn", GatedDeltaNet(cfg, dt));
  else
    self_attn = register_module("self_attn", Attention(cfg, dt));
  if (cfg.IsSparse(layer))
    moe = register_module("mlp", Moe(cfg, dt));
  else
    mlp = register_module("mlp", Mlp(cfg, dt));
  auto norm = [&] { return RmsNorm(cfg.hidden_size, cfg.rms_norm_eps, dt, cfg.unit_offset_norm); };
  input_layernorm = register_module("input_layernorm", norm());
  post_attention_layernorm = register_module("post_attention_layernorm", norm());
  if (cfg.sandwich_norm) {
    pre_feedforward_layernorm = register_module("pre_feedforward_layernorm", norm());
    post_feedforward_layernorm = register_module("post_feedforward_layernorm", norm());
  }
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const LayerInputs& in,
                                        const LayerKV* past, LayerKV* kv_out) {
  auto a = linear_attn ? linear_attn->forward(input_layernorm(x), *in.recurrent, past, kv_out)
                       : self_attn(input_layernorm(x), in.cos, in.sin, in.mask_add, past, kv_out);
  if (!pre_feedforward_layernorm) {
    auto h = x + a;
    return h + Feedforward(post_attention_layernorm(h), in.routing);
  }
  auto h = x + post_attention_layernorm(a);
  return h + post_feedforward_layernorm(Feedforward(pre_feedforward_layernorm(h), in.routing));
}

torch::Tensor DecoderLayerImpl::Feedforward(const torch::Tensor& x, torch::Tensor* routing) {
  return moe ? moe->forward(x, routing) : mlp(x);
}

DecoderImpl::DecoderImpl(const ModelConfig& cfg, torch::Dtype dt) {
  embed_tokens = register_module("embed_tokens", Embedding(cfg.vocab_size, cfg.hidden_size, dt));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg.num_layers; ++i) {
    layer_list.push_back(DecoderLayer(cfg, i, dt));
    layers->push_back(layer_list.back());
  }
  norm = register_module("norm", RmsNorm(cfg.hidden_size, cfg.rms_norm_eps, dt, cfg.unit_offset_norm));
}

namespace {

// LibTorch's default CPU generator state (LoRA dropout draws from it).
torch::Tensor CpuRngState() {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  return gen.get_state();
}
void SetCpuRngState(const torch::Tensor& state) {
  auto gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(state);
}

// Activation checkpointing of one decoder layer: the forward keeps only the
// layer's input; the backward recomputes the layer with gradients on (with the
// generator state the forward saw, so dropout draws the same mask) and
// backpropagates through the recomputation, which accumulates the layer's
// parameter gradients and returns the input's. Peak activation memory is then
// one layer's plus every layer's input, for one extra forward.
// A layer's inputs as autograd saved data (constants: no gradient flows into
// them), and back.
void SaveInputs(torch::autograd::AutogradContext* ctx, const LayerInputs& in) {
  auto keep = [&](const char* name, const torch::Tensor& t) {
    if (t.defined()) ctx->saved_data[name] = t;
  };
  keep("cos", in.cos), keep("sin", in.sin), keep("mask_add", in.mask_add);
  if (in.recurrent == nullptr) return;
  const RecurrentInputs& r = *in.recurrent;
  ctx->saved_data["form"] = static_cast<int64_t>(r.form);
  keep("valid", r.valid), keep("last", r.last), keep("ancestors", r.ancestors),
      keep("conv_index", r.conv_index);
}
struct SavedInputs {
  LayerInputs in;
  RecurrentInputs recurrent;
};
SavedInputs RestoreInputs(torch::autograd::AutogradContext* ctx) {
  auto get = [&](const char* name) {
    auto it = ctx->saved_data.find(name);
    return it == ctx->saved_data.end() ? torch::Tensor() : it->second.toTensor();
  };
  SavedInputs s;
  s.in.cos = get("cos"), s.in.sin = get("sin"), s.in.mask_add = get("mask_add");
  if (ctx->saved_data.count("form")) {
    s.recurrent.form = static_cast<RecurrentForm>(ctx->saved_data["form"].toInt());
    s.recurrent.valid = get("valid"), s.recurrent.last = get("last");
    s.recurrent.ancestors = get("ancestors"), s.recurrent.conv_index = get("conv_index");
  }
  return s;
}

struct CheckpointedLayer : public torch::autograd::Function<CheckpointedLayer> {
  // `inputs` is the address of the layer's LayerInputs, valid while forward runs.
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x,
                               int64_t layer, int64_t inputs, bool save_rng) {
    const auto& in = *reinterpret_cast<const LayerInputs*>(inputs);
    ctx->save_for_backward({x});
    SaveInputs(ctx, in);
    ctx->saved_data["layer"] = layer;
    if (save_rng) ctx->saved_data["rng"] = CpuRngState();
    t_checkpointed_forward = true;
    struct Reset {
      ~Reset() { t_checkpointed_forward = false; }
    } reset;
    return reinterpret_cast<DecoderLayerImpl*>(layer)->forward(x, in, nullptr, nullptr);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    auto* layer = reinterpret_cast<DecoderLayerImpl*>(ctx->saved_data["layer"].toInt());
    SavedInputs inputs = RestoreInputs(ctx);
    if (layer->linear_attn) inputs.in.recurrent = &inputs.recurrent;
    auto x = saved[0].detach().requires_grad_(true);
    torch::Tensor y;
    {
      torch::AutoGradMode grad_on(true);
      const bool rng = ctx->saved_data.count("rng") > 0;
      torch::Tensor now;
      if (rng) {
        now = CpuRngState();
        SetCpuRngState(ctx->saved_data["rng"].toTensor());
      }
      y = layer->forward(x, inputs.in, nullptr, nullptr);
      if (rng) SetCpuRngState(now);
    }
    torch::autograd::backward({y}, {grad[0]});
    return {x.grad(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

TransformerLMImpl::TransformerLMImpl(const ModelConfig& cfg, torch::Dtype dtype, bool initialise)
    : cfg_(cfg) {
  cfg_.Validate();
  inv_freq_ = cfg_.RopeInvFreq();
  if (cfg_.local_rope_theta > 0) local_inv_freq_ = cfg_.LocalRopeInvFreq();
  rope_scale_ = cfg_.RopeAttentionScale();
  model = register_module("model", Decoder(cfg_, dtype));
  if (!cfg_.tie_embeddings) lm_head = register_module("lm_head", MakeLinear(cfg_.hidden_size, cfg_.vocab_size, false, dtype));
  value_head = register_module("value_head", MakeLinear(cfg_.hidden_size, 1, true, torch::kFloat32));
  if (initialise) InitWeights(0);
}

void TransformerLMImpl::InitWeights(uint64_t seed) {
  torch::NoGradGuard no_grad;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const double out_std = 0.02 / std::sqrt(2.0 * static_cast<double>(cfg_.num_layers));
  for (auto& p : named_parameters()) {
    const std::string& name = p.key();
    auto& t = p.value();
    auto cpu = torch::empty(t.sizes(), torch::kFloat32);
    bool is_norm = name.find("norm.weight") != std::string::npos ||
                   name.find("layernorm.weight") != std::string::npos;
    auto ends_with = [&](const char* tail) {
      const std::string t(tail);
      return name.size() >= t.size() && name.compare(name.size() - t.size(), t.size(), t) == 0;
    };
    if (ends_with("linear_attn.norm.weight") || ends_with("dt_bias")) {
      cpu.fill_(1.0);  // the gated norm scales by w; transformers' dt_bias init
    } else if (ends_with("A_log")) {
      cpu.uniform_(0.01, 16.0, gen).log_();  // decay rates A as transformers draws them
    } else if (ends_with("conv1d.weight")) {
      const double bound = 1.0 / std::sqrt(static_cast<double>(t.size(-1)));  // fan-in K
      cpu.uniform_(-bound, bound, gen);
    } else if (is_norm) {
      cpu.fill_(cfg_.unit_offset_norm ? 0.0 : 1.0);  // a gain of 1 either way
    } else if (name.find(".bias") != std::string::npos) {
      cpu.zero_();
    } else {
      bool residual_out = name.find("o_proj") != std::string::npos ||
                          name.find("down_proj") != std::string::npos ||
                          name.find("out_proj") != std::string::npos;
      cpu.normal_(0.0, residual_out ? out_std : 0.02, gen);
    }
    t.copy_(cpu.to(t.device(), t.scalar_type()));
  }
}

torch::Tensor TransformerLMImpl::CausalMask(const torch::Tensor& lengths, int64_t T) {
  auto opts = torch::TensorOptions().dtype(torch::kInt64).device(lengths.device());
  auto ar = torch::arange(T, opts);
  auto causal = ar.unsqueeze(0) <= ar.unsqueeze(1);            // [T(query), T(key)]
  auto valid = ar.unsqueeze(0) < lengths.unsqueeze(1);         // [B, T(key)]
  return (causal.unsqueeze(0) & valid.unsqueeze(1)).unsqueeze(1);  // [B, 1, T, T]
}

void TransformerLMImpl::CheckPosition(int64_t max_position_used) const {
  if (max_position_used >= cfg_.max_position)
    throw ConfigError(fmt::format("sequence position {} exceeds policy.max_position = {}",
                                  max_position_used, cfg_.max_position),
                      "shorten prompts (hide afterstates/memory) or raise policy.max_position");
}

torch::Tensor TransformerLMImpl::CausalMaskFromAttention(const torch::Tensor& attention_mask) {
  const int64_t T = attention_mask.size(1);
  auto ar = torch::arange(T, torch::TensorOptions().dtype(torch::kInt64).device(attention_mask.device()));
  auto causal = ar.unsqueeze(0) <= ar.unsqueeze(1);  // [T(query), T(key)]
  auto valid = attention_mask.to(torch::kBool);      // [B, T(key)]
  return (causal.unsqueeze(0) & valid.unsqueeze(1)).unsqueeze(1);
}

AttentionMask AttentionMask::Causal(const std::vector<int64_t>& lengths, int64_t T,
                                    const torch::Device& device) {
  int64_t tokens = 0, pairs = 0;
  for (int64_t n : lengths) tokens += n, pairs += CausalPairs(n);
  auto lengths_t = torch::tensor(lengths, torch::kInt64).to(device);
  return {TransformerLMImpl::CausalMask(lengths_t, T), tokens, pairs};
}

ForwardCost AttentionMask::Work(int64_t batch) const {
  ForwardCost w;
  w.calls = calls;
  if (tokens >= 0 && attention_pairs >= 0) {
    w.tokens = tokens, w.attention_pairs = attention_pairs;
    return w;
  }
  auto full = mask.expand({batch, 1, mask.size(-2), mask.size(-1)});
  auto counts = torch::stack({full.any(-1).sum(), full.sum()}).to(torch::kCPU);
  w.tokens = counts[0].item<int64_t>(), w.attention_pairs = counts[1].item<int64_t>();
  return w;
}

std::pair<torch::Tensor, torch::Tensor> TransformerLMImpl::Rotary(const torch::Tensor& positions,
                                                                  const std::vector<double>& freqs,
                                                                  torch::Tensor& cached, double scale,
                                                                  torch::Dtype dtype) {
  // RoPE tables in float32 (float64 for a float64 model), never in bf16.
  const auto ft = ComputeType(dtype);
  if (!cached.defined() || cached.device() != positions.device() || cached.scalar_type() != ft) {
    c10::InferenceMode normal_tensor(false);  // also usable by autograd when made during sampling
    cached = torch::tensor(freqs, torch::TensorOptions().dtype(torch::kFloat64)).to(positions.device(), ft);
  }
  auto angles = positions.to(ft).unsqueeze(-1) * cached;     // [B, T, hd/2]
  auto emb = torch::cat({angles, angles}, -1).unsqueeze(1);  // [B, 1, T, hd]
  auto cos = emb.cos(), sin = emb.sin();
  if (scale != 1.0) cos = cos * scale, sin = sin * scale;
  return {cos.to(dtype), sin.to(dtype)};
}

namespace {

// Additive form of a bool mask; a finite negative keeps fully masked (padding)
// rows NaN-free.
torch::Tensor Additive(const torch::Tensor& mask, torch::Dtype dtype) {
  return torch::zeros(mask.sizes(), torch::TensorOptions().dtype(dtype).device(mask.device()))
      .masked_fill(mask.logical_not(), -1e9);
}

// The keys' positions [B, P + T] (the past's, then these): undefined when the past lacks them.
torch::Tensor KeyPositions(const PastKV* past, const torch::Tensor& positions, int64_t P) {
  if (P == 0) return positions;
  for (const auto& layer : *past) {
    if (!layer.k.defined()) continue;
    if (!layer.pos.defined()) return {};
    const int64_t B = positions.size(0);
    return torch::cat({layer.pos.size(0) == B ? layer.pos : layer.pos.expand({B, -1}), positions},
                      1);
  }
  return {};
}

// How recurrent layers read this forward's tokens (see AttentionMask::tree),
// from the new-token block of the mask, on its device: a chain's tokens are
// the rows that see themselves (all of them when the host count says so); a
// tree's ancestors are what each row sees, and its conv window follows them.
RecurrentInputs MakeRecurrentInputs(const AttentionMask& attention, int64_t B, int64_t T, int64_t P,
                                    int64_t K, RecurrentForm form) {
  RecurrentInputs r;
  r.form = form;
  auto block = attention.mask.select(1, 0).slice(2, P).expand({B, T, T});  // [B, T(query), T(key)]
  auto ar = torch::arange(T, torch::TensorOptions().dtype(torch::kInt64).device(block.device()));
  if (!attention.tree) {
    if (attention.tokens == B * T) return r;  // no padding
    r.valid = block.diagonal(0, 1, 2);        // [B, T]
    r.last = torch::where(r.valid, ar.unsqueeze(0), torch::full({1, 1}, -1, ar.options())).amax(1);
    return r;
  }
  r.ancestors = block;
  auto depth = block.sum(-1);  // [B, T] the token's own depth, 1 at a root
  std::vector<torch::Tensor> window(K);
  window[K - 1] = (K - 1 + ar).unsqueeze(0).expand({B, T});
  for (int64_t m = 1; m < K; ++m) {  // the m-th ancestor, or the conv state before the root
    auto sel = block & (depth.unsqueeze(1) == (depth - m).unsqueeze(2));  // [B, i, j]
    auto in_tree = (K - 1) + sel.to(torch::kInt32).argmax(-1);
    auto in_state = (K - 2 - m) + depth;
    window[K - 1 - m] = torch::where(sel.any(-1), in_tree, in_state);
  }
  r.conv_index = torch::stack(window, -1);  // [B, T, K]
  return r;
}

}  // namespace

ForwardOut TransformerLMImpl::forward(const torch::Tensor& ids, const torch::Tensor& positions,
                                      const AttentionMask& attention, const PastKV* past,
                                      bool return_present) {
  const torch::Tensor& mask = attention.mask;
  RLID_CHECK_EQ(ids.dim(), 2);
  RLID_CHECK(ids.sizes() == positions.sizes(), "ids and positions differ in shape");
  const int64_t B = ids.size(0), T = ids.size(1);
  const bool has_past = past && !past->empty();
  const int64_t P = PastLength(past);
  RLID_CHECK_EQ(mask.size(-1), P + T, "mask key length must equal past + new tokens");
  RLID_CHECK_EQ(mask.size(-2), T);
  int64_t max_position = -1;  // known only for positions on the host
  if (positions.is_cpu() && positions.numel() > 0) {
    max_position = positions.max().item<int64_t>();
    CheckPosition(max_position);
  }
  auto x = model->embed_tokens(ids);
  if (cfg_.embed_scale != 1.0)  // the scale rounded to the weights' dtype, as transformers does
    x = x * torch::scalar_tensor(cfg_.embed_scale, x.options());
  const auto ct = ComputeType(x.scalar_type());
  LayerInputs global, local;
  std::tie(global.cos, global.sin) =
      Rotary(positions, inv_freq_, inv_freq_on_device_, rope_scale_, x.scalar_type());
  global.mask_add = Additive(mask, ct);
  local = global;
  if (!local_inv_freq_.empty())
    std::tie(local.cos, local.sin) =
        Rotary(positions, local_inv_freq_, local_inv_freq_on_device_, 1.0, x.scalar_type());
  bool any_sliding = false;
  for (int64_t l = 0; l < cfg_.num_layers; ++l) any_sliding = any_sliding || cfg_.IsSliding(l);
  const torch::Tensor key_pos = any_sliding ? KeyPositions(past, positions, P) : torch::Tensor();
  // Sliding layers also hide keys at sliding_window or more positions back; when no
  // position reaches the window (known on the host), that hides nothing.
  if (any_sliding && !(max_position >= 0 && max_position < cfg_.sliding_window)) {
    RLID_CHECK(key_pos.defined(), "a sliding-window model needs its past keys' positions (LayerKV::pos)");
    auto near = (positions.unsqueeze(-1) - key_pos.unsqueeze(1)) < cfg_.sliding_window;  // [B, T, P+T]
    local.mask_add = Additive(mask & near.unsqueeze(1), ct);
  }
  RecurrentInputs recurrent;
  if (cfg_.HasLinearLayers()) {
    recurrent = MakeRecurrentInputs(attention, B, T, P, cfg_.linear_conv_kernel, recurrent_form_);
    global.recurrent = local.recurrent = &recurrent;
  }
  ForwardOut out;
  if (return_present) out.present.resize(cfg_.num_layers);
  const bool checkpoint = checkpointing_ && is_training() && torch::GradMode::is_enabled() &&
                          !has_past && !return_present;
  // The first layer's input must require grad for checkpointed layers' backward
  // to run at all (the frozen embedding gives it none).
  if (checkpoint && !x.requires_grad()) x = x.detach().requires_grad_(true);
  const bool save_rng = lora_ && lora_->dropout > 0;
  if (record_routing_) routing_.clear();
  LayerInputs routed;  // a sparse layer's inputs while routing is recorded
  for (int64_t l = 0; l < cfg_.num_layers; ++l) {
    const LayerInputs* chosen = cfg_.IsSliding(l) ? &local : &global;
    if (record_routing_ && cfg_.IsSparse(l)) {
      routed = *chosen;
      routed.routing = &routing_.emplace_back();
      chosen = &routed;
    }
    const LayerInputs& in = *chosen;
    DecoderLayerImpl* layer = model->layer_list[l].get();
    if (checkpoint) {
      x = CheckpointedLayer::apply(x, reinterpret_cast<int64_t>(layer),
                                   reinterpret_cast<int64_t>(&in), save_rng);
      continue;
    }
    x = layer->forward(x, in, has_past ? &(*past)[l] : nullptr,
                       return_present ? &out.present[l] : nullptr);
    if (return_present && !cfg_.IsLinear(l)) out.present[l].pos = key_pos;
  }
  out.hidden = model->norm(x);
  work_ += attention.Work(ids.size(0));
  return out;
}

namespace {
// Positions of hidden [..., D].
int64_t Rows(const torch::Tensor& hidden) {
  return hidden.size(-1) > 0 ? hidden.numel() / hidden.size(-1) : 0;
}
}  // namespace

torch::Tensor TransformerLMImpl::Logits(const torch::Tensor& hidden) {
  auto w = lm_head ? lm_head->weight : model->embed_tokens->weight;
  work_.logit_rows += Rows(hidden);
  auto logits = torch::matmul(hidden, w.t()).to(ComputeType(hidden.scalar_type()));
  if (cfg_.final_logit_softcap > 0)
    logits = torch::tanh(logits / cfg_.final_logit_softcap) * cfg_.final_logit_softcap;
  return logits;
}

torch::Tensor TransformerLMImpl::Value(const torch::Tensor& hidden) {
  work_.value_rows += Rows(hidden);
  return value_head(hidden.to(value_head->weight.scalar_type())).squeeze(-1).to(ComputeType(hidden.scalar_type()));
}

}  // namespace rlid::policy

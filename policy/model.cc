#include "policy/model.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <cmath>

#include "core/check.h"
#include "core/error.h"

namespace rlid::policy {

// ---- config ---------------------------------------------------------------------

void ModelConfig::ApplyPreset(const std::string& name) {
  // Few wide heads: on CPU the attention matmuls are only efficient with head_dim 64
  // (measured with `rlid bench flops`: 20k vs 15k train tokens/s for 4 heads of 24).
  if (name == "tiny") {
    hidden_size = 128, intermediate_size = 384, num_layers = 2, num_heads = 2, num_kv_heads = 1,
    head_dim = 64;
  } else if (name == "small") {
    hidden_size = 192, intermediate_size = 512, num_layers = 4, num_heads = 3, num_kv_heads = 1,
    head_dim = 64;
  } else if (name == "base") {
    hidden_size = 256, intermediate_size = 768, num_layers = 6, num_heads = 4, num_kv_heads = 2,
    head_dim = 64;
  } else if (name != "custom") {
    throw ConfigError(fmt::format("unknown model preset '{}'", name), "use tiny, small, base or custom");
  }
  preset = name;
}

void ModelConfig::Load(ConfigNode n) {
  n.GetEnum("preset", preset, {"tiny", "small", "base", "custom"},
            "model size preset; the fields below override it");
  ApplyPreset(preset);
  const IntRange size = IntRange::Positive();
  n.Get("hidden_size", hidden_size, "model width D", size);
  n.Get("intermediate_size", intermediate_size, "SwiGLU hidden width", size);
  n.Get("num_layers", num_layers, "decoder layers", size);
  n.Get("num_heads", num_heads, "query heads (a multiple of num_kv_heads)", size);
  n.Get("num_kv_heads", num_kv_heads, "key/value heads (grouped-query attention)", size);
  n.Get("head_dim", head_dim, "per-head width (explicit, as in Qwen3; even)", size);
  n.Get("rope_theta", rope_theta, "RoPE base", Range::Positive());
  n.Get("rms_norm_eps", rms_norm_eps, "RMSNorm epsilon", Range::Positive());
  n.Get("qk_norm", qk_norm, "RMSNorm on queries and keys (Qwen3)");
  n.Get("attention_bias", attention_bias, "biases on q/k/v projections (Qwen2)");
  n.Get("tie_embeddings", tie_embeddings, "LM head shares the token embedding");
  n.Get("max_position", max_position, "longest sequence in tokens", size);
  try {
    Validate();
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("{}: {}", n.Where(), e.what()), e.hint());
  }
}

void ModelConfig::Validate() const {
  auto positive = [](const char* name, int64_t v) {
    if (v < 1) throw ConfigError(fmt::format("'policy.{}' must be >= 1, found {}", name, v));
  };
  positive("vocab_size", vocab_size);
  positive("hidden_size", hidden_size);
  positive("intermediate_size", intermediate_size);
  positive("num_layers", num_layers);
  positive("num_heads", num_heads);
  positive("num_kv_heads", num_kv_heads);
  positive("head_dim", head_dim);
  positive("max_position", max_position);
  auto positive_finite = [](const char* name, double v) {
    if (!(v > 0) || !std::isfinite(v))
      throw ConfigError(fmt::format("'policy.{}' must be a finite number > 0, found {}", name, v));
  };
  positive_finite("rope_theta", rope_theta);
  positive_finite("rms_norm_eps", rms_norm_eps);
  if (num_heads % num_kv_heads != 0)
    throw ConfigError(fmt::format("policy.num_heads = {} is not a multiple of num_kv_heads = {}",
                                  num_heads, num_kv_heads),
                      "grouped-query attention shares each key/value head among whole groups");
  if (head_dim % 2 != 0)
    throw ConfigError(fmt::format("policy.head_dim = {} must be even (RoPE rotates pairs)", head_dim));
}

nlohmann::json ModelConfig::ToJson() const {
  return {{"architectures", {qk_norm ? "Qwen3ForCausalLM" : "Qwen2ForCausalLM"}},
          {"model_type", qk_norm ? "qwen3" : "qwen2"},
          {"vocab_size", vocab_size},
          {"hidden_size", hidden_size},
          {"intermediate_size", intermediate_size},
          {"num_hidden_layers", num_layers},
          {"num_attention_heads", num_heads},
          {"num_key_value_heads", num_kv_heads},
          {"head_dim", head_dim},
          {"rope_theta", rope_theta},
          {"rms_norm_eps", rms_norm_eps},
          {"tie_word_embeddings", tie_embeddings},
          {"attention_bias", attention_bias},
          {"max_position_embeddings", max_position},
          {"hidden_act", "silu"},
          {"torch_dtype", "float32"},
          {"rlid_preset", preset},
          {"rlid_qk_norm", qk_norm}};
}

ModelConfig ModelConfig::FromJson(const nlohmann::json& j) {
  ModelConfig c;
  try {
    std::string type = j.value("model_type", std::string("qwen3"));
    if (type != "qwen3" && type != "qwen2" && type != "llama")
      throw ConfigError(fmt::format("unsupported model_type '{}'", type), "supported: qwen3, qwen2, llama");
    c.preset = j.value("rlid_preset", std::string("custom"));
    c.vocab_size = j.at("vocab_size").get<int64_t>();
    c.hidden_size = j.at("hidden_size").get<int64_t>();
    c.intermediate_size = j.at("intermediate_size").get<int64_t>();
    c.num_layers = j.at("num_hidden_layers").get<int64_t>();
    c.num_heads = j.at("num_attention_heads").get<int64_t>();
    c.num_kv_heads = j.value("num_key_value_heads", c.num_heads);
    // Without head_dim it is D / heads; with no heads Validate() reports num_heads.
    c.head_dim = j.contains("head_dim") && !j["head_dim"].is_null() ? j["head_dim"].get<int64_t>()
                 : c.num_heads > 0                                  ? c.hidden_size / c.num_heads
                                                                    : 0;
    if (j.contains("rope_theta")) c.rope_theta = j["rope_theta"].get<double>();
    else if (j.contains("rope_parameters")) c.rope_theta = j["rope_parameters"].value("rope_theta", 10000.0);
    c.rms_norm_eps = j.value("rms_norm_eps", 1e-6);
    c.tie_embeddings = j.value("tie_word_embeddings", false);
    c.qk_norm = j.value("rlid_qk_norm", type == "qwen3");
    c.attention_bias = j.value("attention_bias", type == "qwen2");
    c.max_position = j.value("max_position_embeddings", int64_t{4096});
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(fmt::format("bad model config.json: {}", e.what()),
                      "expected Hugging Face Qwen3/Qwen2/Llama config keys");
  }
  try {
    c.Validate();
  } catch (const ConfigError& e) {
    throw ConfigError(
        fmt::format("bad model config.json: {}", e.what()),
        "config.json names them num_hidden_layers (num_layers), num_attention_heads (num_heads), "
        "num_key_value_heads (num_kv_heads), max_position_embeddings (max_position)");
  }
  return c;
}

int64_t ModelConfig::NumParameters() const {
  int64_t attn = hidden_size * head_dim * (2 * num_heads + 2 * num_kv_heads);
  if (attention_bias) attn += head_dim * (num_heads + 2 * num_kv_heads);
  int64_t mlp = 3 * hidden_size * intermediate_size;
  int64_t norms = 2 * hidden_size + (qk_norm ? 2 * head_dim : 0);
  int64_t total = num_layers * (attn + mlp + norms) + vocab_size * hidden_size + hidden_size;
  if (!tie_embeddings) total += vocab_size * hidden_size;
  return total + hidden_size + 1;  // value head
}

ForwardCost& ForwardCost::operator+=(const ForwardCost& o) {
  calls += o.calls;
  tokens += o.tokens;
  attention_pairs += o.attention_pairs;
  logit_rows += o.logit_rows;
  value_rows += o.value_rows;
  return *this;
}

ForwardCost Difference(const ForwardCost& a, const ForwardCost& b) {
  return {a.calls - b.calls, a.tokens - b.tokens, a.attention_pairs - b.attention_pairs,
          a.logit_rows - b.logit_rows, a.value_rows - b.value_rows};
}

int64_t ModelConfig::LayerMatmulParameters() const {
  return hidden_size * head_dim * (2 * num_heads + 2 * num_kv_heads) +
         3 * hidden_size * intermediate_size;
}

double ModelConfig::ForwardFlops(const ForwardCost& c) const {
  const double L = static_cast<double>(num_layers);
  return 2.0 * L * static_cast<double>(LayerMatmulParameters()) * static_cast<double>(c.tokens) +
         4.0 * L * static_cast<double>(num_heads * head_dim) *
             static_cast<double>(c.attention_pairs) +
         2.0 * static_cast<double>(vocab_size * hidden_size) * static_cast<double>(c.logit_rows) +
         2.0 * static_cast<double>(hidden_size) * static_cast<double>(c.value_rows);
}

// ---- modules --------------------------------------------------------------------

// Reductions (norms, softmax, logits) run in float32 for float32/bf16 weights
// and in float64 when the model is float64 (gradient checks).
torch::Dtype ComputeType(torch::Dtype d) { return d == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32; }

torch::Tensor ApplyRmsNorm(const torch::Tensor& x, const torch::Tensor& w, double eps) {
  const auto ct = ComputeType(x.scalar_type());
  auto xf = x.to(ct);
  auto y = xf * torch::rsqrt(xf.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return (y * w.to(ct)).to(x.scalar_type());
}

RmsNormImpl::RmsNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RmsNormImpl::forward(const torch::Tensor& x) { return ApplyRmsNorm(x, weight, eps_); }

namespace {
torch::nn::Linear MakeLinear(int64_t in, int64_t out, bool bias) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}

torch::Tensor RotateHalf(const torch::Tensor& x) {
  auto halves = x.chunk(2, -1);
  return torch::cat({-halves[1], halves[0]}, -1);
}
}  // namespace

AttentionImpl::AttentionImpl(const ModelConfig& cfg)
    : heads_(cfg.num_heads), kv_heads_(cfg.num_kv_heads), head_dim_(cfg.head_dim) {
  q_proj = register_module("q_proj", MakeLinear(cfg.hidden_size, heads_ * head_dim_, cfg.attention_bias));
  k_proj = register_module("k_proj", MakeLinear(cfg.hidden_size, kv_heads_ * head_dim_, cfg.attention_bias));
  v_proj = register_module("v_proj", MakeLinear(cfg.hidden_size, kv_heads_ * head_dim_, cfg.attention_bias));
  o_proj = register_module("o_proj", MakeLinear(heads_ * head_dim_, cfg.hidden_size, false));
  if (cfg.qk_norm) {
    q_norm = register_module("q_norm", RmsNorm(head_dim_, cfg.rms_norm_eps));
    k_norm = register_module("k_norm", RmsNorm(head_dim_, cfg.rms_norm_eps));
  }
}

torch::Tensor AttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& cos,
                                     const torch::Tensor& sin, const torch::Tensor& mask_add,
                                     const LayerKV* past, LayerKV* kv_out) {
  const int64_t B = x.size(0), T = x.size(1), G = heads_ / kv_heads_;
  auto q = q_proj(x).view({B, T, heads_, head_dim_});
  auto k = k_proj(x).view({B, T, kv_heads_, head_dim_});
  auto v = v_proj(x).view({B, T, kv_heads_, head_dim_});
  if (q_norm) {
    q = q_norm(q);
    k = k_norm(k);
  }
  q = q.transpose(1, 2);  // [B, H, T, hd]
  k = k.transpose(1, 2);  // [B, Hkv, T, hd]
  v = v.transpose(1, 2);
  // The 1/sqrt(hd) score scale is folded into q ([B,H,T,hd]) rather than applied
  // to the much larger score tensor ([B,H,T,S]).
  q = (q * cos + RotateHalf(q) * sin) * (1.0 / std::sqrt(static_cast<double>(head_dim_)));
  k = k * cos + RotateHalf(k) * sin;
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
  const int64_t S = k.size(2);
  // Group query heads by their key/value head instead of copying K/V:
  // q [B, Hkv, G*T, hd] @ k^T [B, Hkv, hd, S] -> [B, Hkv, G, T, S].
  auto qg = q.reshape({B, kv_heads_, G * T, head_dim_});
  auto scores = torch::matmul(qg, k.transpose(2, 3)).view({B, kv_heads_, G, T, S});
  scores = scores.to(ComputeType(q.scalar_type())) + mask_add.unsqueeze(1);  // + [B|1, 1, 1, T, S]
  auto attn = torch::softmax(scores, -1).to(v.scalar_type()).view({B, kv_heads_, G * T, S});
  auto out = torch::matmul(attn, v)  // [B, Hkv, G*T, hd]
                 .view({B, heads_, T, head_dim_})
                 .transpose(1, 2)
                 .reshape({B, T, heads_ * head_dim_});
  return o_proj(out);
}

MlpImpl::MlpImpl(const ModelConfig& cfg) {
  gate_proj = register_module("gate_proj", MakeLinear(cfg.hidden_size, cfg.intermediate_size, false));
  up_proj = register_module("up_proj", MakeLinear(cfg.hidden_size, cfg.intermediate_size, false));
  down_proj = register_module("down_proj", MakeLinear(cfg.intermediate_size, cfg.hidden_size, false));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  return down_proj(torch::silu(gate_proj(x)) * up_proj(x));
}

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig& cfg) {
  self_attn = register_module("self_attn", Attention(cfg));
  mlp = register_module("mlp", Mlp(cfg));
  input_layernorm = register_module("input_layernorm", RmsNorm(cfg.hidden_size, cfg.rms_norm_eps));
  post_attention_layernorm =
      register_module("post_attention_layernorm", RmsNorm(cfg.hidden_size, cfg.rms_norm_eps));
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& cos,
                                        const torch::Tensor& sin, const torch::Tensor& mask_add,
                                        const LayerKV* past, LayerKV* kv_out) {
  auto h = x + self_attn(input_layernorm(x), cos, sin, mask_add, past, kv_out);
  return h + mlp(post_attention_layernorm(h));
}

DecoderImpl::DecoderImpl(const ModelConfig& cfg) {
  embed_tokens = register_module("embed_tokens", torch::nn::Embedding(cfg.vocab_size, cfg.hidden_size));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg.num_layers; ++i) {
    layer_list.push_back(DecoderLayer(cfg));
    layers->push_back(layer_list.back());
  }
  norm = register_module("norm", RmsNorm(cfg.hidden_size, cfg.rms_norm_eps));
}

TransformerLMImpl::TransformerLMImpl(const ModelConfig& cfg) : cfg_(cfg) {
  cfg_.Validate();
  model = register_module("model", Decoder(cfg_));
  if (!cfg_.tie_embeddings) lm_head = register_module("lm_head", MakeLinear(cfg_.hidden_size, cfg_.vocab_size, false));
  value_head = register_module("value_head", MakeLinear(cfg_.hidden_size, 1, true));
  InitWeights(0);
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
    if (is_norm) {
      cpu.fill_(1.0);
    } else if (name.find(".bias") != std::string::npos) {
      cpu.zero_();
    } else {
      bool residual_out = name.find("o_proj") != std::string::npos || name.find("down_proj") != std::string::npos;
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

ForwardOut TransformerLMImpl::forward(const torch::Tensor& ids, const torch::Tensor& positions,
                                      const torch::Tensor& mask, const PastKV* past,
                                      bool return_present) {
  RLID_CHECK_EQ(ids.dim(), 2);
  RLID_CHECK(ids.sizes() == positions.sizes(), "ids and positions differ in shape");
  const int64_t T = ids.size(1);
  const int64_t P = past && !past->empty() ? (*past)[0].k.size(2) : 0;
  RLID_CHECK_EQ(mask.size(-1), P + T, "mask key length must equal past + new tokens");
  RLID_CHECK_EQ(mask.size(-2), T);
  if (positions.numel() > 0) {
    int64_t max_pos = positions.max().item<int64_t>();
    if (max_pos >= cfg_.max_position)
      throw ConfigError(fmt::format("sequence position {} exceeds policy.max_position = {}", max_pos,
                                    cfg_.max_position),
                        "shorten prompts (hide afterstates/memory) or raise policy.max_position");
  }
  auto x = model->embed_tokens(ids);
  // RoPE tables in float32 (float64 for a float64 model), never in bf16.
  const auto ft = ComputeType(x.scalar_type());
  auto idx = torch::arange(0, cfg_.head_dim, 2, torch::TensorOptions().dtype(torch::kFloat64).device(ids.device()));
  auto inv_freq = torch::pow(cfg_.rope_theta, -idx / static_cast<double>(cfg_.head_dim)).to(ft);
  auto freqs = positions.to(ft).unsqueeze(-1) * inv_freq;  // [B, T, hd/2]
  auto emb = torch::cat({freqs, freqs}, -1).unsqueeze(1);             // [B, 1, T, hd]
  auto cos = emb.cos().to(x.scalar_type()), sin = emb.sin().to(x.scalar_type());
  // Additive mask; a finite negative keeps fully masked (padding) rows NaN-free.
  auto mask_add = torch::zeros(mask.sizes(), x.options().dtype(ComputeType(x.scalar_type())))
                      .masked_fill(mask.logical_not(), -1e9);
  ForwardOut out;
  if (return_present) out.present.resize(cfg_.num_layers);
  for (int64_t l = 0; l < cfg_.num_layers; ++l) {
    const LayerKV* lp = P > 0 ? &(*past)[l] : nullptr;
    x = model->layer_list[l]->forward(x, cos, sin, mask_add, lp,
                                      return_present ? &out.present[l] : nullptr);
  }
  out.hidden = model->norm(x);
  return out;
}

torch::Tensor TransformerLMImpl::Logits(const torch::Tensor& hidden) {
  auto w = lm_head ? lm_head->weight : model->embed_tokens->weight;
  return torch::matmul(hidden, w.t()).to(ComputeType(hidden.scalar_type()));
}

torch::Tensor TransformerLMImpl::Value(const torch::Tensor& hidden) {
  return value_head(hidden).squeeze(-1).to(ComputeType(hidden.scalar_type()));
}

}  // namespace rlid::policy

// ModelConfig: presets, [policy] keys, Hugging Face config.json in and out,
// RoPE frequencies, parameter and FLOP counts. No LibTorch here.
#include "policy/model/config.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>

#include "core/error.h"

namespace rlid::policy {
// ---- config ---------------------------------------------------------------------

namespace {

// Upper bounds on the sizes, far above any released dense decoder (Llama 3.1 405B: 126
// layers, D = 16384, SwiGLU 53248, 128 heads; Gemma 3: vocabulary 262k; Llama 4: a 10M-token
// context), so a typo or a hostile config.json is a ConfigError instead of a request for
// terabytes or a loop that never ends. Products of them stay far inside int64.
constexpr int64_t kMaxVocabSize = int64_t{1} << 22;         // 4,194,304
constexpr int64_t kMaxHiddenSize = int64_t{1} << 16;        // 65,536
constexpr int64_t kMaxIntermediateSize = int64_t{1} << 18;  // 262,144
constexpr int64_t kMaxLayers = 1024;
constexpr int64_t kMaxHeads = 1024;  // query heads and key/value heads
constexpr int64_t kMaxHeadDim = 1024;
constexpr int64_t kMaxPosition = int64_t{1} << 24;  // 16,777,216 tokens
constexpr int64_t kMaxExperts = 4096;  // DeepSeek-V3 and Qwen3-235B route over 256 and 128

}  // namespace

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
  auto size = [](int64_t max) { return IntRange::Closed(1, max); };
  n.Get("hidden_size", hidden_size, "model width D", size(kMaxHiddenSize));
  n.Get("intermediate_size", intermediate_size, "SwiGLU hidden width", size(kMaxIntermediateSize));
  n.Get("num_layers", num_layers, "decoder layers", size(kMaxLayers));
  n.Get("num_heads", num_heads, "query heads (a multiple of num_kv_heads)", size(kMaxHeads));
  n.Get("num_kv_heads", num_kv_heads, "key/value heads (grouped-query attention)",
        size(kMaxHeads));
  n.Get("head_dim", head_dim, "per-head width (explicit, as in Qwen3; even)", size(kMaxHeadDim));
  n.Get("rope_theta", rope_theta, "RoPE base", Range::Positive());
  n.Get("rms_norm_eps", rms_norm_eps, "RMSNorm epsilon", Range::Positive());
  n.Get("qk_norm", qk_norm, "RMSNorm on queries and keys (Qwen3)");
  n.Get("attention_bias", attention_bias, "biases on q/k/v projections (Qwen2)");
  n.Get("tie_embeddings", tie_embeddings, "LM head shares the token embedding");
  n.Get("max_position", max_position, "longest sequence in tokens", size(kMaxPosition));
  try {
    Validate();
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("{}: {}", n.Where(), e.what()), e.hint());
  }
}

namespace {

// Qwen3.5's linear-attention sizes.
void ValidateLinear(const ModelConfig& c) {
  if (!c.HasLinearLayers()) return;
  if (static_cast<int64_t>(c.linear.size()) != c.num_layers)
    throw ConfigError(fmt::format("{} layer types for {} layers", c.linear.size(), c.num_layers));
  for (const auto& [name, v] :
       {std::pair<const char*, int64_t>{"linear_num_key_heads", c.linear_key_heads},
        {"linear_num_value_heads", c.linear_value_heads},
        {"linear_key_head_dim", c.linear_key_dim},
        {"linear_value_head_dim", c.linear_value_dim},
        {"linear_conv_kernel_dim", c.linear_conv_kernel}}) {
    const int64_t max = std::string(name) == "linear_conv_kernel_dim" ? 64 : kMaxHeads;
    if (v < 1 || v > max)
      throw ConfigError(fmt::format("{} = {} must be in [1, {}]", name, v, max));
  }
  if (c.linear_value_heads % c.linear_key_heads != 0)
    throw ConfigError(
        fmt::format("linear_num_value_heads = {} is not a multiple of linear_num_key_heads = {}",
                    c.linear_value_heads, c.linear_key_heads),
        "each key head serves a whole group of value heads");
  if (c.linear_conv_kernel < 2)
    throw ConfigError(
        fmt::format("linear_conv_kernel_dim = {} must be >= 2", c.linear_conv_kernel));
  if (std::find(c.linear.begin(), c.linear.end(), false) == c.linear.end())
    throw ConfigError(
        "layer_types: every layer is linear_attention",
        "rlid needs at least one full_attention layer (it reads the past's length there)");
}

// Qwen3-MoE's expert sizes.
void ValidateSparse(const ModelConfig& c) {
  if (!c.HasSparseLayers()) return;
  if (static_cast<int64_t>(c.sparse.size()) != c.num_layers)
    throw ConfigError(fmt::format("{} sparse-layer flags for {} layers", c.sparse.size(), c.num_layers));
  if (c.num_experts < 1 || c.num_experts > kMaxExperts)
    throw ConfigError(fmt::format("num_experts = {} must be in [1, {}]", c.num_experts, kMaxExperts));
  if (c.experts_per_token < 1 || c.experts_per_token > c.num_experts)
    throw ConfigError(fmt::format("num_experts_per_tok = {} must be in [1, num_experts = {}]",
                                  c.experts_per_token, c.num_experts));
  if (c.moe_intermediate_size < 1 || c.moe_intermediate_size > kMaxIntermediateSize)
    throw ConfigError(fmt::format("moe_intermediate_size = {} must be in [1, {}]",
                                  c.moe_intermediate_size, kMaxIntermediateSize));
}

}  // namespace

void ModelConfig::Validate() const {
  auto positive = [](const char* name, int64_t v) {
    if (v < 1) throw ConfigError(fmt::format("'policy.{}' must be >= 1, found {}", name, v));
  };
  auto size = [&](const char* name, int64_t v, int64_t max) {
    positive(name, v);
    if (v > max) {
      throw ConfigError(fmt::format("'policy.{}' must be at most {}, found {}", name, max, v),
                        "no released model is this large; check the value (policy/model/config.cc "
                        "states the bounds)");
    }
  };
  size("vocab_size", vocab_size, kMaxVocabSize);
  size("hidden_size", hidden_size, kMaxHiddenSize);
  size("intermediate_size", intermediate_size, kMaxIntermediateSize);
  size("num_layers", num_layers, kMaxLayers);
  size("num_heads", num_heads, kMaxHeads);
  size("num_kv_heads", num_kv_heads, kMaxHeads);
  size("head_dim", head_dim, kMaxHeadDim);
  size("max_position", max_position, kMaxPosition);
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
  if (rope.type != "default" && rope.type != "linear" && rope.type != "llama3" && rope.type != "yarn")
    throw ConfigError(fmt::format("unknown rope type '{}'", rope.type), "use default, linear, llama3 or yarn");
  if (rope.type != "default") positive_finite("rope.factor", rope.factor);
  if (rope.type == "llama3") {
    positive("rope.original_max_position_embeddings", rope.original_max_position);
    positive_finite("rope.low_freq_factor", rope.low_freq_factor);
    if (!(rope.high_freq_factor > rope.low_freq_factor))
      throw ConfigError(fmt::format("rope high_freq_factor = {} must exceed low_freq_factor = {}",
                                    rope.high_freq_factor, rope.low_freq_factor));
  }
  if (rope.type == "yarn") {
    positive_finite("rope.beta_fast", rope.beta_fast);
    positive_finite("rope.beta_slow", rope.beta_slow);
  }
  if (sliding_window < 0) throw ConfigError(fmt::format("sliding_window = {} must be >= 0", sliding_window));
  if (!sliding.empty() && static_cast<int64_t>(sliding.size()) != num_layers)
    throw ConfigError(fmt::format("{} layer types for {} layers", sliding.size(), num_layers));
  if (activation != "silu" && activation != "gelu_tanh")
    throw ConfigError(fmt::format("unknown MLP activation '{}'", activation), "use silu or gelu_tanh");
  if (local_rope_theta != 0) positive_finite("local_rope_theta", local_rope_theta);
  positive_finite("embed_scale", embed_scale);
  if (query_scale != 0) positive_finite("query_scale", query_scale);
  if (final_logit_softcap != 0) positive_finite("final_logit_softcap", final_logit_softcap);
  if (!(partial_rotary > 0 && partial_rotary <= 1) || RotaryDim() < 2 || RotaryDim() % 2 != 0)
    throw ConfigError(
        fmt::format("partial_rotary_factor = {} leaves {} rotary dimensions of head_dim = {}",
                    partial_rotary, RotaryDim(), head_dim),
        "RoPE rotates an even number >= 2 of each head's dimensions");
  ValidateLinear(*this);
  ValidateSparse(*this);
}

bool ModelConfig::HasSparseLayers() const {
  return std::find(sparse.begin(), sparse.end(), true) != sparse.end();
}

bool ModelConfig::HasLinearLayers() const {
  return std::find(linear.begin(), linear.end(), true) != linear.end();
}

int64_t ModelConfig::RotaryDim() const {
  return static_cast<int64_t>(static_cast<double>(head_dim) * partial_rotary);
}

std::string ModelConfig::ModelType() const {
  if (!family.empty()) return family;
  if (qk_norm) return "qwen3";
  if (attention_bias && !output_bias) return "qwen2";
  return "llama";
}

nlohmann::json RopeScaling::ToJson(double theta) const {
  nlohmann::json j = {{"rope_type", type}, {"rope_theta", theta}};
  if (type == "default") return j;
  j["factor"] = factor;
  if (type == "llama3") {
    j["original_max_position_embeddings"] = original_max_position;
    j["low_freq_factor"] = low_freq_factor;
    j["high_freq_factor"] = high_freq_factor;
  } else if (type == "yarn") {
    if (original_max_position > 0) j["original_max_position_embeddings"] = original_max_position;
    j["beta_fast"] = beta_fast;
    j["beta_slow"] = beta_slow;
    if (attention_factor > 0) j["attention_factor"] = attention_factor;
    if (mscale > 0) j["mscale"] = mscale;
    if (mscale_all_dim > 0) j["mscale_all_dim"] = mscale_all_dim;
    j["truncate"] = truncate;
  }
  return j;
}

namespace {

// Mistral and Gemma 3 (text): the shared keys of ToJson, then their own.
nlohmann::json FamilyJson(const ModelConfig& c, nlohmann::json j) {
  j["sliding_window"] =
      c.sliding_window > 0 ? nlohmann::json(c.sliding_window) : nlohmann::json(nullptr);
  if (c.family == "mistral") return j;
  j.erase("hidden_act");
  j["hidden_activation"] = "gelu_pytorch_tanh";
  j["attention_bias"] = c.attention_bias;
  j["rope_local_base_freq"] = c.local_rope_theta;
  nlohmann::json types = nlohmann::json::array();
  for (int64_t l = 0; l < c.num_layers; ++l)
    types.push_back(c.IsSliding(l) ? "sliding_attention" : "full_attention");
  j["layer_types"] = types;
  // query_pre_attn_scalar is an integer in every released config (query_scale = its -1/2 power).
  const double scalar = 1.0 / (c.query_scale * c.query_scale);
  if (std::abs(scalar - std::round(scalar)) < 1e-6 * scalar)
    j["query_pre_attn_scalar"] = static_cast<int64_t>(std::llround(scalar));
  else
    j["query_pre_attn_scalar"] = scalar;
  j["final_logit_softcapping"] =
      c.final_logit_softcap > 0 ? nlohmann::json(c.final_logit_softcap) : nlohmann::json(nullptr);
  j["attn_logit_softcapping"] = nullptr;
  j["use_bidirectional_attention"] = false;
  return j;
}

// Qwen3.5 (text) as transformers 5 writes it: rope_parameters with the partial
// rotary factor, layer_types, the linear-attention sizes.
nlohmann::json Qwen35Json(const ModelConfig& c, nlohmann::json j) {
  nlohmann::json rope = c.rope.ToJson(c.rope_theta);
  rope["partial_rotary_factor"] = c.partial_rotary;
  j.erase("rope_theta");
  j.erase("rope_scaling");
  j["rope_parameters"] = rope;
  j["attention_bias"] = c.attention_bias;
  nlohmann::json types = nlohmann::json::array();
  for (int64_t l = 0; l < c.num_layers; ++l)
    types.push_back(c.IsLinear(l) ? "linear_attention" : "full_attention");
  j["layer_types"] = types;
  j["linear_num_key_heads"] = c.linear_key_heads;
  j["linear_num_value_heads"] = c.linear_value_heads;
  j["linear_key_head_dim"] = c.linear_key_dim;
  j["linear_value_head_dim"] = c.linear_value_dim;
  j["linear_conv_kernel_dim"] = c.linear_conv_kernel;
  return j;
}

// Qwen3-MoE as transformers writes it: Qwen3's keys, the expert sizes, and the
// dense layers as mlp_only_layers (decoder_sparse_step 1).
nlohmann::json Qwen3MoeJson(const ModelConfig& c, nlohmann::json j) {
  j["attention_bias"] = c.attention_bias;
  j["use_sliding_window"] = false;
  j["num_experts"] = c.num_experts;
  j["num_experts_per_tok"] = c.experts_per_token;
  j["moe_intermediate_size"] = c.moe_intermediate_size;
  j["norm_topk_prob"] = c.norm_topk_prob;
  j["decoder_sparse_step"] = 1;
  nlohmann::json dense = nlohmann::json::array();
  for (int64_t l = 0; l < c.num_layers; ++l)
    if (!c.IsSparse(l)) dense.push_back(l);
  j["mlp_only_layers"] = dense;
  return j;
}

}  // namespace

nlohmann::json ModelConfig::ToJson() const {
  static const std::map<std::string, std::string> kArch = {
      {"qwen3", "Qwen3ForCausalLM"},        {"qwen2", "Qwen2ForCausalLM"},
      {"llama", "LlamaForCausalLM"},        {"mistral", "MistralForCausalLM"},
      {"gemma3_text", "Gemma3ForCausalLM"}, {"qwen3_5_text", "Qwen3_5ForCausalLM"},
      {"qwen3_moe", "Qwen3MoeForCausalLM"}};
  const std::string type = ModelType();
  nlohmann::json rope_scaling = nullptr;
  if (rope.type != "default") {
    rope_scaling = rope.ToJson(rope_theta);
    rope_scaling.erase("rope_theta");
  }
  nlohmann::json j = {{"architectures", {kArch.at(type)}},
                      {"model_type", type},
                      {"vocab_size", vocab_size},
                      {"hidden_size", hidden_size},
                      {"intermediate_size", intermediate_size},
                      {"num_hidden_layers", num_layers},
                      {"num_attention_heads", num_heads},
                      {"num_key_value_heads", num_kv_heads},
                      {"head_dim", head_dim},
                      {"rope_theta", rope_theta},
                      {"rope_scaling", rope_scaling},
                      {"rms_norm_eps", rms_norm_eps},
                      {"tie_word_embeddings", tie_embeddings},
                      {"max_position_embeddings", max_position},
                      {"hidden_act", "silu"},
                      {"torch_dtype", "float32"},
                      {"rlid_preset", preset}};
  // Qwen2 always has q/k/v biases; Llama/Qwen3 put attention_bias on q/k/v/o.
  if (type == "mistral" || type == "gemma3_text") return FamilyJson(*this, std::move(j));
  if (type == "qwen3_5_text") return Qwen35Json(*this, std::move(j));
  if (type == "qwen3_moe") return Qwen3MoeJson(*this, std::move(j));
  if (type != "qwen2") j["attention_bias"] = attention_bias;
  if (type == "llama") j["mlp_bias"] = false;
  if (type != "llama") j["use_sliding_window"] = false;
  return j;
}

namespace {

// Reads an HF config.json, naming the field of any value rlid cannot run exactly.
class HfConfigReader {
 public:
  explicit HfConfigReader(const nlohmann::json& j) : j_(j) {}

  template <typename T>
  T Get(const std::string& key, const nlohmann::json& obj, const std::string& prefix,
        std::optional<T> fallback) const {
    auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) {
      if (fallback) return *fallback;
      throw ConfigError(fmt::format("model config.json lacks '{}{}'", prefix, key));
    }
    try {
      if constexpr (std::is_same_v<T, bool>) {
        if (!it->is_boolean()) throw nlohmann::json::type_error::create(302, "not a boolean", nullptr);
      } else if constexpr (std::is_arithmetic_v<T>) {
        if (!it->is_number()) throw nlohmann::json::type_error::create(302, "not a number", nullptr);
        if constexpr (std::is_integral_v<T>)
          if (!it->is_number_integer())
            throw nlohmann::json::type_error::create(302, "not an integer", nullptr);
      }
      return it->get<T>();
    } catch (const nlohmann::json::exception&) {
      throw ConfigError(fmt::format("model config.json: '{}{}' has the wrong type ({})", prefix,
                                    key, it->dump()));
    }
  }
  template <typename T>
  T Get(const std::string& key, std::optional<T> fallback = std::nullopt) const {
    return Get<T>(key, j_, "", fallback);
  }

 private:
  const nlohmann::json& j_;
};

void Unsupported(const std::string& field, const std::string& found, const std::string& hint) {
  throw ConfigError(fmt::format("model config.json: {} = {} is not supported", field, found), hint);
}

// `max_position` is what llama3 and yarn fall back to without original_max_position_embeddings.
// `partial` (Qwen3.5) receives partial_rotary_factor; without it any factor but 1 is refused.
RopeScaling ReadRope(const nlohmann::json& r, const std::string& where, const HfConfigReader& rd,
                     int64_t max_position, double* partial = nullptr) {
  RopeScaling rope;
  static const std::set<std::string> kKnown = {
      "rope_type", "type", "rope_theta", "factor", "original_max_position_embeddings",
      "low_freq_factor", "high_freq_factor", "beta_fast", "beta_slow", "attention_factor", "mscale",
      "mscale_all_dim", "truncate", "partial_rotary_factor",
      // Qwen3.5's multimodal RoPE: text positions are equal on every axis, so plain RoPE.
      "mrope_section", "mrope_interleaved"};
  const std::string pre = where + ".";
  for (auto it = r.begin(); it != r.end(); ++it)
    if (!kKnown.count(it.key()))
      Unsupported(pre + it.key(), it->dump(), "rlid implements rope types default, linear, llama3 and yarn");
  if (r.contains("rope_type") && !r["rope_type"].is_null())
    rope.type = rd.Get<std::string>("rope_type", r, pre, std::nullopt);
  else if (r.contains("type") && !r["type"].is_null())
    rope.type = rd.Get<std::string>("type", r, pre, std::nullopt);
  if (rope.type != "default" && rope.type != "linear" && rope.type != "llama3" && rope.type != "yarn")
    Unsupported(pre + "rope_type", "\"" + rope.type + "\"",
                "rlid implements rope types default, linear, llama3 and yarn");
  if (partial != nullptr) {
    *partial = rd.Get<double>("partial_rotary_factor", r, pre, *partial);
  } else {
    const double prf = rd.Get<double>("partial_rotary_factor", r, pre, 1.0);
    if (prf != 1.0)
      Unsupported(pre + "partial_rotary_factor", fmt::format("{}", prf),
                  "rlid rotates whole heads except in Qwen3.5");
  }
  if (rope.type == "default") return rope;
  rope.factor = rd.Get<double>("factor", r, pre, std::nullopt);
  if (rope.type == "llama3") {
    rope.original_max_position = rd.Get<int64_t>("original_max_position_embeddings", r, pre, max_position);
    rope.low_freq_factor = rd.Get<double>("low_freq_factor", r, pre, std::nullopt);
    rope.high_freq_factor = rd.Get<double>("high_freq_factor", r, pre, std::nullopt);
  } else if (rope.type == "yarn") {
    rope.original_max_position = rd.Get<int64_t>("original_max_position_embeddings", r, pre, max_position);
    rope.beta_fast = rd.Get<double>("beta_fast", r, pre, 32.0);
    rope.beta_slow = rd.Get<double>("beta_slow", r, pre, 1.0);
    rope.attention_factor = rd.Get<double>("attention_factor", r, pre, 0.0);
    rope.mscale = rd.Get<double>("mscale", r, pre, 0.0);
    rope.mscale_all_dim = rd.Get<double>("mscale_all_dim", r, pre, 0.0);
    rope.truncate = rd.Get<bool>("truncate", r, pre, true);
  }
  return rope;
}

// What transformers' LlamaConfig, Qwen2Config and Qwen3Config assume for a key
// config.json leaves out; 0 = derived (num_attention_heads, hidden_size / heads).
struct FamilyDefaults {
  int64_t num_kv_heads;
  int64_t head_dim;
  int64_t max_position;
  bool tie_embeddings = false;
};

const FamilyDefaults& DefaultsOf(const std::string& model_type) {
  static const std::map<std::string, FamilyDefaults> kDefaults = {
      {"llama", {0, 0, 2048}},
      {"qwen2", {32, 0, 32768}},
      {"qwen3", {32, 128, 32768}},
      {"mistral", {8, 0, 131072}},
      {"gemma3_text", {4, 256, 131072, true}},
      {"qwen3_5_text", {4, 256, 32768}},
      {"qwen3_moe", {4, 0, 32768}}};
  return kDefaults.at(model_type);
}

}  // namespace

namespace {

// What rlid's decoder does not implement is refused by its config.json name
// (MoE, sliding windows, other layer types and activations, MLP biases).
void RejectUnsupported(const nlohmann::json& j, HfConfigReader& rd, const std::string& type) {
  static const std::set<std::string> kTypes = {"qwen3",       "qwen2",        "llama",    "mistral",
                                               "gemma3_text", "qwen3_5_text", "qwen3_moe"};
  if (!kTypes.count(type))
    Unsupported("model_type", "\"" + type + "\"",
                "rlid runs qwen3, qwen2, llama, mistral, gemma3_text, qwen3_5 (text) and qwen3_moe "
                "decoders");
  if (type != "qwen3_moe")
    for (const char* moe : {"num_experts", "num_local_experts", "n_routed_experts", "moe_intermediate_size"})
      if (j.contains(moe) && !j[moe].is_null() && !(j[moe].is_number() && j[moe].get<double>() == 0))
        Unsupported(moe, j[moe].dump(), "of the mixture-of-experts families rlid runs qwen3_moe");
  if (type == "qwen3_moe" && j.contains("shared_expert_intermediate_size"))
    Unsupported("shared_expert_intermediate_size", j["shared_expert_intermediate_size"].dump(),
                "Qwen3-MoE has no shared expert (Qwen2-MoE's are not supported)");
  if (rd.Get<bool>("use_sliding_window", false))
    Unsupported("use_sliding_window", "true", "rlid attends over the full context; set it to false");
  if (type == "gemma3_text") {
    const std::string act = rd.Get<std::string>("hidden_activation", std::string("gelu_pytorch_tanh"));
    if (act != "gelu_pytorch_tanh" && act != "gelu_tanh")
      Unsupported("hidden_activation", "\"" + act + "\"", "rlid's Gemma 3 MLP is GeGLU (gelu_pytorch_tanh)");
    if (rd.Get<double>("attn_logit_softcapping", 0.0) != 0.0)
      Unsupported("attn_logit_softcapping", j["attn_logit_softcapping"].dump(),
                  "rlid's attention has no score soft-capping (Gemma 3 releases set none)");
    if (rd.Get<bool>("use_bidirectional_attention", false))
      Unsupported("use_bidirectional_attention", "true", "rlid's decoder is causal");
    return;  // layer_types: read with the sliding window
  }
  if (j.contains("layer_types") && j["layer_types"].is_array() && type != "qwen3_5_text")
    for (const auto& t : j["layer_types"])
      if (t != "full_attention")
        Unsupported("layer_types", t.dump(), "only full_attention layers are supported");
  const std::string act = rd.Get<std::string>("hidden_act", std::string("silu"));
  if (act != "silu") Unsupported("hidden_act", "\"" + act + "\"", "rlid's MLP is SwiGLU (silu)");
  if (rd.Get<bool>("mlp_bias", false)) Unsupported("mlp_bias", "true", "rlid's MLP has no biases");
  if (rd.Get<int64_t>("pretraining_tp", int64_t{1}) != 1)
    Unsupported("pretraining_tp", j["pretraining_tp"].dump(), "set it to 1 (it only changes rounding)");
}

// Sizes and divisors by their config.json names, checked before anything
// divides by them; num_key_value_heads and head_dim fall back as transformers does.
void ReadSizes(const nlohmann::json& j, HfConfigReader& rd, const FamilyDefaults& defaults,
               ModelConfig& c) {
  c.vocab_size = rd.Get<int64_t>("vocab_size");
  c.hidden_size = rd.Get<int64_t>("hidden_size");
  c.intermediate_size = rd.Get<int64_t>("intermediate_size");
  c.num_layers = rd.Get<int64_t>("num_hidden_layers");
  c.num_heads = rd.Get<int64_t>("num_attention_heads");
  // Absent: the family's default; null: num_attention_heads (as transformers does).
  const bool kv_absent = !j.contains("num_key_value_heads") && defaults.num_kv_heads > 0;
  c.num_kv_heads = rd.Get<int64_t>("num_key_value_heads", kv_absent ? defaults.num_kv_heads : c.num_heads);
  // Sizes and divisors by their config.json names, before anything divides by them.
  struct SizeField {
    const char* field;
    int64_t value, max;
  };
  for (const auto& [field, v, max] :
       {SizeField{"vocab_size", c.vocab_size, kMaxVocabSize},
        SizeField{"hidden_size", c.hidden_size, kMaxHiddenSize},
        SizeField{"intermediate_size", c.intermediate_size, kMaxIntermediateSize},
        SizeField{"num_hidden_layers", c.num_layers, kMaxLayers},
        SizeField{"num_attention_heads", c.num_heads, kMaxHeads},
        SizeField{"num_key_value_heads", c.num_kv_heads, kMaxHeads}}) {
    if (v < 1)
      throw ConfigError(fmt::format("config.json: {} = {} must be >= 1", field, v),
                        "config.json is damaged or does not describe a decoder language model");
    if (v > max)
      throw ConfigError(fmt::format("config.json: {} = {} exceeds the {} rlid allows", field, v, max),
                        "no released model is this large; config.json is damaged or hostile");
  }
  if (c.num_heads % c.num_kv_heads != 0)
    throw ConfigError(fmt::format("config.json: num_attention_heads = {} is not a multiple of "
                                  "num_key_value_heads = {}",
                                  c.num_heads, c.num_kv_heads));
  // Without head_dim it is D / heads (Qwen3: 128).
  c.head_dim = rd.Get<int64_t>("head_dim", defaults.head_dim ? defaults.head_dim : c.hidden_size / c.num_heads);
  if (c.head_dim < 1) throw ConfigError(fmt::format("config.json: head_dim = {} must be >= 1", c.head_dim));
}

// max_position_embeddings and the rotary embedding: rope_parameters (current
// layout) or top-level rope_theta + rope_scaling (older); partial rotary is refused.
void ReadGemmaRope(const nlohmann::json& j, HfConfigReader& rd, ModelConfig& c);

void ReadPositions(const nlohmann::json& j, HfConfigReader& rd, const FamilyDefaults& defaults,
                   const std::string& type, ModelConfig& c) {
  c.max_position = rd.Get<int64_t>("max_position_embeddings", defaults.max_position);
  if (type == "gemma3_text") return ReadGemmaRope(j, rd, c);
  // Qwen3.5 rotates a partial_rotary_factor of each head (0.25 unless stated),
  // read from the rope parameters or the top level.
  const bool partial = type == "qwen3_5_text";
  if (partial) c.partial_rotary = rd.Get<double>("partial_rotary_factor", 0.25);
  double* partial_out = partial ? &c.partial_rotary : nullptr;
  // Current layout: rope_parameters {rope_theta, rope_type, ...}; older: top-level
  // rope_theta and rope_scaling (null or {rope_type | type, ...}).
  if (j.contains("rope_parameters") && !j["rope_parameters"].is_null()) {
    const auto& r = j["rope_parameters"];
    if (!r.is_object()) Unsupported("rope_parameters", r.dump(), "expected an object");
    c.rope = ReadRope(r, "rope_parameters", rd, c.max_position, partial_out);
    c.rope_theta = rd.Get<double>("rope_theta", r, "rope_parameters.",
                                  rd.Get<double>("rope_theta", 10000.0));
  } else {
    c.rope_theta = rd.Get<double>("rope_theta", 10000.0);
    if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
      if (!j["rope_scaling"].is_object()) Unsupported("rope_scaling", j["rope_scaling"].dump(), "expected an object");
      c.rope = ReadRope(j["rope_scaling"], "rope_scaling", rd, c.max_position, partial_out);
    }
  }
  // A top-level original_max_position_embeddings (Phi-3 style) overrides the rope
  // parameters' in transformers (standardize_rope_params), so it does here.
  if (c.rope.type == "llama3" || c.rope.type == "yarn")
    c.rope.original_max_position = rd.Get<int64_t>("original_max_position_embeddings", c.rope.original_max_position);
  // transformers also reads a top-level partial_rotary_factor (moving it into the rope
  // parameters); rlid rotates whole heads, so anything else would silently change the model.
  if (partial) return;
  const double partial_rotary = rd.Get<double>("partial_rotary_factor", 1.0);
  if (partial_rotary != 1.0)
    Unsupported("partial_rotary_factor", fmt::format("{}", partial_rotary),
                "rlid rotates the whole head (partial rotary embeddings are not implemented)");
}

// q/k norm and attention biases: by family, or as an rlid config before 0.2 stated them.
void ReadAttentionFlags(const nlohmann::json& j, HfConfigReader& rd, const std::string& type,
                        ModelConfig& c) {
  c.qk_norm = type == "qwen3" || type == "gemma3_text" || type == "qwen3_5_text" || type == "qwen3_moe";
  if (type == "mistral") return;  // no biases (transformers ignores attention_bias there)
  if (type == "qwen3_5_text") {   // q/k/v and o all carry attention_bias
    c.attention_bias = c.output_bias = rd.Get<bool>("attention_bias", false);
    return;
  }
  if (j.contains("rlid_qk_norm")) {  // written by rlid before 0.2: flags stated explicitly
    c.qk_norm = rd.Get<bool>("rlid_qk_norm");
    c.attention_bias = rd.Get<bool>("attention_bias", false);
  } else if (type == "qwen2") {
    c.attention_bias = true;  // Qwen2's q/k/v always carry biases, o_proj never
  } else {
    c.attention_bias = c.output_bias = rd.Get<bool>("attention_bias", false);
  }
}

// Gemma 3: one rope per kind of layer. Current layout: rope_parameters
// {"full_attention": {...}, "sliding_attention": {...}}; older: top-level rope_theta +
// rope_scaling (global layers) and rope_local_base_freq (sliding ones, never scaled).
void ReadGemmaRope(const nlohmann::json& j, HfConfigReader& rd, ModelConfig& c) {
  c.rope_theta = 1e6, c.local_rope_theta = 1e4;  // Gemma3TextConfig's defaults
  if (j.contains("rope_parameters") && !j["rope_parameters"].is_null()) {
    const auto& r = j["rope_parameters"];
    if (!r.is_object()) Unsupported("rope_parameters", r.dump(), "expected an object");
    for (auto it = r.begin(); it != r.end(); ++it)
      if (it.key() != "full_attention" && it.key() != "sliding_attention")
        Unsupported("rope_parameters." + it.key(), it->dump(),
                    "Gemma 3's rope parameters are keyed by layer type (full_attention, sliding_attention)");
    if (r.contains("full_attention") && r["full_attention"].is_object()) {
      c.rope = ReadRope(r["full_attention"], "rope_parameters.full_attention", rd, c.max_position);
      c.rope_theta = rd.Get<double>("rope_theta", r["full_attention"], "rope_parameters.full_attention.", 1e6);
    }
    if (r.contains("sliding_attention") && r["sliding_attention"].is_object()) {
      const auto local = ReadRope(r["sliding_attention"], "rope_parameters.sliding_attention", rd, c.max_position);
      if (local.type != "default")
        Unsupported("rope_parameters.sliding_attention.rope_type", "\"" + local.type + "\"",
                    "rlid's sliding layers use unscaled RoPE, as Gemma 3 releases do");
      c.local_rope_theta =
          rd.Get<double>("rope_theta", r["sliding_attention"], "rope_parameters.sliding_attention.", 1e4);
    }
  } else {
    c.rope_theta = rd.Get<double>("rope_theta", 1e6);
    c.local_rope_theta = rd.Get<double>("rope_local_base_freq", 1e4);
    if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
      if (!j["rope_scaling"].is_object()) Unsupported("rope_scaling", j["rope_scaling"].dump(), "expected an object");
      c.rope = ReadRope(j["rope_scaling"], "rope_scaling", rd, c.max_position);
    }
  }
  const double partial_rotary = rd.Get<double>("partial_rotary_factor", 1.0);
  if (partial_rotary != 1.0)
    Unsupported("partial_rotary_factor", fmt::format("{}", partial_rotary),
                "rlid rotates the whole head (partial rotary embeddings are not implemented)");
}

// A hybrid family's layer_types as flags: true for `other` layers, false for
// full_attention ones. Without layer_types every `interval_key`-th layer is
// full (transformers' default: `interval`).
struct LayerKinds {
  const char* family;        // "Gemma 3", in messages
  const char* other;         // "sliding_attention" | "linear_attention"
  const char* interval_key;  // "sliding_window_pattern" | "full_attention_interval"
  int64_t interval;
};

std::vector<bool> ReadLayerKinds(const nlohmann::json& j, HfConfigReader& rd, int64_t layers,
                                 const LayerKinds& k) {
  std::vector<bool> flags;
  if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    const auto& t = j["layer_types"];
    if (!t.is_array() || static_cast<int64_t>(t.size()) != layers)
      Unsupported("layer_types", t.dump().substr(0, 120),
                  fmt::format("one of {} / full_attention per layer", k.other));
    for (const auto& x : t) {
      if (x != k.other && x != "full_attention")
        Unsupported("layer_types", x.dump(),
                    fmt::format("{}'s layers are {} or full_attention", k.family, k.other));
      flags.push_back(x == k.other);
    }
    return flags;
  }
  const int64_t interval = rd.Get<int64_t>(k.interval_key, k.interval);
  if (interval < 1) Unsupported(k.interval_key, std::to_string(interval), "a whole number >= 1");
  for (int64_t l = 0; l < layers; ++l) flags.push_back((l + 1) % interval != 0);
  return flags;
}

// Mistral: every layer slides (sliding_window null: none does). Gemma 3 (text):
// layer_types (or every sliding_window_pattern-th layer global), (1 + w) norms
// with sandwich norms, sqrt(D)-scaled embeddings, GeGLU, query_pre_attn_scalar,
// final-logit soft-capping.
void ReadQwen35(const nlohmann::json& j, HfConfigReader& rd, ModelConfig& c);
void ReadQwen3Moe(const nlohmann::json& j, HfConfigReader& rd, ModelConfig& c);

void ReadFamily(const nlohmann::json& j, HfConfigReader& rd, const std::string& type, ModelConfig& c) {
  if (type == "qwen3_5_text") return ReadQwen35(j, rd, c);
  if (type == "qwen3_moe") return ReadQwen3Moe(j, rd, c);
  if (type != "mistral" && type != "gemma3_text") return;
  c.family = type;
  const bool absent = !j.contains("sliding_window");
  c.sliding_window = absent ? 4096 : rd.Get<int64_t>("sliding_window", int64_t{0});
  if (c.sliding_window < 0 || (!absent && j["sliding_window"].is_number() && c.sliding_window == 0))
    Unsupported("sliding_window", j["sliding_window"].dump(), "a window of at least one token");
  if (type == "mistral") {
    c.sliding.assign(c.num_layers, c.sliding_window > 0);
    return;
  }
  c.sliding = ReadLayerKinds(j, rd, c.num_layers,
                             {"Gemma 3", "sliding_attention", "sliding_window_pattern", 6});
  if (c.sliding_window == 0 && std::find(c.sliding.begin(), c.sliding.end(), true) != c.sliding.end())
    Unsupported("sliding_window", "null", "sliding_attention layers need a window");
  c.unit_offset_norm = c.sandwich_norm = true;
  c.embed_scale = std::sqrt(static_cast<double>(c.hidden_size));
  c.activation = "gelu_tanh";
  const double scalar = rd.Get<double>("query_pre_attn_scalar", 256.0);
  if (!(scalar > 0)) Unsupported("query_pre_attn_scalar", fmt::format("{}", scalar), "a positive number");
  c.query_scale = 1.0 / std::sqrt(scalar);
  c.final_logit_softcap = rd.Get<double>("final_logit_softcapping", 0.0);
  if (c.final_logit_softcap < 0)
    Unsupported("final_logit_softcapping", fmt::format("{}", c.final_logit_softcap), "null or > 0");
}

// Qwen3.5 (text): layer_types (or every full_attention_interval-th layer full),
// the linear-attention sizes (Qwen3_5TextConfig's defaults), (1 + w) norms and
// the attention output gate.
void ReadQwen35(const nlohmann::json& j, HfConfigReader& rd, ModelConfig& c) {
  c.family = "qwen3_5_text";
  c.linear = ReadLayerKinds(j, rd, c.num_layers,
                            {"Qwen3.5", "linear_attention", "full_attention_interval", 4});
  c.linear_key_heads = rd.Get<int64_t>("linear_num_key_heads", int64_t{16});
  c.linear_value_heads = rd.Get<int64_t>("linear_num_value_heads", int64_t{32});
  c.linear_key_dim = rd.Get<int64_t>("linear_key_head_dim", int64_t{128});
  c.linear_value_dim = rd.Get<int64_t>("linear_value_head_dim", int64_t{128});
  c.linear_conv_kernel = rd.Get<int64_t>("linear_conv_kernel_dim", int64_t{4});
  c.unit_offset_norm = true;
  c.attn_output_gate = true;
}

// Qwen3-MoE: num_experts (transformers 5 writes num_local_experts) experts of
// moe_intermediate_size, top num_experts_per_tok; layer l is sparse unless it is in
// mlp_only_layers or (l + 1) is not a multiple of decoder_sparse_step (Qwen3MoeConfig's
// defaults otherwise). router_aux_loss_coef is read by nobody: rlid adds no balancing loss.
void ReadQwen3Moe(const nlohmann::json& j, HfConfigReader& rd, ModelConfig& c) {
  c.family = "qwen3_moe";
  c.num_experts = rd.Get<int64_t>("num_experts", rd.Get<int64_t>("num_local_experts", int64_t{128}));
  c.experts_per_token = rd.Get<int64_t>("num_experts_per_tok", int64_t{8});
  c.moe_intermediate_size = rd.Get<int64_t>("moe_intermediate_size", int64_t{768});
  c.norm_topk_prob = rd.Get<bool>("norm_topk_prob", false);
  const int64_t step = rd.Get<int64_t>("decoder_sparse_step", int64_t{1});
  if (step < 1) Unsupported("decoder_sparse_step", std::to_string(step), "a whole number >= 1");
  std::set<int64_t> dense;
  if (j.contains("mlp_only_layers") && !j["mlp_only_layers"].is_null()) {
    const auto& m = j["mlp_only_layers"];
    if (!m.is_array()) Unsupported("mlp_only_layers", m.dump(), "a list of layer indices");
    for (const auto& l : m) {
      if (!l.is_number_integer() || l.get<int64_t>() < 0 || l.get<int64_t>() >= c.num_layers)
        Unsupported("mlp_only_layers", l.dump(), fmt::format("layer indices in [0, {})", c.num_layers));
      dense.insert(l.get<int64_t>());
    }
  }
  c.sparse.assign(c.num_layers, false);
  for (int64_t l = 0; l < c.num_layers; ++l)
    c.sparse[l] = c.num_experts > 0 && !dense.count(l) && (l + 1) % step == 0;
  if (!c.HasSparseLayers()) c.sparse.clear();
}

// A Qwen3_5ForConditionalGeneration config.json: the text model's config
// (text_config; tie_word_embeddings falls back to the top level). The vision
// tower's weights are skipped when loading (checkpoint.cc).
nlohmann::json TextConfigOf(const nlohmann::json& j) {
  if (!j.contains("model_type") || j["model_type"] != "qwen3_5") return j;
  if (!j.contains("text_config") || !j["text_config"].is_object())
    throw ConfigError(
        "model config.json: model_type \"qwen3_5\" without a text_config object",
        "a Qwen3.5 checkpoint's config.json holds its language model under text_config");
  nlohmann::json text = j["text_config"];
  if (!text.contains("model_type")) text["model_type"] = "qwen3_5_text";
  for (const char* key : {"tie_word_embeddings", "dtype", "torch_dtype"})
    if (!text.contains(key) && j.contains(key)) text[key] = j[key];
  return text;
}

}  // namespace

ModelConfig ModelConfig::FromJson(const nlohmann::json& outer) {
  if (!outer.is_object()) throw ConfigError("model config.json is not a JSON object");
  const nlohmann::json j = TextConfigOf(outer);
  ModelConfig c;
  HfConfigReader rd(j);
  const std::string type = rd.Get<std::string>("model_type", std::string("qwen3"));
  RejectUnsupported(j, rd, type);
  c.preset = rd.Get<std::string>("rlid_preset", std::string("custom"));
  const FamilyDefaults& defaults = DefaultsOf(type);
  ReadSizes(j, rd, defaults, c);
  ReadPositions(j, rd, defaults, type, c);
  c.rms_norm_eps = rd.Get<double>("rms_norm_eps", 1e-6);
  c.tie_embeddings = rd.Get<bool>("tie_word_embeddings", defaults.tie_embeddings);
  ReadAttentionFlags(j, rd, type, c);
  ReadFamily(j, rd, type, c);
  c.source_dtype = rd.Get<std::string>("dtype", rd.Get<std::string>("torch_dtype", std::string("float32")));
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

std::vector<double> ModelConfig::RopeInvFreq() const {
  const int64_t half = RotaryDim() / 2;
  const double dim = static_cast<double>(RotaryDim());
  std::vector<double> inv(half);
  for (int64_t i = 0; i < half; ++i) inv[i] = std::pow(rope_theta, -2.0 * i / dim);
  if (rope.type == "linear") {
    for (auto& f : inv) f /= rope.factor;
  } else if (rope.type == "llama3") {
    // Wavelengths longer than the original context are interpolated, shorter
    // ones kept, and the band between blended smoothly.
    const double old_len = static_cast<double>(rope.original_max_position);
    const double low_wavelen = old_len / rope.low_freq_factor;
    const double high_wavelen = old_len / rope.high_freq_factor;
    for (auto& f : inv) {
      const double wavelen = 2.0 * M_PI / f;
      if (wavelen > low_wavelen) {
        f /= rope.factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth =
            (old_len / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor);
        f = (1.0 - smooth) * f / rope.factor + smooth * f;
      }
    }
  } else if (rope.type == "yarn") {
    const double orig = static_cast<double>(rope.original_max_position > 0 ? rope.original_max_position
                                                                           : max_position);
    auto correction_dim = [&](double rotations) {
      return dim * std::log(orig / (rotations * 2.0 * M_PI)) / (2.0 * std::log(rope_theta));
    };
    double low = correction_dim(rope.beta_fast), high = correction_dim(rope.beta_slow);
    if (rope.truncate) low = std::floor(low), high = std::ceil(high);
    low = std::max(low, 0.0), high = std::min(high, dim - 1);
    if (low == high) high += 0.001;
    for (int64_t i = 0; i < half; ++i) {
      const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
      const double extrapolation = 1.0 - ramp;  // weight of the unscaled frequency
      inv[i] = inv[i] / rope.factor * (1.0 - extrapolation) + inv[i] * extrapolation;
    }
  }
  return inv;
}

std::vector<double> ModelConfig::LocalRopeInvFreq() const {
  if (local_rope_theta <= 0) return RopeInvFreq();
  std::vector<double> inv(head_dim / 2);
  for (int64_t i = 0; i < head_dim / 2; ++i)
    inv[i] = std::pow(local_rope_theta, -2.0 * i / static_cast<double>(head_dim));
  return inv;
}

double ModelConfig::RopeAttentionScale() const {
  if (rope.type != "yarn") return 1.0;
  if (rope.attention_factor > 0) return rope.attention_factor;
  auto mscale = [&](double m) { return rope.factor <= 1 ? 1.0 : 0.1 * m * std::log(rope.factor) + 1.0; };
  if (rope.mscale > 0 && rope.mscale_all_dim > 0) return mscale(rope.mscale) / mscale(rope.mscale_all_dim);
  return mscale(1.0);
}

int64_t ModelConfig::NumParameters() const {
  int64_t total = vocab_size * hidden_size + hidden_size;  // embedding, final norm
  for (int64_t l = 0; l < num_layers; ++l) {
    total += LayerMatmulParameters(l, /*all_experts=*/true) + (sandwich_norm ? 4 : 2) * hidden_size;
    if (IsLinear(l)) {  // conv, dt_bias, A_log, gated norm
      total +=
          LinearConvChannels() * linear_conv_kernel + 2 * linear_value_heads + linear_value_dim;
      continue;
    }
    if (attention_bias)
      total += head_dim * ((attn_output_gate ? 2 : 1) * num_heads + 2 * num_kv_heads);
    if (output_bias) total += hidden_size;
    if (qk_norm) total += 2 * head_dim;
  }
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

int64_t ModelConfig::LayerMatmulParameters(int64_t layer, bool all_experts) const {
  int64_t mlp = 3 * hidden_size * intermediate_size;
  if (IsSparse(layer))  // the router, then the experts
    mlp = hidden_size * num_experts +
          (all_experts ? num_experts : experts_per_token) * 3 * hidden_size * moe_intermediate_size;
  if (IsLinear(layer)) {
    const int64_t values = linear_value_heads * linear_value_dim;
    // in_proj_qkv, in_proj_z, in_proj_b, in_proj_a, out_proj
    return hidden_size * (LinearConvChannels() + values + 2 * linear_value_heads) +
           values * hidden_size + mlp;
  }
  return hidden_size * head_dim * ((attn_output_gate ? 3 : 2) * num_heads + 2 * num_kv_heads) + mlp;
}

double ModelConfig::ForwardFlops(const ForwardCost& c) const {
  double matmul = 0, full = 0, linear_layers = 0;
  for (int64_t l = 0; l < num_layers; ++l) {
    matmul += static_cast<double>(LayerMatmulParameters(l));
    (IsLinear(l) ? linear_layers : full) += 1.0;
  }
  const double state = static_cast<double>(linear_value_heads * linear_key_dim * linear_value_dim);
  return 2.0 * matmul * static_cast<double>(c.tokens) +
         6.0 * linear_layers * state * static_cast<double>(c.tokens) +
         4.0 * full * static_cast<double>(num_heads * head_dim) *
             static_cast<double>(c.attention_pairs) +
         2.0 * static_cast<double>(vocab_size * hidden_size) * static_cast<double>(c.logit_rows) +
         2.0 * static_cast<double>(hidden_size) * static_cast<double>(c.value_rows);
}

}  // namespace rlid::policy

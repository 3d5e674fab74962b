#include "policy/model/model.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <optional>
#include <set>

#include "core/check.h"
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

void ModelConfig::Validate() const {
  auto positive = [](const char* name, int64_t v) {
    if (v < 1) throw ConfigError(fmt::format("'policy.{}' must be >= 1, found {}", name, v));
  };
  auto size = [&](const char* name, int64_t v, int64_t max) {
    positive(name, v);
    if (v > max) {
      throw ConfigError(fmt::format("'policy.{}' must be at most {}, found {}", name, max, v),
                        "no released model is this large; check the value (policy/model/model.cc "
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
}

std::string ModelConfig::ModelType() const {
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

nlohmann::json ModelConfig::ToJson() const {
  static const std::map<std::string, std::string> kArch = {
      {"qwen3", "Qwen3ForCausalLM"}, {"qwen2", "Qwen2ForCausalLM"}, {"llama", "LlamaForCausalLM"}};
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
RopeScaling ReadRope(const nlohmann::json& r, const std::string& where, const HfConfigReader& rd,
                     int64_t max_position) {
  RopeScaling rope;
  static const std::set<std::string> kKnown = {
      "rope_type", "type", "rope_theta", "factor", "original_max_position_embeddings",
      "low_freq_factor", "high_freq_factor", "beta_fast", "beta_slow", "attention_factor",
      "mscale", "mscale_all_dim", "truncate", "partial_rotary_factor"};
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
  const double prf = rd.Get<double>("partial_rotary_factor", r, pre, 1.0);
  if (prf != 1.0)
    Unsupported(pre + "partial_rotary_factor", fmt::format("{}", prf), "rlid rotates the whole head");
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
};

const FamilyDefaults& DefaultsOf(const std::string& model_type) {
  static const std::map<std::string, FamilyDefaults> kDefaults = {
      {"llama", {0, 0, 2048}}, {"qwen2", {32, 0, 32768}}, {"qwen3", {32, 128, 32768}}};
  return kDefaults.at(model_type);
}

}  // namespace

namespace {

// What rlid's decoder does not implement is refused by its config.json name
// (MoE, sliding windows, other layer types and activations, MLP biases).
void RejectUnsupported(const nlohmann::json& j, HfConfigReader& rd, const std::string& type) {
  if (type != "qwen3" && type != "qwen2" && type != "llama")
    Unsupported("model_type", "\"" + type + "\"",
                "rlid runs qwen3, qwen2 and llama decoders (MoE variants are not supported)");
  for (const char* moe : {"num_experts", "num_local_experts", "n_routed_experts", "moe_intermediate_size"})
    if (j.contains(moe) && !j[moe].is_null() && !(j[moe].is_number() && j[moe].get<double>() == 0))
      Unsupported(moe, j[moe].dump(), "mixture-of-experts models are not supported");
  if (rd.Get<bool>("use_sliding_window", false))
    Unsupported("use_sliding_window", "true", "rlid attends over the full context; set it to false");
  if (j.contains("layer_types") && j["layer_types"].is_array())
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
void ReadPositions(const nlohmann::json& j, HfConfigReader& rd, const FamilyDefaults& defaults,
                   ModelConfig& c) {
  c.max_position = rd.Get<int64_t>("max_position_embeddings", defaults.max_position);
  // Current layout: rope_parameters {rope_theta, rope_type, ...}; older: top-level
  // rope_theta and rope_scaling (null or {rope_type | type, ...}).
  if (j.contains("rope_parameters") && !j["rope_parameters"].is_null()) {
    const auto& r = j["rope_parameters"];
    if (!r.is_object()) Unsupported("rope_parameters", r.dump(), "expected an object");
    c.rope = ReadRope(r, "rope_parameters", rd, c.max_position);
    c.rope_theta = rd.Get<double>("rope_theta", r, "rope_parameters.",
                                  rd.Get<double>("rope_theta", 10000.0));
  } else {
    c.rope_theta = rd.Get<double>("rope_theta", 10000.0);
    if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
      if (!j["rope_scaling"].is_object()) Unsupported("rope_scaling", j["rope_scaling"].dump(), "expected an object");
      c.rope = ReadRope(j["rope_scaling"], "rope_scaling", rd, c.max_position);
    }
  }
  // A top-level original_max_position_embeddings (Phi-3 style) overrides the rope
  // parameters' in transformers (standardize_rope_params), so it does here.
  if (c.rope.type == "llama3" || c.rope.type == "yarn")
    c.rope.original_max_position = rd.Get<int64_t>("original_max_position_embeddings", c.rope.original_max_position);
  // transformers also reads a top-level partial_rotary_factor (moving it into the rope
  // parameters); rlid rotates whole heads, so anything else would silently change the model.
  const double partial_rotary = rd.Get<double>("partial_rotary_factor", 1.0);
  if (partial_rotary != 1.0)
    Unsupported("partial_rotary_factor", fmt::format("{}", partial_rotary),
                "rlid rotates the whole head (partial rotary embeddings are not implemented)");
}

// q/k norm and attention biases: by family, or as an rlid config before 0.2 stated them.
void ReadAttentionFlags(const nlohmann::json& j, HfConfigReader& rd, const std::string& type,
                        ModelConfig& c) {
  c.qk_norm = type == "qwen3";
  if (j.contains("rlid_qk_norm")) {  // written by rlid before 0.2: flags stated explicitly
    c.qk_norm = rd.Get<bool>("rlid_qk_norm");
    c.attention_bias = rd.Get<bool>("attention_bias", false);
  } else if (type == "qwen2") {
    c.attention_bias = true;  // Qwen2's q/k/v always carry biases, o_proj never
  } else {
    c.attention_bias = c.output_bias = rd.Get<bool>("attention_bias", false);
  }
}

}  // namespace

ModelConfig ModelConfig::FromJson(const nlohmann::json& j) {
  if (!j.is_object()) throw ConfigError("model config.json is not a JSON object");
  ModelConfig c;
  HfConfigReader rd(j);
  const std::string type = rd.Get<std::string>("model_type", std::string("qwen3"));
  RejectUnsupported(j, rd, type);
  c.preset = rd.Get<std::string>("rlid_preset", std::string("custom"));
  const FamilyDefaults& defaults = DefaultsOf(type);
  ReadSizes(j, rd, defaults, c);
  ReadPositions(j, rd, defaults, c);
  c.rms_norm_eps = rd.Get<double>("rms_norm_eps", 1e-6);
  c.tie_embeddings = rd.Get<bool>("tie_word_embeddings", false);
  ReadAttentionFlags(j, rd, type, c);
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
  const int64_t half = head_dim / 2;
  const double dim = static_cast<double>(head_dim);
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

double ModelConfig::RopeAttentionScale() const {
  if (rope.type != "yarn") return 1.0;
  if (rope.attention_factor > 0) return rope.attention_factor;
  auto mscale = [&](double m) { return rope.factor <= 1 ? 1.0 : 0.1 * m * std::log(rope.factor) + 1.0; };
  if (rope.mscale > 0 && rope.mscale_all_dim > 0) return mscale(rope.mscale) / mscale(rope.mscale_all_dim);
  return mscale(1.0);
}

int64_t ModelConfig::NumParameters() const {
  int64_t attn = hidden_size * head_dim * (2 * num_heads + 2 * num_kv_heads);
  if (attention_bias) attn += head_dim * (num_heads + 2 * num_kv_heads);
  if (output_bias) attn += hidden_size;
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

RmsNormImpl::RmsNormImpl(int64_t dim, double eps, torch::Dtype dtype) : eps_(eps) {
  weight = register_parameter("weight", torch::empty({dim}, torch::TensorOptions().dtype(dtype)));
}

torch::Tensor RmsNormImpl::forward(const torch::Tensor& x) { return ApplyRmsNorm(x, weight, eps_); }

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
    : heads_(cfg.num_heads), kv_heads_(cfg.num_kv_heads), head_dim_(cfg.head_dim) {
  q_proj = register_module("q_proj", MakeLinear(cfg.hidden_size, heads_ * head_dim_, cfg.attention_bias, dt));
  k_proj = register_module("k_proj", MakeLinear(cfg.hidden_size, kv_heads_ * head_dim_, cfg.attention_bias, dt));
  v_proj = register_module("v_proj", MakeLinear(cfg.hidden_size, kv_heads_ * head_dim_, cfg.attention_bias, dt));
  o_proj = register_module("o_proj", MakeLinear(heads_ * head_dim_, cfg.hidden_size, cfg.output_bias, dt));
  if (cfg.qk_norm) {
    q_norm = register_module("q_norm", RmsNorm(head_dim_, cfg.rms_norm_eps, dt));
    k_norm = register_module("k_norm", RmsNorm(head_dim_, cfg.rms_norm_eps, dt));
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
  // softmax(q k^T + mask) v through LibTorch's fused attention (flash/memory-
  // efficient kernels on CPU and CUDA, the math kernel otherwise): q [B, H, T, hd],
  // k, v [B, Hkv, S, hd], the additive mask [B|1, 1, T, S]; grouped-query heads
  // share their K/V head without copies (enable_gqa). q already carries the scale.
  auto out = at::scaled_dot_product_attention(q, k, v, mask_add.to(q.scalar_type()),
                                              /*dropout_p=*/0.0, /*is_causal=*/false,
                                              /*scale=*/1.0, /*enable_gqa=*/G > 1);
  return o_proj(out.transpose(1, 2).reshape({B, T, heads_ * head_dim_}));
}

MlpImpl::MlpImpl(const ModelConfig& cfg, torch::Dtype dt) {
  gate_proj = register_module("gate_proj", MakeLinear(cfg.hidden_size, cfg.intermediate_size, false, dt));
  up_proj = register_module("up_proj", MakeLinear(cfg.hidden_size, cfg.intermediate_size, false, dt));
  down_proj = register_module("down_proj", MakeLinear(cfg.intermediate_size, cfg.hidden_size, false, dt));
}

torch::Tensor MlpImpl::forward(const torch::Tensor& x) {
  return down_proj(torch::silu(gate_proj(x)) * up_proj(x));
}

DecoderLayerImpl::DecoderLayerImpl(const ModelConfig& cfg, torch::Dtype dt) {
  self_attn = register_module("self_attn", Attention(cfg, dt));
  mlp = register_module("mlp", Mlp(cfg, dt));
  input_layernorm = register_module("input_layernorm", RmsNorm(cfg.hidden_size, cfg.rms_norm_eps, dt));
  post_attention_layernorm =
      register_module("post_attention_layernorm", RmsNorm(cfg.hidden_size, cfg.rms_norm_eps, dt));
}

torch::Tensor DecoderLayerImpl::forward(const torch::Tensor& x, const torch::Tensor& cos,
                                        const torch::Tensor& sin, const torch::Tensor& mask_add,
                                        const LayerKV* past, LayerKV* kv_out) {
  auto h = x + self_attn(input_layernorm(x), cos, sin, mask_add, past, kv_out);
  return h + mlp(post_attention_layernorm(h));
}

DecoderImpl::DecoderImpl(const ModelConfig& cfg, torch::Dtype dt) {
  embed_tokens = register_module("embed_tokens", Embedding(cfg.vocab_size, cfg.hidden_size, dt));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < cfg.num_layers; ++i) {
    layer_list.push_back(DecoderLayer(cfg, dt));
    layers->push_back(layer_list.back());
  }
  norm = register_module("norm", RmsNorm(cfg.hidden_size, cfg.rms_norm_eps, dt));
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
struct CheckpointedLayer : public torch::autograd::Function<CheckpointedLayer> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, torch::Tensor x, torch::Tensor cos,
                               torch::Tensor sin, torch::Tensor mask_add, int64_t layer, bool save_rng) {
    ctx->save_for_backward({x, cos, sin, mask_add});
    ctx->saved_data["layer"] = layer;
    if (save_rng) ctx->saved_data["rng"] = CpuRngState();
    t_checkpointed_forward = true;
    struct Reset {
      ~Reset() { t_checkpointed_forward = false; }
    } reset;
    return reinterpret_cast<DecoderLayerImpl*>(layer)->forward(x, cos, sin, mask_add, nullptr, nullptr);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad) {
    const auto saved = ctx->get_saved_variables();
    auto* layer = reinterpret_cast<DecoderLayerImpl*>(ctx->saved_data["layer"].toInt());
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
      y = layer->forward(x, saved[1], saved[2], saved[3], nullptr, nullptr);
      if (rng) SetCpuRngState(now);
    }
    torch::autograd::backward({y}, {grad[0]});
    return {x.grad(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

TransformerLMImpl::TransformerLMImpl(const ModelConfig& cfg, torch::Dtype dtype, bool initialise)
    : cfg_(cfg) {
  cfg_.Validate();
  inv_freq_ = cfg_.RopeInvFreq();
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

ForwardOut TransformerLMImpl::forward(const torch::Tensor& ids, const torch::Tensor& positions,
                                      const AttentionMask& attention, const PastKV* past,
                                      bool return_present) {
  const torch::Tensor& mask = attention.mask;
  RLID_CHECK_EQ(ids.dim(), 2);
  RLID_CHECK(ids.sizes() == positions.sizes(), "ids and positions differ in shape");
  const int64_t T = ids.size(1);
  const int64_t P = past && !past->empty() ? (*past)[0].k.size(2) : 0;
  RLID_CHECK_EQ(mask.size(-1), P + T, "mask key length must equal past + new tokens");
  RLID_CHECK_EQ(mask.size(-2), T);
  if (positions.is_cpu() && positions.numel() > 0) CheckPosition(positions.max().item<int64_t>());
  auto x = model->embed_tokens(ids);
  // RoPE tables in float32 (float64 for a float64 model), never in bf16.
  const auto ft = ComputeType(x.scalar_type());
  if (!inv_freq_on_device_.defined() || inv_freq_on_device_.device() != ids.device() ||
      inv_freq_on_device_.scalar_type() != ft) {
    c10::InferenceMode normal_tensor(false);  // also usable by autograd when made during sampling
    inv_freq_on_device_ =
        torch::tensor(inv_freq_, torch::TensorOptions().dtype(torch::kFloat64)).to(ids.device(), ft);
  }
  const auto& inv_freq = inv_freq_on_device_;
  auto freqs = positions.to(ft).unsqueeze(-1) * inv_freq;  // [B, T, hd/2]
  auto emb = torch::cat({freqs, freqs}, -1).unsqueeze(1);   // [B, 1, T, hd]
  auto cos = emb.cos(), sin = emb.sin();
  if (rope_scale_ != 1.0) cos = cos * rope_scale_, sin = sin * rope_scale_;
  cos = cos.to(x.scalar_type()), sin = sin.to(x.scalar_type());
  // Additive mask; a finite negative keeps fully masked (padding) rows NaN-free.
  auto mask_add = torch::zeros(mask.sizes(), x.options().dtype(ComputeType(x.scalar_type())))
                      .masked_fill(mask.logical_not(), -1e9);
  ForwardOut out;
  if (return_present) out.present.resize(cfg_.num_layers);
  const bool checkpoint = checkpointing_ && is_training() && torch::GradMode::is_enabled() && P == 0 &&
                          !return_present;
  if (checkpoint) {
    // The first layer's input must require grad for the layers' backward to run
    // at all (the frozen embedding gives it none).
    if (!x.requires_grad()) x = x.detach().requires_grad_(true);
    const bool save_rng = lora_ && lora_->dropout > 0;
    for (int64_t l = 0; l < cfg_.num_layers; ++l)
      x = CheckpointedLayer::apply(x, cos, sin, mask_add,
                                   reinterpret_cast<int64_t>(model->layer_list[l].get()), save_rng);
  } else {
    for (int64_t l = 0; l < cfg_.num_layers; ++l) {
      const LayerKV* lp = P > 0 ? &(*past)[l] : nullptr;
      x = model->layer_list[l]->forward(x, cos, sin, mask_add, lp,
                                        return_present ? &out.present[l] : nullptr);
    }
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
  return torch::matmul(hidden, w.t()).to(ComputeType(hidden.scalar_type()));
}

torch::Tensor TransformerLMImpl::Value(const torch::Tensor& hidden) {
  work_.value_rows += Rows(hidden);
  return value_head(hidden.to(value_head->weight.scalar_type())).squeeze(-1).to(ComputeType(hidden.scalar_type()));
}

}  // namespace rlid::policy

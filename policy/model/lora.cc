#include "policy/model/lora.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include "core/check.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/json_file.h"
#include "policy/model/safetensors.h"

namespace rlid::policy {
namespace fs = std::filesystem;

namespace {

// Attention, MLP and (Qwen3.5) linear-attention projections.
const std::vector<std::string>& KnownTargets() {
  static const std::vector<std::string> k = LoraConfig().target_modules;
  return k;
}
constexpr const char* kTargetList =
    "q_proj k_proj v_proj o_proj gate_proj up_proj down_proj, and for Qwen3.5's linear attention "
    "in_proj_qkv in_proj_z in_proj_b in_proj_a out_proj";

// The adapted projections of a model, by parameter prefix ("model.layers.0.self_attn.q_proj").
std::vector<std::pair<std::string, LinearImpl*>> Projections(TransformerLM& model,
                                                              const std::vector<std::string>& targets) {
  std::vector<std::pair<std::string, LinearImpl*>> out;
  for (const auto& m : model->named_modules("", /*include_self=*/false)) {
    const std::string& name = m.key();
    if (name.rfind("model.layers.", 0) != 0) continue;
    const auto dot = name.rfind('.');
    const std::string leaf = name.substr(dot + 1);
    if (std::find(targets.begin(), targets.end(), leaf) == targets.end()) continue;
    auto* lin = dynamic_cast<LinearImpl*>(m.value().get());
    if (lin != nullptr) out.emplace_back(name, lin);
  }
  return out;
}

}  // namespace

// Far above useful ranks (LoRA's are 4-256; a rank above a projection's width adds nothing),
// so a hostile value is a ConfigError, not an allocation of terabytes.
constexpr int64_t kMaxRank = 16384;

void LoraConfig::Load(ConfigNode n) {
  n.Get("rank", rank, "LoRA rank r (0 = no adapters: every weight trains)",
        IntRange::Closed(0, kMaxRank));
  n.Get("alpha", alpha, "LoRA alpha; the adapter output is scaled by alpha / rank", Range::Positive());
  n.Get("dropout", dropout,
        "dropout on the adapter input, in gradient forwards only (rollouts and the PPO "
        "old log-probs never drop)",
        Range::Unit().OpenHigh());
  n.Get("target_modules", target_modules,
        "projections that get adapters (those the model has): any of q_proj k_proj v_proj o_proj "
        "gate_proj up_proj down_proj in_proj_qkv in_proj_z in_proj_b in_proj_a out_proj");
  if (enabled()) {
    try {
      Validate();
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("{}: {}", n.Where("target_modules"), e.what()), e.hint());
    }
  }
}

void LoraConfig::Validate() const {
  if (rank <= 0) throw ConfigError(fmt::format("policy.lora.rank must be >= 1, found {}", rank));
  if (rank > kMaxRank)
    throw ConfigError(fmt::format("policy.lora.rank must be at most {}, found {}", kMaxRank, rank),
                      "LoRA ranks are typically 4 to 256");
  if (!(alpha > 0)) throw ConfigError(fmt::format("policy.lora.alpha must be > 0, found {}", alpha));
  if (!(dropout >= 0 && dropout < 1))
    throw ConfigError(fmt::format("policy.lora.dropout must be in [0, 1), found {}", dropout));
  if (target_modules.empty())
    throw ConfigError("policy.lora.target_modules is empty",
                      fmt::format("name at least one of {}", kTargetList));
  std::set<std::string> seen;
  for (const auto& t : target_modules) {
    if (std::find(KnownTargets().begin(), KnownTargets().end(), t) == KnownTargets().end())
      throw ConfigError(fmt::format("policy.lora.target_modules: unknown module '{}'", t),
                        fmt::format("use any of {}", kTargetList));
    if (!seen.insert(t).second)
      throw ConfigError(fmt::format("policy.lora.target_modules names '{}' twice", t));
  }
}

std::vector<std::string> PresentTargets(TransformerLM& model,
                                        const std::vector<std::string>& targets) {
  const auto projections = Projections(model, targets);
  std::vector<std::string> out;
  for (const auto& t : targets)
    for (const auto& [name, lin] : projections)
      if (name.size() > t.size() &&
          name.compare(name.size() - t.size() - 1, t.size() + 1, "." + t) == 0) {
        out.push_back(t);
        break;
      }
  return out;
}

void AttachLora(TransformerLM& model, const LoraConfig& cfg, uint64_t seed) {
  cfg.Validate();
  if (model->lora())
    throw ConfigError(fmt::format("the model already has LoRA adapters (rank {})", model->lora()->rank),
                      "leave [policy.lora] unset to keep training the adapters of policy.init");
  // The targets this model has (Qwen3.5's linear-attention projections exist there only).
  LoraConfig attached = cfg;
  attached.target_modules = PresentTargets(model, cfg.target_modules);
  if (attached.target_modules.empty())
    throw ConfigError(
        fmt::format("policy.lora.target_modules = [{}] names no projection of this model",
                    fmt::join(cfg.target_modules, ", ")),
        fmt::format("use any of {}", kTargetList));
  torch::NoGradGuard no_grad;
  for (auto& p : model->parameters()) p.set_requires_grad(false);
  const auto dtype = ComputeType(model->dtype());
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (auto& [name, lin] : Projections(model, cfg.target_modules)) {
    lin->AddAdapter(cfg.rank, cfg.scale(), cfg.dropout, dtype);
    const double bound = 1.0 / std::sqrt(static_cast<double>(lin->weight.size(1)));
    auto a = torch::empty(lin->lora_A->weight.sizes(), torch::kFloat64).uniform_(-bound, bound, gen);
    lin->lora_A->weight.copy_(a);
    lin->lora_B->weight.zero_();
  }
  for (auto& p : model->value_head->parameters()) p.set_requires_grad(true);
  model->set_lora(attached);
}

void ForEachMergedParameter(TransformerLM& model,
                            const std::function<void(const std::string&, const torch::Tensor&)>& fn,
                            bool include_value_head) {
  std::map<std::string, LinearImpl*> adapted;
  if (model->lora())
    for (auto& [name, lin] : Projections(model, model->lora()->target_modules))
      if (lin->has_adapter()) adapted[name + ".weight"] = lin;
  torch::NoGradGuard no_grad;
  for (const auto& p : model->named_parameters()) {
    const std::string& name = p.key();
    if (name.find(".lora_A.") != std::string::npos || name.find(".lora_B.") != std::string::npos) continue;
    if (!include_value_head && name.rfind("value_head.", 0) == 0) continue;
    auto it = adapted.find(name);
    fn(name, it == adapted.end() ? p.value().detach() : it->second->MergedWeight());
  }
}

TransformerLM ShareBaseWeights(TransformerLM& model) {
  TransformerLM ref(model->config(), model->dtype(), /*initialise=*/false);
  ref->to(model->device());
  torch::NoGradGuard no_grad;
  auto src = model->named_parameters();
  for (auto& p : ref->named_parameters()) {
    const torch::Tensor* s = src.find(p.key());
    RLID_CHECK(s != nullptr, "ShareBaseWeights: no parameter '{}'", p.key());
    if (p.key().rfind("value_head.", 0) == 0) {
      p.value().set_data(s->detach().clone());
    } else {
      p.value().set_data(s->detach());  // the same storage
    }
    p.value().set_requires_grad(false);
  }
  ref->eval();
  return ref;
}

bool IsAdapterDirectory(const std::string& dir) {
  return fs::exists(fs::path(dir) / "adapter_config.json");
}

namespace {

// "'<dir>/adapter_config.json': <field> <why>" as a ConfigError.
struct AdapterConfigError {
  std::string path;
  ConfigError operator()(const std::string& field, const std::string& why,
                         const std::string& hint = "") const {
    return ConfigError(fmt::format("'{}': {} {}", path, field, why), hint);
  }
};

// Every PEFT setting that would make the adapter compute something other than
// plain LoRA (x W^T + s B A x on the listed modules) is refused by name.
void RejectUnsupportedPeft(const nlohmann::json& j, const AdapterConfigError& bad) {
  if (j.value("peft_type", std::string("LORA")) != "LORA")
    throw bad("peft_type", fmt::format("= {} (rlid reads LoRA adapters only)", j["peft_type"].dump()));
  auto flag = [&](const char* key) { return j.contains(key) && j[key].is_boolean() && j[key].get<bool>(); };
  if (flag("use_dora")) throw bad("use_dora", "= true: DoRA adapters are not supported");
  if (flag("use_rslora")) throw bad("use_rslora", "= true: rank-stabilised scaling is not supported");
  if (flag("fan_in_fan_out")) throw bad("fan_in_fan_out", "= true applies to GPT-2 Conv1D layers only");
  if (j.contains("bias") && j["bias"] != "none") throw bad("bias", fmt::format("= {}: only \"none\" is supported", j["bias"].dump()));
  for (const char* key : {"modules_to_save", "layers_to_transform", "layers_pattern"})
    if (j.contains(key) && !j[key].is_null() && !(j[key].is_array() && j[key].empty()))
      throw bad(key, fmt::format("= {} is not supported", j[key].dump()));
  for (const char* key : {"rank_pattern", "alpha_pattern"})
    if (j.contains(key) && !j[key].is_null() && !j[key].empty())
      throw bad(key, "(per-module ranks or alphas) is not supported");
  // PEFT fields that change what the adapted model computes, beyond x W^T + s B A x: the LoRA
  // variants (aLoRA's offsets, BD-LoRA, Arrow routing, KaSA, MonteCLoRA, VeLoRA), a bias on
  // lora_B, other layers, replicated layers, trainable token rows and adapted parameters. Any
  // value but absent/null/false/empty is refused, so none of them is silently ignored.
  for (const char* key : {"alora_invocation_tokens", "use_bdlora", "arrow_config", "kasa_config",
                          "monteclora_config", "velora_config", "lora_bias", "use_qalora",
                          "exclude_modules", "layer_replication", "trainable_token_indices",
                          "target_parameters"}) {
    if (!j.contains(key)) continue;
    const auto& v = j[key];
    if (v.is_null() || (v.is_boolean() && !v.get<bool>()) || ((v.is_array() || v.is_object()) && v.empty()))
      continue;
    throw bad(key, fmt::format("= {} is not supported (rlid computes plain LoRA only)", v.dump()));
  }
  // PEFT's from_pretrained re-runs the initialisation, and these rewrite the base weights
  // (W - s B A for PiSSA/OLoRA/CorDA, LoRA-GA's offset, LoftQ's quantisation) or are a variant
  // (MiCA); true, false, "gaussian", "eva" and "orthogonal" only draw A and B, which the file
  // then overwrites.
  if (j.contains("init_lora_weights") && j["init_lora_weights"].is_string()) {
    const std::string init = j["init_lora_weights"].get<std::string>();
    if (init != "gaussian" && init != "eva" && init != "orthogonal")
      throw bad("init_lora_weights",
                fmt::format("= \"{}\": PEFT changes the base weights when it loads such an adapter", init),
                "save it from PEFT with save_pretrained(..., path_initial_model_for_weight_conversion=...), "
                "which writes a plain LoRA adapter of the original base");
  }
}

// target_modules: "all-linear" or a list of (possibly full) module names; an
// entry counts for its last component, in KnownTargets' order.
void ReadTargetModules(const nlohmann::json& j, const AdapterConfigError& bad, LoraConfig& c) {
  const auto& t = j.at("target_modules");
  c.target_modules.clear();
  if (t.is_string()) {
    if (t.get<std::string>() != "all-linear")
      throw bad("target_modules", fmt::format("= {}: a regular expression is not supported", t.dump()),
                "list the modules (q_proj, k_proj, ...)");
    c.target_modules = KnownTargets();
  } else {
    // PEFT matches a module when its name equals an entry or ends with "." + entry, and
    // save_pretrained writes "all-linear" as the full names ("model.layers.0.self_attn.q_proj").
    // An entry counts for its last component here; LoadAdapterWeights checks that the entries
    // select that projection in every layer, as rlid adapts it.
    for (const auto& m : t) {
      c.peft_target_modules.push_back(m.get<std::string>());
      std::string leaf = c.peft_target_modules.back();
      leaf = leaf.substr(leaf.rfind('.') + 1);
      if (std::find(c.target_modules.begin(), c.target_modules.end(), leaf) == c.target_modules.end())
        c.target_modules.push_back(leaf);
    }
    std::sort(c.target_modules.begin(), c.target_modules.end(), [](const auto& a, const auto& b) {
      auto pos = [](const std::string& s) {
        return std::find(KnownTargets().begin(), KnownTargets().end(), s) - KnownTargets().begin();
      };
      return pos(a) < pos(b);
    });
  }
}

}  // namespace

LoraConfig ReadAdapterConfig(const std::string& dir) {
  const fs::path path = fs::path(dir) / "adapter_config.json";
  const nlohmann::json j = ReadJsonFile(path);
  const AdapterConfigError bad{path.string()};
  if (!j.is_object()) throw bad("the file", "is not a JSON object");
  RejectUnsupportedPeft(j, bad);
  LoraConfig c;
  try {
    if (!j.at("r").is_number_integer()) throw bad("r", fmt::format("= {} is not an integer", j["r"].dump()));
    c.rank = j.at("r").get<int64_t>();
    c.alpha = j.at("lora_alpha").get<double>();
    c.dropout = j.value("lora_dropout", 0.0);
    ReadTargetModules(j, bad, c);
    c.base_model = j.value("base_model_name_or_path", std::string());
  } catch (const nlohmann::json::exception& e) {
    throw bad("a field", fmt::format("is missing or mistyped: {}", e.what()),
              "an adapter_config.json needs r, lora_alpha and target_modules");
  }
  try {
    c.Validate();
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("'{}': {}", path.string(), e.what()), e.hint());
  }
  return c;
}

void SaveAdapter(const std::string& dir, TransformerLM& model) {
  RLID_CHECK(model->lora().has_value(), "SaveAdapter: the model has no adapters");
  const LoraConfig& c = *model->lora();
  TensorMap tensors;
  for (const auto& p : model->named_parameters())
    if (p.key().find(".lora_A.") != std::string::npos || p.key().find(".lora_B.") != std::string::npos)
      tensors[kPeftPrefix + p.key()] = p.value().detach().to(torch::kFloat32);
  SaveSafetensors((fs::path(dir) / "adapter_model.safetensors").string(), tensors, {{"format", "pt"}});
  // The fields PEFT's LoraConfig reads, with the values that make it compute what rlid does.
  nlohmann::json j = {{"peft_type", "LORA"},
                      {"task_type", "CAUSAL_LM"},
                      {"base_model_name_or_path", c.base_model},
                      {"r", c.rank},
                      {"lora_alpha", c.alpha},
                      {"lora_dropout", c.dropout},
                      {"target_modules", c.target_modules},
                      {"bias", "none"},
                      {"fan_in_fan_out", false},
                      {"use_rslora", false},
                      {"use_dora", false},
                      {"init_lora_weights", true},
                      {"inference_mode", true},
                      {"modules_to_save", nullptr},
                      {"layers_to_transform", nullptr},
                      {"layers_pattern", nullptr},
                      {"rank_pattern", nlohmann::json::object()},
                      {"alpha_pattern", nlohmann::json::object()},
                      {"revision", nullptr}};
  WriteWholeFile((fs::path(dir) / "adapter_config.json").string(), j.dump(2) + "\n",
                 "adapter config");
}

void LoadAdapterWeights(const std::string& dir, TransformerLM& model) {
  RLID_CHECK(model->lora().has_value(), "LoadAdapterWeights: the model has no adapters");
  const std::string path = (fs::path(dir) / "adapter_model.safetensors").string();
  if (!fs::exists(path))
    throw IoError(fmt::format("'{}' is missing", path),
                  "an adapter directory needs adapter_model.safetensors (PEFT's save_pretrained "
                  "writes it)");
  // The entries of target_modules as written (ReadAdapterConfig kept them whole in
  // peft_target_modules): each adapted projection must be one they select.
  const std::vector<std::string>& entries = model->lora()->peft_target_modules;
  const fs::path config_path = fs::path(dir) / "adapter_config.json";
  auto selected = [&](const std::string& module) {
    return std::any_of(entries.begin(), entries.end(), [&](const std::string& e) {
      return module == e || (module.size() > e.size() && module.ends_with(e) &&
                             module[module.size() - e.size() - 1] == '.');
    });
  };
  SafetensorsReader reader(path);
  torch::NoGradGuard no_grad;
  std::set<std::string> used;
  for (auto& p : model->named_parameters()) {
    const auto lora_at = std::min(p.key().find(".lora_A."), p.key().find(".lora_B."));
    if (lora_at == std::string::npos) continue;
    const std::string module = p.key().substr(0, lora_at);
    if (!entries.empty() && !selected(module))
      throw ConfigError(fmt::format("'{}': target_modules selects {} in some layers only, not '{}'",
                                    config_path.string(), module.substr(module.rfind('.') + 1), module),
                        "rlid adapts a projection in every layer or in none");
    const std::string file_name = kPeftPrefix + p.key();
    const auto* e = reader.Find(file_name);
    if (e == nullptr)
      throw ConfigError(fmt::format("'{}' lacks tensor '{}'", path, file_name),
                        "adapter_config.json's r and target_modules do not match the file");
    if (e->shape != p.value().sizes().vec())
      throw ConfigError(fmt::format("'{}': tensor '{}' has shape {}, the adapter config needs {}", path,
                                    file_name, c10::str(c10::IntArrayRef(e->shape)),
                                    c10::str(p.value().sizes())),
                        "adapter_config.json and adapter_model.safetensors disagree");
    reader.ReadInto(file_name, p.value());
    used.insert(file_name);
  }
  for (const auto& [name, e] : reader.entries())
    if (!used.count(name))
      throw ConfigError(fmt::format("'{}' has tensor '{}' that the adapter config does not use", path, name),
                        "rlid reads lora_A/lora_B of the projections in target_modules only");
}

}  // namespace rlid::policy

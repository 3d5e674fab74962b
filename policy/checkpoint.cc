#include "policy/checkpoint.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>

#include "core/error.h"
#include "core/log.h"
#include "policy/safetensors.h"

namespace rlid::policy {
namespace fs = std::filesystem;

namespace {

void WriteText(const fs::path& p, const std::string& text) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  if (!out) throw IoError(fmt::format("cannot write '{}'", p.string()));
  out << text;
  out.flush();
  if (!out) throw IoError(fmt::format("write failed for '{}' (disk full?)", p.string()));
}

nlohmann::json ReadJson(const fs::path& p) {
  std::ifstream in(p);
  if (!in) throw IoError(fmt::format("cannot open '{}'", p.string()));
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw IoError(fmt::format("'{}' is not valid JSON: {}", p.string(), e.what()));
  }
}

std::string NowIso() {
  auto t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

}  // namespace

void SaveCheckpoint(const std::string& dir, TransformerLM& model, const Tokenizer& tokenizer,
                    const nlohmann::json& extra,
                    const std::function<void(const std::string& tmp_dir)>& write_more) {
  fs::path target(dir);
  if (target.has_parent_path()) fs::create_directories(target.parent_path());
  fs::path tmp = target.string() + fmt::format(".tmp-{}", getpid());
  std::error_code ec;
  fs::remove_all(tmp, ec);
  if (!fs::create_directories(tmp, ec) && ec)
    throw IoError(fmt::format("cannot create '{}': {}", tmp.string(), ec.message()));
  TensorMap tensors;
  for (const auto& p : model->named_parameters()) tensors[p.key()] = p.value().to(torch::kFloat32);
  SaveSafetensors((tmp / "model.safetensors").string(), tensors, {{"format", "pt"}});
  WriteText(tmp / "config.json", model->config().ToJson().dump(2));
  tokenizer.SaveDirectory(tmp.string());
  nlohmann::json meta = {{"format", "rlid-checkpoint"},
                         {"format_version", kCheckpointFormatVersion},
                         {"code_version", VersionString()},
                         {"created", NowIso()},
                         {"tokenizer_fingerprint", fmt::format("{:016x}", tokenizer.Fingerprint())},
                         {"extra", extra}};
  if (write_more) write_more(tmp.string());
  WriteText(tmp / "rlid.json", meta.dump(2));
  // Publish: move any old checkpoint aside, rename, then delete the old one.
  fs::path old = target.string() + fmt::format(".old-{}", getpid());
  if (fs::exists(target)) {
    fs::rename(target, old, ec);
    if (ec) throw IoError(fmt::format("cannot replace '{}': {}", dir, ec.message()));
  }
  fs::rename(tmp, target, ec);
  if (ec) throw IoError(fmt::format("cannot publish checkpoint '{}': {}", dir, ec.message()));
  fs::remove_all(old, ec);
}

namespace {

// The safetensors files of a model directory and which one holds each tensor.
struct WeightFiles {
  std::vector<std::unique_ptr<SafetensorsReader>> readers;
  std::map<std::string, const SafetensorsReader*> owner;  // tensor -> file
};

WeightFiles OpenWeights(const fs::path& root) {
  WeightFiles w;
  auto add = [&](const fs::path& file) {
    w.readers.push_back(std::make_unique<SafetensorsReader>(file.string()));
    for (const auto& [name, e] : w.readers.back()->entries()) {
      auto [it, fresh] = w.owner.emplace(name, w.readers.back().get());
      if (!fresh)
        throw IoError(fmt::format("tensor '{}' is in both '{}' and '{}'", name, it->second->path(),
                                  file.string()));
    }
  };
  if (fs::exists(root / "model.safetensors")) {
    add(root / "model.safetensors");
    return w;
  }
  const fs::path index = root / "model.safetensors.index.json";
  if (!fs::exists(index))
    throw IoError(fmt::format("'{}' has neither model.safetensors nor model.safetensors.index.json",
                              root.string()),
                  "rlid reads Hugging Face safetensors checkpoints (convert .bin files with "
                  "transformers' save_pretrained(safe_serialization=True))");
  const nlohmann::json j = ReadJson(index);
  if (!j.contains("weight_map") || !j["weight_map"].is_object())
    throw IoError(fmt::format("'{}' has no \"weight_map\" object", index.string()));
  std::set<std::string> files;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it->is_string())
      throw IoError(fmt::format("'{}': weight_map[\"{}\"] is not a file name", index.string(), it.key()));
    const std::string f = it->get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      throw IoError(fmt::format("'{}': weight_map[\"{}\"] = \"{}\" is not a file in the directory",
                                index.string(), it.key(), f));
    files.insert(f);
  }
  for (const auto& f : files) add(root / f);
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    auto found = w.owner.find(it.key());
    if (found == w.owner.end() || fs::path(found->second->path()).filename() != it->get<std::string>())
      throw IoError(fmt::format("'{}' maps '{}' to '{}', which does not hold it", index.string(),
                                it.key(), it->get<std::string>()),
                    "the index and the shards disagree; the download is incomplete or damaged");
  }
  return w;
}

// Tensors HF files may carry that rlid's model has no parameter for.
bool IgnorableTensor(const std::string& name, const ModelConfig& cfg) {
  if (name == "lm_head.weight" && cfg.tie_embeddings) return true;  // tied: HF ignores it too
  return name.size() > 21 && name.compare(name.size() - 21, 21, "rotary_emb.inv_freq") == 0;
}

}  // namespace

LoadedCheckpoint LoadCheckpoint(const std::string& dir, torch::Device device, const LoadOptions& opt) {
  fs::path root(dir);
  if (!fs::is_directory(root))
    throw IoError(
        fmt::format("checkpoint '{}' is not a directory", dir),
        "pass a directory written by `rlid sft`/`rlid train` (runs/<run>/checkpoints/...) or a "
        "Hugging Face model directory");
  LoadedCheckpoint out;
  out.dir = dir;
  if (fs::exists(root / "rlid.json")) {
    out.meta = ReadJson(root / "rlid.json");
    int version = out.meta.value("format_version", -1);
    if (version > kCheckpointFormatVersion)
      throw ConfigError(
          fmt::format("checkpoint '{}' has format version {}, newer than this rlid ({})", dir,
                      version, kCheckpointFormatVersion),
          "upgrade rlid to load it");
    if (version < 1)
      throw IoError(fmt::format("checkpoint '{}': rlid.json has no valid format_version", dir));
  }
  ModelConfig cfg;
  try {
    out.hf_config = ReadJson(root / "config.json");
    cfg = ModelConfig::FromJson(out.hf_config);
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("checkpoint '{}': {}", dir, e.what()), e.hint());
  }
  out.has_tokenizer = fs::exists(root / "tokenizer.json");
  if (out.has_tokenizer) {
    out.tokenizer = Tokenizer::FromDirectory(root.string());
    if (out.tokenizer.VocabSize() > cfg.vocab_size)
      throw ConfigError(fmt::format("checkpoint '{}': tokenizer has {} ids but the model only {}",
                                    dir, out.tokenizer.VocabSize(), cfg.vocab_size));
  } else if (opt.require_tokenizer) {
    throw IoError(fmt::format("checkpoint '{}' has no tokenizer.json", dir),
                  "copy the model's tokenizer.json into the directory (commands that take token "
                  "ids, such as `rlid policy logits`, do not need one)");
  }
  WeightFiles weights = OpenWeights(root);
  for (const auto& r : weights.readers) out.weight_files.push_back(r->path());
  out.model = TransformerLM(cfg, opt.dtype, /*initialise=*/false);
  torch::NoGradGuard no_grad;
  std::vector<std::string> missing;
  std::set<std::string> used;
  for (auto& p : out.model->named_parameters()) {
    auto it = weights.owner.find(p.key());
    if (it == weights.owner.end()) {
      if (p.key().rfind("value_head.", 0) == 0) {
        p.value().zero_();  // HF checkpoints have no value head
        continue;
      }
      missing.push_back(p.key());
      continue;
    }
    used.insert(p.key());
    const auto* e = it->second->Find(p.key());
    if (e->shape != p.value().sizes().vec())
      throw ConfigError(
          fmt::format("checkpoint '{}': tensor '{}' has shape {} but config.json needs {}", dir,
                      p.key(), c10::str(c10::IntArrayRef(e->shape)), c10::str(p.value().sizes())),
          "config.json and the safetensors files disagree; the checkpoint is damaged");
    if (!c10::isFloatingType(e->dtype))
      throw ConfigError(fmt::format("checkpoint '{}': tensor '{}' is {}, not a float tensor", dir,
                                    p.key(), e->dtype_name));
    it->second->ReadInto(p.key(), p.value());
  }
  if (!missing.empty())
    throw ConfigError(fmt::format("checkpoint '{}' lacks {} tensor(s) the config needs, e.g. '{}'",
                                  dir, missing.size(), missing.front()),
                      "config.json describes a different architecture than the weights");
  for (const auto& [name, r] : weights.owner)
    if (!used.count(name) && !IgnorableTensor(name, cfg))
      throw ConfigError(fmt::format("checkpoint '{}' has tensor '{}' that the model built from "
                                    "config.json does not use",
                                    dir, name),
                        "config.json describes a different architecture than the weights");
  out.model->to(device);
  return out;
}

void CopyWeights(TransformerLM& src, TransformerLM& dst) {
  torch::NoGradGuard no_grad;
  auto s = src->named_parameters();
  for (auto& p : dst->named_parameters()) p.value().copy_(s[p.key()]);
}

TransformerLM CloneModel(TransformerLM& src, std::optional<torch::Dtype> dtype) {
  TransformerLM dst(src->config(), dtype.value_or(src->dtype()), /*initialise=*/false);
  dst->value_head->to(src->value_head->weight.scalar_type());
  dst->to(src->device());
  CopyWeights(src, dst);
  for (auto& p : dst->parameters()) p.set_requires_grad(false);
  return dst;
}

}  // namespace rlid::policy

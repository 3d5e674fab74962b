#include "policy/checkpoint.h"

#include <fmt/format.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>

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
  tokenizer.Save((tmp / "tokenizer.json").string());
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

LoadedCheckpoint LoadCheckpoint(const std::string& dir, torch::Device device) {
  fs::path root(dir);
  if (!fs::is_directory(root))
    throw IoError(
        fmt::format("checkpoint '{}' is not a directory", dir),
        "pass a directory written by `rlid sft`/`rlid train` (runs/<run>/checkpoints/...)");
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
    cfg = ModelConfig::FromJson(ReadJson(root / "config.json"));
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("checkpoint '{}': {}", dir, e.what()), e.hint());
  }
  if (!fs::exists(root / "tokenizer.json"))
    throw IoError(fmt::format("checkpoint '{}' has no tokenizer.json", dir));
  out.tokenizer = Tokenizer::FromFile((root / "tokenizer.json").string());
  if (out.tokenizer.VocabSize() > cfg.vocab_size)
    throw ConfigError(fmt::format("checkpoint '{}': tokenizer has {} ids but the model only {}",
                                  dir, out.tokenizer.VocabSize(), cfg.vocab_size));
  TensorMap tensors = LoadSafetensors((root / "model.safetensors").string());
  out.model = TransformerLM(cfg);
  torch::NoGradGuard no_grad;
  std::vector<std::string> missing;
  for (auto& p : out.model->named_parameters()) {
    auto it = tensors.find(p.key());
    if (it == tensors.end()) {
      if (p.key().rfind("value_head.", 0) == 0) {
        p.value().zero_();  // HF checkpoints have no value head
        continue;
      }
      missing.push_back(p.key());
      continue;
    }
    if (it->second.sizes() != p.value().sizes())
      throw ConfigError(
          fmt::format("checkpoint '{}': tensor '{}' has shape {} but the config needs {}", dir,
                      p.key(), c10::str(it->second.sizes()), c10::str(p.value().sizes())),
          "config.json and model.safetensors disagree; the checkpoint is damaged");
    p.value().copy_(it->second.to(torch::kFloat32));
  }
  if (!missing.empty())
    throw ConfigError(fmt::format("checkpoint '{}' lacks {} tensor(s), e.g. '{}'", dir,
                                  missing.size(), missing.front()));
  out.model->to(device);
  return out;
}

void CopyWeights(TransformerLM& src, TransformerLM& dst) {
  torch::NoGradGuard no_grad;
  auto s = src->named_parameters();
  for (auto& p : dst->named_parameters()) p.value().copy_(s[p.key()]);
}

TransformerLM CloneModel(TransformerLM& src) {
  TransformerLM dst(src->config());
  dst->to(src->device());
  CopyWeights(src, dst);
  for (auto& p : dst->parameters()) p.set_requires_grad(false);
  return dst;
}

}  // namespace rlid::policy

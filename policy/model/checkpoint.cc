#include "policy/model/checkpoint.h"

#include <fmt/format.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <climits>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <set>

#include "core/error.h"
#include "core/file_io.h"
#include "core/json_file.h"
#include "core/log.h"
#include "policy/model/lora.h"
#include "policy/model/safetensors.h"

namespace rlid::policy {
namespace fs = std::filesystem;

namespace {

void WriteText(const fs::path& p, const std::string& text) {
  WriteWholeFile(p.string(), text, "checkpoint file");
}


std::string NowIso() {
  auto t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

// The checkpoint's files in the unpublished directory `tmp`.
void WriteCheckpointFiles(const fs::path& tmp, TransformerLM& model, const Tokenizer& tokenizer,
                          const nlohmann::json& extra,
                          const std::function<void(const std::string& tmp_dir)>& write_more) {
  nlohmann::json meta = {{"format", "rlid-checkpoint"},
                         {"format_version", kCheckpointFormatVersion},
                         {"code_version", VersionString()},
                         {"created", NowIso()},
                         {"tokenizer_fingerprint", fmt::format("{:016x}", tokenizer.Fingerprint())},
                         {"extra", extra}};
  if (model->lora()) {
    // Adapters only (PEFT layout) + the value head; the frozen base stays where it is.
    SaveAdapter(tmp.string(), model);
    TensorMap head;
    for (const auto& p : model->value_head->named_parameters())
      head["value_head." + p.key()] = p.value().detach().to(torch::kFloat32);
    SaveSafetensors((tmp / kValueHeadFile).string(), head, {{"format", "pt"}});
    meta["base_model"] = model->lora()->base_model;
    meta["base_dtype"] = c10::toString(model->dtype());
  } else {
    TensorMap tensors;
    for (const auto& p : model->named_parameters())
      tensors[p.key()] = p.value().to(torch::kFloat32);
    SaveSafetensors((tmp / "model.safetensors").string(), tensors, {{"format", "pt"}});
    WriteText(tmp / "config.json", model->config().ToJson().dump(2));
  }
  tokenizer.SaveDirectory(tmp.string());
  if (write_more) write_more(tmp.string());
  WriteText(tmp / "rlid.json", meta.dump(2));
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
  try {
    WriteCheckpointFiles(tmp, model, tokenizer, extra, write_more);
  } catch (...) {
    fs::remove_all(tmp, ec);  // a full disk leaves no half checkpoint behind
    throw;
  }
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
  std::map<std::string, std::string> stored;  // rlid's name -> the file's, where they differ
};

// A multimodal Qwen3.5 checkpoint (Qwen3_5ForConditionalGeneration) keeps its
// language model under model.language_model.: rlid reads those tensors as
// model.* (what transformers' Qwen3_5ForCausalLM does).
void MapLanguageModelNames(WeightFiles& w) {
  const std::string prefix = "model.language_model.";
  std::vector<std::pair<std::string, std::string>> renamed;
  for (const auto& [name, reader] : w.owner)
    if (name.rfind(prefix, 0) == 0)
      renamed.emplace_back("model." + name.substr(prefix.size()), name);
  for (const auto& [ours, theirs] : renamed) {
    if (w.owner.count(ours))
      throw IoError(fmt::format("the checkpoint holds both '{}' and '{}'", ours, theirs),
                    "a language model's weights must be stored once");
    w.owner[ours] = w.owner.at(theirs);
    w.owner.erase(theirs);
    w.stored[ours] = theirs;
  }
}

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
  const nlohmann::json j = ReadJsonFile(index);
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
  if (cfg.family == "qwen3_5_text" &&
      (name.rfind("model.visual.", 0) == 0 || name.rfind("mtp.", 0) == 0))
    return true;  // the vision tower and multi-token-prediction heads (transformers skips them too)
  return name.size() > 21 && name.compare(name.size() - 21, 21, "rotary_emb.inv_freq") == 0;
}

// tie_word_embeddings = true, yet the files store an lm_head.weight: as
// transformers does, the head stays its own tensor when its values differ
// from the embedding's (the model is untied), and is tied when they are equal.
void UntieDifferingHead(const WeightFiles& w, ModelConfig& cfg, const std::string& dir) {
  if (!cfg.tie_embeddings) return;
  const auto head = w.owner.find("lm_head.weight"),
             embed = w.owner.find("model.embed_tokens.weight");
  if (head == w.owner.end() || embed == w.owner.end()) return;
  auto stored = [&](const auto& it) {
    const auto s = w.stored.find(it->first);
    return s == w.stored.end() ? it->first : s->second;
  };
  const torch::Tensor h = head->second->Read(stored(head)), e = embed->second->Read(stored(embed));
  if (h.sizes() == e.sizes() && torch::equal(h.to(torch::kFloat32), e.to(torch::kFloat32))) return;
  cfg.tie_embeddings = false;
  spdlog::info(
      "checkpoint '{}': tie_word_embeddings is true but lm_head.weight differs from the "
      "embedding; the head is kept as its own tensor (as transformers loads it)",
      dir);
}

// rlid.json of `root` (empty when absent), with its format version checked.
nlohmann::json ReadMeta(const fs::path& root, const std::string& dir) {
  if (!fs::exists(root / "rlid.json")) return nullptr;
  nlohmann::json meta = ReadJsonFile(root / "rlid.json");
  const std::string hint =
      "rlid.json is written by `rlid train`/`rlid sft`; restore it from the run, or remove it to "
      "load the directory as a plain Hugging Face model";
  if (!meta.is_object())
    throw IoError(fmt::format("checkpoint '{}': rlid.json is not a JSON object", dir), hint);
  const auto format = meta.find("format");
  if (format == meta.end() || !format->is_string() || *format != "rlid-checkpoint")
    throw IoError(fmt::format("checkpoint '{}': rlid.json has format {}, not \"rlid-checkpoint\"",
                              dir, format == meta.end() ? "(none)" : format->dump()),
                  hint);
  const auto v = meta.find("format_version");
  if (v == meta.end() || !v->is_number_integer() || v->get<int64_t>() < 1)
    throw IoError(
        fmt::format("checkpoint '{}': rlid.json has format_version {}, not an integer >= 1", dir,
                    v == meta.end() ? "(none)" : v->dump()),
        hint);
  if (v->get<int64_t>() > kCheckpointFormatVersion)
    throw ConfigError(
        fmt::format("checkpoint '{}' has format version {}, newer than this rlid ({})", dir,
                    v->dump(), kCheckpointFormatVersion),
        "upgrade rlid to load it");
  const auto extra = meta.find("extra");
  if (extra != meta.end() && !extra->is_object())
    throw IoError(fmt::format("checkpoint '{}': rlid.json's \"extra\" is not an object", dir),
                  hint);
  return meta;
}

// The checkpoint's tokenizer must be the one it was saved with: rlid.json's
// fingerprint (of the vocabulary, merges, added tokens, normalizer and
// pre-tokenizer; not of formatting or the chat template) against tokenizer.json.
void CheckTokenizerFingerprint(const nlohmann::json& meta, const Tokenizer& tokenizer,
                               const std::string& dir) {
  if (!meta.is_object() || !meta.contains("tokenizer_fingerprint")) return;
  const auto& fp = meta["tokenizer_fingerprint"];
  const std::string have = fmt::format("{:016x}", tokenizer.Fingerprint());
  if (fp.is_string() && fp.get<std::string>() == have) return;
  throw ConfigError(
      fmt::format("checkpoint '{}': its tokenizer.json is not the tokenizer the weights were saved "
                  "with (rlid.json says fingerprint {}, tokenizer.json has {})",
                  dir, fp.dump(), have),
      "put the checkpoint's own tokenizer.json back (the run directory keeps a copy); token ids "
      "under another vocabulary are other text, so the weights would read garbage");
}

// Every parameter finite (NumericError naming the first tensor that is not):
// NaN or inf weights would make every readout NaN, or an update blame the
// learning rate for a file that was broken before training began.
void RequireFiniteWeights(TransformerLM& model, const std::string& dir) {
  torch::NoGradGuard no_grad;
  for (const auto& p : model->named_parameters()) {
    if (torch::isfinite(p.value()).all().item<bool>()) continue;
    const int64_t bad = (~torch::isfinite(p.value())).sum().item<int64_t>();
    throw NumericError(fmt::format("checkpoint '{}': tensor '{}' holds {} non-finite value(s) (NaN "
                                   "or inf)",
                                   dir, p.key(), bad),
                       "the file is damaged or was saved after training diverged; load an earlier "
                       "checkpoint");
  }
}

void ReadValueHead(const fs::path& file, TransformerLM& model) {
  SafetensorsReader r(file.string());
  torch::NoGradGuard no_grad;
  for (auto& p : model->value_head->named_parameters()) {
    const std::string name = "value_head." + p.key();
    const auto* e = r.Find(name);
    if (e == nullptr || e->shape != p.value().sizes().vec())
      throw ConfigError(fmt::format("'{}' has no tensor '{}' of shape {}", file.string(), name,
                                    c10::str(p.value().sizes())),
                        "the value head file does not belong to this model");
    r.ReadInto(name, p.value());
  }
}

// An adapter directory: the base model its adapter_config.json names, the
// adapters attached and read, the value head (zero when the directory has none,
// as PEFT adapters trained elsewhere).
LoadedCheckpoint LoadAdapterCheckpoint(const fs::path& root, const std::string& dir,
                                       torch::Device device, const LoadOptions& opt) {
  nlohmann::json meta = ReadMeta(root, dir);
  LoraConfig lc = ReadAdapterConfig(dir);
  const std::string& base = lc.base_model;
  if (base.empty() || !fs::is_directory(base))
    throw ConfigError(
        fmt::format("adapter '{}': base_model_name_or_path = \"{}\" is not a directory here", dir, base),
        "rlid cannot download models: set base_model_name_or_path in adapter_config.json to the "
        "local directory of the base model");
  if (IsAdapterDirectory(base))
    throw ConfigError(fmt::format("adapter '{}': its base '{}' is itself an adapter", dir, base),
                      "point base_model_name_or_path at a full model directory");
  const bool own_tokenizer = fs::exists(root / "tokenizer.json");
  LoadOptions base_opt = opt;
  base_opt.require_tokenizer = opt.require_tokenizer && !own_tokenizer;
  LoadedCheckpoint out = LoadCheckpoint(base, device, base_opt);
  if (own_tokenizer) {
    out.tokenizer = Tokenizer::FromDirectory(root.string());
    out.has_tokenizer = true;
  }
  if (out.has_tokenizer) CheckTokenizerFingerprint(meta, out.tokenizer, dir);
  AttachLora(out.model, lc, 0);
  LoadAdapterWeights(dir, out.model);
  if (fs::exists(root / kValueHeadFile)) {
    ReadValueHead(root / kValueHeadFile, out.model);
    out.weight_files.push_back((root / kValueHeadFile).string());
  }
  RequireFiniteWeights(out.model, dir);
  out.weight_files.push_back((root / "adapter_model.safetensors").string());
  out.base_dir = base;
  out.meta = std::move(meta);
  out.dir = dir;
  return out;
}

}  // namespace

LoadedCheckpoint LoadCheckpoint(const std::string& dir, torch::Device device, const LoadOptions& opt) {
  fs::path root(dir);
  if (!fs::is_directory(root))
    throw IoError(
        fmt::format("checkpoint '{}' is not a directory", dir),
        "pass a directory written by `rlid sft`/`rlid train` (runs/<run>/checkpoints/...), a "
        "Hugging Face model directory or a PEFT LoRA adapter directory");
  const std::string name = fs::path(dir).lexically_normal().filename().string();
  if (IsUnpublishedCheckpointName(name.empty() ? fs::path(dir).parent_path().filename().string() : name))
    throw IoError(fmt::format("'{}' is an unfinished checkpoint: a process stopped while writing it", dir),
                  "load the checkpoint it was to become only if that exists (e.g. checkpoints/latest)");
  if (IsAdapterDirectory(dir)) return LoadAdapterCheckpoint(root, dir, device, opt);
  LoadedCheckpoint out;
  out.dir = dir;
  out.meta = ReadMeta(root, dir);
  ModelConfig cfg;
  try {
    out.hf_config = ReadJsonFile(root / "config.json");
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
    CheckTokenizerFingerprint(out.meta, out.tokenizer, dir);
  } else if (opt.require_tokenizer) {
    throw IoError(fmt::format("checkpoint '{}' has no tokenizer.json", dir),
                  "copy the model's tokenizer.json into the directory (commands that take token "
                  "ids, such as `rlid policy logits`, do not need one)");
  }
  WeightFiles weights = OpenWeights(root);
  MapLanguageModelNames(weights);
  UntieDifferingHead(weights, cfg, dir);
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
    const auto stored = weights.stored.find(p.key());
    const std::string& name = stored == weights.stored.end() ? p.key() : stored->second;
    const auto* e = it->second->Find(name);
    if (e->shape != p.value().sizes().vec())
      throw ConfigError(
          fmt::format("checkpoint '{}': tensor '{}' has shape {} but config.json needs {}", dir,
                      p.key(), c10::str(c10::IntArrayRef(e->shape)), c10::str(p.value().sizes())),
          "config.json and the safetensors files disagree; the checkpoint is damaged");
    if (!c10::isFloatingType(e->dtype))
      throw ConfigError(fmt::format("checkpoint '{}': tensor '{}' is {}, not a float tensor", dir,
                                    p.key(), e->dtype_name));
    it->second->ReadInto(name, p.value());
  }
  if (!missing.empty())
    throw ConfigError(fmt::format("checkpoint '{}' lacks {} tensor(s) the config needs, e.g. '{}'",
                                  dir, missing.size(), missing.front()),
                      "config.json describes a different architecture than the weights");
  int64_t skipped = 0;
  for (const auto& [name, r] : weights.owner) {
    if (used.count(name)) continue;
    if (!IgnorableTensor(name, cfg))
      throw ConfigError(fmt::format("checkpoint '{}' has tensor '{}' that the model built from "
                                    "config.json does not use",
                                    dir, name),
                        "config.json describes a different architecture than the weights");
    skipped += name.rfind("model.visual.", 0) == 0 ? 1 : 0;
  }
  RequireFiniteWeights(out.model, dir);
  if (skipped > 0)
    spdlog::info(
        "checkpoint '{}': read the language model; skipped the vision tower ({} tensors, rlid "
        "takes text input only)",
        dir, skipped);
  out.model->to(device);
  return out;
}

namespace {

// The exported model's files in the unpublished directory `tmp`.
void WriteExportFiles(LoadedCheckpoint& ck, const fs::path& tmp, const ExportOptions& opt) {
  if (ck.model->lora() && !opt.merge) {
    SaveAdapter(tmp.string(), ck.model);
  } else {
    TensorMap tensors;
    ForEachMergedParameter(ck.model, [&](const std::string& name, const torch::Tensor& t) {
      tensors[name] = t.to(opt.dtype).contiguous();
    });
    SaveSafetensors((tmp / "model.safetensors").string(), tensors, {{"format", "pt"}});
    tensors.clear();
    nlohmann::json cfg = ck.hf_config.is_object() ? ck.hf_config : ck.model->config().ToJson();
    const std::string dtype_name = opt.dtype == torch::kBFloat16 ? "bfloat16" : "float32";
    cfg["torch_dtype"] = dtype_name;
    if (cfg.contains("dtype")) cfg["dtype"] = dtype_name;
    WriteText(tmp / "config.json", cfg.dump(2));
  }
  if (ck.has_tokenizer) ck.tokenizer.SaveDirectory(tmp.string());
}

}  // namespace

void ExportModel(LoadedCheckpoint& ck, const std::string& out_dir, const ExportOptions& opt) {
  const fs::path target(out_dir);
  std::error_code ec;
  if (fs::exists(target) && !(fs::is_directory(target) && fs::is_empty(target)))
    throw IoError(fmt::format("'{}' already exists and is not an empty directory", out_dir),
                  "export writes a new directory: choose another --out or remove it");
  if (target.has_parent_path()) fs::create_directories(target.parent_path(), ec);
  const fs::path tmp = target.string() + fmt::format(".tmp-{}", getpid());
  fs::remove_all(tmp, ec);
  if (!fs::create_directories(tmp, ec) && ec)
    throw IoError(fmt::format("cannot create '{}': {}", tmp.string(), ec.message()));
  try {
    WriteExportFiles(ck, tmp, opt);
  } catch (...) {
    fs::remove_all(tmp, ec);  // a full disk leaves no OUT.tmp-PID behind
    throw;
  }
  if (fs::exists(target)) fs::remove(target, ec);  // the empty directory
  fs::rename(tmp, target, ec);
  if (ec) throw IoError(fmt::format("cannot publish '{}': {}", out_dir, ec.message()));
}

bool IsUnpublishedCheckpointName(const std::string& name) {
  for (const char* mark : {".tmp-", ".old-"}) {
    const auto at = name.rfind(mark);
    if (at == std::string::npos) continue;
    const std::string pid = name.substr(at + 5);
    if (!pid.empty() && std::all_of(pid.begin(), pid.end(), [](char c) { return c >= '0' && c <= '9'; }))
      return true;
  }
  return false;
}

int RemoveOrphanCheckpoints(const std::string& dir) {
  int removed = 0;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return 0;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!IsUnpublishedCheckpointName(name)) continue;
    const std::string digits = name.substr(name.rfind('-') + 1);
    long long pid = 0;
    const auto parsed = std::from_chars(digits.data(), digits.data() + digits.size(), pid);
    const bool alive = parsed.ec == std::errc() && pid > 0 && pid <= INT_MAX &&
                       (::kill(static_cast<pid_t>(pid), 0) == 0 || errno == EPERM);
    if (alive) continue;  // still being written
    fs::remove_all(e.path(), ec);
    if (ec) {
      spdlog::warn("could not remove the unfinished checkpoint {}: {}", e.path().string(), ec.message());
      continue;
    }
    spdlog::info("removed {}, an unfinished checkpoint of a process that no longer runs", e.path().string());
    ++removed;
  }
  return removed;
}

nlohmann::json ReadCheckpointMeta(const std::string& dir) {
  nlohmann::json meta = ReadMeta(fs::path(dir), dir);
  if (meta.is_null())
    throw IoError(fmt::format("checkpoint '{}' has no rlid.json", dir),
                  "it is not a checkpoint written by `rlid train`/`rlid sft`");
  return meta;
}

void CopyWeights(TransformerLM& src, TransformerLM& dst) {
  torch::NoGradGuard no_grad;
  auto d = dst->named_parameters();
  if (src->lora() && !dst->lora()) {  // dst computes what src computes: adapters folded in
    ForEachMergedParameter(src, [&](const std::string& name, const torch::Tensor& t) { d[name].copy_(t); },
                           /*include_value_head=*/true);
    return;
  }
  auto s = src->named_parameters();
  for (auto& p : d) {
    const torch::Tensor* t = s.find(p.key());
    if (t == nullptr)
      throw ConfigError(fmt::format("CopyWeights: the source model has no parameter '{}'", p.key()),
                        "copy between models of one config (and the same LoRA adapters)");
    p.value().copy_(*t);
  }
}

void RestoreWeights(const std::string& dir, TransformerLM& model) {
  const fs::path root(dir);
  if (IsAdapterDirectory(dir)) {
    if (!model->lora())
      throw ConfigError(fmt::format("checkpoint '{}' holds LoRA adapters but the model has none", dir));
    LoadAdapterWeights(dir, model);
    ReadValueHead(root / kValueHeadFile, model);
    return;
  }
  if (model->lora())
    throw ConfigError(fmt::format("checkpoint '{}' holds full weights but the model trains LoRA adapters", dir),
                      "resume with the [policy.lora] settings the run was started with");
  WeightFiles weights = OpenWeights(root);
  torch::NoGradGuard no_grad;
  for (auto& p : model->named_parameters()) {
    auto it = weights.owner.find(p.key());
    const auto* e = it == weights.owner.end() ? nullptr : it->second->Find(p.key());
    if (e == nullptr || e->shape != p.value().sizes().vec())
      throw ConfigError(fmt::format("checkpoint '{}' has no tensor '{}' of shape {}", dir, p.key(),
                                    c10::str(p.value().sizes())),
                        "resume a run with the config it was started with");
    it->second->ReadInto(p.key(), p.value());
  }
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

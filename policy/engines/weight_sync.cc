#include "policy/engines/weight_sync.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/http.h"
#include "policy/engines/engine_error.h"
#include "policy/model/checkpoint.h"
#include "policy/model/lora.h"

namespace rlid::policy {

namespace fs = std::filesystem;

namespace {

// A fresh, empty directory `path` (whatever was there is removed).
void FreshDirectory(const fs::path& path) {
  std::error_code ec;
  fs::remove_all(path, ec);
  fs::create_directories(path.parent_path(), ec);
}

void RemoveQuietly(const std::string& dir) {
  std::error_code ec;
  if (!dir.empty()) fs::remove_all(dir, ec);
}

// POST base_url + path; EngineError naming what was asked when it fails.
void Call(const ServerTarget& t, const std::string& path, const nlohmann::json& body, double timeout_s,
          const std::string& what) {
  const HttpResponse resp = HttpPerform(ServerPost(t, path, body.dump(), timeout_s));
  if (!resp.ok())
    throw EngineError(fmt::format("the engine at {} could not {}: {}", t.base_url, what, resp.Describe()),
                      t.log_hint.empty() ? "a vLLM server loads adapters at run time only with "
                                           "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True and --enable-lora"
                                         : t.log_hint);
}

}  // namespace

void WriteServedModel(TransformerLM& model, const std::string& dir, bool merge) {
  LoadedCheckpoint ck;
  ck.model = model->lora() && !merge ? ShareBaseWeights(model) : model;
  FreshDirectory(dir);
  ExportOptions opt;
  opt.merge = true;
  ExportModel(ck, dir, opt);
}

LoraSync::LoraSync(std::string dir, std::string prefix, double timeout_s)
    : dir_(std::move(dir)),
      prefix_(fmt::format("{}-{}-{}", prefix, ::getpid(),
                          std::chrono::duration_cast<std::chrono::milliseconds>(
                              std::chrono::system_clock::now().time_since_epoch())
                                  .count() %
                              100000000)),
      timeout_s_(timeout_s) {}

LoraSync::~LoraSync() {
  if (loaded_.empty()) return;
  try {  // best effort: a server that is gone has nothing to unload
    HttpPerform(ServerPost(server_, "/unload_lora_adapter", nlohmann::json{{"lora_name", loaded_}}.dump(), 10));
  } catch (...) {
  }
}

ServerTarget LoraSync::Apply(TransformerLM& model, int64_t version, const ServerTarget& current,
                             EngineSync& report) {
  if (!model->lora())
    throw InternalError("LoraSync needs a model with LoRA adapters");
  const std::string name = fmt::format("{}-v{}", prefix_, version);
  const fs::path path = fs::path(dir_) / fmt::format("v{}", version);
  FreshDirectory(path);
  fs::create_directories(path);
  SaveAdapter(path.string(), model);
  ServerTarget next = current;
  if (name != loaded_) {
    Call(current, "/load_lora_adapter", {{"lora_name", name}, {"lora_path", fs::absolute(path).string()}},
         timeout_s_, fmt::format("load the adapter of version {} from '{}'", version, path.string()));
    if (!loaded_.empty()) {
      Call(current, "/unload_lora_adapter", {{"lora_name", loaded_}}, timeout_s_,
           fmt::format("unload the adapter '{}'", loaded_));
      if (loaded_dir_ != path.string()) RemoveQuietly(loaded_dir_);
    }
  }
  loaded_ = name;
  loaded_dir_ = path.string();
  server_ = current;
  next.model = name;
  report.restarted = false;
  return next;
}

FullWeightSync::FullWeightSync(std::string dir, Load load, std::string served)
    : dir_(std::move(dir)), load_(std::move(load)), served_dir_(std::move(served)) {}

namespace {

// Whether two files hold the same bytes (false when either cannot be read).
bool SameBytes(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  if (fs::file_size(a, ec) != fs::file_size(b, ec) || ec) return false;
  std::ifstream fa(a, std::ios::binary), fb(b, std::ios::binary);
  std::vector<char> ba(1 << 20), bb(1 << 20);
  while (fa && fb) {
    fa.read(ba.data(), static_cast<std::streamsize>(ba.size()));
    fb.read(bb.data(), static_cast<std::streamsize>(bb.size()));
    if (fa.gcount() != fb.gcount() || !std::equal(ba.begin(), ba.begin() + fa.gcount(), bb.begin()))
      return false;
  }
  return fa.eof() && fb.eof();
}

}  // namespace

ServerTarget FullWeightSync::Apply(TransformerLM& model, int64_t version, const ServerTarget& current,
                                   EngineSync& report) {
  const std::string path = (fs::path(dir_) / fmt::format("full_v{}", version)).string();
  WriteServedModel(model, path, /*merge=*/true);
  const auto same = [&](const char* file) {
    return !served_dir_.empty() && SameBytes(fs::path(served_dir_) / file, fs::path(path) / file);
  };
  if (same("model.safetensors") && same("config.json")) {  // the server has these weights
    RemoveQuietly(path);
    return current;
  }
  ServerTarget next = load_(path, report);
  // Versions this sync wrote are removed once the next serves; the starting directory stays.
  if (served_dir_ != path && served_dir_.rfind(dir_, 0) == 0) RemoveQuietly(served_dir_);
  served_dir_ = path;
  return next;
}

}  // namespace rlid::policy

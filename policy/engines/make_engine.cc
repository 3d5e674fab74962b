#include "policy/engines/make_engine.h"

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>

#include "core/error.h"
#include "core/http.h"
#include "policy/engines/engine_error.h"
#include "policy/engines/server_engine.h"
#include "policy/engines/vllm_server.h"
#include "policy/engines/weight_sync.h"
#include "policy/model/lora.h"
#include "policy/reading/sampler.h"

namespace rlid::policy {

namespace fs = std::filesystem;

namespace {

ServerOptions ServerOptionsOf(const EngineConfig& cfg, const SamplerOptions& options) {
  ServerOptions so;
  so.request_timeout_s = cfg.request_timeout_s;
  so.max_parallel_requests = cfg.max_parallel_requests;
  so.probe_tolerance = cfg.probe_tolerance > 0 ? cfg.probe_tolerance
                       : options.dtype == Precision::kBFloat16 ? 0.5
                                                               : 0.02;
  return so;
}

// "in-place reload" of a full-parameter model by a vLLM server in dev mode.
ServerTarget ReloadInPlace(const ServerTarget& t, const std::string& dir, double timeout_s) {
  ServerTarget root = t;  // /collective_rpc sits beside /v1, not under it
  if (root.base_url.size() >= 3 && root.base_url.compare(root.base_url.size() - 3, 3, "/v1") == 0)
    root.base_url.resize(root.base_url.size() - 3);
  const HttpResponse resp = HttpPerform(ServerPost(
      root, "/collective_rpc",
      nlohmann::json{{"method", "reload_weights"}, {"kwargs", {{"weights_path", dir}}}}.dump(), timeout_s));
  if (!resp.ok())
    throw EngineError(fmt::format("the vLLM server could not reload the weights in '{}': {}", dir, resp.Describe()),
                      "set [sampler.vllm] full_sync = \"restart\" (vLLM 0.20's CPU build cannot reload in place)");
  return t;
}

std::unique_ptr<RolloutEngine> MakeVllm(const EngineConfig& cfg, const SamplerOptions& options,
                                        TransformerLM& model, const EngineContext& ctx) {
  const fs::path dir = fs::absolute(ctx.dir);
  VllmServerOptions vo;
  vo.python = cfg.vllm.python.empty() ? DefaultVllmPython() : cfg.vllm.python;
  vo.model_dir = (dir / "base").string();
  vo.port = cfg.vllm.port;
  vo.startup_timeout_s = cfg.vllm.startup_timeout_s;
  vo.max_model_len = cfg.vllm.max_model_len;
  vo.cpu_kv_cache_gib = cfg.vllm.cpu_kv_cache_gib;
  vo.gpu_memory_utilization = cfg.vllm.gpu_memory_utilization;
  vo.dtype = options.dtype;
  vo.seed = ctx.seed;
  vo.extra_args = cfg.vllm.extra_args;
  vo.log_path = (dir / "vllm.log").string();
  const bool lora = static_cast<bool>(model->lora());
  if (lora) vo.max_lora_rank = static_cast<int>(model->lora()->rank);
  // LoRA: the frozen base is served once, adapters follow. Full: version 0's weights.
  WriteServedModel(model, vo.model_dir, /*merge=*/!lora);
  auto server = std::make_unique<VllmServer>(vo);
  ServerTarget target;
  target.base_url = server->base_url();
  target.model = vo.served_name;
  target.log_hint = fmt::format("the vLLM server's log: {}", vo.log_path);
  std::unique_ptr<WeightSync> sync;
  if (lora) {
    sync = std::make_unique<LoraSync>((dir / "adapters").string(), "rlid", cfg.request_timeout_s);
  } else {
    VllmServer* s = server.get();
    const double timeout = cfg.request_timeout_s;
    const FullSync how = cfg.vllm.full_sync;
    sync = std::make_unique<FullWeightSync>(
        (dir / "weights").string(), [s, how, timeout, target](const std::string& weights, EngineSync& report) {
          if (how == FullSync::kReload) return ReloadInPlace(target, weights, timeout);
          s->Restart(weights);
          report.restarted = true;
          return target;
        },
        vo.model_dir);
  }
  auto engine = std::make_unique<ServerEngine>("vllm", model->config(), options, ServerOptionsOf(cfg, options),
                                               target, std::move(sync), std::move(server));
  engine->Sync(model, ctx.version);
  return engine;
}

std::unique_ptr<RolloutEngine> MakeOpenAi(const EngineConfig& cfg, const SamplerOptions& options,
                                          TransformerLM& model, const EngineContext& ctx) {
  const auto& o = cfg.openai;
  if (o.base_url.empty())
    throw ConfigError("[sampler] engine = \"openai\" needs [sampler.openai] base_url",
                      "the server's OpenAI-compatible root, e.g. \"http://127.0.0.1:8000/v1\"");
  if (o.model.empty())
    throw ConfigError("[sampler] engine = \"openai\" needs [sampler.openai] model (the served model name)");
  ServerTarget target;
  target.base_url = o.base_url;
  while (!target.base_url.empty() && target.base_url.back() == '/') target.base_url.pop_back();
  target.model = o.model;
  if (!o.api_key_env.empty()) {
    const char* key = std::getenv(o.api_key_env.c_str());
    if (!key || !*key)
      throw ConfigError(fmt::format("[sampler.openai] api_key_env names '{}', which is not set", o.api_key_env),
                        "export the key in that variable; rlid never reads keys from config files");
    target.api_key = key;
  }
  std::unique_ptr<WeightSync> sync;
  if (o.sync == ServerSync::kLora) {
    if (!model->lora())
      throw ConfigError("[sampler.openai] sync = \"lora\" needs a policy with LoRA adapters ([policy.lora])",
                        "a server rlid does not own cannot take full weights: use engine = \"vllm\", or "
                        "sync = \"none\" to sample with the server's own weights");
    sync = std::make_unique<LoraSync>((fs::absolute(ctx.dir) / "adapters").string(), "rlid", cfg.request_timeout_s);
  } else {
    sync = std::make_unique<NoSync>();
  }
  auto engine = std::make_unique<ServerEngine>("openai", model->config(), options, ServerOptionsOf(cfg, options),
                                               target, std::move(sync));
  engine->Sync(model, ctx.version);
  return engine;
}

}  // namespace

std::unique_ptr<RolloutEngine> MakeRolloutEngine(const EngineConfig& cfg, const SamplerOptions& options,
                                                 TransformerLM& model, const EngineContext& ctx) {
  switch (cfg.backend) {
    case EngineBackend::kVllm:
      return MakeVllm(cfg, options, model, ctx);
    case EngineBackend::kOpenai:
      return MakeOpenAi(cfg, options, model, ctx);
    case EngineBackend::kRlid:
      break;
  }
  auto sampler = std::make_unique<TextSampler>(model->config(), options, model->parameters().front().device());
  sampler->SyncWeights(model);
  return sampler;
}

}  // namespace rlid::policy

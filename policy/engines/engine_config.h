// [sampler] engine and its sections: which rollout engine samples the token
// plane's text (docs/engines.md).
#pragma once

#include <string>
#include <vector>

#include "core/modes.h"

namespace rlid::policy {

// "rlid": rlid's LibTorch engine (the default and the reference); "vllm": a
// vLLM server rlid starts and owns for the run; "openai": an OpenAI-compatible
// completions server the user runs (vLLM, SGLang), at [sampler.openai] base_url.
enum class EngineBackend { kRlid, kVllm, kOpenai };
constexpr auto Spellings(EngineBackend) {
  return ModeNames<EngineBackend>(
      {{EngineBackend::kRlid, "rlid"}, {EngineBackend::kVllm, "vllm"}, {EngineBackend::kOpenai, "openai"}});
}

// How a vLLM server rlid owns comes to serve new full-parameter weights
// (LoRA runs always hot-load adapters): "restart" on the new weights, or
// "reload" them in place (/collective_rpc reload_weights; vLLM 0.20's CPU
// build fails it, so restart is the default).
enum class FullSync { kRestart, kReload };
constexpr auto Spellings(FullSync) {
  return ModeNames<FullSync>({{FullSync::kRestart, "restart"}, {FullSync::kReload, "reload"}});
}

// What an engine behind a server does at a weight sync: "lora" hot-loads each
// version's adapter (vLLM's /v1/load_lora_adapter), "none" keeps the
// server's weights (the engine then plays with weights the trainer left behind).
enum class ServerSync { kLora, kNone };
constexpr auto Spellings(ServerSync) {
  return ModeNames<ServerSync>({{ServerSync::kLora, "lora"}, {ServerSync::kNone, "none"}});
}

struct VllmConfig {
  std::string python;              // "" = RLID_VLLM_PYTHON or <source>/.venv-vllm/bin/python
  int port = 0;                    // 0 = a free loopback port
  double startup_timeout_s = 600;
  int max_model_len = 1024;
  int cpu_kv_cache_gib = 1;        // VLLM_CPU_KVCACHE_SPACE (whole GiB)
  double gpu_memory_utilization = 0.4;
  FullSync full_sync = FullSync::kRestart;
  std::vector<std::string> extra_args;
};

struct OpenAiConfig {
  std::string base_url;       // "http://host:port/v1"
  std::string model;          // the served model name
  std::string api_key_env;    // the environment variable holding the API key ("" = none)
  ServerSync sync = ServerSync::kLora;
};

struct EngineConfig {
  EngineBackend backend = EngineBackend::kRlid;
  double request_timeout_s = 600;
  int max_parallel_requests = 64;
  double probe_tolerance = 0;  // 0 = by engine dtype: 0.02 float32, 0.5 bfloat16
  VllmConfig vllm;
  OpenAiConfig openai;
};

}  // namespace rlid::policy

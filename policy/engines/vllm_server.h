// A vLLM OpenAI-compatible server that rlid starts for a run and never leaves
// running: it runs in its own process group under rlid's launcher
// (vllm_launcher.py), which stops the whole group when rlid dies, even by
// SIGKILL (PR_SET_PDEATHSIG reaches the launcher, not the engine processes vLLM
// spawns); the group is also stopped when the run ends, fails or is interrupted. Its output goes to a log file (the run
// directory's engine/vllm.log); errors quote its last lines.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "policy/model/precision.h"

namespace rlid {
class ChildProcess;
}

namespace rlid::policy {

struct VllmServerOptions {
  std::string python;              // an interpreter that imports vllm
  std::string model_dir;           // a Hugging Face model directory to serve
  std::string served_name = "rlid-base";
  int port = 0;                    // 0: a free loopback port
  double startup_timeout_s = 600;  // until /health answers
  int max_model_len = 1024;        // prompt + generated tokens
  int cpu_kv_cache_gib = 1;        // VLLM_CPU_KVCACHE_SPACE (CPU builds; whole GiB)
  double gpu_memory_utilization = 0.4;  // CUDA builds
  Precision dtype = Precision::kFloat32;
  int max_lora_rank = 0;           // > 0: LoRA adapters up to this rank can be hot-loaded
  uint64_t seed = 0;
  std::vector<std::string> extra_args;  // appended to the command line as they are
  std::string log_path;            // the server's stdout and stderr
};

class VllmServer {
 public:
  // Starts the server and waits until it is healthy. EngineError when the
  // interpreter has no vllm, the port is taken, the server exits, or the
  // deadline passes (the server is stopped first; the hint quotes its log).
  explicit VllmServer(VllmServerOptions options);
  ~VllmServer();  // stops the server's process group (SIGTERM, then SIGKILL)
  VllmServer(const VllmServer&) = delete;
  VllmServer& operator=(const VllmServer&) = delete;

  // Stops the server and starts it again on `model_dir` (same port); returns
  // the seconds it took.
  double Restart(const std::string& model_dir);
  // "http://127.0.0.1:PORT/v1".
  std::string base_url() const;
  // Whether the process still runs (false after it died).
  bool Alive();
  pid_t pid() const;
  const VllmServerOptions& options() const { return opt_; }
  // The last `n` lines of the server's log, for messages.
  std::string LogTail(size_t n = 12) const;

 private:
  void Start();
  void Stop();
  std::vector<std::string> CommandLine() const;

  VllmServerOptions opt_;
  int port_ = 0;
  std::unique_ptr<ChildProcess> child_;
};

// The interpreter rlid starts vLLM with when none is configured: RLID_VLLM_PYTHON,
// else the engine venv the setup script makes (<source>/.venv-vllm/bin/python).
std::string DefaultVllmPython();

// The smallest LoRA rank vLLM accepts (--max-lora-rank) that holds `rank`.
int VllmLoraRank(int rank);

}  // namespace rlid::policy

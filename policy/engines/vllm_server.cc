#include "policy/engines/vllm_server.h"

#include <arpa/inet.h>
#include <signal.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>

#include "core/clock.h"
#include "core/http.h"
#include "core/interrupt.h"
#include "core/launch.h"
#include "core/log.h"
#include "core/subprocess.h"
#include "policy/engines/engine_error.h"

#ifndef RLID_SOURCE_DIR
#define RLID_SOURCE_DIR "."
#endif

namespace rlid::policy {

namespace fs = std::filesystem;

namespace {

// Whether something accepts connections on the loopback port.
bool PortInUse(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  const bool used = ::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  ::close(fd);
  return used;
}

std::string Num(double x) { return fmt::format("{}", x); }

// The launcher that stops the server's whole process group when rlid dies.
std::string VllmLauncher() { return (fs::path(RLID_SOURCE_DIR) / "policy/engines/vllm_launcher.py").string(); }

}  // namespace

std::string DefaultVllmPython() {
  if (const char* p = std::getenv("RLID_VLLM_PYTHON"); p && *p) return p;
  return (fs::path(RLID_SOURCE_DIR) / ".venv-vllm/bin/python").string();
}

int VllmLoraRank(int rank) {
  for (int r : {1, 8, 16, 32, 64, 128, 256, 320, 512})
    if (rank <= r) return r;
  throw EngineError(fmt::format("LoRA rank {} is above the largest vLLM serves (512)", rank),
                    "use a smaller lora.rank, or engine = \"rlid\"");
}

VllmServer::VllmServer(VllmServerOptions options) : opt_(std::move(options)) {
  if (FindProgram(opt_.python).empty())
    throw EngineError(fmt::format("no Python interpreter at '{}' to start vLLM with", opt_.python),
                      "make the engine venv with `scripts/setup.sh --vllm`, or set "
                      "[sampler.vllm] python (or RLID_VLLM_PYTHON) to an interpreter that imports vllm");
  if (opt_.port != 0 && PortInUse(opt_.port))
    throw EngineError(fmt::format("port {} is taken: something already listens on 127.0.0.1:{}", opt_.port,
                                  opt_.port),
                      "set [sampler.vllm] port = 0 to let rlid pick a free port");
  port_ = opt_.port != 0 ? opt_.port : FreeLocalPort("the vLLM server");
  Start();
}

VllmServer::~VllmServer() { Stop(); }

std::string VllmServer::base_url() const { return fmt::format("http://127.0.0.1:{}/v1", port_); }

bool VllmServer::Alive() { return child_ && child_->Running(); }

pid_t VllmServer::pid() const { return child_ ? child_->pid() : -1; }

std::vector<std::string> VllmServer::CommandLine() const {
  // env sets vLLM's variables; sh sends the server's output to the log file.
  std::vector<std::string> argv = {
      "env",
      "VLLM_CPU_KVCACHE_SPACE=" + std::to_string(opt_.cpu_kv_cache_gib),
      "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True",
      "VLLM_SERVER_DEV_MODE=1",  // /collective_rpc: in-place weight reloads
      "VLLM_NO_USAGE_STATS=1",
      "VLLM_DO_NOT_TRACK=1",
      "HF_HUB_OFFLINE=1",
      "/bin/sh", "-c", "exec \"$@\" >>\"$0\" 2>&1", opt_.log_path,
      opt_.python, VllmLauncher(),
      "--model", opt_.model_dir,
      "--served-model-name", opt_.served_name,
      "--host", "127.0.0.1",
      "--port", std::to_string(port_),
      "--max-model-len", std::to_string(opt_.max_model_len),
      "--dtype", opt_.dtype == Precision::kBFloat16 ? "bfloat16" : "float32",
      "--skip-tokenizer-init",  // ids in, ids out: the server never sees text
      "--logprobs-mode", "processed_logprobs",
      "--seed", std::to_string(opt_.seed % 2147483647),
      "--gpu-memory-utilization", Num(opt_.gpu_memory_utilization),
      "--disable-uvicorn-access-log",
      // Whole prompts only: vLLM 0.20's CPU build kills its engine when a
      // seeded request's prompt is split across steps ("CPU Generator does
      // not use offset"), and every rlid request has a seed.
      "--no-enable-chunked-prefill",
      "--max-num-batched-tokens", std::to_string(std::max(opt_.max_model_len, 4096)),
  };
  if (opt_.max_lora_rank > 0) {
    for (const std::string& a : {std::string("--enable-lora"), std::string("--max-loras"), std::string("2"),
                                 std::string("--max-lora-rank"), std::to_string(VllmLoraRank(opt_.max_lora_rank))})
      argv.push_back(a);
  }
  argv.insert(argv.end(), opt_.extra_args.begin(), opt_.extra_args.end());
  return argv;
}

std::string VllmServer::LogTail(size_t n) const {
  std::ifstream in(opt_.log_path);
  std::deque<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(line.size() > 300 ? line.substr(0, 300) + "..." : line);
    if (lines.size() > n) lines.pop_front();
  }
  std::string out;
  for (const auto& l : lines) out += "\n    " + l;
  return out.empty() ? " (the log is empty)" : out;
}

void VllmServer::Start() {
  fs::create_directories(fs::path(opt_.log_path).parent_path());
  {
    std::ofstream log(opt_.log_path, std::ios::app);
    log << fmt::format("---- rlid starts vLLM on port {} serving {} ----\n", port_, opt_.model_dir);
  }
  ChildOptions co;
  co.argv = CommandLine();
  co.log_name = "vllm";
  child_ = std::make_unique<ChildProcess>(co);
  spdlog::info("engine: starting vLLM (pid {}) on 127.0.0.1:{} serving '{}'; its log: {}", child_->pid(),
               port_, opt_.model_dir, opt_.log_path);
  const double t0 = MonotonicSeconds();
  const std::string health = fmt::format("http://127.0.0.1:{}/health", port_);
  for (;;) {
    if (!child_->Running()) {
      const std::string how = child_->ExitDescription();
      const std::string tail = LogTail();
      child_.reset();
      const bool no_vllm = tail.find("No module named") != std::string::npos;
      const bool taken = tail.find("ddress already in use") != std::string::npos;
      throw EngineError(
          fmt::format("the vLLM server {} before it became healthy; the end of its log ({}):{}", how,
                      opt_.log_path, tail),
          no_vllm ? fmt::format("'{}' cannot import vllm: make the engine venv with `scripts/setup.sh --vllm`",
                                opt_.python)
          : taken ? fmt::format("port {} was taken; set [sampler.vllm] port = 0 for a free one", port_)
                  : "read the server's log; a small max_model_len and cpu_kv_cache_gib help on small machines");
    }
    HttpRequest r;
    r.method = "GET";
    r.url = health;
    r.timeout_s = 2;
    if (HttpPerform(r).ok()) break;
    const double waited = MonotonicSeconds() - t0;
    if (waited > opt_.startup_timeout_s) {
      const std::string tail = LogTail();
      Stop();
      throw EngineError(fmt::format("the vLLM server was not healthy within {} s (it was stopped); the end of "
                                    "its log ({}):{}",
                                    opt_.startup_timeout_s, opt_.log_path, tail),
                        "raise [sampler.vllm] startup_timeout_s: vLLM takes a minute or more to start on a CPU");
    }
    ThrowIfInterrupted();
    ::usleep(250 * 1000);
  }
  spdlog::info("engine: vLLM healthy after {:.1f} s", MonotonicSeconds() - t0);
}

void VllmServer::Stop() {
  if (!child_) return;
  if (child_->Running()) {
    ::kill(-child_->pid(), SIGTERM);  // vLLM shuts its engine processes down on SIGTERM
    child_->WaitForExit(15);  // the launcher gives the server 10 s, then kills its group
  }
  child_.reset();  // SIGKILLs the process group if anything is left
}

double VllmServer::Restart(const std::string& model_dir) {
  const double t0 = MonotonicSeconds();
  Stop();
  opt_.model_dir = model_dir;
  Start();
  return MonotonicSeconds() - t0;
}

}  // namespace rlid::policy

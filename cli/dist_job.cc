#include "cli/dist_job.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <map>

#include "core/error.h"
#include "core/hash.h"
#include "core/interrupt.h"
#include "core/launch.h"
#include "policy/model/device.h"
#include "policy/model/runtime.h"

namespace rlid::cli {
namespace {

// Keys that may differ between the ranks of one job: the machine's cores and devices.
bool PerRank(const std::string& path) { return path == "run.threads" || path == "run.device"; }

// The resolved config as "path = value" lines, in order, without docs or the
// per-rank keys: what every rank of a job must agree on. ResolvedToml writes
// "key = value  # doc" with the docs aligned, so the doc is cut at its last
// "  # " (a doc-less string value containing "  # " loses its tail; both ranks
// lose the same tail).
std::string SharedConfigLines(const trainers::ExperimentConfig& cfg) {
  const std::string toml = cfg.raw.ResolvedToml();
  std::string section, out;
  std::map<std::string, int> elements;  // [[array]] headers seen per array
  size_t at = 0;
  while (at < toml.size()) {
    size_t end = toml.find('\n', at);
    if (end == std::string::npos) end = toml.size();
    std::string line = toml.substr(at, end - at);
    at = end + 1;
    if (line.empty()) continue;
    if (line.rfind("[[", 0) == 0 && line.size() > 4) {
      const std::string name = line.substr(2, line.size() - 4);
      section = fmt::format("{}[{}]", name, elements[name]++);
      continue;
    }
    if (line[0] == '[' && line.back() == ']') {
      section = line.substr(1, line.size() - 2);
      continue;
    }
    if (const size_t doc = line.rfind("  # "); doc != std::string::npos) line.resize(doc);
    while (!line.empty() && line.back() == ' ') line.pop_back();
    const size_t eq = line.find(" = ");
    const std::string key = eq == std::string::npos ? line : line.substr(0, eq);
    const std::string path = section.empty() ? key : section + "." + key;
    if (PerRank(path)) continue;
    out += section.empty() ? line : section + "." + line;
    out += '\n';
  }
  return out;
}

}  // namespace

DistJob::~DistJob() {
  if (comm_) trainers::SetProcessComm(nullptr);
}

void DistJob::Add(CLI::App& app) {
  app.add_option("--nproc", nproc_,
                 "data-parallel ranks on this machine (c10d; each rank uses run.threads / "
                 "--threads intra-op threads). For several machines start every rank with "
                 "torchrun's variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) instead")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
}

bool DistJob::Enter(const trainers::ExperimentConfig& cfg) {
  const char* world = std::getenv("WORLD_SIZE");
  if (nproc_ > 1 && !(world && *world)) {
    const int gpus = policy::CudaDeviceCount();
    if (cfg.run.device != "cpu" && cfg.run.device != "auto" && gpus < nproc_)
      throw ConfigError(
          fmt::format("--nproc {} with run.device = '{}' needs one GPU per rank, found {}", nproc_,
                      cfg.run.device, gpus),
          fmt::format("use --nproc {} or fewer, or run.device = \"cpu\" (Gloo)", std::max(gpus, 1)));
    LaunchResult r = LaunchLocalRanks({.nproc = nproc_, .args = WithoutNproc(CliArgs())});
    if (r.signal != 0) ThrowIfInterrupted();  // stopped like one process: exit code 128 + signal
    if (r.exit_code != 0)
      throw DistError(r.summary, "the ranks' own messages above say why; resume with --resume "
                                 "--out DIR from the last checkpoint (any --nproc)");
    return false;
  }
  const trainers::DistEnv env = trainers::DistEnv::FromEnvironment();
  if (nproc_ > 1 && env.world_size != nproc_)
    throw ConfigError(fmt::format("--nproc {} inside a job of WORLD_SIZE={}", nproc_, env.world_size),
                      "drop --nproc when starting ranks with torchrun's variables");
  if (env.world_size == 1) return true;
  trainers::DistOptions o;
  o.timeout_s = cfg.run.dist_timeout_s;
  o.bucket_mb = cfg.run.dist_bucket_mb;
  o.device = policy::ResolveDevice(cfg.run.device, env.local_rank, env.local_world_size);
  o.config = SharedConfigLines(cfg);
  if (env.rank > 0) {
    // Rank 0 reports; the others only warn, with their rank in every line.
    spdlog::set_pattern(fmt::format("[%H:%M:%S] [rank {}] [%^%l%$] %v", env.rank));
    if (spdlog::get_level() < spdlog::level::warn) spdlog::set_level(spdlog::level::warn);
  }
  comm_ = std::make_unique<trainers::Comm>(env, o);
  trainers::SetProcessComm(comm_.get());
  if (env.rank == 0)
    spdlog::info("data-parallel job: {} ranks ({}), rendezvous at {}:{}, one config (fingerprint {:016x})",
                 env.world_size, comm_->backend(), env.master_addr, env.master_port,
                 HashBytes(o.config));
  return true;
}

}  // namespace rlid::cli

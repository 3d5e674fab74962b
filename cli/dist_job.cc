#include "cli/dist_job.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cstdlib>

#include "core/error.h"
#include "core/interrupt.h"
#include "core/launch.h"
#include "policy/device.h"
#include "policy/runtime.h"

namespace rlid::cli {

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
  if (env.rank > 0) {
    // Rank 0 reports; the others only warn, with their rank in every line.
    spdlog::set_pattern(fmt::format("[%H:%M:%S] [rank {}] [%^%l%$] %v", env.rank));
    if (spdlog::get_level() < spdlog::level::warn) spdlog::set_level(spdlog::level::warn);
  }
  comm_ = std::make_unique<trainers::Comm>(env, o);
  trainers::SetProcessComm(comm_.get());
  if (env.rank == 0)
    spdlog::info("data-parallel job: {} ranks ({}), rendezvous at {}:{}", env.world_size,
                 comm_->backend(), env.master_addr, env.master_port);
  return true;
}

}  // namespace rlid::cli

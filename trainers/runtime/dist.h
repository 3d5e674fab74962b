// Data parallelism on LibTorch's own distributed engine, c10d (docs/distributed.md).
// A job is N ranks (processes). They meet through a c10d TCPStore that rank 0
// hosts at MASTER_ADDR:MASTER_PORT, then talk through a c10d ProcessGroupGloo
// (CPU; NCCL when the model is on CUDA and LibTorch was built with it). No
// other networking exists in rlid.
//
// Comm is what the trainers see: the rank, the world size, and the few
// collectives an update needs (sums of scalars, variable-length gathers,
// flat-bucket gradient all-reduce, parameter broadcast). A single process gets
// a Comm of size 1 whose collectives return their input, so every trainer has
// one code path.
//
// Faults: every collective waits at most the job's timeout. When one fails,
// the message names the rank(s) responsible: each rank keeps a heartbeat
// counter and a progress mark ("iteration 3 update") in the store, and the
// failing rank reads them (a rank whose heartbeat stopped is dead or frozen; a
// live rank whose mark lags is stuck). A rank that cannot reach the store at
// all learns that rank 0, its host, is gone, or frozen when the store stops
// answering: every store call returns within the timeout too (c10d's own
// TCPStore client would wait for a frozen or silent server forever).
#pragma once

#include <torch/torch.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace rlid::trainers {

// Where this process stands in a job, from torchrun's variables: RANK,
// WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT. Without WORLD_SIZE (or
// WORLD_SIZE=1) the process is a job of one.
struct DistEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;  // ranks on this machine (LOCAL_WORLD_SIZE; default WORLD_SIZE)
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // ConfigError naming the variable for malformed or inconsistent values
  // (RANK outside [0, WORLD_SIZE), a port outside 1..65535, RANK missing).
  static DistEnv FromEnvironment();
};

// Job settings ([run] dist_* keys).
struct DistOptions {
  double timeout_s = 300;   // rendezvous, every collective and every store call
  int64_t bucket_mb = 25;   // gradient all-reduce bucket size
  torch::Device device{torch::kCPU};
  // What every rank must agree on, as "path = value" lines (the resolved
  // config less the keys that may differ per rank). Rank 0 compares every
  // rank's at the rendezvous and refuses a job whose ranks differ.
  std::string config;
};

class Comm {
 public:
  // A job of one: every collective returns its input.
  Comm();
  // Joins the job `env` describes (a job of one when env.world_size == 1):
  // TCPStore rendezvous (rank 0 hosts it), the config check, then the process
  // group. DistError when the store does not answer or the other ranks do not
  // all arrive within the timeout (each step waits at most timeout_s);
  // ConfigError, on every rank, naming the rank and the keys, when a rank's
  // options.config differs from rank 0's.
  Comm(const DistEnv& env, const DistOptions& options);
  ~Comm();
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;

  int rank() const { return rank_; }
  // Where this rank's tensors live (DistOptions::device; the CPU for a job of one).
  torch::Device device() const { return options_.device; }
  int size() const { return size_; }
  bool distributed() const { return size_ > 1; }
  const std::string& backend() const { return backend_; }

  // ---- collectives (every rank must call them in the same order) ------------
  // `what` names the collective in fault messages ("gradients", "metrics").
  // Elementwise sum over ranks.
  std::vector<double> Sum(std::vector<double> values, const char* what);
  double Sum(double value, const char* what) { return Sum(std::vector<double>{value}, what)[0]; }
  double Max(double value, const char* what);
  // Every rank's vector, in rank order (lengths may differ).
  std::vector<std::vector<double>> Gather(const std::vector<double>& values, const char* what);
  std::vector<std::vector<int64_t>> Gather(const std::vector<int64_t>& values, const char* what);
  // Sums the gradients of `params` over ranks, in flat buckets of at most
  // bucket_mb (per dtype). A parameter with a gradient on some rank gets one on
  // every rank (zeros where it had none); one with no gradient anywhere keeps
  // none, as in a single process (AdamW skips it).
  void AllReduceGradients(const std::vector<torch::Tensor>& params);
  // Overwrites every tensor with rank `root`'s values (parameters, buffers).
  void Broadcast(const std::vector<torch::Tensor>& tensors, int root, const char* what);
  void Barrier(const char* what);
  // Rank `root`'s string on every rank.
  std::string Broadcast(const std::string& s, int root, const char* what);
  // A value one rank publishes after long work that the others wait for
  // without a time limit (rank 0's warm start): AwaitPost returns once `from`
  // has posted `key`, and fails with a DistError as soon as `from` loses its
  // heartbeat, so only a dead or frozen rank ends the wait.
  void Post(const std::string& key, const std::string& value);
  std::string AwaitPost(const std::string& key, int from);

  // ---- progress marks and faults ----------------------------------------------
  // Records where this rank is ("iteration 3 rollout") for fault messages.
  void Mark(const std::string& where);
  // Test hook for the fault tests: RLID_FAULT_INJECT="rank=R,iteration=I,kind=exit|hang"
  // makes rank R exit (code 17, no cleanup) or freeze (SIGSTOP) when it marks
  // the start of iteration I. Does nothing without the variable.
  void MaybeInjectFault(int64_t iteration) const;

 private:
  struct Impl;
  // Runs `op`; a c10d failure becomes a DistError naming the responsible ranks.
  template <typename Op>
  auto Guard(const char* what, Op&& op) -> decltype(op());
  std::string Diagnose(const std::string& failure);
  void CheckIn();
  void AllReduce(torch::Tensor& t, bool max, const char* what);
  std::vector<torch::Tensor> AllGather(const torch::Tensor& t, const char* what);

  int rank_ = 0, size_ = 1;
  std::string backend_ = "none";
  DistOptions options_;
  std::string where_ = "start";
  std::unique_ptr<Impl> impl_;
};

// The process's job: size 1 unless rlid train/compare joined one (SetProcessComm).
Comm& ProcessComm();
// A job of one (for work one rank does alone).
Comm& SoloComm();
// Makes `comm` the process's job (null: back to a job of one). The caller owns it.
void SetProcessComm(Comm* comm);

// The contiguous block [begin, end) of `n` items rank `rank` of `size` owns
// (the first n % size ranks get one more).
std::pair<int64_t, int64_t> RankBlock(int64_t n, int rank, int size);

}  // namespace rlid::trainers

// c10d rendezvous, process group and collectives for data-parallel training.
#include "trainers/algorithms/dist.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <signal.h>
#include <unistd.h>

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef USE_C10D_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/interrupt.h"
#include "core/log.h"
#include "core/strings.h"

namespace rlid::trainers {
namespace {

using Millis = std::chrono::milliseconds;

// The first line of a c10d/Gloo message (the rest is a C++ source location).
std::string FirstLine(const std::string& s) { return s.substr(0, s.find('\n')); }

Millis ToMillis(double seconds) { return Millis(static_cast<int64_t>(seconds * 1000.0)); }

// The integer value of environment variable `name`, or `fallback` when unset.
int EnvInt(const char* name, int fallback, int lo, int hi) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < lo || x > hi)
    throw ConfigError(fmt::format("environment variable {}='{}' is not an integer in [{}, {}]", name,
                                  v, lo, hi),
                      "torchrun sets RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT; "
                      "rlid train --nproc N sets them for N ranks on this machine");
  return static_cast<int>(x);
}

bool IsLoopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

std::string BeatKey(int r) { return fmt::format("rlid/beat/{}", r); }
std::string MarkKey(int r) { return fmt::format("rlid/mark/{}", r); }

std::string ToString(const std::vector<uint8_t>& b) { return std::string(b.begin(), b.end()); }
std::vector<uint8_t> ToBytes(const std::string& s) { return std::vector<uint8_t>(s.begin(), s.end()); }

Comm*& ProcessCommPtr() {
  static Comm* comm = nullptr;
  return comm;
}

}  // namespace

DistEnv DistEnv::FromEnvironment() {
  DistEnv e;
  e.world_size = EnvInt("WORLD_SIZE", 1, 1, 1 << 16);
  if (e.world_size == 1) return e;
  if (!std::getenv("RANK"))
    throw ConfigError(fmt::format("WORLD_SIZE={} is set but RANK is not", e.world_size),
                      "set RANK (0..WORLD_SIZE-1) for every process, or use rlid train --nproc N");
  e.rank = EnvInt("RANK", 0, 0, e.world_size - 1);
  e.local_rank = EnvInt("LOCAL_RANK", e.rank, 0, e.world_size - 1);
  e.local_world_size = EnvInt("LOCAL_WORLD_SIZE", e.world_size, 1, e.world_size);
  if (const char* a = std::getenv("MASTER_ADDR"); a && *a) e.master_addr = a;
  e.master_port = EnvInt("MASTER_PORT", e.master_port, 1, 65535);
  return e;
}

struct Comm::Impl {
  c10::intrusive_ptr<c10d::Store> store;       // collectives' rendezvous + marks
  c10::intrusive_ptr<c10d::Store> beat_store;  // the heartbeat thread's own connection
  c10::intrusive_ptr<c10d::Backend> pg;  // Gloo or NCCL (c10d backends, used directly)
  std::string addr;
  int port = 0;
  std::string host = "rank 0";  // who hosts the store
  Millis timeout{0};
  // Heartbeat: rlid/beat/<rank> += 1 every second until stopped.
  std::thread beat;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;

  void BeatLoop(int rank) {
    try {
      std::unique_lock lk(mu);
      while (!stop) {
        lk.unlock();
        beat_store->add(BeatKey(rank), 1);
        lk.lock();
        cv.wait_for(lk, std::chrono::seconds(1), [&] { return stop; });
      }
    } catch (const std::exception&) {
      // The store is gone (rank 0 exited): the next collective reports it.
    }
  }
};

Comm::Comm() = default;

Comm::Comm(const DistEnv& env, const DistOptions& options)
    : rank_(env.rank), size_(env.world_size), options_(options) {
  if (size_ == 1) return;
  impl_ = std::make_unique<Impl>();
  impl_->addr = env.master_addr;
  impl_->port = env.master_port;
  impl_->timeout = ToMillis(options.timeout_s);
  // Under torchrun (TORCHELASTIC_USE_AGENT_STORE=True) its agent already hosts
  // the store at MASTER_ADDR:MASTER_PORT: every rank is a client, and keys
  // live under "/worker/attempt_<restart count>", as PyTorch's own workers do.
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  const bool agent_store = agent && std::string(agent) == "True";
  const char* attempt = std::getenv("TORCHELASTIC_RESTART_COUNT");
  const std::string prefix =
      fmt::format("/worker/attempt_{}", attempt && *attempt ? attempt : "0");
  if (agent_store) impl_->host = "torchrun's agent";
  try {
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(env.master_port);
    so.isServer = rank_ == 0 && !agent_store;
    if (!agent_store) so.numWorkers = size_;
    so.waitWorkers = !agent_store;
    so.timeout = impl_->timeout;
    c10d::TCPStoreOptions client = so;
    client.isServer = false;
    client.numWorkers = c10::nullopt;
    client.waitWorkers = false;
    auto open = [&](const c10d::TCPStoreOptions& o) -> c10::intrusive_ptr<c10d::Store> {
      auto tcp = c10::make_intrusive<c10d::TCPStore>(env.master_addr, o);
      if (!agent_store) return tcp;
      return c10::make_intrusive<c10d::PrefixStore>(prefix, tcp);
    };
    impl_->store = open(so);
    impl_->beat_store = open(client);
#ifdef USE_C10D_NCCL
    if (options.device.is_cuda()) {
      auto o = c10d::ProcessGroupNCCL::Options::create();
      o->timeout = impl_->timeout;
      impl_->pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(impl_->store, rank_, size_, o);
      backend_ = "nccl";
    }
#endif
    if (!impl_->pg) {
      auto o = c10d::ProcessGroupGloo::Options::create(impl_->timeout);
      if (IsLoopback(env.master_addr)) {
        o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
      } else if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
        o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
      } else {
        o->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      }
      o->threads = 2;
      impl_->pg = c10::make_intrusive<c10d::ProcessGroupGloo>(impl_->store, rank_, size_, o);
      backend_ = "gloo";
    }
  } catch (const std::exception& e) {
    throw DistError(
        fmt::format("rank {} of {} could not join the job at {}:{} within {} s: {}", rank_, size_,
                    env.master_addr, env.master_port, options.timeout_s, FirstLine(e.what())),
        "every rank must start within run.dist_timeout_s with the same WORLD_SIZE, MASTER_ADDR "
        "and MASTER_PORT, and rank 0 must be able to listen on MASTER_PORT");
  }
  impl_->beat = std::thread([this] { impl_->BeatLoop(rank_); });
  Mark("start");
}

Comm::~Comm() {
  if (!impl_) return;
  {
    std::lock_guard lk(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  if (impl_->beat.joinable()) impl_->beat.join();
}

template <typename Op>
auto Comm::Guard(const char* what, Op&& op) -> decltype(op()) {
  try {
    return op();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw DistError(
        Diagnose(fmt::format("rank {}: the collective '{}' at '{}' failed ({})", rank_, what, where_,
                             FirstLine(e.what()))),
        fmt::format("every rank stops when one does; resume from the last checkpoint with "
                    "--resume (with the same or another --nproc). A slow rank needs a larger "
                    "run.dist_timeout_s (now {} s)",
                    options_.timeout_s));
  }
}

std::string Comm::Diagnose(const std::string& failure) {
  // Whom to blame: ranks whose heartbeat stopped, then ranks whose mark lags.
  std::vector<int64_t> before(size_), after(size_);
  std::vector<std::string> marks(size_);
  try {
    for (int r = 0; r < size_; ++r) before[r] = impl_->store->add(BeatKey(r), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    for (int r = 0; r < size_; ++r) after[r] = impl_->store->add(BeatKey(r), 0);
    for (int r = 0; r < size_; ++r)
      marks[r] = impl_->store->check({MarkKey(r)}) ? ToString(impl_->store->get(MarkKey(r))) : "?";
  } catch (const std::exception&) {
    if (rank_ == 0 && impl_->host == "rank 0")
      return failure + "; the job's store (hosted by this rank) did not answer";
    return fmt::format(
        "{}; {}, which hosts the job's store at {}:{}, is gone (it exited, was killed or its "
        "machine is unreachable)",
        failure, impl_->host, impl_->addr, impl_->port);
  }
  std::vector<std::string> blame;
  for (int r = 0; r < size_; ++r)
    if (r != rank_ && after[r] == before[r])
      blame.push_back(fmt::format(
          "rank {} stopped responding (no heartbeat for 2.5 s: it exited, was killed or is "
          "frozen; its last mark: '{}')",
          r, marks[r]));
  if (blame.empty())
    for (int r = 0; r < size_; ++r)
      if (r != rank_ && marks[r] != where_)
        blame.push_back(fmt::format("rank {} is alive but at '{}', not '{}' (stuck or diverged)", r,
                                    marks[r], where_));
  if (blame.empty()) return failure + "; every rank still has a heartbeat and the same mark";
  return fmt::format("{}: {}", Join(blame, "; "), failure);
}

void Comm::Mark(const std::string& where) {
  where_ = where;
  if (!impl_) return;
  Guard("progress mark", [&] { impl_->store->set(MarkKey(rank_), ToBytes(where)); });
}

void Comm::MaybeInjectFault(int64_t iteration) const {
  const char* spec = std::getenv("RLID_FAULT_INJECT");
  if (!spec || !*spec) return;
  int rank = -1;
  long long it = -1;
  char kind[16] = {0};
  if (std::sscanf(spec, "rank=%d,iteration=%lld,kind=%15s", &rank, &it, kind) != 3) return;
  if (rank != rank_ || it != iteration) return;
  spdlog::warn("RLID_FAULT_INJECT: rank {} {} at iteration {}", rank_, kind, iteration);
  if (std::string(kind) == "hang") ::raise(SIGSTOP);
  if (std::string(kind) == "exit") std::_Exit(17);
}

void Comm::AllReduce(torch::Tensor& t, bool max, const char* what) {
  if (!impl_) return;
  Guard(what, [&] {
    std::vector<at::Tensor> v{t};
    c10d::AllreduceOptions o;
    o.reduceOp = max ? c10d::ReduceOp::MAX : c10d::ReduceOp::SUM;
    o.timeout = impl_->timeout;
    impl_->pg->allreduce(v, o)->wait(impl_->timeout);
  });
}

std::vector<torch::Tensor> Comm::AllGather(const torch::Tensor& t, const char* what) {
  if (!impl_) return {t.clone()};
  return Guard(what, [&] {
    std::vector<std::vector<at::Tensor>> out(1);
    for (int r = 0; r < size_; ++r) out[0].push_back(torch::empty_like(t));
    std::vector<at::Tensor> in{t.contiguous()};
    impl_->pg->allgather(out, in)->wait(impl_->timeout);
    return out[0];
  });
}

std::vector<double> Comm::Sum(std::vector<double> values, const char* what) {
  if (!impl_ || values.empty()) return values;
  auto t = torch::tensor(values, torch::kFloat64);
  AllReduce(t, /*max=*/false, what);
  return std::vector<double>(t.data_ptr<double>(), t.data_ptr<double>() + t.numel());
}

double Comm::Max(double value, const char* what) {
  if (!impl_) return value;
  auto t = torch::tensor({value}, torch::kFloat64);
  AllReduce(t, /*max=*/true, what);
  return t.item<double>();
}

namespace {
template <typename T>
std::vector<std::vector<T>> GatherVectors(const std::vector<T>& values,
                                          const std::function<std::vector<torch::Tensor>(const torch::Tensor&)>& gather,
                                          torch::ScalarType type) {
  auto lengths = gather(torch::tensor({static_cast<int64_t>(values.size())}, torch::kInt64));
  int64_t width = 1;
  for (const auto& l : lengths) width = std::max(width, l.item<int64_t>());
  auto padded = torch::zeros({width}, type);
  if (!values.empty())
    padded.slice(0, 0, static_cast<int64_t>(values.size()))
        .copy_(torch::tensor(values, type));
  auto parts = gather(padded);
  std::vector<std::vector<T>> out;
  for (size_t r = 0; r < parts.size(); ++r) {
    const T* p = parts[r].template data_ptr<T>();
    out.emplace_back(p, p + lengths[r].item<int64_t>());
  }
  return out;
}
}  // namespace

std::vector<std::vector<double>> Comm::Gather(const std::vector<double>& values, const char* what) {
  if (!impl_) return {values};
  return GatherVectors<double>(
      values, [&](const torch::Tensor& t) { return AllGather(t, what); }, torch::kFloat64);
}

std::vector<std::vector<int64_t>> Comm::Gather(const std::vector<int64_t>& values,
                                               const char* what) {
  if (!impl_) return {values};
  return GatherVectors<int64_t>(
      values, [&](const torch::Tensor& t) { return AllGather(t, what); }, torch::kInt64);
}

void Comm::AllReduceGradients(const std::vector<torch::Tensor>& params) {
  if (!impl_) return;
  torch::NoGradGuard ng;
  // Which parameters have a gradient anywhere.
  std::vector<double> has(params.size(), 0.0);
  for (size_t i = 0; i < params.size(); ++i) has[i] = params[i].grad().defined() ? 1.0 : 0.0;
  has = Sum(has, "gradient layout");
  std::vector<torch::Tensor> grads;
  for (size_t i = 0; i < params.size(); ++i) {
    if (has[i] == 0) continue;
    auto p = params[i];
    if (!p.grad().defined()) p.mutable_grad() = torch::zeros_like(p);
    grads.push_back(p.grad());
  }
  // Flat buckets of consecutive gradients of one dtype and device.
  const int64_t limit = std::max<int64_t>(1, options_.bucket_mb) << 20;
  size_t i = 0;
  while (i < grads.size()) {
    size_t j = i;
    int64_t bytes = 0;
    while (j < grads.size() && grads[j].scalar_type() == grads[i].scalar_type() &&
           grads[j].device() == grads[i].device() &&
           (j == i || bytes + grads[j].nbytes() <= static_cast<size_t>(limit)))
      bytes += static_cast<int64_t>(grads[j++].nbytes());
    std::vector<torch::Tensor> flat_parts;
    for (size_t k = i; k < j; ++k) flat_parts.push_back(grads[k].reshape({-1}));
    auto flat = torch::cat(flat_parts);
    const bool widen = flat.scalar_type() != torch::kFloat32 && flat.scalar_type() != torch::kFloat64;
    if (widen) flat = flat.to(torch::kFloat32);
    AllReduce(flat, /*max=*/false, "gradients");
    int64_t off = 0;
    for (size_t k = i; k < j; ++k) {
      const int64_t n = grads[k].numel();
      grads[k].copy_(flat.slice(0, off, off + n).view(grads[k].sizes()));
      off += n;
    }
    i = j;
  }
}

void Comm::Broadcast(const std::vector<torch::Tensor>& tensors, int root, const char* what) {
  if (!impl_) return;
  torch::NoGradGuard ng;
  for (const auto& t0 : tensors) {
    auto t = t0.detach();
    const bool direct = t.is_contiguous() && (t.scalar_type() == torch::kFloat32 ||
                                              t.scalar_type() == torch::kFloat64 ||
                                              t.scalar_type() == torch::kInt64);
    auto buf = direct ? t : t.to(torch::kFloat32).contiguous();
    Guard(what, [&] {
      std::vector<at::Tensor> v{buf};
      c10d::BroadcastOptions o;
      o.rootRank = root;
      o.timeout = impl_->timeout;
      impl_->pg->broadcast(v, o)->wait(impl_->timeout);
    });
    if (!direct) t.copy_(buf);
  }
}

std::string Comm::Broadcast(const std::string& s, int root, const char* what) {
  if (!impl_) return s;
  std::vector<int64_t> bytes;
  if (rank_ == root)
    for (unsigned char ch : s) bytes.push_back(ch);
  const auto all = Gather(bytes, what);
  return std::string(all[root].begin(), all[root].end());
}

void Comm::Post(const std::string& key, const std::string& value) {
  if (!impl_) return;
  Guard("post", [&] { impl_->store->set("rlid/post/" + key, ToBytes(value)); });
}

std::string Comm::AwaitPost(const std::string& key, int from) {
  if (!impl_) throw InternalError(fmt::format("AwaitPost('{}') in a job of one", key));
  const std::string k = "rlid/post/" + key;
  int64_t last_beat = -1;
  int still = 0;  // consecutive checks without a heartbeat of `from`
  while (true) {
    ThrowIfInterrupted();
    if (Guard("wait", [&] { return impl_->store->check({k}); }))
      return Guard("wait", [&] { return ToString(impl_->store->get(k)); });
    const int64_t beat = Guard("wait", [&] { return impl_->store->add(BeatKey(from), 0); });
    still = beat == last_beat ? still + 1 : 0;
    last_beat = beat;
    if (still >= 5)
      throw DistError(Diagnose(fmt::format("rank {} waited for rank {} to post '{}'", rank_, from, key)),
                      "every rank stops when one does");
    std::this_thread::sleep_for(std::chrono::seconds(1));
  }
}

void Comm::Barrier(const char* what) {
  if (!impl_) return;
  Guard(what, [&] {
    c10d::BarrierOptions o;
    o.timeout = impl_->timeout;
    impl_->pg->barrier(o)->wait(impl_->timeout);
  });
}

Comm& SoloComm() {
  static Comm single;
  return single;
}

Comm& ProcessComm() { return ProcessCommPtr() ? *ProcessCommPtr() : SoloComm(); }

void SetProcessComm(Comm* comm) { ProcessCommPtr() = comm; }

std::pair<int64_t, int64_t> RankBlock(int64_t n, int rank, int size) {
  const int64_t base = n / size, extra = n % size;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

}  // namespace rlid::trainers

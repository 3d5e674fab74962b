// c10d rendezvous, process group and collectives for data-parallel training.
#include "trainers/runtime/dist.h"

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
#include <cmath>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "core/error.h"
#include "core/hash.h"
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

// "3 s", "0.5 s" (to a tenth of a second).
std::string Seconds(Millis t) { return fmt::format("{:g} s", std::round(t.count() / 100.0) / 10.0); }

// A c10d store whose every call returns within a deadline. c10d's TCPStore
// client waits in recv() without a limit for the server's answer (the ping
// that opens it, add, check, the cancel of a timed-out wait), so a frozen
// (SIGSTOPped) host or a program on MASTER_PORT that accepts and never answers
// would block a rank forever. Here each call runs on the store's own thread
// and the caller waits at most the deadline; past it the call throws
// c10::DistStoreError and the store is *stuck*: every later call throws at
// once, and the thread and the TCPStore it holds are abandoned (never joined
// or destroyed), since the blocked recv() may never return.
class BoundedStore : public c10d::Store {
 public:
  // `where` names the store in messages ("127.0.0.1:29500"); `timeout` bounds
  // every call that does not wait for a key (and is added to those that do).
  BoundedStore(std::string where, Millis timeout)
      : c10d::Store(timeout), where_(std::move(where)), shared_(std::make_shared<Shared>()) {
    worker_ = std::thread(&BoundedStore::Loop, shared_);
  }
  ~BoundedStore() override {
    {
      std::lock_guard lk(shared_->mu);
      shared_->stop = true;
    }
    shared_->cv.notify_all();
    if (!stuck_) {
      worker_.join();
      return;
    }
    // The thread may wake up during exit(): it must not destroy the TCPStore then.
    new std::shared_ptr<Shared>(shared_);  // NOLINT: deliberately leaked
    worker_.detach();
  }

  // Makes the store with `open` (a TCPStore constructor: connect + handshake)
  // on the store's thread, waiting at most `limit`.
  void Open(std::function<c10::intrusive_ptr<c10d::Store>()> open, Millis limit) {
    Call("connect", limit, [open = std::move(open)](Shared& s) {
      s.inner = open();
      return 0;
    });
  }
  bool stuck() const { return stuck_; }
  const std::string& where() const { return where_; }

  c10::intrusive_ptr<c10d::Store> clone() override {
    auto inner = Call("clone", timeout_, [](Shared& s) { return s.inner->clone(); });
    auto copy = c10::make_intrusive<BoundedStore>(where_, timeout_);
    copy->Open([inner] { return inner; }, timeout_);
    return copy;
  }
  using c10d::Store::set;
  void set(const std::string& key, const std::vector<uint8_t>& value) override {
    Call("set", timeout_, [key, value](Shared& s) {
      s.inner->set(key, value);
      return 0;
    });
  }
  using c10d::Store::compareSet;
  std::vector<uint8_t> compareSet(const std::string& key, const std::vector<uint8_t>& current,
                                  const std::vector<uint8_t>& desired) override {
    return Call("compareSet", timeout_, [key, current, desired](Shared& s) {
      return s.inner->compareSet(key, current, desired);
    });
  }
  // get waits up to the store's timeout for the key, then asks the server.
  std::vector<uint8_t> get(const std::string& key) override {
    return Call("get", 2 * timeout_, [key](Shared& s) { return s.inner->get(key); });
  }
  int64_t add(const std::string& key, int64_t value) override {
    return Call("add", timeout_, [key, value](Shared& s) { return s.inner->add(key, value); });
  }
  bool deleteKey(const std::string& key) override {
    return Call("deleteKey", timeout_, [key](Shared& s) { return s.inner->deleteKey(key); });
  }
  bool check(const std::vector<std::string>& keys) override {
    return Call("check", timeout_, [keys](Shared& s) { return s.inner->check(keys); });
  }
  int64_t getNumKeys() override {
    return Call("getNumKeys", timeout_, [](Shared& s) { return s.inner->getNumKeys(); });
  }
  void wait(const std::vector<std::string>& keys) override { wait(keys, timeout_); }
  // Waits at most the store's timeout, whatever `timeout` asks (Gloo asks for
  // c10d's default of 300 s): nothing in a job waits longer than dist_timeout_s.
  void wait(const std::vector<std::string>& keys, const Millis& timeout) override {
    const Millis t = timeout == kNoTimeout ? timeout_ : std::min(timeout, timeout_);
    Call("wait", t + timeout_, [keys, t](Shared& s) {
      s.inner->wait(keys, t);
      return 0;
    });
  }
  void setTimeout(const Millis& timeout) override {
    timeout_ = timeout;
    Call("setTimeout", timeout_, [timeout](Shared& s) {
      s.inner->setTimeout(timeout);
      return 0;
    });
  }
  void append(const std::string& key, const std::vector<uint8_t>& value) override {
    Call("append", timeout_, [key, value](Shared& s) {
      s.inner->append(key, value);
      return 0;
    });
  }
  std::vector<std::vector<uint8_t>> multiGet(const std::vector<std::string>& keys) override {
    return Call("multiGet", 2 * timeout_, [keys](Shared& s) { return s.inner->multiGet(keys); });
  }
  void multiSet(const std::vector<std::string>& keys,
                const std::vector<std::vector<uint8_t>>& values) override {
    Call("multiSet", timeout_, [keys, values](Shared& s) {
      s.inner->multiSet(keys, values);
      return 0;
    });
  }
  // Set once by Open, before any caller can ask.
  bool hasExtendedApi() const override { return shared_->inner && shared_->inner->hasExtendedApi(); }

 private:
  // What the caller and the store's thread share; the thread owns it too, so
  // an abandoned call never touches a destroyed store.
  struct Shared {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::function<void()>> tasks;
    bool stop = false;
    c10::intrusive_ptr<c10d::Store> inner;  // used on the store's thread only
  };

  static void Loop(std::shared_ptr<Shared> s) {
    std::unique_lock lk(s->mu);
    while (true) {
      s->cv.wait(lk, [&] { return s->stop || !s->tasks.empty(); });
      if (s->tasks.empty()) return;
      auto task = std::move(s->tasks.front());
      s->tasks.pop_front();
      lk.unlock();
      task();
      lk.lock();
    }
  }

  // Runs `f(shared)` on the store's thread; `f` owns copies of its arguments,
  // since an abandoned call may run after its caller has returned.
  template <typename F>
  auto Call(const char* op, Millis limit, F f) -> decltype(f(std::declval<Shared&>())) {
    using R = decltype(f(std::declval<Shared&>()));
    if (stuck_)
      C10_THROW_ERROR(DistStoreError,
                      fmt::format("the job's store at {} did not answer an earlier call within its "
                                  "deadline",
                                  where_));
    auto task = std::make_shared<std::packaged_task<R()>>(
        [s = shared_, f = std::move(f)]() mutable { return f(*s); });
    auto done = task->get_future();
    {
      std::lock_guard lk(shared_->mu);
      shared_->tasks.emplace_back([task] { (*task)(); });
    }
    shared_->cv.notify_all();
    if (done.wait_for(limit) != std::future_status::ready) {
      stuck_ = true;
      C10_THROW_ERROR(DistStoreError, fmt::format("the job's store at {} did not answer '{}' within {}",
                                                  where_, op, Seconds(limit)));
    }
    return done.get();
  }

  std::string where_;
  std::shared_ptr<Shared> shared_;
  std::thread worker_;
  std::atomic<bool> stuck_{false};
};

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
  c10::intrusive_ptr<BoundedStore> bounded;       // the connection `store` uses
  c10::intrusive_ptr<BoundedStore> beat_bounded;  // the heartbeat thread's own connection
  c10::intrusive_ptr<c10d::Store> store;          // collectives' rendezvous + marks
  c10::intrusive_ptr<c10d::Store> beat_store;
  c10::intrusive_ptr<c10d::Backend> pg;  // Gloo or NCCL (c10d backends, used directly)
  std::string addr;
  int port = 0;
  std::string host = "rank 0";  // who hosts the store
  Millis timeout{0};
  bool failed = false;  // a collective or the rendezvous failed: abandon, do not close
  // Heartbeat: rlid/beat/<rank> += 1 every second until stopped.
  std::thread beat;
  std::mutex mu;
  std::condition_variable cv;
  bool stop = false;

  // Rendezvous: connects `store` and the heartbeat's own `beat_store` to the
  // job's TCPStore (hosted by rank 0, or by torchrun's agent), each connection
  // within what is left of the timeout. DistError when it does not answer.
  void OpenStores(const DistEnv& env, int rank, int size);
  // The process group over `store`: NCCL for a CUDA device when compiled in,
  // else Gloo. Returns the backend's name; DistError when the ranks cannot connect.
  std::string ConnectBackend(const DistEnv& env, const torch::Device& device, int rank, int size);
  // Rank 0's side of the check-in: waits for every rank's config, compares
  // them with `mine` and posts the verdict. Other ranks: AwaitVerdict.
  void JudgeConfigs(int size, const std::string& mine);
  void AwaitVerdict(int rank, int size);
  // Rank 0 after a failed verdict: its store goes when it exits, so it waits
  // (briefly) until `readers` ranks have read the verdict.
  void Linger(int readers);
  // Marks the job failed and returns the error of a rank that could not join.
  DistError JoinError(const std::string& what);

  void BeatLoop(int rank) {
    try {
      std::unique_lock lk(mu);
      while (!stop) {
        lk.unlock();
        beat_store->add(BeatKey(rank), 1);  // returns within the timeout (BoundedStore)
        lk.lock();
        cv.wait_for(lk, std::chrono::seconds(1), [&] { return stop; });
      }
    } catch (const std::exception&) {
      // The store is gone or stuck: the next collective reports it.
    }
  }
};

namespace {

// Slack on top of dist_timeout_s for a c10d call that has its own timeout of
// dist_timeout_s, so that its own (more specific) error arrives first.
constexpr Millis kSlack{2000};
// How often the check-in looks at the store while it waits.
constexpr Millis kCheckInPoll{50};

std::string ConfigKey(int r) { return fmt::format("rlid/config/{}", r); }
const char* kVerdictKey = "rlid/config/verdict";
const char* kSeenKey = "rlid/config/seen";  // how many ranks > 0 read the verdict
const char* kConfigHint =
    "start every rank with the same config file and the same --set overrides (only run.threads "
    "and run.device may differ between ranks)";

// "path = value" lines as a map (the format of DistOptions::config).
std::map<std::string, std::string> ConfigLines(const std::string& text) {
  std::map<std::string, std::string> out;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) end = text.size();
    const std::string line = text.substr(at, end - at);
    const size_t eq = line.find(" = ");
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 3);
    else if (!line.empty()) out[line] = "";
    at = end + 1;
  }
  return out;
}

// What differs between rank 0's config and rank `r`'s ("trainer.seed = 1 on
// rank 0, 2 on rank 1"), at most `limit` keys.
std::string ConfigDiff(const std::string& mine, const std::string& theirs, int r, size_t limit = 8) {
  const auto a = ConfigLines(mine), b = ConfigLines(theirs);
  std::vector<std::string> diff;
  size_t n = 0;
  auto note = [&](const std::string& key, const std::string& va, const std::string& vb) {
    if (n++ < limit) diff.push_back(fmt::format("{} = {} on rank 0, {} on rank {}", key, va, vb, r));
  };
  for (const auto& [k, v] : a) {
    auto it = b.find(k);
    if (it == b.end()) note(k, v, "(absent)");
    else if (it->second != v) note(k, v, it->second);
  }
  for (const auto& [k, v] : b)
    if (!a.count(k)) note(k, "(absent)", v);
  if (n == 0) return "their resolved configs differ in layout";
  if (n > limit) diff.push_back(fmt::format("and {} more", n - limit));
  return Join(diff, "; ");
}

}  // namespace

Comm::Comm() = default;

Comm::Comm(const DistEnv& env, const DistOptions& options)
    : rank_(env.rank), size_(env.world_size), options_(options) {
  if (size_ == 1) return;
  impl_ = std::make_unique<Impl>();
  impl_->addr = env.master_addr;
  impl_->port = env.master_port;
  impl_->timeout = ToMillis(options.timeout_s);
  impl_->OpenStores(env, rank_, size_);
  CheckIn();
  backend_ = impl_->ConnectBackend(env, options.device, rank_, size_);
  impl_->beat = std::thread([this] { impl_->BeatLoop(rank_); });
  Mark("start");
}

void Comm::Impl::OpenStores(const DistEnv& env, int rank, int size) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  auto left = [&] {
    return std::max(Millis(0), std::chrono::duration_cast<Millis>(
                                   deadline - std::chrono::steady_clock::now()));
  };
  // Under torchrun (TORCHELASTIC_USE_AGENT_STORE=True) its agent already hosts
  // the store at MASTER_ADDR:MASTER_PORT: every rank is a client, and keys
  // live under "/worker/attempt_<restart count>", as PyTorch's own workers do.
  const char* agent = std::getenv("TORCHELASTIC_USE_AGENT_STORE");
  const bool agent_store = agent && std::string(agent) == "True";
  const char* attempt = std::getenv("TORCHELASTIC_RESTART_COUNT");
  const std::string prefix =
      fmt::format("/worker/attempt_{}", attempt && *attempt ? attempt : "0");
  if (agent_store) host = "torchrun's agent";
  const std::string where = fmt::format("{}:{}", env.master_addr, env.master_port);
  try {
    // Each connection (connect + c10d's handshake) gets what is left of
    // dist_timeout_s; the ranks then check in with their configs (CheckIn),
    // which rank 0 waits for at most dist_timeout_s.
    c10d::TCPStoreOptions so;
    so.port = static_cast<uint16_t>(env.master_port);
    so.isServer = rank == 0 && !agent_store;
    if (so.isServer) so.numWorkers = size;
    so.waitWorkers = false;  // CheckIn waits, naming the ranks that did not come
    so.timeout = timeout;
    c10d::TCPStoreOptions client = so;
    client.isServer = false;
    client.numWorkers = c10::nullopt;
    auto open = [&](const c10d::TCPStoreOptions& o,
                    c10::intrusive_ptr<BoundedStore>& into) -> c10::intrusive_ptr<c10d::Store> {
      into = c10::make_intrusive<BoundedStore>(where, timeout);
      const std::string master = env.master_addr;
      into->Open([master, o] { return c10::make_intrusive<c10d::TCPStore>(master, o); },
                 left() + kSlack);
      if (!agent_store) return into;
      return c10::make_intrusive<c10d::PrefixStore>(prefix, into);
    };
    store = open(so, bounded);
    beat_store = open(client, beat_bounded);
  } catch (const std::exception& e) {
    failed = true;
    throw DistError(
        fmt::format("rank {} of {} could not join the job at {} within {}: {}", rank, size, where,
                    Seconds(timeout), FirstLine(e.what())),
        "every rank must start within run.dist_timeout_s with the same WORLD_SIZE, MASTER_ADDR "
        "and MASTER_PORT, and rank 0 must be able to listen on MASTER_PORT (a program that "
        "holds the port and does not answer as a c10d store makes the ranks wait and fail)");
  }
}

std::string Comm::Impl::ConnectBackend(const DistEnv& env, const torch::Device& device, int rank,
                                       int size) {
  try {
#ifdef USE_C10D_NCCL
    if (device.is_cuda()) {
      auto o = c10d::ProcessGroupNCCL::Options::create();
      o->timeout = timeout;
      pg = c10::make_intrusive<c10d::ProcessGroupNCCL>(store, rank, size, o);
      return "nccl";
    }
#else
    (void)device;
#endif
    auto o = c10d::ProcessGroupGloo::Options::create(timeout);
    if (IsLoopback(env.master_addr)) {
      o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
    } else if (const char* ifname = std::getenv("GLOO_SOCKET_IFNAME"); ifname && *ifname) {
      o->devices.push_back(c10d::ProcessGroupGloo::createDeviceForInterface(ifname));
    } else {
      o->devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
    }
    o->threads = 2;
    pg = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, size, o);
    return "gloo";
  } catch (const std::exception& e) {
    failed = true;
    throw DistError(
        fmt::format("rank {} of {} could not connect to the other ranks of the job at {}:{} "
                    "within {}: {}",
                    rank, size, env.master_addr, env.master_port, Seconds(timeout),
                    FirstLine(e.what())),
        "the ranks must reach each other (across machines Gloo uses GLOO_SOCKET_IFNAME, else "
        "the interface the host name resolves to)");
  }
}

// Every rank posts its config; rank 0 waits for all of them, compares, and
// posts the verdict ("ok", or what differs) that the others wait for. Rank 0
// started before any other rank could reach its store, so a rank waits for
// the verdict at most dist_timeout_s (+ slack) after posting.
void Comm::CheckIn() {
  try {
    impl_->store->set(ConfigKey(rank_), ToBytes(options_.config));
    if (rank_ == 0) {
      impl_->JudgeConfigs(size_, options_.config);
    } else {
      impl_->AwaitVerdict(rank_, size_);
    }
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    throw impl_->JoinError(
        fmt::format("rank {} of {} lost the job's store at {}:{} while joining: {}", rank_, size_,
                    impl_->addr, impl_->port, FirstLine(e.what())));
  }
}

DistError Comm::Impl::JoinError(const std::string& what) {
  failed = true;
  return DistError(what, "every rank must start within run.dist_timeout_s (now " +
                             Seconds(timeout) +
                             ") with the same WORLD_SIZE, MASTER_ADDR and MASTER_PORT");
}

void Comm::Impl::Linger(int readers) {
  const auto until = std::chrono::steady_clock::now() + std::min(timeout, Millis(10000));
  while (store->add(kSeenKey, 0) < readers && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(kCheckInPoll);
}

void Comm::Impl::JudgeConfigs(int size, const std::string& mine) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<int> missing;
  for (int r = 1; r < size; ++r) missing.push_back(r);
  while (!missing.empty()) {
    std::vector<int> still;
    for (int r : missing)
      if (!store->check({ConfigKey(r)})) still.push_back(r);
    missing = still;
    if (missing.empty()) break;
    if (std::chrono::steady_clock::now() - start > timeout) {
      const std::string msg = fmt::format(
          "rank 0 of {} waited {} for rank(s) {} to join the job at {}:{}; they "
          "did not",
          size, Seconds(timeout), fmt::join(missing, ", "), addr, port);
      store->set(kVerdictKey, ToBytes("fail\n" + msg));
      Linger(size - 1 - static_cast<int>(missing.size()));
      throw JoinError(msg);
    }
    ThrowIfInterrupted();
    std::this_thread::sleep_for(kCheckInPoll);
  }
  std::vector<std::string> differ;
  for (int r = 1; r < size; ++r) {
    const std::string theirs = ToString(store->get(ConfigKey(r)));
    if (theirs != mine)
      differ.push_back(fmt::format("rank {}'s config differs from rank 0's: {}", r,
                                   ConfigDiff(mine, theirs, r)));
  }
  if (differ.empty()) {
    store->set(kVerdictKey, ToBytes(std::string("ok\n")));
    return;
  }
  const std::string msg = Join(differ, "; ");
  store->set(kVerdictKey, ToBytes("config\n" + msg));
  Linger(size - 1);
  failed = true;
  throw ConfigError(msg, kConfigHint);
}

void Comm::Impl::AwaitVerdict(int rank, int size) {
  const auto start = std::chrono::steady_clock::now();
  while (!store->check({kVerdictKey})) {
    if (std::chrono::steady_clock::now() - start > timeout + kSlack)
      throw JoinError(
          fmt::format("rank {} of {} joined the job at {}:{}, but rank 0 did not "
                      "confirm it within {}",
                      rank, size, addr, port, Seconds(timeout)));
    ThrowIfInterrupted();
    std::this_thread::sleep_for(kCheckInPoll);
  }
  const std::string verdict = ToString(store->get(kVerdictKey));
  store->add(kSeenKey, 1);
  const size_t nl = verdict.find('\n');
  const std::string kind = verdict.substr(0, nl);
  const std::string msg = nl == std::string::npos ? "" : verdict.substr(nl + 1);
  if (kind == "ok") return;
  failed = true;
  if (kind == "config") throw ConfigError(msg, kConfigHint);  // msg names the rank
  throw JoinError(fmt::format("rank {}: {}", rank, msg));
}

Comm::~Comm() {
  if (!impl_) return;
  {
    std::lock_guard lk(impl_->mu);
    impl_->stop = true;
  }
  impl_->cv.notify_all();
  // Returns within the timeout: the heartbeat's store calls are bounded.
  if (impl_->beat.joinable()) impl_->beat.join();
  // After a failure the process group and the stores are abandoned, not
  // closed: closing them could wait on a frozen peer, and the process is
  // about to exit anyway.
  if (impl_->failed) (void)impl_.release();  // NOLINT: deliberately leaked
}

template <typename Op>
auto Comm::Guard(const char* what, Op&& op) -> decltype(op()) {
  try {
    return op();
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    impl_->failed = true;
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
    if (impl_->bounded->stuck())
      return fmt::format(
          "{}; {}, which hosts the job's store at {}:{}, did not answer within {} (it is frozen, "
          "e.g. stopped by SIGSTOP or a debugger, or its machine is unreachable)",
          failure, impl_->host, impl_->addr, impl_->port, Seconds(impl_->timeout));
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
    if (still >= 5) {
      impl_->failed = true;
      throw DistError(Diagnose(fmt::format("rank {} waited for rank {} to post '{}'", rank_, from, key)),
                      "every rank stops when one does");
    }
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

// The `external` environment: a child process per worker speaks rlid's env
// protocol (docs/external_env.md) and rlid sees an ordinary Env. Each State is
// a handle inside one worker process; NewState puts it on the least-loaded
// worker, so many episodes' steps run at once across workers (AsyncState).
// Every call has a timeout; a crashed, silent or confused worker is an
// EnvError naming the env, the message and its last output, never a hang.
#include "envs/external/external.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "core/check.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/interrupt.h"
#include "core/log.h"
#include "core/strings.h"
#include "core/subprocess.h"
#include "core/utf8.h"
#include "envs/api/conformance.h"
#include "envs/api/reasoning_oracle.h"
#include "envs/api/simple_env.h"

namespace rlid::envs {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxTextBytes = size_t{1} << 20;   // an observation or task
constexpr size_t kMaxWordingBytes = 300;            // a command or realisation
constexpr uint64_t kHashSeed = 0x65787465726e616cULL;  // "external"

// What an env said about itself in its hello reply.
struct Hello {
  std::string name, summary, instructions;
  int step_limit = 0;
  bool deterministic = true;
  int protocol = kExternalProtocolVersion;  // the version agreed on
  std::set<std::string> capabilities;
  std::string metadata;  // the metadata reply (a JSON object), "" without the capability
  bool Has(const std::string& c) const { return capabilities.count(c) > 0; }
};

std::string Shorten(std::string_view s, size_t n = 200) {
  std::string out(s.substr(0, n));
  if (s.size() > n) out += "...";
  return out;
}

std::string JsonTypeName(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

// A hash id sent by the env (string or integer) as 64 bits.
uint64_t HashId(const json& v) {
  return HashBytes(v.is_string() ? v.get<std::string>() : v.dump(), kHashSeed);
}

// Whitespace runs (newlines included) as one space: afterstates are one menu line.
std::string OneLine(std::string_view s) {
  std::string out;
  bool space = false;
  for (char c : s) {
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r') {
      space = !out.empty();
      continue;
    }
    if (space) out += ' ';
    space = false;
    out += c;
  }
  return out;
}

// ---- one worker process -----------------------------------------------------

class Worker {
 public:
  Worker(const ExternalParams& p, int index, std::string env_label)
      : p_(p), index_(index), label_(std::move(env_label)) {
    ChildOptions o;
    o.argv = p.command;
    o.cwd = p.cwd;
    // Log lines are tagged with the program, or the script an interpreter runs.
    std::string script = std::filesystem::path(p.command[0]).filename().string();
    static const std::set<std::string> kInterpreters = {"python", "python3", "node", "ruby",
                                                        "perl",   "bash",    "sh",   "julia"};
    if (kInterpreters.count(script))
      for (size_t i = 1; i < p.command.size(); ++i)
        if (!p.command[i].empty() && p.command[i][0] != '-') {
          script = p.command[i];
          break;
        }
    o.log_name = fmt::format("{}[{}]", std::filesystem::path(script).filename().string(), index);
    child_ = std::make_unique<ChildProcess>(std::move(o));
    if (label_.empty()) label_ = fmt::format("external env `{}`", child_->CommandLine());
  }

  int index() const { return index_; }
  bool healthy() const { return !broken_; }
  int64_t live = 0;  // open handles on this worker

  // Sends hello and checks the reply (protocol version, required fields). rlid
  // offers every version it speaks; an env that refuses the offer with a
  // version-1 error (a version-1 env that checks "protocol" == 1) is asked
  // again for version 1 alone.
  Hello Handshake() {
    json req = {{"op", "hello"},
                {"protocol", kExternalProtocolVersion},
                {"protocols", json::array()},
                {"params", p_.params},
                {"worker", index_},
                {"workers", p_.workers},
                // whether rlid reads the env's own afterstates: with "clone" it computes them
                // and with "none" shows none, so an env may skip the work
                {"afterstates", p_.afterstates == "auto" || p_.afterstates == "env"}};
    for (int v = kOldestExternalProtocolVersion; v <= kExternalProtocolVersion; ++v)
      req["protocols"].push_back(v);
    json r = ReceiveRaw(Send(req, "hello"), "hello", p_.start_timeout_s);
    if (r.contains("error") && r["error"].is_string()) {  // version 2 errors are objects
      spdlog::debug("{} refused hello with protocols {}; asking for version 1", Where(),
                    req["protocols"].dump());
      req.erase("protocols");
      req["protocol"] = kOldestExternalProtocolVersion;
      r = Call(std::move(req), "hello", p_.start_timeout_s);
    }
    r = Checked(std::move(r), "hello");  // a version-2 env's error (its env failed to start)
    Hello h;
    h.protocol =
        r.contains("protocol") && r["protocol"].is_number_integer() ? r["protocol"].get<int>() : -1;
    if (h.protocol < kOldestExternalProtocolVersion || h.protocol > kExternalProtocolVersion)
      Fail("hello",
           fmt::format("protocol version mismatch: rlid speaks {} to {}, the env replied {}",
                       kOldestExternalProtocolVersion, kExternalProtocolVersion,
                       r.contains("protocol") ? Shorten(r["protocol"].dump()) : "none"),
           /*kill=*/true);
    protocol_ = h.protocol;
    h.name = String(r, "name", "hello", /*required=*/true);
    if (h.name.empty() || h.name.size() > 64 ||
        !std::all_of(h.name.begin(), h.name.end(), [](char c) {
          return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
        }))
      Fail("hello", fmt::format("'name' must be 1-64 letters, digits, '_', '-' or '.', found '{}'",
                                Shorten(h.name)),
           true);
    label_ = fmt::format("env '{}'", h.name);
    h.summary = String(r, "summary", "hello", false);
    h.instructions = String(r, "instructions", "hello", false);
    h.step_limit = static_cast<int>(Int(r, "step_limit", "hello", true, 1, 1'000'000));
    h.deterministic = Bool(r, "deterministic", "hello", true);
    if (r.contains("capabilities")) {
      const json& caps = r["capabilities"];
      if (!caps.is_array())
        Fail("hello", fmt::format("'capabilities' must be an array of strings, found {}",
                                  JsonTypeName(caps)), true);
      for (const auto& c : caps) {
        if (!c.is_string())
          Fail("hello", fmt::format("'capabilities' must be an array of strings, found an element "
                                    "that is {}", JsonTypeName(c)), true);
        static const std::set<std::string> kKnown = {"clone",  "restore",  "close",    "compile",
                                                     "oracle", "metadata", "reasoning"};
        if (!kKnown.count(c.get<std::string>()))
          spdlog::debug("{} offers capability '{}', unknown to this rlid (ignored)", label_,
                        c.get<std::string>());
        h.capabilities.insert(c.get<std::string>());
      }
    }
    if (h.Has("metadata")) h.metadata = Metadata();
    return h;
  }

  // The env's metadata reply (capability "metadata"): a JSON object of at most 64 KB.
  std::string Metadata() {
    json r = Call({{"op", "metadata"}}, "metadata", p_.start_timeout_s);
    r.erase("id");
    std::string text = r.dump();
    if (text.size() > 65536)
      Fail("metadata",
           fmt::format("the reply is {} bytes, more than the 65536 allowed", text.size()), false);
    return text;
  }

  // Whether a state reply says the episode ended by the env's rules: version 1's
  // "terminal", version 2's "terminated" (Gymnasium's name; "truncated" apart).
  bool Terminated(const json& r, const std::string& what) {
    if (protocol_ == 1) return Bool(r, "terminal", what, false);
    if (r.contains("terminal") && !r.contains("terminated"))
      Fail(what,
           "a protocol-2 reply says 'terminated' (ended by the env's rules) and "
           "'truncated' (cut by a limit), not version 1's 'terminal'",
           false);
    return Bool(r, "terminated", what, false);
  }
  // Sends a request (an "id" is added) without waiting; returns its id.
  int64_t Send(json req, const std::string& what) {
    CheckHealthy(what);
    const int64_t id = ++next_id_;
    req["id"] = id;
    // Invalid UTF-8 (only ever in free text) is sent with U+FFFD in its place.
    const std::string line = req.dump(-1, ' ', false, json::error_handler_t::replace);
    if (spdlog::should_log(spdlog::level::trace)) spdlog::trace("{} <- {}", Where(), line);
    std::string error;
    if (!child_->WriteLine(line, p_.timeout_s, &error)) {
      child_->WaitForExit(1.0);
      Fail(what, fmt::format("cannot send the request: {}", error), true);
    }
    pending_.push_back(id);
    return id;
  }

  // Waits for the reply to request `id` (replies to other pending requests that
  // arrive first are kept for their own Receive); an error reply is an EnvError.
  json Receive(int64_t id, const std::string& what, double timeout_s = -1) {
    return Checked(ReceiveRaw(id, what, timeout_s), what);
  }

  // Receive, with an error reply returned as it is.
  json ReceiveRaw(int64_t id, const std::string& what, double timeout_s = -1) {
    if (auto it = stash_.find(id); it != stash_.end()) {
      json r = std::move(it->second);
      stash_.erase(it);
      return r;
    }
    CheckHealthy(what);
    if (timeout_s < 0) timeout_s = p_.timeout_s;
    for (;;) {
      std::string line;
      switch (child_->ReadLine(line, timeout_s)) {
        case ChildProcess::Read::kLine: break;
        case ChildProcess::Read::kTimeout:
          Fail(what, fmt::format("no reply within {:g} s", timeout_s), true);
        case ChildProcess::Read::kEof:
          child_->WaitForExit(1.0);  // for its exit status and last stderr lines
          Fail(what, fmt::format("the process closed its stdout ({})", child_->ExitDescription()),
               true);
        case ChildProcess::Read::kTooLong:
          Fail(what, "a reply line longer than 64 MB", true);
        case ChildProcess::Read::kInterrupted:
          broken_ = true;
          child_->Kill();
          ThrowIfInterrupted();
          Fail(what, "interrupted", true);
      }
      if (spdlog::should_log(spdlog::level::trace)) spdlog::trace("{} -> {}", Where(), line);
      if (Trim(line).empty()) continue;
      json r = json::parse(line, nullptr, /*allow_exceptions=*/false);
      if (r.is_discarded())
        Fail(what, fmt::format("a reply that is not JSON: '{}' (print your own messages to stderr, "
                               "not stdout)", Shorten(line)), true);
      if (!r.is_object())
        Fail(what, fmt::format("a reply that is not a JSON object: {}", Shorten(line)), true);
      if (!r.contains("id") || !r["id"].is_number_integer())
        Fail(what, fmt::format("a reply without an integer 'id': {}", Shorten(line)), true);
      const int64_t got = r["id"].get<int64_t>();
      auto at = std::find(pending_.begin(), pending_.end(), got);
      if (at == pending_.end())
        Fail(what, fmt::format("a reply with id {}, which no pending request has (pending: {})",
                               got, fmt::join(pending_, ", ")), true);
      pending_.erase(at);
      if (got == id) return r;
      stash_.emplace(got, std::move(r));
    }
  }

  // Sends a request and waits for its reply. An env at capacity (error code
  // "capacity") is asked again after waits of 0.05 s doubling to 2 s, for as
  // long as the request's timeout allows.
  json Call(json req, const std::string& what, double timeout_s = -1) {
    if (timeout_s < 0) timeout_s = p_.timeout_s;
    const auto start = std::chrono::steady_clock::now();
    for (double wait = 0.05;; wait = std::min(2 * wait, 2.0)) {
      json r = ReceiveRaw(Send(req, what), what, timeout_s);
      const double spent =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (ErrorCode(r) != "capacity" || spent + wait > timeout_s)
        return Checked(std::move(r), what);
      std::this_thread::sleep_for(std::chrono::duration<double>(wait));
    }
  }

  // The code of an error reply ("" for none; version 1's bare message is an
  // execution error).
  static std::string ErrorCode(const json& r) {
    if (!r.contains("error")) return "";
    const json& e = r["error"];
    if (e.is_object() && e.contains("code") && e["code"].is_string())
      return e["code"].get<std::string>();
    return "execution_error";
  }

  // Reading reply fields; a missing or mistyped field is an EnvError.
  std::string String(const json& r, const char* key, const std::string& what, bool required,
                     size_t max_bytes = kMaxTextBytes) {
    if (!r.contains(key) || r[key].is_null()) {
      if (required) Fail(what, fmt::format("the reply has no '{}'", key), false);
      return "";
    }
    if (!r[key].is_string())
      Fail(what, fmt::format("'{}' must be a string, found {}", key, JsonTypeName(r[key])), false);
    std::string s = r[key].get<std::string>();
    if (s.size() > max_bytes)
      Fail(what, fmt::format("'{}' is {} bytes, more than the {} allowed", key, s.size(), max_bytes),
           false);
    return s;
  }
  int64_t Int(const json& r, const char* key, const std::string& what, bool required, int64_t lo,
              int64_t hi, int64_t def = 0) {
    if (!r.contains(key) || r[key].is_null()) {
      if (required) Fail(what, fmt::format("the reply has no '{}'", key), false);
      return def;
    }
    if (!r[key].is_number_integer())
      Fail(what, fmt::format("'{}' must be an integer, found {}", key, JsonTypeName(r[key])), false);
    const int64_t v = r[key].is_number_unsigned() && r[key].get<uint64_t>() > INT64_MAX
                          ? INT64_MAX
                          : r[key].get<int64_t>();
    if (v < lo || v > hi)
      Fail(what, fmt::format("'{}' must be in [{}, {}], found {}", key, lo, hi, v), false);
    return v;
  }
  bool Bool(const json& r, const char* key, const std::string& what, bool def) {
    if (!r.contains(key) || r[key].is_null()) return def;
    if (!r[key].is_boolean())
      Fail(what, fmt::format("'{}' must be true or false, found {}", key, JsonTypeName(r[key])),
           false);
    return r[key].get<bool>();
  }
  double Number(const json& r, const char* key, const std::string& what, bool required) {
    if (!r.contains(key) || r[key].is_null()) {
      if (required) Fail(what, fmt::format("the reply has no '{}'", key), false);
      return 0.0;
    }
    if (!r[key].is_number())
      Fail(what, fmt::format("'{}' must be a number, found {}", key, JsonTypeName(r[key])), false);
    return r[key].get<double>();
  }

  // Throws the EnvError for a failed request. kill: the worker is unusable
  // (its process is stopped); otherwise only this request failed.
  [[noreturn]] void Fail(const std::string& what, const std::string& problem, bool kill) {
    if (kill && !broken_) {
      broken_ = true;
      broken_reason_ = problem;
      child_->Kill();
    }
    throw EnvError(fmt::format("{}: {}: {}", Where(), what, problem), LastOutput(problem));
  }

  // Marks the worker unusable and stops its process (a failed handshake).
  void Abandon(const std::string& reason) {
    if (broken_) return;
    broken_ = true;
    broken_reason_ = reason;
    child_->Kill();
  }

  // "env 'shop' (worker 1, pid 4242)".
  std::string Where() const {
    return fmt::format("{} (worker {}, pid {})", label_, index_, child_->pid());
  }

 private:
  void CheckHealthy(const std::string& what) {
    if (broken_)
      throw EnvError(fmt::format("{}: {}: this worker stopped earlier ({}); its states were lost",
                                 Where(), what, broken_reason_),
                     LastOutput(broken_reason_));
  }

  // A reply that carries "error" is the env refusing the request: version 1's
  // message, or version 2's {"code", "message"}.
  json Checked(json r, const std::string& what) {
    if (r.contains("error")) {
      const json& e = r["error"];
      const std::string msg = e.is_string() ? e.get<std::string>()
                              : e.is_object() && e.contains("message") && e["message"].is_string()
                                  ? e["message"].get<std::string>()
                                  : e.dump();
      if (ErrorCode(r) == "config_error")  // the env refuses its parameters: the user's config
        throw ConfigError(fmt::format("{}: the env refuses the [env] settings it was given: {}",
                                      Where(), Shorten(msg, 2000)),
                          "fix the key it names ([env] in the config, or --set env.KEY=VALUE); "
                          "docs/field_envs.md lists each adapter's keys and ranges");
      Fail(what,
           fmt::format("the env replied with an error [{}]: {}", ErrorCode(r), Shorten(msg, 2000)),
           false);
    }
    return r;
  }

  // The hint of an EnvError: the process's last words, its command and what
  // to try for this `problem`.
  std::string LastOutput(std::string_view problem) const {
    std::string out;
    const auto err = child_->LastStderrLines(5);
    if (!err.empty()) {
      out += "its last stderr lines:";
      for (const auto& l : err) out += "\n    " + Shorten(l, 300);
    }
    // An error reply is the last stdout line: the message quotes it already.
    const bool replied = problem.starts_with("the env replied with an error");
    if (!child_->last_stdout_line().empty() && !replied)
      out += fmt::format("{}its last stdout line: {}", out.empty() ? "" : "\n  ",
                         Shorten(child_->last_stdout_line(), 300));
    if (out.empty() && !replied) out = "it printed nothing on stderr";
    std::string fix;
    if (problem.starts_with("no reply within"))
      fix = "raise [env] timeout_s if the env is only slow; otherwise it is stuck on this request";
    else if (problem.find("closed its stdout") != std::string_view::npos ||
             problem.starts_with("cannot send"))
      fix = "the process exited: its last stderr lines say why; run the command by hand to see it";
    else if (problem.starts_with("the env replied with an error [capacity]"))
      fix =
          "the env had no room for the request for timeout_s seconds: raise [env] timeout_s, "
          "or play fewer episodes at once (num_envs)";
    else if (problem.starts_with("the env replied with an error [execution_error]"))
      fix = "fix the error the env names (the Python helper prints its traceback to stderr)";
    else if (problem.starts_with("the env replied with an error"))
      fix =
          "the env refused rlid's request: check that it implements the protocol version it "
          "announced (docs/external_env.md lists every message and its fields)";
    else
      fix = "docs/external_env.md lists every message and its fields";
    out += fmt::format("{}command: {}\n  to fix: {}", out.empty() ? "" : "\n  ",
                       child_->CommandLine(), fix);
    return out;
  }

  const ExternalParams& p_;
  int index_;
  std::string label_;
  std::unique_ptr<ChildProcess> child_;
  int64_t next_id_ = 0;
  std::deque<int64_t> pending_;
  std::map<int64_t, json> stash_;
  int protocol_ = kExternalProtocolVersion;  // agreed in hello
  bool broken_ = false;
  std::string broken_reason_;
};

// The workers of one env. Worker 0 starts with the env (its hello defines the
// env); the others start on first use. A broken worker is replaced by a fresh
// process when the next state needs one.
class Pool {
 public:
  explicit Pool(ExternalParams p) : p_(std::move(p)), workers_(p_.workers) {
    workers_[0] = std::make_shared<Worker>(p_, 0, "");
    hello_ = workers_[0]->Handshake();
  }
  const Hello& hello() const { return hello_; }
  const ExternalParams& params() const { return p_; }

  std::shared_ptr<Worker> Pick() {
    int best = -1;
    int64_t best_load = 0;
    for (int i = 0; i < p_.workers; ++i) {
      const auto& w = workers_[i];
      const int64_t load = w && w->healthy() ? w->live : 0;
      if (best < 0 || load < best_load) best = i, best_load = load;
    }
    auto& w = workers_[best];
    if (!w || !w->healthy()) {
      if (w) spdlog::warn("{}: restarting worker {}", hello_.name, best);
      w = std::make_shared<Worker>(p_, best, "");
      Hello h;
      try {
        h = w->Handshake();
      } catch (const Error& e) {
        w->Abandon(e.what());
        throw;
      }
      if (h.name != hello_.name || h.step_limit != hello_.step_limit ||
          h.capabilities != hello_.capabilities || h.instructions != hello_.instructions)
        w->Fail("hello", fmt::format("worker {} describes a different env than worker 0 (name, "
                                     "step_limit, capabilities and instructions must agree)",
                                     best),
                true);
    }
    return w;
  }

 private:
  ExternalParams p_;
  std::vector<std::shared_ptr<Worker>> workers_;
  Hello hello_;
};

enum class Afterstates { kEnv, kClone, kNone };

struct Shared {
  std::shared_ptr<Pool> pool;
  Hello hello;
  std::string afterstates;  // the [env] setting
  bool can_clone = false;   // through the env's clone, or by replay
};

// The parts of a state reply (reset and step).
struct Snapshot {
  std::string task, observation;
  Menu menu;
  std::vector<std::string> facts;
  uint64_t hash = 0;
  bool env_afterstates = false;  // every item came with an afterstate
};

class ExternalState : public State, public CutState, public AsyncState, public FactSource {
 public:
  ExternalState(std::shared_ptr<const Shared> env, uint64_t seed)
      : env_(std::move(env)), seed_(seed) {
    worker_ = env_->pool->Pick();
    const std::string what = fmt::format("reset (seed {})", seed);
    const json r = worker_->Call(
        {{"op", "reset"}, {"seed", seed}, {"split", SplitName(SplitOf(seed))}}, what);
    Adopt(r, what);
    if (worker_->Terminated(r, what))
      worker_->Fail(what, "the reset state is terminal (an episode needs at least one decision)",
                    false);
  }
  ~ExternalState() override {
    if (handle_ < 0 || !worker_->healthy()) return;
    try {
      if (pending_ >= 0) {
        // A rollout unwinding (an error, Ctrl-C) with this step in flight: its
        // reply is read and dropped, or the worker is given up when stopping.
        if (PendingSignal() != 0) {
          worker_->Abandon("rlid was stopped with a step in flight");
          return;
        }
        worker_->Receive(pending_, "step (discarded)", std::min(2.0, env_->pool->params().timeout_s));
      }
      if (env_->hello.Has("close"))
        worker_->Call({{"op", "close"}, {"handle", handle_}}, fmt::format("close (handle {})", handle_));
    } catch (const Error& e) {
      spdlog::debug("closing an external state: {}", e.what());
    }
    --worker_->live;
  }
  ExternalState(const ExternalState&) = delete;
  ExternalState& operator=(const ExternalState&) = delete;

  std::string Observation() const override {
    return snap_.task.empty() ? snap_.observation : snap_.task + "\n" + snap_.observation;
  }
  std::vector<ActionId> LegalActions() const override {
    std::vector<ActionId> out;
    if (done_) return out;
    for (const auto& it : snap_.menu.items) out.push_back(it.action);
    return out;
  }
  Menu CompileMenu() const override {
    if (done_) return Menu{};
    return MenuWithAfterstates();
  }
  bool WasCut() const override { return cut_; }
  Menu MenuAtCut() const override {
    RLID_CHECK(cut_, "MenuAtCut() on a state the step limit did not cut");
    return MenuWithAfterstates();
  }
  StepOutcome Apply(ActionId action) override {
    StartApply(action);
    return FinishApply();
  }
  void StartApply(ActionId action) override {
    RLID_CHECK(!done_, "Apply({}) on a terminal state", action);
    RLID_CHECK(pending_ < 0, "Apply({}) while a step is pending", action);
    RLID_CHECK(snap_.menu.IndexOfAction(action) >= 0, "action {} is not legal here", action);
    pending_what_ = fmt::format("step (handle {}, action {})", handle_, action);
    pending_ = worker_->Send({{"op", "step"}, {"handle", handle_}, {"action", action}},
                             pending_what_);
    pending_action_ = action;
  }
  StepOutcome FinishApply() override {
    RLID_CHECK(pending_ >= 0, "FinishApply() without StartApply()");
    const int64_t id = std::exchange(pending_, -1);
    const json r = worker_->Receive(id, pending_what_);
    StepOutcome out;
    out.reward = worker_->Number(r, "reward", pending_what_, true);
    if (!std::isfinite(out.reward))
      worker_->Fail(pending_what_, fmt::format("a non-finite reward {}", out.reward), false);
    out.terminal = worker_->Terminated(r, pending_what_);
    out.success = Bool(r, "success", pending_what_);
    out.truncated = Bool(r, "truncated", pending_what_);
    if (out.truncated) out.terminal = true;
    history_.push_back(pending_action_);
    ++steps_;
    invalidate_oracle();
    if (out.terminal) {
      // A terminal state offers nothing; whatever menu came along is ignored,
      // except after a truncation, where it is the menu at the cut.
      Adopt(r, pending_what_, /*menu=*/out.truncated && r.contains("menu") &&
                                  r["menu"].is_array() && !r["menu"].empty());
      cut_ = out.truncated && !snap_.menu.items.empty();
    } else {
      Adopt(r, pending_what_);
      if (steps_ >= env_->hello.step_limit) {
        out.terminal = out.truncated = true;
        cut_ = true;
      }
    }
    done_ = out.terminal;
    return out;
  }
  bool IsTerminal() const override { return done_; }
  CompileResult Compile(std::string_view text) const override {
    CompileResult r = snap_.menu.Compile(text);
    if (!r.valid() && !done_ && env_->hello.Has("compile")) return EnvCompile(text);
    return r;
  }
  uint64_t Hash() const override { return snap_.hash; }
  int StepCount() const override { return steps_; }
  std::vector<std::string> Facts() const override { return snap_.facts; }

  // ---- what the capability mixins call -----------------------------------------
  CompileResult EnvCompile(std::string_view text) const {
    CompileResult res;
    if (done_) {
      res.reason = "the episode is over";
      return res;
    }
    const std::string what = fmt::format("compile (handle {})", handle_);
    const json r = worker_->Call(
        {{"op", "compile"}, {"handle", handle_}, {"text", std::string(text)}}, what);
    if (r.contains("invalid") && !r["invalid"].is_null()) {
      res.reason = r["invalid"].is_string() ? r["invalid"].get<std::string>() : r["invalid"].dump();
      if (Trim(res.reason).empty()) res.reason = "the env's compiler rejected the text";
      return res;
    }
    const auto action = static_cast<ActionId>(worker_->Int(r, "action", what, true, 0, INT32_MAX));
    const int item = snap_.menu.IndexOfAction(action);
    if (item < 0)
      worker_->Fail(what, fmt::format("compiled the text to action {}, which is not on the menu "
                                      "(actions: {})",
                                      action, fmt::join(LegalActions(), ", ")),
                    false);
    res.action = action;
    res.item = item;
    res.matched = Shorten(Trim(text), kMaxWordingBytes);
    return res;
  }
  // The env's worked reasoning for its optimal action: one line, at most 4000 bytes.
  std::string EnvReasoning() const {
    RLID_CHECK(!done_, "OracleReasoning() on a terminal state");
    const std::string what = fmt::format("reasoning (handle {})", handle_);
    const json r = worker_->Call({{"op", "reasoning"}, {"handle", handle_}}, what);
    std::string text = worker_->String(r, "reasoning", what, true, 4000);
    if (!IsValidUtf8(text) || text.find('\n') != std::string::npos || Trim(text).empty())
      worker_->Fail(what,
                    "'reasoning' must be one non-empty line of UTF-8 (it is the scratchpad "
                    "line a policy writes before it decides)",
                    false);
    return text;
  }
  std::vector<ActionId> EnvOptimalActions() const {
    if (done_) return {};
    LoadOracle();
    return oracle_actions_;
  }
  double EnvOptimalReturn() const {
    if (done_) return 0.0;
    LoadOracle();
    if (oracle_return_) return *oracle_return_;
    // No "return" in the reply: play the oracle's first choice out on a copy.
    auto copy = Clone();
    auto* s = static_cast<ExternalState*>(copy.get());
    double ret = 0;
    while (!s->IsTerminal()) {
      const auto best = s->EnvOptimalActions();
      if (best.empty()) break;
      ret += s->Apply(best[0]).reward;
    }
    oracle_return_ = ret;
    return ret;
  }

 protected:
  // A copy of `from` in a new handle (the env's clone, or a replay of the
  // actions from reset when the env is deterministic).
  explicit ExternalState(const ExternalState& from, int)
      : env_(from.env_), seed_(from.seed_), worker_(from.worker_) {
    RLID_CHECK(from.pending_ < 0, "Clone() while a step is pending");
    if (env_->hello.Has("clone")) {
      const std::string what = fmt::format("clone (handle {})", from.handle_);
      const json r = worker_->Call({{"op", "clone"}, {"handle", from.handle_}}, what);
      handle_ = worker_->Int(r, "handle", what, true, INT64_MIN, INT64_MAX);
      ++worker_->live;
    } else {
      Replay(from);
    }
    CopyEpisodeFrom(from);
  }

 private:
  bool Bool(const json& r, const char* key, const std::string& what) const {
    return worker_->Bool(r, key, what, false);
  }

  void Replay(const ExternalState& from) {
    if (!env_->hello.deterministic)
      throw EnvError(
          fmt::format("env '{}' cannot copy a state: it has no 'clone' capability and is not "
                      "deterministic, so rlid cannot replay its actions",
                      env_->hello.name),
          "offer 'clone' (the Python helper clones by deepcopy), or set [env] afterstates = "
          "\"env\" or \"none\" so no copies are needed");
    const std::string what = fmt::format("reset (seed {}, replaying {} actions)", seed_,
                                         from.history_.size());
    json r = worker_->Call({{"op", "reset"}, {"seed", seed_}, {"split", SplitName(SplitOf(seed_))}},
                           what);
    handle_ = worker_->Int(r, "handle", what, true, INT64_MIN, INT64_MAX);
    ++worker_->live;
    for (ActionId a : from.history_)
      r = worker_->Call({{"op", "step"}, {"handle", handle_}, {"action", a}},
                        fmt::format("step (handle {}, action {}, replaying)", handle_, a));
    Snapshot again = Parse(r, what, !from.done_);
    if (again.observation != from.snap_.observation || again.hash != from.snap_.hash)
      worker_->Fail(what, "replaying the episode's actions from reset gave a different state; "
                          "the env is not deterministic (say \"deterministic\": false in hello, "
                          "or offer 'clone')",
                    false);
  }

  // Takes a state reply (reset, or a step's new state) as this state's own.
  void Adopt(const json& r, const std::string& what, bool with_menu = true) {
    if (handle_ < 0) {
      handle_ = worker_->Int(r, "handle", what, true, INT64_MIN, INT64_MAX);
      ++worker_->live;
    }
    snap_ = Parse(r, what, with_menu);
    afterstates_.reset();
  }

  // Observation, task, facts, hash and menu (labels A, B, ... by position).
  Snapshot Parse(const json& r, const std::string& what, bool with_menu) const {
    Snapshot s;
    s.task = worker_->String(r, "task", what, false);
    s.observation = worker_->String(r, "observation", what, true);
    if (!IsValidUtf8(s.observation) || !IsValidUtf8(s.task))
      worker_->Fail(what, "'observation' and 'task' must be valid UTF-8", false);
    if (r.contains("facts") && !r["facts"].is_null()) {
      if (!r["facts"].is_array())
        worker_->Fail(what, fmt::format("'facts' must be an array of strings, found {}",
                                        JsonTypeName(r["facts"])), false);
      for (const auto& f : r["facts"]) {
        if (!f.is_string() || !IsValidUtf8(f.get<std::string>()))
          worker_->Fail(what, "'facts' must be an array of UTF-8 strings", false);
        s.facts.push_back(f.get<std::string>());
      }
    }
    s.hash = r.contains("state_hash") && !r["state_hash"].is_null()
                 ? HashId(r["state_hash"])
                 : HashBytes(s.task + "\x1f" + s.observation, kHashSeed);
    if (!with_menu) return s;
    if (!r.contains("menu") || !r["menu"].is_array())
      worker_->Fail(what, r.contains("menu") ? fmt::format("'menu' must be an array, found {}",
                                                           JsonTypeName(r["menu"]))
                                             : "a non-terminal state's reply has no 'menu'",
                    false);
    const json& items = r["menu"];
    if (items.empty()) worker_->Fail(what, "a non-terminal state has an empty 'menu'", false);
    if (items.size() > static_cast<size_t>(kMaxMenuSize))
      worker_->Fail(what, fmt::format("the menu has {} items, more than the {} labels A-Z",
                                      items.size(), kMaxMenuSize), false);
    s.env_afterstates = true;
    for (size_t k = 0; k < items.size(); ++k) {
      const json& it = items[k];
      const std::string at = fmt::format("{}: menu item {}", what, k);
      if (!it.is_object()) worker_->Fail(at, "must be an object", false);
      MenuItem item;
      item.action = static_cast<ActionId>(worker_->Int(it, "action", at, true, 0, INT32_MAX));
      item.command = Wording(worker_->String(it, "command", at, true), at, "command");
      item.realisations.push_back(item.command);
      if (it.contains("realisations") && !it["realisations"].is_null()) {
        if (!it["realisations"].is_array())
          worker_->Fail(at, "'realisations' must be an array of strings", false);
        for (const auto& w : it["realisations"]) {
          if (!w.is_string()) worker_->Fail(at, "'realisations' must be an array of strings", false);
          std::string word = Wording(w.get<std::string>(), at, "realisation");
          if (std::find(item.realisations.begin(), item.realisations.end(), word) ==
              item.realisations.end())
            item.realisations.push_back(std::move(word));
        }
      }
      if (it.contains("afterstate") && !it["afterstate"].is_null()) {
        const std::string text = worker_->String(it, "afterstate", at, false);
        // Without an afterstate_hash, the id a state with this observation would have.
        item.afterstate_hash = it.contains("afterstate_hash") && !it["afterstate_hash"].is_null()
                                   ? HashId(it["afterstate_hash"])
                                   : HashBytes(s.task + "\x1f" + text, kHashSeed);
        item.afterstate = OneLine(text);
      }
      if (item.afterstate.empty()) s.env_afterstates = false;
      s.menu.items.push_back(std::move(item));
    }
    // The menu rules, in the author's terms (ValidateMenu's are rlid's own).
    std::map<ActionId, size_t> item_of_action;
    std::map<std::string, size_t> item_of_wording;  // lower-cased, as the compiler matches
    for (size_t k = 0; k < s.menu.items.size(); ++k) {
      const MenuItem& item = s.menu.items[k];
      if (auto [at, fresh] = item_of_action.emplace(item.action, k); !fresh)
        worker_->Fail(what,
                      fmt::format("duplicate action {}: menu items {} and {} both have it; "
                                  "give each item its own action id",
                                  item.action, at->second, k),
                      false);
      for (const auto& w : item.realisations)
        if (auto [at, fresh] = item_of_wording.emplace(ToLower(w), k); !fresh && at->second != k)
          worker_->Fail(what,
                        fmt::format("the wording '{}' names two actions ({} in menu item {}, "
                                    "{} in item {}): a command or realisation must name one "
                                    "action; drop it from one of the items",
                                    w, s.menu.items[at->second].action, at->second, item.action, k),
                        false);
    }
    AssignDefaultLabels(s.menu);
    try {
      ValidateMenu(s.menu);
    } catch (const InternalError& e) {
      worker_->Fail(what, fmt::format("an invalid menu: {}", AuthorMessage(e.what())), false);
    }
    return s;
  }

  std::string Wording(std::string w, const std::string& at, const char* field) const {
    const std::string_view t = Trim(w);
    if (t.empty() || t.size() > kMaxWordingBytes || !IsValidUtf8(t) ||
        std::any_of(t.begin(), t.end(), [](char c) { return static_cast<unsigned char>(c) < 0x20; }))
      worker_->Fail(at, fmt::format("a {} must be one line of 1-{} bytes of UTF-8 text, found '{}'",
                                    field, kMaxWordingBytes, Shorten(w, 80)),
                    false);
    return std::string(t);
  }

  // The menu with afterstates per [env] afterstates (computed once per state).
  Menu MenuWithAfterstates() const {
    if (afterstates_) return *afterstates_;
    Menu m = snap_.menu;
    const std::string& mode = env_->afterstates;
    const bool compute = mode == "clone" || (mode == "auto" && !snap_.env_afterstates &&
                                             env_->hello.Has("clone"));
    if (mode == "none") {
      for (auto& it : m.items) it.afterstate.clear(), it.afterstate_hash = 0;
    } else if (compute) {
      // One copy per item, or with 'restore' one scratch copy reset to this
      // state before each item (2K+1 calls instead of 3K).
      const bool restore = env_->hello.Has("restore");
      std::unique_ptr<State> scratch;
      for (size_t k = 0; k < m.items.size(); ++k) {
        if (!scratch || !restore)
          scratch = Clone();
        else
          static_cast<ExternalState*>(scratch.get())->RestoreFrom(*this);
        scratch->Apply(m.items[k].action);
        auto* c = static_cast<const ExternalState*>(scratch.get());
        m.items[k].afterstate = OneLine(c->snap_.observation);
        m.items[k].afterstate_hash = c->Hash();
      }
    }
    MarkSameAfterstates(m);
    afterstates_ = m;
    return m;
  }

  // rlid's side of the episode (the env's side is the worker's handle).
  void CopyEpisodeFrom(const ExternalState& from) {
    snap_ = from.snap_;
    afterstates_ = from.afterstates_;
    history_ = from.history_;
    steps_ = from.steps_;
    done_ = from.done_;
    cut_ = from.cut_;
  }

  // Makes this state (a copy on the same worker) equal to `from` again.
  void RestoreFrom(const ExternalState& from) {
    RLID_CHECK(worker_ == from.worker_ && pending_ < 0 && from.pending_ < 0,
               "restore needs two idle states of one worker");
    worker_->Call({{"op", "restore"}, {"handle", handle_}, {"from", from.handle_}},
                  fmt::format("restore (handle {} from {})", handle_, from.handle_));
    CopyEpisodeFrom(from);
    invalidate_oracle();
  }

  void LoadOracle() const {
    if (oracle_loaded_) return;
    const std::string what = fmt::format("oracle (handle {})", handle_);
    const json r = worker_->Call({{"op", "oracle"}, {"handle", handle_}}, what);
    if (!r.contains("actions") || !r["actions"].is_array())
      worker_->Fail(what, "the reply needs 'actions', an array of action ids", false);
    oracle_actions_.clear();
    for (const auto& a : r["actions"]) {
      if (!a.is_number_integer() || snap_.menu.IndexOfAction(a.get<ActionId>()) < 0)
        worker_->Fail(what, fmt::format("'actions' holds {}, which is not an action on the menu",
                                        Shorten(a.dump())), false);
      oracle_actions_.push_back(a.get<ActionId>());
    }
    oracle_return_.reset();
    if (r.contains("return") && !r["return"].is_null()) {
      const double v = worker_->Number(r, "return", what, true);
      if (!std::isfinite(v)) worker_->Fail(what, "'return' must be finite", false);
      oracle_return_ = v;
    }
    oracle_loaded_ = true;
  }
  void invalidate_oracle() {
    oracle_loaded_ = false;
    oracle_actions_.clear();
    oracle_return_.reset();
  }

  std::shared_ptr<const Shared> env_;
  uint64_t seed_;
  std::shared_ptr<Worker> worker_;
  int64_t handle_ = -1;
  Snapshot snap_;
  mutable std::optional<Menu> afterstates_;
  std::vector<ActionId> history_;
  int steps_ = 0;
  bool done_ = false, cut_ = false;
  int64_t pending_ = -1;  // id of the step request in flight
  ActionId pending_action_ = kNoAction;
  std::string pending_what_;
  mutable bool oracle_loaded_ = false;
  mutable std::vector<ActionId> oracle_actions_;
  mutable std::optional<double> oracle_return_;
};

// Optional capabilities, present on a state's type only when the env offers them.
class WithOracle : public OracleState {
 public:
  std::vector<ActionId> OptimalActions() const override { return Self().EnvOptimalActions(); }
  double OptimalReturn() const override { return Self().EnvOptimalReturn(); }

 private:
  const ExternalState& Self() const { return dynamic_cast<const ExternalState&>(*this); }
};
class WithCompiler : public TextCompiler {
 public:
  CompileResult CompileText(std::string_view text) const override { return Self().EnvCompile(text); }

 private:
  const ExternalState& Self() const { return dynamic_cast<const ExternalState&>(*this); }
};
class WithReasoning : public ReasoningOracle {
 public:
  std::string OracleReasoning() const override { return Self().EnvReasoning(); }

 private:
  const ExternalState& Self() const { return dynamic_cast<const ExternalState&>(*this); }
};

template <class... Caps>
class ExternalStateOf final : public ExternalState, public Caps... {
 public:
  ExternalStateOf(std::shared_ptr<const Shared> env, uint64_t seed)
      : ExternalState(std::move(env), seed) {}
  ExternalStateOf(const ExternalStateOf& from, int tag) : ExternalState(from, tag) {}
  std::unique_ptr<State> Clone() const override {
    return std::unique_ptr<State>(new ExternalStateOf(*this, 0));
  }
};

class ExternalEnv final : public Env {
 public:
  explicit ExternalEnv(ExternalParams p) {
    auto shared = std::make_shared<Shared>();
    shared->afterstates = p.afterstates;
    shared->pool = std::make_shared<Pool>(std::move(p));
    shared->hello = shared->pool->hello();
    shared->can_clone = shared->hello.Has("clone") || shared->hello.deterministic;
    if (shared->afterstates == "clone" && !shared->can_clone)
      throw ConfigError(
          fmt::format("[env] afterstates = \"clone\", but env '{}' has no 'clone' capability and is "
                      "not deterministic, so rlid cannot compute afterstates",
                      shared->hello.name),
          "use afterstates = \"env\" (the env's own) or \"none\"");
    shared_ = std::move(shared);
    const Hello& h = shared_->hello;
    const bool oracle = h.Has("oracle"), compiler = h.Has("compile");
    const bool reasoning = oracle && h.Has("reasoning");  // worked reasoning of the oracle's action
    make_ = reasoning && compiler ? &Make<WithOracle, WithReasoning, WithCompiler>
            : reasoning           ? &Make<WithOracle, WithReasoning>
            : oracle && compiler  ? &Make<WithOracle, WithCompiler>
            : oracle              ? &Make<WithOracle>
            : compiler            ? &Make<WithCompiler>
                                  : &Make<>;
  }
  EnvInfo Info() const override {
    const Hello& h = shared_->hello;
    EnvInfo info{h.name, h.summary.empty() ? "external environment" : h.summary, h.step_limit,
                 h.deterministic};
    const ExternalParams& p = shared_->pool->params();
    info.drop_failed_episodes = p.on_error == "drop_episode";
    info.episode_retries = p.retries;
    info.retry_backoff_s = p.retry_backoff_s;
    info.metadata = h.metadata;
    info.concurrency = p.workers;
    return info;
  }
  std::string Instructions() const override { return shared_->hello.instructions; }
  std::unique_ptr<State> NewState(uint64_t seed) const override { return make_(shared_, seed); }

 private:
  template <class... Caps>
  static std::unique_ptr<State> Make(const std::shared_ptr<const Shared>& s, uint64_t seed) {
    return std::make_unique<ExternalStateOf<Caps...>>(s, seed);
  }
  std::shared_ptr<const Shared> shared_;
  std::unique_ptr<State> (*make_)(const std::shared_ptr<const Shared>&, uint64_t) = nullptr;
};

const Registrar<EnvRegistry> kRegister(
    "external", "any program speaking rlid's env protocol over stdin/stdout (JSON lines)",
    [](ConfigNode c) -> std::unique_ptr<Env> {
      ExternalParams p;
      c.Get("command", p.command,
            "the program and its arguments, e.g. [\"python3\", \"my_env.py\"] (docs/external_env.md)");
      if (p.command.empty() || p.command[0].empty())
        throw ConfigError(fmt::format("{}: [env] name = \"external\" needs 'command', the program "
                                      "to run and its arguments",
                                      c.Where("command")),
                          "e.g. command = [\"python3\", \"envs/external/python/examples/courier.py\"]");
      ReadProcessKeys(c, p);
      c.GetTable("params", p.params, "parameters sent to the env in its hello message");
      return MakeExternalEnv(std::move(p));
    });

}  // namespace

void ReadProcessKeys(ConfigNode c, ExternalParams& p) {
  c.Get("cwd", p.cwd, "working directory of the env processes (\"\" = rlid's own)");
  c.Get("workers", p.workers, "env processes; episodes spread over them and their steps overlap",
        IntRange{1, 256});
  c.Get("timeout_s", p.timeout_s, "seconds a reply may take before the env counts as hung",
        Range::Positive());
  c.Get("start_timeout_s", p.start_timeout_s, "seconds the hello reply may take at start",
        Range::Positive());
  c.GetEnum("afterstates", p.afterstates, {"auto", "env", "clone", "none"},
            "menu afterstates: the env's own when it sends them, else clone+step (auto); only "
            "the env's (env); always clone+step (clone); none");
  c.GetEnum("on_error", p.on_error, {"stop", "drop_episode"},
            "once its retries are spent, a broken episode stops the run, or is dropped");
  c.Get("retries", p.retries,
        "plays of an episode an env failure broke again from reset (same seed), at most",
        IntRange{0, 100});
  c.Get("retry_backoff_s", p.retry_backoff_s, "the i-th retry waits i times this many seconds",
        Range::NonNegative());
}

std::unique_ptr<Env> MakeExternalEnv(ExternalParams p) {
  return std::make_unique<ExternalEnv>(std::move(p));
}

}  // namespace rlid::envs

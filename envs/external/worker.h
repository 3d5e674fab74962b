// The external-env protocol's client side (envs/external/external.cc): one
// child process speaking rlid's env protocol (Worker: handshake, calls with
// timeouts, a broken process reported with its last output) and the pool of
// them behind one env (Pool). Internal to envs/external.
#pragma once

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <filesystem>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/check.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/interrupt.h"
#include "core/log.h"
#include "core/strings.h"
#include "core/subprocess.h"
#include "core/utf8.h"
#include "envs/external/external.h"

namespace rlid::envs::protocol {

using json = nlohmann::json;

constexpr size_t kMaxTextBytes = size_t{1} << 20;      // an observation or task
constexpr size_t kMaxRealisationBytes = 300;           // a command or realisation
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

inline std::string Shorten(std::string_view s, size_t n = 200) {
  std::string out(s.substr(0, n));
  if (s.size() > n) out += "...";
  return out;
}

inline std::string JsonTypeName(const json& v) {
  if (v.is_null()) return "null";
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  return "an object";
}

// A hash id sent by the env (string or integer) as 64 bits.
inline uint64_t HashId(const json& v) {
  return HashBytes(v.is_string() ? v.get<std::string>() : v.dump(), kHashSeed);
}

// Whitespace runs (newlines included) as one space: afterstates are one menu line.
inline std::string OneLine(std::string_view s) {
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
                {"afterstates", p_.afterstates == AfterstateSource::kAuto || p_.afterstates == AfterstateSource::kEnv}};
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

}  // namespace rlid::envs::protocol

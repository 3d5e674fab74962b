// External environments: any program that speaks rlid's env protocol
// (newline-delimited JSON over its stdin/stdout, docs/external_env.md) is an
// rlid environment, registered as `external`:
//   [env]
//   name = "external"
//   command = ["python3", "my_env.py"]
//   workers = 4            # processes; states spread over them, steps overlap
// The client side (ExternalEnv, its states and worker pool) lives in
// external.cc; ServeEnv is the server side for a built-in env (`rlid env
// serve`), used by tests and the protocol benchmark. No LibTorch here.
#pragma once

#include <istream>
#include <memory>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "envs/env.h"

namespace rlid::envs {

// The protocol version this build speaks (hello.protocol).
constexpr int kExternalProtocolVersion = 1;

// An env served by a program, and how rlid runs it ([env] keys of `external`).
struct ExternalParams {
  std::vector<std::string> command;  // the program and its arguments
  std::string cwd;                   // "" = rlid's own
  int workers = 1;
  double timeout_s = 30.0;
  double start_timeout_s = 60.0;
  std::string afterstates = "auto";                  // auto | env | clone | none
  std::string on_error = "stop";                     // stop | drop_episode
  nlohmann::json params = nlohmann::json::object();  // sent in hello
};

// Reads the [env] keys of how the processes run: cwd, workers, timeout_s,
// start_timeout_s, afterstates, on_error (not command or params).
void ReadProcessKeys(ConfigNode c, ExternalParams& p);

// The env served by p.command: starts worker 0 and exchanges hello before it
// returns (EnvError naming the program when that fails).
std::unique_ptr<Env> MakeExternalEnv(ExternalParams p);

// The server side of the protocol for an env of this process: one request
// line in, one reply line out. Every capability the env has is offered
// (clone, restore, close, compile; oracle when its states have one).
// step_delay_ms makes every step that much slower (a deliberately slow env for
// benchmarks). Never throws on bad requests: they get an {"error": ...} reply.
class EnvServer {
 public:
  explicit EnvServer(const Env& env, double step_delay_ms = 0);
  ~EnvServer();
  std::string Handle(const std::string& request_line);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Serves `env` on `in`/`out` until `in` ends; returns the requests served.
int64_t ServeEnv(const Env& env, std::istream& in, std::ostream& out, double step_delay_ms = 0);

}  // namespace rlid::envs

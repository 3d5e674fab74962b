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
#include <ostream>
#include <string>

#include "envs/env.h"

namespace rlid::envs {

// The protocol version this build speaks (hello.protocol).
constexpr int kExternalProtocolVersion = 1;

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

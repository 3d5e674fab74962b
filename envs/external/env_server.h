// The server side of the external-env protocol (docs/external_env.md) for an
// env of this process: `rlid env serve`, the protocol's reference
// implementation, and the test server of tests/helpers/env_server.cc. No
// LibTorch here.
#pragma once

#include <istream>
#include <memory>
#include <ostream>
#include <string>

#include "envs/api/env.h"

namespace rlid::envs {

struct EnvServerOptions {
  double step_delay_ms = 0;  // every step that much slower (a deliberately slow env)
  // The newest protocol version served: 1 answers as a version-1 env would
  // (refusing a hello that does not offer 1), for tests of old clients.
  int max_protocol = 2;
};

// One request line in, one reply line out. Every capability the env has is
// offered (clone, restore, close, compile, metadata; oracle when its states
// have one). Never throws on bad requests: they get an error reply, with a
// code (invalid_json, unknown_op, validation_error, execution_error) under
// protocol 2, a bare message under 1.
class EnvServer {
 public:
  explicit EnvServer(const Env& env, EnvServerOptions options = {});
  ~EnvServer();
  std::string Handle(const std::string& request_line);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Serves `env` on `in`/`out` until `in` ends; returns the requests served.
int64_t ServeEnv(const Env& env, std::istream& in, std::ostream& out,
                 EnvServerOptions options = {});

}  // namespace rlid::envs

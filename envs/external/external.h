// External environments: any program that speaks rlid's env protocol
// (newline-delimited JSON over its stdin/stdout, docs/external_env.md) is an
// rlid environment, registered as `external`:
//   [env]
//   name = "external"
//   command = ["python3", "my_env.py"]
//   workers = 4            # processes; states spread over them, steps overlap
// The client side (ExternalEnv, its states and worker pool) lives in
// external.cc; the server side for a built-in env (`rlid env serve`, tests,
// the protocol benchmark) in env_server.h. No LibTorch here.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "envs/api/env.h"

namespace rlid::envs {

// The protocol versions this build speaks: it asks for the newest in hello
// and accepts an env that answers with any of them (docs/external_env.md).
constexpr int kExternalProtocolVersion = 2;
constexpr int kOldestExternalProtocolVersion = 1;

// Where menu afterstates come from ([env] afterstates): the env's own when it
// sends them, else copy-and-step (auto); only the env's (env); always
// copy-and-step (clone); none.
enum class AfterstateSource { kAuto, kEnv, kClone, kNone };
constexpr auto Spellings(AfterstateSource) {
  using A = AfterstateSource;
  return ModeNames<A>({{A::kAuto, "auto"}, {A::kEnv, "env"}, {A::kClone, "clone"}, {A::kNone, "none"}});
}
// What an env failure does ([env] on_error): stop the run, or drop the episode.
enum class OnEnvError { kStop, kDropEpisode };
constexpr auto Spellings(OnEnvError) {
  return ModeNames<OnEnvError>({{OnEnvError::kStop, "stop"}, {OnEnvError::kDropEpisode, "drop_episode"}});
}

// An env served by a program, and how rlid runs it ([env] keys of `external`).
struct ExternalParams {
  std::vector<std::string> command;  // the program and its arguments
  std::string cwd;                   // "" = rlid's own
  int workers = 1;
  double timeout_s = 30.0;
  double start_timeout_s = 60.0;
  AfterstateSource afterstates = AfterstateSource::kAuto;
  OnEnvError on_error = OnEnvError::kStop;
  int retries = 0;               // plays of a broken episode again from reset, at most
  double retry_backoff_s = 1.0;  // the i-th retry waits i times this first
  nlohmann::json params = nlohmann::json::object();  // sent in hello
};

// Reads the [env] keys of how the processes run: cwd, workers, timeout_s,
// start_timeout_s, afterstates, on_error, retries, retry_backoff_s (not
// command or params).
void ReadProcessKeys(ConfigNode c, ExternalParams& p);

// The env served by p.command: starts worker 0 and exchanges hello before it
// returns (EnvError naming the program when that fails).
std::unique_ptr<Env> MakeExternalEnv(ExternalParams p);

}  // namespace rlid::envs

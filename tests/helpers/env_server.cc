// A built-in env served over the external-env protocol, for tests of the
// protocol client that must not need Python or the rlid binary:
//   env_server ENV [key=value ...] [--delay-ms N] [--crash-after N [--once FILE]]
//              [--hang-after N] [--garbage-after N] [--protocol V] [--capacity-resets N]
// --crash-after / --hang-after / --garbage-after N: after N step requests the
// server exits with code 3 / stops answering / answers a line that is not JSON.
// --once FILE: crash only if FILE does not exist, and create it (a restarted
// server then runs normally).
// --protocol V: serve protocol versions up to V (1: answer as a version-1 env).
// --capacity-resets N: answer the first N reset requests with a "capacity"
// error (the env is full; protocol 2), then serve normally.
// --count-resets: the --*-after counts count reset requests instead of steps
// (a crash every episode meets, however its agent answers).
#include "envs/external/env_server.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>
#include <vector>

#include "core/error.h"
#include "envs/api/env.h"
#include "envs/external/external.h"

int main(int argc, char** argv) {
  if (argc < 2) {
    std::cerr << "usage: env_server ENV [key=value ...] [--delay-ms N] [--crash-after N] "
                 "[--hang-after N] [--garbage-after N]\n";
    return 2;
  }
  std::vector<std::string> params;
  rlid::envs::EnvServerOptions options;
  long crash_after = -1, hang_after = -1, garbage_after = -1, capacity_resets = 0;
  std::string once;
  bool count_resets = false;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string("0"); };
    if (a == "--delay-ms")
      options.step_delay_ms = std::atof(next().c_str());
    else if (a == "--protocol")
      options.max_protocol = std::atoi(next().c_str());
    else if (a == "--capacity-resets")
      capacity_resets = std::atol(next().c_str());
    else if (a == "--crash-after") crash_after = std::atol(next().c_str());
    else if (a == "--hang-after") hang_after = std::atol(next().c_str());
    else if (a == "--garbage-after") garbage_after = std::atol(next().c_str());
    else if (a == "--once") once = next();
    else if (a == "--count-resets")
      count_resets = true;
    else params.push_back(a);
  }
  try {
    auto env = rlid::envs::MakeEnv(argv[1], params);
    if (crash_after < 0 && hang_after < 0 && garbage_after < 0 && capacity_resets == 0) {
      rlid::envs::ServeEnv(*env, std::cin, std::cout, options);
      return 0;
    }
    // Serve one request at a time so the misbehaviour starts at a known step.
    rlid::envs::EnvServer server(*env, options);
    long steps = 0;
    std::string line;
    while (std::getline(std::cin, line)) {
      const bool step =
          line.find(count_resets ? "\"op\":\"reset\"" : "\"op\":\"step\"") != std::string::npos;
      if (line.find("\"op\":\"reset\"") != std::string::npos && capacity_resets > 0) {
        --capacity_resets;
        const size_t at = line.find("\"id\":");
        const std::string id = line.substr(at + 5, line.find_first_of(",}", at) - at - 5);
        std::cout << "{\"id\":" << id
                  << ",\"error\":{\"code\":\"capacity\",\"message\":\"all sessions busy\"}}\n"
                  << std::flush;
        continue;
      }
      if (step && steps == crash_after && (once.empty() || ::access(once.c_str(), F_OK) != 0)) {
        if (!once.empty()) std::fclose(std::fopen(once.c_str(), "w"));
        std::cerr << "env_server: crashing as asked\n";
        return 3;
      }
      if (step && steps == hang_after) {
        std::cerr << "env_server: hanging as asked\n";
        pause();
      }
      if (step && steps == garbage_after) {
        std::cout << "this is not json\n" << std::flush;
        ++steps;
        continue;
      }
      steps += step;
      std::cout << server.Handle(line) << "\n" << std::flush;
    }
  } catch (const rlid::Error& e) {
    std::cerr << rlid::FormatError(e) << "\n";
    return 2;
  }
  return 0;
}

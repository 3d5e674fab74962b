// Runs the rlid CLI in-process (as `rlid ARGS...`) and captures what it printed.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "cli/command.h"

namespace rlid::testing {

struct CliOutput {
  int code;         // the exit code main() would return
  std::string out;  // stdout
  std::string err;  // stderr (log lines, error messages)
};

inline CliOutput RunRlid(const std::vector<std::string>& args) {
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const int code = cli::RunCli(args);
  CliOutput o{code, ::testing::internal::GetCapturedStdout(), ::testing::internal::GetCapturedStderr()};
  return o;
}

}  // namespace rlid::testing

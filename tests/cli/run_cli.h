// Runs the rlid CLI in-process (as `rlid ARGS...`) and captures what it printed.
#pragma once

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/command.h"
#include "tests/test_paths.h"

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

// Runs the rlid executable ($RLID_BIN, else the build's) as a child process,
// `rlid ARGS` through the shell (in directory `cwd` when given, with `env`
// assignments such as "RLID_FAULT_INJECT=..." before it); `out` holds its
// stdout and stderr together, and those of any process it started.
inline CliOutput RunRlidProcess(const std::string& args, const std::filesystem::path& cwd = {},
                                const std::string& env = {}) {
  const char* bin = std::getenv("RLID_BIN");
  const std::string exe =
      std::filesystem::absolute(bin ? bin : (std::filesystem::path(RLID_BINARY_DIR) / "rlid").string())
          .string();
  const std::string cmd = (cwd.empty() ? "" : "cd '" + cwd.string() + "' && ") + env + " " + exe +
                          " " + args + " 2>&1";
  CliOutput r{-1, "", ""};
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return r;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) r.out.append(buf, n);
  const int status = ::pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

}  // namespace rlid::testing

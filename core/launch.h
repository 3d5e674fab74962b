// `--nproc N`: one machine, N ranks. The launcher starts N copies of this
// executable with the torchrun variables set (RANK, WORLD_SIZE, LOCAL_RANK,
// LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1, MASTER_PORT = a free port), passes
// them its stdout and stderr, forwards SIGINT/SIGTERM/SIGHUP, and watches
// them: when one rank fails, the others get `grace_s` to stop on their own
// (they name the failed rank themselves) and are then killed (the summary
// names them, and which were frozen: stopped by a signal). No networking
// here; the ranks meet through c10d (trainers/runtime/dist.h).
#pragma once

#include <string>
#include <vector>

namespace rlid {

struct LaunchOptions {
  int nproc = 1;
  std::vector<std::string> args;  // argv[1..] of every rank (without --nproc)
  double grace_s = 15;            // after the first failure, before the others are killed
  std::string log_file;           // "": the ranks write to this process's stdout/stderr; else appended here
};

// What became of the job.
struct LaunchResult {
  int exit_code = 0;     // 0, or that of the first rank that failed (7 for a rank killed by a signal)
  std::string summary;   // "" when every rank exited 0; else which rank failed first and how
  int signal = 0;        // a stop signal this process received and passed on to the ranks
};

// Starts the ranks (the executable of this process, /proc/self/exe) and waits
// for all of them. IoError when a rank cannot be started.
LaunchResult LaunchLocalRanks(const LaunchOptions& options);

// args without "--nproc N" / "--nproc=N".
std::vector<std::string> WithoutNproc(const std::vector<std::string>& args);

// A TCP port on 127.0.0.1 that was free a moment ago. IoError naming `purpose`
// ("the job's store") when there is none.
int FreeLocalPort(const std::string& purpose = "the job's store");

}  // namespace rlid

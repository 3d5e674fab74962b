// Stopping on SIGINT, SIGTERM and SIGHUP without leaving anything half done.
// The handlers only record the signal; long loops call ThrowIfInterrupted() at
// points where stopping is safe (between env steps, minibatches, iterations),
// and the exception unwinds through the owners that flush the store and mark
// the run "interrupted". A second Ctrl-C (SIGINT) kills the process at once;
// a repeated SIGTERM or SIGHUP is not a second request (`timeout` sends the
// same signal to the process and to its group) and changes nothing.
#pragma once

#include <string>

#include "core/error.h"

namespace rlid {

// Thrown by ThrowIfInterrupted; exit code 128 + signal (130 SIGINT, 143 SIGTERM, 129 SIGHUP).
class Interrupted : public Error {
 public:
  explicit Interrupted(int signal);
  int exit_code() const override { return 128 + signal_; }
  int signal() const { return signal_; }

 private:
  int signal_;
};

// Installs the handlers (idempotent; the CLI calls it for every command).
void InstallInterruptHandlers();
// The first of the three signals received since the handlers were installed, or 0.
int PendingSignal();
// Throws Interrupted when a signal is pending.
void ThrowIfInterrupted();
// Forgets a pending signal (tests, or a command that handled it).
void ClearPendingSignal();
// "SIGINT", "SIGTERM", "SIGHUP" or "signal N".
std::string SignalName(int signal);

}  // namespace rlid

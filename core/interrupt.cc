#include "core/interrupt.h"

#include <fmt/format.h>

#include <atomic>
#include <csignal>

namespace rlid {
namespace {

std::atomic<int> g_signal{0};

extern "C" void OnStopSignal(int sig) {
  int expected = 0;
  g_signal.compare_exchange_strong(expected, sig);
  // A second Ctrl-C takes the default action: it kills. A repeated SIGTERM or
  // SIGHUP does not: tools such as `timeout` send one to the process and one to
  // its process group, and that duplicate must not kill the process before it
  // stops cleanly (SIGKILL still does). The handler stays, so it is not inherited.
  std::signal(SIGINT, SIG_DFL);
  if (sig == SIGINT) {
    std::signal(SIGTERM, SIG_DFL);
    std::signal(SIGHUP, SIG_DFL);
  }
}

}  // namespace

Interrupted::Interrupted(int signal)
    : Error(fmt::format("stopped by {}: what was recorded so far is committed and the run is marked "
                        "interrupted",
                        SignalName(signal)),
            "continue it with `rlid train CONFIG --out RUN_DIR --resume` (from its last checkpoint)"),
      signal_(signal) {}

void InstallInterruptHandlers() {
  struct sigaction sa {};
  sa.sa_handler = OnStopSignal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // interrupted system calls (writes, reads) resume
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaction(s, &sa, nullptr);
  // A write past `ulimit -f` fails with EFBIG instead of killing the process
  // silently: the write's IoError names the file and the limit.
  signal(SIGXFSZ, SIG_IGN);
}

int PendingSignal() { return g_signal.load(); }

void ThrowIfInterrupted() {
  if (const int s = g_signal.load(); s != 0) throw Interrupted(s);
}

void ClearPendingSignal() { g_signal.store(0); }

std::string SignalName(int signal) {
  switch (signal) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return fmt::format("signal {}", signal);
  }
}

}  // namespace rlid

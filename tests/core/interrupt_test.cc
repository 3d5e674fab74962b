// Stop signals: the first is recorded for ThrowIfInterrupted; a second Ctrl-C
// kills, a repeated SIGTERM (as `timeout` sends, to the process and its group)
// does not. Each case runs in a forked child so the test process keeps its
// own signal dispositions.
#include "core/interrupt.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>

namespace rlid {
namespace {

// Forks a child that installs the handlers, raises `sig` twice, and exits 0
// when `sig` is the pending signal and ThrowIfInterrupted throws. Returns the
// child's wait status.
int RaiseTwiceInChild(int sig) {
  const pid_t pid = fork();
  if (pid == 0) {
    InstallInterruptHandlers();
    ::raise(sig);
    ::raise(sig);
    bool threw = false;
    try {
      ThrowIfInterrupted();
    } catch (const Interrupted&) {
      threw = true;
    }
    _exit(PendingSignal() == sig && threw ? 0 : 1);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

TEST(Interrupt, ARepeatedSigtermIsRecordedOnceAndDoesNotKill) {
  for (int sig : {SIGTERM, SIGHUP}) {
    const int status = RaiseTwiceInChild(sig);
    ASSERT_TRUE(WIFEXITED(status)) << "signal " << sig << " killed the process";
    EXPECT_EQ(WEXITSTATUS(status), 0) << "signal " << sig << " was not recorded";
  }
}

TEST(Interrupt, ASecondCtrlCKills) {
  const int status = RaiseTwiceInChild(SIGINT);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGINT);
}

}  // namespace
}  // namespace rlid

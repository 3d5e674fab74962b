#include "core/launch.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "core/clock.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/log.h"
#include "core/strings.h"

namespace rlid {
namespace {

std::string Describe(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  if (WIFSIGNALED(status)) return fmt::format("was killed by {}", SignalName(WTERMSIG(status)));
  return "stopped";
}

// Whether process `pid` is stopped (SIGSTOP, SIGTSTP, a debugger): state T or t in /proc.
bool IsStopped(pid_t pid) {
  std::ifstream f(fmt::format("/proc/{}/stat", pid));
  std::string stat;
  std::getline(f, stat);
  const size_t paren = stat.rfind(')');  // the command name may hold spaces and parentheses
  return paren != std::string::npos && paren + 2 < stat.size() &&
         (stat[paren + 2] == 'T' || stat[paren + 2] == 't');
}

}  // namespace

int FreeLocalPort(const std::string& purpose) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw IoError("cannot open a socket to find a free port for " + purpose);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  socklen_t len = sizeof(a);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  ::close(fd);
  if (!ok) throw IoError("cannot find a free TCP port on 127.0.0.1 for " + purpose);
  return ntohs(a.sin_port);
}

std::vector<std::string> WithoutNproc(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--nproc") {
      ++i;  // and its value
      continue;
    }
    if (args[i].rfind("--nproc=", 0) == 0) continue;
    out.push_back(args[i]);
  }
  return out;
}

namespace {

// The job's ranks as the launcher sees them.
struct Ranks {
  explicit Ranks(int n) : pids(n, -1), status(n, 0), done(n, false), notes(n) {}
  std::vector<pid_t> pids;
  std::vector<int> status;         // waitpid status, once done
  std::vector<bool> done;
  std::vector<std::string> notes;  // why the launcher killed a rank
  void KillAll(int sig) const {
    for (size_t r = 0; r < pids.size(); ++r)
      if (pids[r] > 0 && !done[r]) ::kill(pids[r], sig);
  }
};

// In the forked child: becomes rank `r` of `n` (torchrun's variables, its own
// process group, SIGTERM when the launcher dies, the log file) and execs this
// binary with `args`. Never returns.
[[noreturn]] void ExecRank(const LaunchOptions& options, int r, int n, int port,
                           std::vector<std::string>& args) {
  // Its own process group, so a terminal's Ctrl-C reaches only the launcher,
  // which forwards it once; and SIGTERM when the launcher dies.
  ::setpgid(0, 0);
  ::prctl(PR_SET_PDEATHSIG, SIGTERM);
  if (::getppid() == 1) ::_exit(1);  // the launcher died before prctl
  if (!options.log_file.empty()) {
    const int fd = ::open(options.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd < 0) ::_exit(126);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    ::close(fd);
  }
  ::setenv("RANK", std::to_string(r).c_str(), 1);
  ::setenv("LOCAL_RANK", std::to_string(r).c_str(), 1);
  ::setenv("WORLD_SIZE", std::to_string(n).c_str(), 1);
  ::setenv("LOCAL_WORLD_SIZE", std::to_string(n).c_str(), 1);
  ::setenv("MASTER_ADDR", "127.0.0.1", 1);
  ::setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  ::execv("/proc/self/exe", argv.data());
  ::_exit(127);
}

// The ranks still running `grace_s` after `first_failed` failed: noted (frozen
// ones say so) and killed.
void KillLateRanks(Ranks& ranks, int first_failed, double grace_s) {
  std::vector<std::string> late;
  for (size_t r = 0; r < ranks.pids.size(); ++r) {
    if (ranks.done[r]) continue;
    const bool frozen = IsStopped(ranks.pids[r]);
    ranks.notes[r] = fmt::format(" after it did not stop within {:g} s of rank {}'s failure{}", grace_s,
                                 first_failed, frozen ? " (it was frozen: stopped)" : "");
    late.push_back(fmt::format("rank {}{}", r, frozen ? " (frozen: stopped)" : ""));
  }
  spdlog::error("{} did not stop within {:g} s of rank {}'s failure; killing {}", Join(late, ", "), grace_s,
                first_failed, late.size() == 1 ? "it" : "them");
  ranks.KillAll(SIGKILL);  // works on a frozen (SIGSTOPped) rank too
}

// The job's outcome: the first failed rank's exit code and every rank's fate.
LaunchResult Summarise(const Ranks& ranks, int first_failed, int forwarded) {
  LaunchResult res;
  res.signal = forwarded;
  if (first_failed < 0) return res;
  const int n = static_cast<int>(ranks.pids.size());
  const int st = ranks.status[first_failed];
  res.exit_code = WIFEXITED(st) ? WEXITSTATUS(st) : 7;
  res.summary = fmt::format("rank {} of {} {} first", first_failed, n, Describe(st));
  for (int r = 0; r < n; ++r)
    if (r != first_failed)
      res.summary += fmt::format("; rank {} {}{}", r, Describe(ranks.status[r]), ranks.notes[r]);
  return res;
}

}  // namespace

LaunchResult LaunchLocalRanks(const LaunchOptions& options) {
  const int n = options.nproc;
  const int port = FreeLocalPort();
  Ranks ranks(n);
  std::vector<std::string> argv_s = {"rlid"};
  argv_s.insert(argv_s.end(), options.args.begin(), options.args.end());
  spdlog::info("starting {} ranks on this machine (store at 127.0.0.1:{})", n, port);
  for (int r = 0; r < n; ++r) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      ranks.KillAll(SIGKILL);
      throw IoError(fmt::format("cannot start rank {}: fork failed", r));
    }
    if (pid == 0) ExecRank(options, r, n, port, argv_s);
    ranks.pids[r] = pid;
  }
  int first_failed = -1, forwarded = 0, running = n;
  double failed_at = 0;
  while (running > 0) {
    int st = 0;
    const pid_t pid = ::waitpid(-1, &st, WNOHANG);
    if (pid > 0) {
      for (int r = 0; r < n; ++r) {
        if (ranks.pids[r] != pid) continue;
        ranks.done[r] = true;
        ranks.status[r] = st;
        --running;
        const bool ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
        if (!ok && first_failed < 0) {
          first_failed = r;
          failed_at = MonotonicSeconds();
          if (running > 0 && forwarded == 0)
            spdlog::error("rank {} {}; the other ranks get {} s to stop", r, Describe(st), options.grace_s);
        }
      }
      continue;
    }
    if (const int sig = PendingSignal(); sig != 0 && forwarded != sig) {
      ranks.KillAll(sig);  // the ranks stop at a safe point, as one process would
      forwarded = sig;
    }
    if (first_failed >= 0 && MonotonicSeconds() - failed_at > options.grace_s) {
      KillLateRanks(ranks, first_failed, options.grace_s);
      failed_at = MonotonicSeconds() + 1e9;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return Summarise(ranks, first_failed, forwarded);
}

}  // namespace rlid

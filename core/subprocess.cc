#include "core/subprocess.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <cstring>

#include "core/clock.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/log.h"

extern char** environ;

namespace rlid {
namespace {

// After the child exits, its stderr is read for at most this long (a process
// it started outside its group may hold the pipe open for ever).
constexpr double kStderrGraceS = 1.0;
// Stderr lines logged: the first kLogBurst, then kLogPerSecond a second.
constexpr int kLogBurst = 100;
constexpr int kLogPerSecond = 10;

// Milliseconds left until `deadline` for poll(), at least 0.
int MsLeft(double deadline) {
  const double left = deadline - MonotonicSeconds();
  if (left <= 0) return 0;
  return static_cast<int>(std::min(left * 1e3 + 1, 1e9));
}

void SetNonBlocking(int fd) { ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) | O_NONBLOCK); }

void CloseFd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Blocks SIGPIPE on this thread for its lifetime and swallows a SIGPIPE raised
// meanwhile, so a write to a child that has exited returns EPIPE instead of
// killing rlid (the process-wide disposition stays as it was).
class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGPIPE);
    sigpending(&pending_before_);
    pthread_sigmask(SIG_BLOCK, &set, &old_);
  }
  ~SigpipeGuard() {
    if (!sigismember(&pending_before_, SIGPIPE)) {
      sigset_t set, pending;
      sigemptyset(&set);
      sigaddset(&set, SIGPIPE);
      sigpending(&pending);
      if (sigismember(&pending, SIGPIPE)) {
        timespec zero{0, 0};
        sigtimedwait(&set, nullptr, &zero);
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t old_, pending_before_;
};

std::string Quote(const std::string& s) {
  if (!s.empty() && s.find_first_of(" \t\n'\"\\$") == std::string::npos) return s;
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

// What the forked child needs, prepared before the fork.
struct ExecPlan {
  std::vector<char*> argv;         // null-terminated
  std::vector<std::string> paths;  // where argv[0] may be, in PATH order
  std::vector<const char*> path_ptrs;
  const char* cwd = nullptr;  // chdir here first (nullptr: stay)
  std::array<int, 3> fds{};   // become the child's stdin, stdout, stderr
  int report_fd = -1;         // {stage, errno} go here when exec fails
  pid_t parent = -1;
};

// Where the exec failed, as the child reports it.
constexpr int kStageFds = 1, kStageChdir = 2, kStageExec = 3;

// The files posix_spawnp/execvp would try for `program`.
std::vector<std::string> ProgramPaths(const std::string& program) {
  if (program.find('/') != std::string::npos) return {program};
  const char* env_path = std::getenv("PATH");
  const std::string path = env_path ? env_path : "/bin:/usr/bin";
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t colon = path.find(':', start);
    const std::string dir = path.substr(start, colon == std::string::npos ? colon : colon - start);
    out.push_back((dir.empty() ? "." : dir) + "/" + program);
    if (colon == std::string::npos) break;
    start = colon + 1;
  }
  return out;
}

// The forked child, up to exec. Only system calls here: the fork copied a
// process whose other threads may hold locks (malloc's among them).
[[noreturn]] void ExecChild(const ExecPlan& p) {
  // Its own process group: a terminal's Ctrl-C reaches only rlid, which stops
  // the child, and the group is what rlid kills to stop what the child started.
  ::setpgid(0, 0);
  // Die with rlid, even when rlid is SIGKILLed. The signal comes when the
  // forking thread ends: the spawner thread, which lives as long as rlid.
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != p.parent) ::_exit(127);  // rlid died before prctl took effect
  auto fail = [&](int stage) {
    const int msg[2] = {stage, errno};
    [[maybe_unused]] const ssize_t n = ::write(p.report_fd, msg, sizeof(msg));
    ::_exit(127);
  };
  // Lift the pipe ends above 2 first, so that no dup2 below overwrites another.
  int fds[3];
  for (int i = 0; i < 3; ++i)
    if ((fds[i] = ::fcntl(p.fds[i], F_DUPFD_CLOEXEC, 3)) < 0) fail(kStageFds);
  for (int i = 0; i < 3; ++i)
    if (::dup2(fds[i], i) < 0) fail(kStageFds);  // the copies at 0-2 stay open across exec
  if (p.cwd != nullptr && ::chdir(p.cwd) != 0) fail(kStageChdir);
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) ::sigaction(s, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
  // Like execvp: try each PATH entry; a file found but not executable (EACCES)
  // is reported over a later "not found".
  bool denied = false;
  for (const char* path : p.path_ptrs) {
    ::execve(path, p.argv.data(), environ);
    if (errno == EACCES)
      denied = true;
    else if (errno != ENOENT && errno != ENOTDIR && errno != ESTALE)
      break;
  }
  if (denied && (errno == ENOENT || errno == ENOTDIR || errno == ESTALE)) errno = EACCES;
  fail(kStageExec);
  ::_exit(127);
}

// Forks children on one thread that lives as long as rlid: PR_SET_PDEATHSIG
// fires when the thread that forked the child ends, not the process, so a
// child forked on a short-lived thread would be killed when that thread ends.
class Spawner {
 public:
  static Spawner& Get() {
    static Spawner* spawner = new Spawner;  // never destroyed: its thread runs until exit
    return *spawner;
  }

  // Forks a child that runs ExecChild(plan); the pid, or -1 with errno set.
  pid_t Fork(const ExecPlan& plan) {
    if (::getpid() != owner_) {
      // This process is a fork of the one that started the spawner thread,
      // which it does not have: fork here (the child then dies with this thread).
      const pid_t pid = ::_Fork();
      if (pid == 0) ExecChild(plan);
      return pid;
    }
    std::lock_guard<std::mutex> one_at_a_time(call_mu_);
    std::unique_lock<std::mutex> lock(mu_);
    plan_ = &plan;
    done_ = false;
    cv_.notify_all();
    cv_.wait(lock, [&] { return done_; });
    errno = errno_;
    return pid_;
  }

 private:
  Spawner() : owner_(::getpid()) {
    std::thread([this] { Loop(); }).detach();
  }

  void Loop() {
    // No signal handler runs here (nor, until it resets the mask, in a child).
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_BLOCK, &all, nullptr);
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return plan_ != nullptr; });
      // _Fork: no atfork handlers (LibTorch's, OpenMP's) run in the child.
      const pid_t pid = ::_Fork();
      if (pid == 0) ExecChild(*plan_);
      pid_ = pid;
      errno_ = errno;
      plan_ = nullptr;
      done_ = true;
      cv_.notify_all();
    }
  }

  const pid_t owner_;
  std::mutex call_mu_;  // one Fork at a time
  std::mutex mu_;
  std::condition_variable cv_;
  const ExecPlan* plan_ = nullptr;
  bool done_ = false;
  pid_t pid_ = -1;
  int errno_ = 0;
};

}  // namespace

ChildProcess::ChildProcess(ChildOptions options) : opt_(std::move(options)) {
  if (opt_.argv.empty() || opt_.argv[0].empty())
    throw ConfigError("empty command for a child process", "give the program and its arguments");
  // Fds to close on every way out of this constructor that has not handed them on.
  std::vector<int> fds;
  auto close_all = [&] {
    for (int fd : fds) ::close(fd);
  };
  auto make_pipe = [&](int p[2]) {
    if (::pipe2(p, O_CLOEXEC) != 0) {
      const int e = errno;
      close_all();
      throw IoError(fmt::format("cannot make a pipe for `{}`: {}", CommandLine(), std::strerror(e)),
                    "too many open files? raise the limit (ulimit -n) or use fewer env workers");
    }
    fds.push_back(p[0]);
    fds.push_back(p[1]);
  };
  int in[2], out[2], err[2], report[2];
  make_pipe(in);
  make_pipe(out);
  make_pipe(err);
  make_pipe(report);

  // Everything the forked child needs is prepared here: between fork and exec
  // it may only make system calls (another thread may hold malloc's lock).
  ExecPlan plan;
  for (auto& a : opt_.argv) plan.argv.push_back(a.data());
  plan.argv.push_back(nullptr);
  plan.paths = ProgramPaths(opt_.argv[0]);
  for (auto& path : plan.paths) plan.path_ptrs.push_back(path.c_str());
  plan.cwd = opt_.cwd.empty() ? nullptr : opt_.cwd.c_str();
  plan.fds = {in[0], out[1], err[1]};
  plan.report_fd = report[1];
  plan.parent = ::getpid();
  pid_ = Spawner::Get().Fork(plan);
  const int fork_errno = errno;
  for (int fd : {in[0], out[1], err[1], report[1]}) ::close(fd);
  fds = {in[1], out[0], err[0], report[0]};
  if (pid_ < 0) {
    close_all();
    throw IoError(
        fmt::format("cannot start `{}`: fork failed: {}", CommandLine(), std::strerror(fork_errno)),
        "too many processes or too little memory? try fewer env workers");
  }
  // The child reports {stage, errno} when it cannot exec; EOF means exec worked.
  int failure[2] = {0, 0};
  size_t got = 0;
  while (got < sizeof(failure)) {
    const ssize_t n =
        ::read(report[0], reinterpret_cast<char*>(failure) + got, sizeof(failure) - got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(report[0]);
  fds.pop_back();
  if (got > 0) {
    int status;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
    close_all();
    const int e = got == sizeof(failure) ? failure[1] : EIO;
    if (failure[0] == kStageChdir)
      throw IoError(fmt::format("cannot start `{}`: cannot enter directory '{}': {}", CommandLine(),
                                opt_.cwd, std::strerror(e)),
                    "check [env] cwd");
    throw IoError(
        fmt::format("cannot start `{}`: {}{}", CommandLine(), std::strerror(e),
                    opt_.cwd.empty() ? "" : fmt::format(" (in directory '{}')", opt_.cwd)),
        e == ENOENT ? "check that the program exists and is on PATH (or give its path)"
                    : "check the command and the directory it runs in");
  }
  in_fd_ = in[1], out_fd_ = out[0], err_fd_ = err[0];
  SetNonBlocking(in_fd_);
  SetNonBlocking(out_fd_);
  err_thread_ = std::thread([this] { StderrLoop(); });
}

ChildProcess::~ChildProcess() {
  CloseFd(in_fd_);
  if (pid_ > 0 && !exited_) {
    const double deadline = MonotonicSeconds() + 1.0;
    while (!exited_ && MonotonicSeconds() < deadline) {
      Reap(WNOHANG);
      if (!exited_) ::usleep(5000);
    }
    if (!exited_) {
      ::kill(-pid_, SIGTERM);
      const double term_deadline = MonotonicSeconds() + 1.0;
      while (!exited_ && MonotonicSeconds() < term_deadline) {
        Reap(WNOHANG);
        if (!exited_) ::usleep(5000);
      }
    }
    if (!exited_) Kill();
  }
  CloseFd(out_fd_);
  if (err_thread_.joinable()) err_thread_.join();
  CloseFd(err_fd_);
}

void ChildProcess::Kill() {
  if (pid_ <= 0 || exited_) return;
  ::kill(-pid_, SIGKILL);
  Reap(0);
}

void ChildProcess::Reap(int options) {
  if (pid_ <= 0 || exited_) return;
  // Wait without reaping first: while the child is a zombie its pid, which is
  // also its process group's id, cannot be reused, so killing the group cannot
  // hit a stranger. Whatever the child started in its group dies with it.
  siginfo_t info{};
  int r;
  do {
    r = ::waitid(P_PID, static_cast<id_t>(pid_), &info, WEXITED | WNOWAIT | (options & WNOHANG));
  } while (r < 0 && errno == EINTR);
  if (r < 0) {
    exit_time_ = MonotonicSeconds();
    exited_ = true;  // not our child any more (reaped elsewhere): treat as gone
    status_ = 0;
    return;
  }
  if (info.si_pid == 0) return;  // still running (WNOHANG)
  ::kill(-pid_, SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  status_ = status;
  exit_time_ = MonotonicSeconds();
  exited_ = true;
}

bool ChildProcess::Running() {
  Reap(WNOHANG);
  return pid_ > 0 && !exited_;
}

std::string ChildProcess::ExitDescription() {
  if (Running()) return "running";
  if (WIFEXITED(status_)) return fmt::format("exited with code {}", WEXITSTATUS(status_));
  if (WIFSIGNALED(status_)) {
    const int s = WTERMSIG(status_);
    const char* name = ::sigabbrev_np(s);
    return fmt::format("killed by {}", name ? fmt::format("SIG{}", name) : fmt::format("signal {}", s));
  }
  return "exited";
}

int ChildProcess::ExitCode() {
  if (Running() || !WIFEXITED(status_)) return -1;
  return WEXITSTATUS(status_);
}

void ChildProcess::StderrLoop() {
  const std::string& name = opt_.log_name.empty() ? opt_.argv[0] : opt_.log_name;
  std::string partial;
  char buf[4096];
  // The log gets a burst of kLogBurst lines, then kLogPerSecond lines a
  // second; the lines past that are counted and reported as suppressed (the
  // report costs a line of the budget). err_lines_ keeps the last lines all
  // the same, for error messages.
  double tokens = kLogBurst, refilled = MonotonicSeconds();
  int64_t suppressed = 0;
  auto report_suppressed = [&] {
    spdlog::info(
        "[{}] ({} stderr lines suppressed: rlid logs at most {} lines a second of an "
        "env's stderr after the first {})",
        name, suppressed, kLogPerSecond, kLogBurst);
    suppressed = 0;
  };
  auto emit = [&](std::string line) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    const double now = MonotonicSeconds();
    tokens = std::min<double>(kLogBurst, tokens + (now - refilled) * kLogPerSecond);
    refilled = now;
    if (suppressed > 0 && tokens >= 2) {
      report_suppressed();
      tokens -= 1;
    }
    if (suppressed == 0 && tokens >= 1) {
      spdlog::info("[{}] {}", name, line.size() > 2000 ? line.substr(0, 2000) + "..." : line);
      tokens -= 1;
    } else {
      ++suppressed;
    }
    std::lock_guard<std::mutex> lock(err_mu_);
    err_lines_.push_back(std::move(line));
    while (err_lines_.size() > 50) err_lines_.pop_front();
  };
  bool cut = false;
  for (;;) {
    // Once the child is gone, what it wrote is in the pipe already; a pipe
    // that stays open is held by a process it started outside its process
    // group (setsid). That is read for a short grace, not until it ends.
    if (exited_ && MonotonicSeconds() > exit_time_ + kStderrGraceS) {
      cut = true;
      break;
    }
    pollfd p{err_fd_, POLLIN, 0};
    const int r = ::poll(&p, 1, 100);
    if (r < 0 && errno != EINTR) break;
    if (r <= 0) {
      if (pid_ <= 0) break;
      if (exited_) {  // silent since the child exited: nothing more is coming from it
        cut = true;
        break;
      }
      continue;
    }
    const ssize_t n = ::read(err_fd_, buf, sizeof(buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) break;
    partial.append(buf, static_cast<size_t>(n));
    size_t at;
    while ((at = partial.find('\n')) != std::string::npos) {
      emit(partial.substr(0, at));
      partial.erase(0, at + 1);
    }
    if (partial.size() > 8192) {  // a very long line: log it in pieces
      emit(partial);
      partial.clear();
    }
  }
  if (!partial.empty()) emit(partial);
  if (suppressed > 0) report_suppressed();
  if (cut)
    spdlog::info(
        "[{}] stopped reading its stderr: the process exited, but a process it started "
        "outside its process group still holds the pipe open; its output is not shown",
        name);
  stderr_done_ = true;
}

bool ChildProcess::WaitForExit(double timeout_s) {
  const double deadline = MonotonicSeconds() + timeout_s;
  while (MonotonicSeconds() < deadline && (Running() || !stderr_done_)) ::usleep(2000);
  return !Running();
}

std::vector<std::string> ChildProcess::LastStderrLines(size_t n) const {
  std::lock_guard<std::mutex> lock(err_mu_);
  const size_t k = std::min(n, err_lines_.size());
  return {err_lines_.end() - static_cast<std::ptrdiff_t>(k), err_lines_.end()};
}

bool ChildProcess::WriteLine(std::string_view line, double timeout_s, std::string* error) {
  if (in_fd_ < 0) {
    if (error) *error = "its stdin is closed";
    return false;
  }
  SigpipeGuard guard;
  std::string data(line);
  data += '\n';
  size_t done = 0;
  const double deadline = MonotonicSeconds() + timeout_s;
  while (done < data.size()) {
    const ssize_t n = ::write(in_fd_, data.data() + done, data.size() - done);
    if (n > 0) {
      done += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) {
      // The child is not reading: maybe it is blocked writing replies we have
      // not read yet. Keep reading its stdout meanwhile, so neither side waits
      // on the other.
      pollfd p[2] = {{in_fd_, POLLOUT, 0}, {out_fd_, POLLIN, 0}};
      const int ms = MsLeft(deadline);
      if (ms == 0) {
        if (error) *error = fmt::format("it read no input for {:g} s", timeout_s);
        return false;
      }
      if (::poll(p, out_fd_ >= 0 ? 2 : 1, std::min(ms, 100)) > 0 && out_fd_ >= 0 &&
          (p[1].revents & POLLIN)) {
        char buf[65536];
        const ssize_t got = ::read(out_fd_, buf, sizeof(buf));
        if (got > 0) buffer_.append(buf, static_cast<size_t>(got));
      }
      continue;
    }
    if (error)
      *error = errno == EPIPE ? "it closed its stdin (the process exited?)"
                              : fmt::format("write failed: {}", std::strerror(errno));
    return false;
  }
  return true;
}

ChildProcess::Read ChildProcess::ReadLine(std::string& line, double timeout_s) {
  const double deadline = MonotonicSeconds() + timeout_s;
  size_t scanned = 0;
  for (;;) {
    const size_t at = buffer_.find('\n', scanned);
    if (at != std::string::npos) {
      line.assign(buffer_, 0, at);
      if (!line.empty() && line.back() == '\r') line.pop_back();
      buffer_.erase(0, at + 1);
      last_stdout_ = line.size() > 500 ? line.substr(0, 500) + "..." : line;
      return Read::kLine;
    }
    scanned = buffer_.size();
    if (buffer_.size() > opt_.max_line_bytes) {
      last_stdout_ = buffer_.substr(0, 500) + "...";
      buffer_.clear();
      return Read::kTooLong;
    }
    if (out_fd_ < 0) return Read::kEof;
    pollfd p{out_fd_, POLLIN, 0};
    const int ms = MsLeft(deadline);
    if (ms == 0) return Read::kTimeout;
    const int r = ::poll(&p, 1, ms);
    if (r < 0) {
      if (errno != EINTR) return Read::kEof;
      if (PendingSignal() != 0) return Read::kInterrupted;
      continue;
    }
    if (r == 0) continue;  // the deadline check above decides
    char buf[65536];
    const ssize_t n = ::read(out_fd_, buf, sizeof(buf));
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) {
      if (PendingSignal() != 0) return Read::kInterrupted;
      continue;
    }
    if (n <= 0) {
      if (!buffer_.empty()) last_stdout_ = buffer_.substr(0, 500);
      CloseFd(out_fd_);
      return Read::kEof;
    }
    buffer_.append(buf, static_cast<size_t>(n));
  }
}

std::string ChildProcess::CommandLine() const {
  std::string out;
  for (const auto& a : opt_.argv) out += (out.empty() ? "" : " ") + Quote(a);
  return out;
}

std::string FindProgram(const std::string& program) {
  if (program.empty()) return "";
  for (const std::string& path : ProgramPaths(program)) {
    struct stat st {};
    if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0)
      return path;
  }
  return "";
}

std::vector<std::string> SplitCommandLine(std::string_view line) {
  std::vector<std::string> words;
  std::string cur;
  bool in_word = false;
  char quote = 0;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quote == '\'') {
      if (c == '\'') quote = 0;
      else cur += c;
      continue;
    }
    if (quote == '"') {
      if (c == '"') {
        quote = 0;
      } else if (c == '\\' && i + 1 < line.size() &&
                 std::strchr("\"\\$`\n", line[i + 1]) != nullptr) {
        cur += line[++i];
      } else {
        cur += c;
      }
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\n') {
      if (in_word) words.push_back(std::move(cur)), cur.clear(), in_word = false;
      continue;
    }
    in_word = true;
    if (c == '\'' || c == '"') {
      quote = c;
    } else if (c == '\\' && i + 1 < line.size()) {
      cur += line[++i];
    } else {
      cur += c;
    }
  }
  if (quote != 0)
    throw ConfigError(fmt::format("unclosed {} quote in command line `{}`",
                                  quote == '\'' ? "single" : "double", line),
                      "close the quote, or pass the command as a TOML array in [env] command");
  if (in_word) words.push_back(std::move(cur));
  return words;
}

}  // namespace rlid

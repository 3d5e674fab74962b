#include "core/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/error.h"
#include "core/interrupt.h"
#include "core/log.h"

extern char** environ;

namespace rlid {
namespace {

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Milliseconds left until `deadline` for poll(), at least 0.
int MsLeft(double deadline) {
  const double left = deadline - Now();
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

}  // namespace

ChildProcess::ChildProcess(ChildOptions options) : opt_(std::move(options)) {
  if (opt_.argv.empty() || opt_.argv[0].empty())
    throw ConfigError("empty command for a child process", "give the program and its arguments");
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) != 0) throw IoError(fmt::format("pipe: {}", std::strerror(errno)));
  if (::pipe2(out, O_CLOEXEC) != 0) {
    ::close(in[0]), ::close(in[1]);
    throw IoError(fmt::format("pipe: {}", std::strerror(errno)));
  }
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(in[0]), ::close(in[1]), ::close(out[0]), ::close(out[1]);
    throw IoError(fmt::format("pipe: {}", std::strerror(errno)));
  }
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, in[0], 0);
  posix_spawn_file_actions_adddup2(&fa, out[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err[1], 2);
  if (!opt_.cwd.empty()) posix_spawn_file_actions_addchdir_np(&fa, opt_.cwd.c_str());
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t defaults, empty;
  sigemptyset(&defaults);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGPIPE}) sigaddset(&defaults, s);
  sigemptyset(&empty);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setsigmask(&attr, &empty);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGDEF |
                                      POSIX_SPAWN_SETSIGMASK);
  std::vector<char*> argv;
  for (auto& a : opt_.argv) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int rc = ::posix_spawnp(&pid_, argv[0], &fa, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  ::close(in[0]), ::close(out[1]), ::close(err[1]);
  if (rc != 0) {
    ::close(in[1]), ::close(out[0]), ::close(err[0]);
    pid_ = -1;
    throw IoError(fmt::format("cannot start `{}`: {}{}", CommandLine(), std::strerror(rc),
                              opt_.cwd.empty() ? "" : fmt::format(" (in directory '{}')", opt_.cwd)),
                  rc == ENOENT ? "check that the program exists and is on PATH (or give its path)"
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
    const double deadline = Now() + 1.0;
    while (!exited_ && Now() < deadline) {
      Reap(WNOHANG);
      if (!exited_) ::usleep(5000);
    }
    if (!exited_) {
      ::kill(-pid_, SIGTERM);
      const double term_deadline = Now() + 1.0;
      while (!exited_ && Now() < term_deadline) {
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
  int status = 0;
  pid_t r;
  do {
    r = ::waitpid(pid_, &status, options);
  } while (r < 0 && errno == EINTR);
  if (r == pid_) {
    exited_ = true;
    status_ = status;
  } else if (r < 0) {
    exited_ = true;  // not our child any more (reaped elsewhere): treat as gone
    status_ = 0;
  }
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

void ChildProcess::StderrLoop() {
  std::string partial;
  char buf[4096];
  auto emit = [&](std::string line) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    spdlog::info("[{}] {}", opt_.log_name.empty() ? opt_.argv[0] : opt_.log_name, line);
    std::lock_guard<std::mutex> lock(err_mu_);
    err_lines_.push_back(std::move(line));
    while (err_lines_.size() > 50) err_lines_.pop_front();
  };
  for (;;) {
    pollfd p{err_fd_, POLLIN, 0};
    const int r = ::poll(&p, 1, 100);
    if (r < 0 && errno != EINTR) break;
    if (r <= 0) {
      // The child is gone and the pipe stayed open (a grandchild holds it): stop.
      if (exited_ || pid_ <= 0) break;
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
  stderr_done_ = true;
}

bool ChildProcess::WaitForExit(double timeout_s) {
  const double deadline = Now() + timeout_s;
  while (Now() < deadline && (Running() || !stderr_done_)) ::usleep(2000);
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
  const double deadline = Now() + timeout_s;
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
  const double deadline = Now() + timeout_s;
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

// ChildProcess: a program rlid starts and talks to over pipes (an external
// environment speaking newline-delimited JSON). stdin/stdout carry the
// protocol; a background thread reads stderr line by line, logs it (rate
// limited) and keeps the last lines for error messages (so a chatty child
// never blocks on a full stderr pipe). Every read and write has a deadline;
// nothing here ever hangs, and nothing the child starts outlives it or rlid.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace rlid {

struct ChildOptions {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH
  std::string cwd;                // working directory ("" = ours)
  std::string log_name;           // prefix of logged stderr lines ("env shop[2]")
  size_t max_line_bytes = size_t{64} << 20;  // a longer stdout line is an error
};

class ChildProcess {
 public:
  // Starts the program in its own process group (a terminal's Ctrl-C reaches
  // only rlid, which then stops the child), set to be SIGKILLed when rlid dies
  // (PR_SET_PDEATHSIG, so even a SIGKILLed rlid leaves no env behind). When
  // the child exits, its process group is killed: whatever it started there
  // dies with it. IoError when it cannot be started (not found, not
  // executable, no such cwd), naming the command.
  explicit ChildProcess(ChildOptions options);
  // Closes stdin (a well-behaved child exits on EOF), waits up to 1 s, then
  // SIGTERM, then SIGKILL to its process group. Returns within about 3 s even
  // when a process the child started outside its group (setsid) holds its
  // stderr open: after the exit stderr is read for 1 s at most. Never throws.
  ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // Writes `line` + '\n'. Returns false when the child closed its stdin (it
  // exited) or the deadline passed; `error` says which.
  bool WriteLine(std::string_view line, double timeout_s, std::string* error);

  enum class Read { kLine, kTimeout, kEof, kTooLong, kInterrupted };
  // Reads one stdout line (without '\n') within timeout_s. kInterrupted: a
  // stop signal (core/interrupt.h) arrived while waiting.
  Read ReadLine(std::string& line, double timeout_s);

  // True while the process has not exited (reaps it once it has).
  bool Running();
  // Waits up to timeout_s for the process to exit and for its stderr to be
  // read to the end (or cut, 1 s after the exit), so an error message can
  // quote its exit status and last words. Returns whether it exited.
  bool WaitForExit(double timeout_s);
  // "exited with code 1", "killed by SIGKILL", or "running".
  std::string ExitDescription();
  // The exit code once the process has exited; -1 while it runs or when a
  // signal killed it.
  int ExitCode();
  // The last stderr lines (up to `n` <= 50, oldest first; kept even when the
  // log suppressed them), and the last stdout line read (a line that was not
  // protocol is often the child's own message).
  std::vector<std::string> LastStderrLines(size_t n = 5) const;
  const std::string& last_stdout_line() const { return last_stdout_; }
  pid_t pid() const { return pid_; }
  std::string CommandLine() const;

  // Stops the child now (SIGKILL to its process group) and reaps it.
  void Kill();

 private:
  void StderrLoop();
  // Reaps the child if it exited (options: 0 waits, WNOHANG does not), killing
  // its process group first.
  void Reap(int options);

  ChildOptions opt_;
  pid_t pid_ = -1;
  int in_fd_ = -1, out_fd_ = -1, err_fd_ = -1;
  std::atomic<bool> exited_{false};  // read by the stderr thread
  std::atomic<double> exit_time_{0};      // when exited_ was set (steady clock, s)
  std::atomic<bool> stderr_done_{false};  // the stderr thread has stopped
  int status_ = 0;
  std::string buffer_;  // stdout bytes read past the last line
  std::string last_stdout_;
  std::thread err_thread_;
  mutable std::mutex err_mu_;
  std::deque<std::string> err_lines_;
};

// The file execvp would run for `program` (searched in PATH unless it has a
// '/'): the first that is an executable regular file, or "" when none is.
std::string FindProgram(const std::string& program);

// Splits a command line like a POSIX shell would for words: whitespace
// separates, '...' and "..." quote, backslash escapes (outside single quotes).
// No expansion of variables or globs. ConfigError on an unclosed quote.
std::vector<std::string> SplitCommandLine(std::string_view line);

}  // namespace rlid

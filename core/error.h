// Typed errors for everything a user can cause (bad config, bad files, bad
// input) plus InternalError for broken invariants. Every message says what was
// expected, what was found, and (via `hint`) what to try. main() catches
// rlid::Error, prints it, and exits non-zero.
#pragma once

#include <stdexcept>
#include <string>

namespace rlid {

class Error : public std::runtime_error {
 public:
  Error(std::string what, std::string hint = {})
      : std::runtime_error(std::move(what)), hint_(std::move(hint)) {}
  const std::string& hint() const { return hint_; }
  // Short category printed before the message ("config error", ...).
  virtual const char* kind() const { return "error"; }
  // Process exit code main() uses for this error.
  virtual int exit_code() const { return 1; }

 private:
  std::string hint_;
};

// Bad configuration, CLI flags, or user-supplied JSON. Exit code 2.
class ConfigError : public Error {
 public:
  using Error::Error;
  const char* kind() const override { return "config error"; }
  int exit_code() const override { return 2; }
};

// A file or database could not be read/written. Exit code 3.
class IoError : public Error {
 public:
  using Error::Error;
  const char* kind() const override { return "i/o error"; }
  int exit_code() const override { return 3; }
};

// A broken invariant inside rlid (a bug). Exit code 4.
class InternalError : public Error {
 public:
  using Error::Error;
  const char* kind() const override { return "internal error"; }
  int exit_code() const override { return 4; }
};

// Training produced a non-finite value; names the tensor and iteration. Exit code 5.
class NumericError : public Error {
 public:
  using Error::Error;
  const char* kind() const override { return "numeric error"; }
  int exit_code() const override { return 5; }
};

// An environment failed to do its part: an external env's process crashed,
// stayed silent past its timeout, or answered with malformed or wrong data.
// The message names the env and the message; the hint carries its last output.
// Exit code 6.
class EnvError : public Error {
 public:
  using Error::Error;
  const char* kind() const override { return "environment error"; }
  int exit_code() const override { return 6; }
};

// A data-parallel job lost a rank: it exited, stopped responding past the
// collective timeout, or the rendezvous could not form. The message names the
// rank(s) and what they last reported. Exit code 7.
class DistError : public Error {
 public:
  using Error::Error;
  const char* kind() const override { return "distributed error"; }
  int exit_code() const override { return 7; }
};

// "error message\n  hint: ..." as main() prints it.
std::string FormatError(const Error& e);

}  // namespace rlid

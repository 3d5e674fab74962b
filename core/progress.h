// Progress lines with an ETA for long commands (sft, eval, audit, policy
// readout, bench, compare). One Progress per loop: Update(done) logs an info
// line at most every `every_s` seconds (and once at the end), so a command
// that runs for minutes is never silent and a fast one prints one line.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace rlid {

// "350ms" (under a second), "42s", "3m07s", "1h05m".
std::string FormatDuration(double seconds);

class Progress {
 public:
  // `what` names the loop ("sft", "eval 64 episodes"); `total` > 0 units of
  // work (steps, episodes, states). Disabled progress logs nothing.
  // With `end_line` false the end is logged only after an earlier line (a
  // loop that finished within every_s stays silent).
  Progress(std::string what, int64_t total, bool enabled = true, double every_s = 10.0,
           bool end_line = true);
  // `done` units of `total` are finished (monotone); `detail` is appended
  // ("loss 0.41"). Logs when every_s passed since the last line or done == total.
  void Update(int64_t done, std::string_view detail = {});
  // The line Update would log now (for tests and callers that log themselves).
  std::string Line(int64_t done, std::string_view detail = {}) const;
  int64_t total() const { return total_; }

 private:
  std::string what_;
  int64_t total_;
  bool enabled_;
  double every_s_, start_, last_;
  bool finished_ = false;
  bool end_line_ = true, logged_ = false;
};

}  // namespace rlid

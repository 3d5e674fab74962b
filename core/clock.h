// The one clock rlid measures durations with.
#pragma once

#include <chrono>

namespace rlid {

// Seconds on the monotonic clock (std::chrono::steady_clock) from an
// unspecified origin: meaningful only as a difference of two readings.
inline double MonotonicSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace rlid

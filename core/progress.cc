#include "core/progress.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "core/clock.h"

namespace rlid {

std::string FormatDuration(double s) {
  if (!std::isfinite(s) || s < 0) return "?";
  if (s > 0 && s < 0.95) return fmt::format("{:.0f}ms", std::max(1.0, s * 1000));  // not "0s"
  if (s < 60) return fmt::format("{:.0f}s", s);
  if (s < 3600) return fmt::format("{:.0f}m{:02.0f}s", std::floor(s / 60), std::floor(std::fmod(s, 60)));
  return fmt::format("{:.0f}h{:02.0f}m", std::floor(s / 3600), std::floor(std::fmod(s / 60, 60)));
}

Progress::Progress(std::string what, int64_t total, bool enabled, double every_s, bool end_line)
    : what_(std::move(what)),
      total_(std::max<int64_t>(total, 1)),
      enabled_(enabled),
      every_s_(every_s),
      start_(MonotonicSeconds()),
      last_(start_),
      end_line_(end_line) {}

std::string Progress::Line(int64_t done, std::string_view detail) const {
  done = std::clamp<int64_t>(done, 0, total_);
  const double elapsed = MonotonicSeconds() - start_;
  const double frac = static_cast<double>(done) / static_cast<double>(total_);
  std::string line = fmt::format("{}: {}/{} ({:.0f}%)", what_, done, total_, 100 * frac);
  if (!detail.empty()) line += fmt::format(" {}", detail);
  line += fmt::format(" | {} elapsed", FormatDuration(elapsed));
  if (done < total_)
    line += fmt::format(" | ETA {}", done > 0 ? FormatDuration(elapsed * (1 - frac) / frac) : "?");
  return line;
}

void Progress::Update(int64_t done, std::string_view detail) {
  if (!enabled_ || finished_) return;
  const double now = MonotonicSeconds();
  const bool end = done >= total_;
  if (!end && now - last_ < every_s_) return;
  last_ = now;
  finished_ = end;
  if (end && !end_line_ && !logged_) return;
  logged_ = true;
  spdlog::info("{}", Line(done, detail));
}

}  // namespace rlid

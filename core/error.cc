// Error formatting and the out-of-line part of the CHECK macros.
#include "core/error.h"

#include <fmt/format.h>

#include "core/check.h"

namespace rlid {

std::string FormatError(const Error& e) {
  std::string out = fmt::format("{}: {}", e.kind(), e.what());
  if (!e.hint().empty()) out += fmt::format("\n  hint: {}", e.hint());
  return out;
}

namespace internal {

void CheckFailed(const char* file, int line, const std::string& what, const std::string& msg) {
  std::string text = fmt::format("check failed at {}:{}: {}", file, line, what);
  if (!msg.empty()) text += " — " + msg;
  throw InternalError(text, "this is a bug in rlid; please report it with the command you ran");
}

}  // namespace internal
}  // namespace rlid

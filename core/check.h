// Always-on invariant checks (also in Release builds). A failed check throws
// rlid::InternalError naming the file:line, the expression, and both values.
// Use them for conditions only a bug can cause; user errors throw ConfigError.
#pragma once

#include <fmt/format.h>
#include <fmt/ostream.h>

#include <sstream>
#include <string>

#include "core/error.h"

namespace rlid::internal {

template <class T>
std::string CheckRepr(const T& v) {
  if constexpr (fmt::is_formattable<T>::value) {
    return fmt::format("{}", v);
  } else {
    std::ostringstream os;
    os << v;
    return os.str();
  }
}

[[noreturn]] void CheckFailed(const char* file, int line, const std::string& what,
                              const std::string& msg);

template <class A, class B>
[[noreturn]] void CheckOpFailed(const char* file, int line, const char* expr, const A& a,
                                const B& b, const std::string& msg) {
  CheckFailed(file, line,
              fmt::format("{} ({} vs {})", expr, CheckRepr(a), CheckRepr(b)), msg);
}

}  // namespace rlid::internal

// RLID_CHECK(cond) or RLID_CHECK(cond, "fmt {}", args...)
#define RLID_CHECK(cond, ...)                                                          \
  do {                                                                                 \
    if (!(cond)) [[unlikely]]                                                          \
      ::rlid::internal::CheckFailed(__FILE__, __LINE__, #cond,                         \
                                    ::fmt::format("" __VA_ARGS__));     \
  } while (0)

#define RLID_CHECK_OP_(op, a, b, ...)                                                    \
  do {                                                                                   \
    const auto& rlid_a_ = (a);                                                           \
    const auto& rlid_b_ = (b);                                                           \
    if (!(rlid_a_ op rlid_b_)) [[unlikely]]                                              \
      ::rlid::internal::CheckOpFailed(__FILE__, __LINE__, #a " " #op " " #b, rlid_a_,     \
                                      rlid_b_, ::fmt::format("" __VA_ARGS__)); \
  } while (0)

#define RLID_CHECK_EQ(a, b, ...) RLID_CHECK_OP_(==, a, b __VA_OPT__(, ) __VA_ARGS__)
#define RLID_CHECK_NE(a, b, ...) RLID_CHECK_OP_(!=, a, b __VA_OPT__(, ) __VA_ARGS__)
#define RLID_CHECK_LT(a, b, ...) RLID_CHECK_OP_(<, a, b __VA_OPT__(, ) __VA_ARGS__)
#define RLID_CHECK_LE(a, b, ...) RLID_CHECK_OP_(<=, a, b __VA_OPT__(, ) __VA_ARGS__)
#define RLID_CHECK_GT(a, b, ...) RLID_CHECK_OP_(>, a, b __VA_OPT__(, ) __VA_ARGS__)
#define RLID_CHECK_GE(a, b, ...) RLID_CHECK_OP_(>=, a, b __VA_OPT__(, ) __VA_ARGS__)

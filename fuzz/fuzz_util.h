// Helpers shared by the libFuzzer targets in fuzz/: reading fixed-size fields
// off the front of an input and failing loudly on a broken invariant (a crash
// libFuzzer records, unlike an exception the target is allowed to throw).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace rlid::fuzz {

// Consumes bytes from the front of a fuzz input.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  // Little-endian integer from up to `bytes` bytes (fewer when the input ends).
  uint64_t TakeInt(size_t bytes) {
    uint64_t v = 0;
    for (size_t i = 0; i < bytes && pos_ < size_; ++i) v |= uint64_t{data_[pos_++]} << (8 * i);
    return v;
  }
  uint8_t TakeByte() { return static_cast<uint8_t>(TakeInt(1)); }
  // Everything not consumed yet.
  std::string_view Rest() const {
    return {reinterpret_cast<const char*>(data_) + pos_, size_ - pos_};
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

inline std::string_view AsText(const uint8_t* data, size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

[[noreturn]] inline void Fail(const char* file, int line, const char* what) {
  std::fprintf(stderr, "%s:%d: fuzz invariant violated: %s\n", file, line, what);
  std::abort();
}

}  // namespace rlid::fuzz

// Aborts (a crash libFuzzer reports with the input) when `cond` is false.
#define FUZZ_CHECK(cond) \
  ((cond) ? (void)0 : ::rlid::fuzz::Fail(__FILE__, __LINE__, #cond))

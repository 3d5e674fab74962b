// Stable 64-bit hashing for state ids, prompt hashes and seed derivation.
// Values are identical on every platform and build (no std::hash).
#pragma once

#include <cstdint>
#include <string_view>

namespace rlid {

// SplitMix64 finaliser: a bijective mixer of 64-bit values.
constexpr uint64_t Mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// FNV-1a over bytes, then mixed.
constexpr uint64_t HashBytes(std::string_view s, uint64_t seed = 0) {
  uint64_t h = 0xcbf29ce484222325ULL ^ Mix64(seed);
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return Mix64(h);
}

constexpr uint64_t HashCombine(uint64_t a, uint64_t b) { return Mix64(a ^ (Mix64(b) + 0x632be59bd9b4e019ULL)); }

}  // namespace rlid

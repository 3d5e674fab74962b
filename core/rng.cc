#include "core/rng.h"

#include <fmt/format.h>

#include <sstream>

#include "core/error.h"
#include "core/hash.h"

namespace rlid {
namespace {
uint64_t Rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
}  // namespace

Rng::Rng(uint64_t seed) {
  uint64_t x = seed;
  for (auto& w : s_) {
    x += 0x9e3779b97f4a7c15ULL;
    w = Mix64(x);
  }
}

uint64_t Rng::DeriveSeed(uint64_t seed, std::string_view name, uint64_t index, uint64_t rank) {
  return HashCombine(HashCombine(HashBytes(name, seed), index), rank ^ 0x5bd1e995ULL);
}

Rng Rng::Stream(uint64_t seed, std::string_view name, uint64_t index, uint64_t rank) {
  return Rng(DeriveSeed(seed, name, index, rank));
}

uint64_t Rng::Next() {
  const uint64_t result = Rotl(s_[1] * 5, 7) * 9;
  const uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = Rotl(s_[3], 45);
  return result;
}

uint64_t Rng::UniformInt(uint64_t n) {
  if (n == 0) throw InternalError("Rng::UniformInt(0): empty range");
  const uint64_t limit = UINT64_MAX - UINT64_MAX % n;
  uint64_t x;
  do x = Next();
  while (x >= limit);
  return x % n;
}

int64_t Rng::UniformRange(int64_t lo, int64_t hi) {
  if (hi < lo) throw InternalError(fmt::format("Rng::UniformRange({}, {}): empty range", lo, hi));
  return lo + static_cast<int64_t>(UniformInt(static_cast<uint64_t>(hi - lo) + 1));
}

double Rng::Uniform() { return static_cast<double>(Next() >> 11) * 0x1.0p-53; }

size_t Rng::Categorical(std::span<const double> weights) {
  double total = 0;
  for (double w : weights) {
    if (!(w >= 0)) throw InternalError("Rng::Categorical: negative or NaN weight");
    total += w;
  }
  if (!(total > 0)) throw InternalError("Rng::Categorical: weights sum to zero");
  double u = Uniform() * total;
  size_t last_positive = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (weights[i] > 0) last_positive = i;
    if (u < weights[i]) return i;
    u -= weights[i];
  }
  return last_positive;  // rounding: fall back to the last item with mass
}

std::vector<int> Rng::Permutation(int n) {
  std::vector<int> p(n);
  for (int i = 0; i < n; ++i) p[i] = i;
  Shuffle(p);
  return p;
}

std::string Rng::SaveState() const {
  return fmt::format("{:016x}{:016x}{:016x}{:016x}", s_[0], s_[1], s_[2], s_[3]);
}

void Rng::LoadState(std::string_view text) {
  if (text.size() != 64) throw IoError(fmt::format("bad RNG state '{}' (expected 64 hex digits)", text));
  for (int i = 0; i < 4; ++i) {
    std::string part(text.substr(i * 16, 16));
    try {
      s_[i] = std::stoull(part, nullptr, 16);
    } catch (const std::exception&) {
      throw IoError(fmt::format("bad RNG state '{}' (expected hex digits)", text));
    }
  }
}

}  // namespace rlid

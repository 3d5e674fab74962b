// Deterministic random streams. Every stream is derived from
// (run seed, stream name, index[, rank]) so that adding a consumer never shifts
// another consumer's numbers, and reruns give identical trajectories. The
// generator (xoshiro256**) and the distributions are implemented here so the
// numbers are identical across standard libraries and platforms.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace rlid {

class Rng {
 public:
  explicit Rng(uint64_t seed = 0);
  // The stream for (seed, name, index, rank).
  static Rng Stream(uint64_t seed, std::string_view name, uint64_t index = 0, uint64_t rank = 0);
  // A 64-bit seed derived the same way (for seeding other generators, e.g. torch).
  static uint64_t DeriveSeed(uint64_t seed, std::string_view name, uint64_t index = 0,
                             uint64_t rank = 0);

  uint64_t Next();
  // Uniform integer in [0, n); n > 0. Unbiased (rejection sampling).
  uint64_t UniformInt(uint64_t n);
  // Uniform integer in [lo, hi] inclusive.
  int64_t UniformRange(int64_t lo, int64_t hi);
  // Uniform double in [0, 1) with 53 random bits.
  double Uniform();
  bool Bernoulli(double p) { return Uniform() < p; }
  // Index drawn proportionally to non-negative weights (sum > 0).
  size_t Categorical(std::span<const double> weights);
  // A uniformly random permutation of 0..n-1.
  std::vector<int> Permutation(int n);
  template <class T>
  void Shuffle(std::vector<T>& v) {
    for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[UniformInt(i)]);
  }

  // Serialisable state (for --resume).
  std::string SaveState() const;
  void LoadState(std::string_view text);
  bool operator==(const Rng& o) const { return s_ == o.s_; }

 private:
  std::array<uint64_t, 4> s_;
};

}  // namespace rlid

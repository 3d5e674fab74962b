// The gated delta rule's three forms (policy/model/gated_delta.h) compute the
// same outputs and states: token by token, in chunks (any chunk size, with a
// starting state), and over a forest, where every token must equal the
// recurrence along its own root path alone.
#include "policy/model/gated_delta.h"

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

namespace rlid::policy {
namespace {

struct Inputs {
  torch::Tensor q, k, v, g, beta, state;
};

// Random inputs as the layer makes them: l2-normalised q and k (q scaled),
// log decays in (-2, 0), beta in (0, 1), a random starting state.
Inputs RandomInputs(int64_t B, int64_t H, int64_t T, int64_t dk, int64_t dv, uint64_t seed,
                    torch::Dtype dtype = torch::kFloat64) {
  auto gen = at::detail::createCPUGenerator(seed);
  auto opts = torch::TensorOptions().dtype(dtype);
  auto normal = [&](std::vector<int64_t> shape) { return at::normal(0.0, 1.0, shape, gen, opts); };
  auto unit = [](const torch::Tensor& x) { return x / x.norm(2, -1, true); };
  Inputs in;
  in.q = unit(normal({B, H, T, dk})) / std::sqrt(static_cast<double>(dk));
  in.k = unit(normal({B, H, T, dk}));
  in.v = normal({B, H, T, dv});
  in.g = -2.0 * at::rand({B, H, T}, gen, opts);
  in.beta = at::rand({B, H, T}, gen, opts);
  in.state = 0.5 * normal({B, H, dk, dv});
  return in;
}

double MaxDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>();
}

TEST(GatedDelta, ChunkedEqualsRecurrentForAnyChunkAndStart) {
  for (uint64_t seed = 0; seed < 3; ++seed) {
    const Inputs in = RandomInputs(2, 3, 150, 16, 8, seed);
    for (const torch::Tensor& start : {torch::Tensor(), in.state}) {
      const auto rec = RecurrentGatedDeltaRule(in.q, in.k, in.v, in.g, in.beta, start);
      for (int64_t chunk : {1, 16, 64, 200}) {
        const auto ch = ChunkedGatedDeltaRule(in.q, in.k, in.v, in.g, in.beta, start, chunk);
        EXPECT_LT(MaxDiff(ch.out, rec.out), 1e-10) << "chunk " << chunk;
        EXPECT_LT(MaxDiff(ch.state, rec.state), 1e-10) << "chunk " << chunk;
      }
    }
  }
}

TEST(GatedDelta, PaddingStepsLeaveTheStateUnchanged) {
  Inputs in = RandomInputs(1, 2, 20, 8, 8, 4);
  auto keep = torch::ones({1, 1, 20}, torch::kFloat64);
  keep.slice(2, 12).zero_();  // tokens 12.. are padding: g = 0, beta = 0
  const auto full =
      ChunkedGatedDeltaRule(in.q, in.k, in.v, in.g * keep, in.beta * keep, in.state, 8);
  auto first = [](const torch::Tensor& t) { return t.slice(2, 0, 12); };
  const auto cut = ChunkedGatedDeltaRule(first(in.q), first(in.k), first(in.v), first(in.g),
                                         first(in.beta), in.state, 8);
  EXPECT_LT(MaxDiff(full.state, cut.state), 1e-12);
  EXPECT_LT(MaxDiff(full.out.slice(2, 0, 12), cut.out), 1e-12);
}

// A random forest over T tokens, parents before children (-1: a root).
std::vector<int64_t> RandomForest(int64_t T, uint64_t seed) {
  std::vector<int64_t> parent(T);
  uint64_t x = seed * 2654435761u + 1;
  for (int64_t i = 0; i < T; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    const int64_t r = static_cast<int64_t>((x >> 33) % static_cast<uint64_t>(i + 2));
    parent[i] =
        r == 0 || i == 0 ? -1 : i - 1 - (r - 1) % std::min<int64_t>(i, 3);  // mostly deep chains
  }
  return parent;
}

TEST(GatedDelta, TreeEqualsTheRecurrenceAlongEachPath) {
  const int64_t T = 40;
  double worst = 0;
  for (uint64_t seed = 0; seed < 4; ++seed) {
    const Inputs in = RandomInputs(2, 2, T, 16, 8, 10 + seed);
    std::vector<std::vector<int64_t>> parents = {RandomForest(T, seed),
                                                 RandomForest(T, seed + 100)};
    auto anc = torch::zeros({2, T, T}, torch::kBool);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < T; ++i)
        for (int64_t a = i; a >= 0; a = parents[b][a]) anc[b][i][a] = true;
    const auto tree = TreeGatedDeltaRule(in.q, in.k, in.v, in.g, in.beta, in.state, anc);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < T; ++i) {
        std::vector<int64_t> path;
        for (int64_t a = i; a >= 0; a = parents[b][a]) path.insert(path.begin(), a);
        auto idx = torch::tensor(path, torch::kInt64);
        auto pick = [&](const torch::Tensor& t) {
          return t.slice(0, b, b + 1).index_select(2, idx);
        };
        const auto alone = RecurrentGatedDeltaRule(pick(in.q), pick(in.k), pick(in.v), pick(in.g),
                                                   pick(in.beta), in.state.slice(0, b, b + 1));
        worst =
            std::max(worst, MaxDiff(tree.slice(0, b, b + 1).select(2, i),
                                    alone.out.select(2, static_cast<int64_t>(path.size()) - 1)));
      }
  }
  std::printf("tree vs each path alone: max |diff| = %.3g\n", worst);
  EXPECT_LT(worst, 1e-10);
}

TEST(GatedDelta, GradientsOfTheFormsAgree) {
  Inputs in = RandomInputs(1, 2, 30, 8, 4, 7);
  auto grads = [&](bool chunked) {
    auto v = in.v.detach().requires_grad_(true), g = in.g.detach().requires_grad_(true);
    auto out = chunked ? ChunkedGatedDeltaRule(in.q, in.k, v, g, in.beta, in.state, 8)
                       : RecurrentGatedDeltaRule(in.q, in.k, v, g, in.beta, in.state);
    (out.out.pow(2).sum() + out.state.sum()).backward();
    return std::make_pair(v.grad(), g.grad());
  };
  const auto [v1, g1] = grads(true);
  const auto [v2, g2] = grads(false);
  EXPECT_LT(MaxDiff(v1, v2), 1e-9);
  EXPECT_LT(MaxDiff(g1, g2), 1e-9);
}

}  // namespace
}  // namespace rlid::policy

// CompareRouting: which (response token, sparse layer) pairs route through
// other experts in two models. Checked against models whose routing is known:
// the same weights (nothing differs), a router negated in one model (every
// token's top-2 of 4 experts becomes its bottom-2: all differ), top-k = all
// experts (sets always equal), and rlid's own engines (float32 copy: nothing
// differs; bfloat16: a share in [0, 1] over the same pairs).
#include <gtest/gtest.h>

#include "core/error.h"
#include "policy/reading/routing.h"
#include "policy/reading/sampler.h"
#include "tests/policy/family_models.h"

namespace rlid::policy {
namespace {

constexpr int64_t kVocab = 61;

TransformerLM Moe(uint64_t seed, int64_t top_k = 2) {
  auto cfg = rlid::testing::FamilyConfig("qwen3_moe", kVocab);
  cfg.experts_per_token = top_k;
  return rlid::testing::SharpenedModel(cfg, seed, 8.0);
}

TransformerLM CopyOf(TransformerLM& m) {
  TransformerLM c(m->config());
  torch::NoGradGuard ng;
  auto src = m->named_parameters();
  for (auto& p : c->named_parameters()) p.value().copy_(src[p.key()]);
  return c;
}

std::vector<ScoreRequest> Requests() {
  return {{{1, 2, 3, 4}, {5, 6, 7}}, {{9, 8}, {10}}, {{11, 12, 13}, {}}, {{3}, {14, 15, 16, 17, 18}}};
}
constexpr int64_t kResponseTokens = 3 + 1 + 0 + 5;  // one sparse layer (layer 0)

TEST(CompareRouting, SameWeightsRouteAlike) {
  auto a = Moe(1);
  auto b = CopyOf(a);
  const auto r = CompareRouting(a, b, Requests());
  EXPECT_EQ(r.pairs, kResponseTokens);
  EXPECT_EQ(r.differing, 0);
  EXPECT_TRUE(a->routing().empty());  // recording is switched off again, nothing kept
}

TEST(CompareRouting, ANegatedRouterMovesEveryToken) {
  auto a = Moe(2);
  auto b = CopyOf(a);
  {
    torch::NoGradGuard ng;
    b->model->layer_list[0]->moe->gate->weight.neg_();  // top-2 of 4 <-> bottom-2 of 4
  }
  const auto r = CompareRouting(a, b, Requests());
  EXPECT_EQ(r.pairs, kResponseTokens);
  EXPECT_EQ(r.differing, kResponseTokens);
  EXPECT_DOUBLE_EQ(r.share(), 1.0);
}

TEST(CompareRouting, ComparesExpertSetsNotTheirOrder) {
  auto a = Moe(3, /*top_k=*/4);  // every token runs every expert, in some order
  auto b = CopyOf(a);
  {
    torch::NoGradGuard ng;
    b->model->layer_list[0]->moe->gate->weight.neg_();  // the order reverses
  }
  EXPECT_EQ(CompareRouting(a, b, Requests()).differing, 0);
}

TEST(CompareRouting, DenseModelsAndOtherArchitectures) {
  TransformerLM dense(rlid::testing::FamilyConfig("qwen3", kVocab));
  TransformerLM other(rlid::testing::FamilyConfig("qwen3", kVocab));
  EXPECT_EQ(CompareRouting(dense, other, Requests()).pairs, 0);
  auto moe = Moe(4);
  EXPECT_THROW(CompareRouting(moe, dense, Requests()), ConfigError);
}

TEST(CompareRouting, RlidsEnginesAgainstTheirTrainer) {
  auto trainer = Moe(5);
  for (Precision p : {Precision::kFloat32, Precision::kBFloat16}) {
    SamplerOptions o;
    o.dtype = p;
    TextSampler engine(trainer->config(), o, torch::kCPU);
    engine.SyncWeights(trainer);
    ASSERT_NE(engine.local_model(), nullptr);
    const auto r = CompareRouting(*engine.local_model(), trainer, Requests());
    EXPECT_EQ(r.pairs, kResponseTokens);
    if (p == Precision::kFloat32) EXPECT_EQ(r.differing, 0);
    EXPECT_LE(r.differing, r.pairs);
  }
}

}  // namespace
}  // namespace rlid::policy

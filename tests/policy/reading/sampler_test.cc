// Rollout engine: KV-cache decoding equals full recomputation, determinism by
// seed, the top-p nucleus on a hand-built distribution, one prompt encoding per
// group (counters), weight sync, and the bf16 engine's small non-zero log-prob
// gap against the fp32 training forward.
#include "policy/reading/sampler.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "policy/reading/readout.h"
#include "policy/reading/scoring.h"
#include "tests/policy/family_models.h"

namespace rlid::policy {
namespace {

// family: qwen3 (the default model), mistral / gemma3_text with a 4-token window, or
// qwen3_5_text (a recurrent Gated DeltaNet layer).
ModelConfig Config(const std::string& family = "qwen3") {
  if (family != "qwen3") return rlid::testing::FamilyConfig(family, 53);
  ModelConfig c;
  c.ApplyPreset("tiny");
  c.vocab_size = 53;
  c.num_layers = 2;
  return c;
}

// A training model with sharper-than-init distributions.
TransformerLM TrainModel(uint64_t seed, double scale = 8.0, const std::string& family = "qwen3") {
  return rlid::testing::SharpenedModel(Config(family), seed, scale);
}

TextSampler MakeSampler(TransformerLM& m, SamplerOptions o) {
  TextSampler s(m->config(), o, torch::kCPU);
  s.SyncWeights(m);
  return s;
}

const std::vector<std::vector<TokenId>> kPrompts = {{3, 14, 15, 9}, {2, 6, 5, 35, 8, 9, 7, 9, 3}, {23, 8, 4, 6, 2, 6}};

// Stops a sample when it emits a token divisible by 7 (exercises early stops).
bool StopOnSeven(const std::vector<TokenId>& g) { return g.back() % 7 == 0; }

TEST(TopPFilter, KeepsOnlyTheNucleus) {
  // Probabilities 0.05, 0.5, 0.1, 0.2, 0.15 (shuffled on purpose).
  auto logits = torch::log(torch::tensor({0.05, 0.5, 0.1, 0.2, 0.15}, torch::kFloat32)).unsqueeze(0);
  auto kept = [&](double p) {
    auto f = TopPFilter(logits, p)[0];
    std::vector<int> k;
    for (int i = 0; i < 5; ++i) k.push_back(!std::isinf(f[i].item<float>()));
    return k;
  };
  EXPECT_EQ(kept(0.45), (std::vector<int>{0, 1, 0, 0, 0}));
  EXPECT_EQ(kept(0.6), (std::vector<int>{0, 1, 0, 1, 0}));
  EXPECT_EQ(kept(0.8), (std::vector<int>{0, 1, 0, 1, 1}));
  EXPECT_EQ(kept(0.9), (std::vector<int>{0, 1, 1, 1, 1}));
  EXPECT_EQ(kept(0.99), (std::vector<int>{1, 1, 1, 1, 1}));
  EXPECT_EQ(kept(1.0), (std::vector<int>{1, 1, 1, 1, 1}));
  // Kept logits are unchanged.
  EXPECT_FLOAT_EQ(TopPFilter(logits, 0.6)[0][3].item<float>(), logits[0][3].item<float>());
  EXPECT_THROW(TopPFilter(logits, 0.0), ConfigError);
}

void ExpectKvCacheEqualsRecomputation(const std::string& family) {
  SCOPED_TRACE(family);
  // Gemma 3's soft-capped logits saturate at the 8x scale (one token, probability 1).
  TransformerLM m = TrainModel(1, family == "gemma3_text" ? 2.0 : 8.0, family);
  for (double temperature : {0.0, 1.0}) {
    SamplerOptions o;
    o.temperature = temperature;
    o.max_new_tokens = 8;
    auto cached = MakeSampler(m, o).Sample(kPrompts, 3, StopOnSeven, 42);
    o.kv_cache = false;
    auto plain = MakeSampler(m, o).Sample(kPrompts, 3, StopOnSeven, 42);
    double max_diff = 0;
    int stops = 0;
    for (size_t i = 0; i < kPrompts.size(); ++i)
      for (int j = 0; j < 3; ++j) {
        const auto &a = cached[i][j], &b = plain[i][j];
        ASSERT_EQ(a.tokens, b.tokens) << "prompt " << i << " sample " << j;
        EXPECT_EQ(a.finish, b.finish);
        stops += a.finish == "stop";
        for (size_t t = 0; t < a.logprobs.size(); ++t)
          max_diff = std::max(max_diff, static_cast<double>(std::abs(a.logprobs[t] - b.logprobs[t])));
      }
    std::printf("%s, T=%.1f: kv vs recompute max |logprob diff| = %.3g, %d early stops\n", family.c_str(),
                temperature, max_diff, stops);
    EXPECT_LT(max_diff, 1e-4);
    if (temperature > 0) {
      EXPECT_GT(stops, 0);
    }
  }
}

TEST(TextSampler, KvCacheEqualsRecomputation) {
  ExpectKvCacheEqualsRecomputation("qwen3");
  // Prompts of 4 to 9 tokens and 8 new ones under windows of 4: the cache carries
  // its keys' positions (LayerKV::pos) and the window moves with each new token.
  ExpectKvCacheEqualsRecomputation("mistral");
  ExpectKvCacheEqualsRecomputation("gemma3_text");
  // The cache holds each row's conv inputs and delta-rule state beside the keys.
  ExpectKvCacheEqualsRecomputation("qwen3_5_text");
  // Each cached step routes its one token as the full forward routes it.
  ExpectKvCacheEqualsRecomputation("qwen3_moe");
}

TEST(TextSampler, LogProbsMatchTheTrainingForward) {
  TransformerLM m = TrainModel(2);
  SamplerOptions o;
  o.temperature = 0.7;
  o.max_new_tokens = 6;
  auto res = MakeSampler(m, o).Sample(kPrompts, 2, nullptr, 5);
  torch::NoGradGuard ng;
  for (size_t i = 0; i < kPrompts.size(); ++i)
    for (const auto& r : res[i]) {
      EXPECT_EQ(r.finish, "length");
      ASSERT_EQ(r.tokens.size(), 6u);
      auto full = NaiveRealisationLogProbs(m, kPrompts[i], r.tokens);  // temperature 1
      ScoreBatch s = ScoreResponses(m, {{kPrompts[i], r.tokens}}, {0.7});
      for (size_t t = 0; t < r.tokens.size(); ++t) EXPECT_NEAR(r.logprobs[t], s.logp[0][t].item<float>(), 1e-4);
      // Tempered log-probs differ from untempered ones.
      EXPECT_GT((full - s.logp[0]).abs().max().item<double>(), 1e-3);
    }
}

TEST(TextSampler, DeterministicBySeed) {
  TransformerLM m = TrainModel(3);
  SamplerOptions o;
  o.max_new_tokens = 10;
  auto s = MakeSampler(m, o);
  auto a = s.Sample(kPrompts, 2, StopOnSeven, 7);
  auto b = s.Sample(kPrompts, 2, StopOnSeven, 7);
  auto c = s.Sample(kPrompts, 2, StopOnSeven, 8);
  bool differs = false;
  for (size_t i = 0; i < kPrompts.size(); ++i)
    for (int j = 0; j < 2; ++j) {
      EXPECT_EQ(a[i][j].tokens, b[i][j].tokens);
      EXPECT_EQ(a[i][j].logprobs, b[i][j].logprobs);
      differs |= a[i][j].tokens != c[i][j].tokens;
    }
  EXPECT_TRUE(differs);
  // Samples of one group are independent draws.
  auto g = s.Sample({kPrompts[1]}, 4, nullptr, 7)[0];
  EXPECT_FALSE(g[0].tokens == g[1].tokens && g[1].tokens == g[2].tokens && g[2].tokens == g[3].tokens);
}

TEST(TextSampler, TinyNucleusIsGreedy) {
  TransformerLM m = TrainModel(4);
  SamplerOptions greedy;
  greedy.temperature = 0.0;
  greedy.max_new_tokens = 6;
  SamplerOptions nucleus = greedy;
  nucleus.temperature = 1.0;
  nucleus.top_p = 1e-9;
  auto g = MakeSampler(m, greedy).Sample(kPrompts, 1, nullptr, 1);
  auto n = MakeSampler(m, nucleus).Sample(kPrompts, 2, nullptr, 99);
  for (size_t i = 0; i < kPrompts.size(); ++i) {
    EXPECT_EQ(n[i][0].tokens, g[i][0].tokens);
    EXPECT_EQ(n[i][1].tokens, g[i][0].tokens);
  }
}

TEST(TextSampler, GroupEncodesPromptOnce) {
  TransformerLM m = TrainModel(5);
  SamplerOptions o;
  o.max_new_tokens = 3;
  auto s = MakeSampler(m, o);
  std::vector<std::vector<TokenId>> prompts = {kPrompts[0], kPrompts[1]};  // 4 + 9 tokens
  s.Sample(prompts, 4, nullptr, 0);
  EXPECT_EQ(s.prompt_tokens_encoded(), 13);
  EXPECT_EQ(s.tokens_generated(), 2 * 4 * 3);
  EXPECT_EQ(s.cost().tokens, 13 + 2 * 4 * 2);  // last sampled token is never fed
  s.ResetCounters();
  o.kv_cache = false;
  auto r = MakeSampler(m, o);
  r.Sample(prompts, 4, nullptr, 0);
  // Recomputation: prompts once, then 4 rows x (len + 1) and 4 x (len + 2) per prompt.
  EXPECT_EQ(r.cost().tokens, 13 + 4 * (5 + 6) + 4 * (10 + 11));
  EXPECT_EQ(s.cost().tokens, 0);
}

TEST(TextSampler, Bf16EngineHasSmallNonZeroGap) {
  TransformerLM m = TrainModel(6, 1.0);  // default initialisation scale
  SamplerOptions o;
  o.dtype = Precision::kBFloat16;
  o.max_new_tokens = 8;
  auto s = MakeSampler(m, o);
  EXPECT_EQ(s.engine()->dtype(), torch::kBFloat16);
  auto res = s.Sample(kPrompts, 2, nullptr, 3);
  std::vector<ScoreRequest> reqs;
  std::vector<float> engine_lp;
  for (size_t i = 0; i < kPrompts.size(); ++i)
    for (const auto& r : res[i]) {
      reqs.push_back({kPrompts[i], r.tokens});
      engine_lp.insert(engine_lp.end(), r.logprobs.begin(), r.logprobs.end());
    }
  torch::NoGradGuard ng;
  auto sc = ScoreResponses(m, reqs, {});
  auto train = sc.logp.masked_select(sc.mask > 0);
  auto gap = (train - torch::tensor(engine_lp)).abs();
  double mean = gap.mean().item<double>(), max = gap.max().item<double>();
  std::printf("bf16 engine vs fp32 scorer: mean |gap| = %.3g, max = %.3g over %ld tokens\n", mean, max,
              static_cast<long>(gap.numel()));
  EXPECT_GT(mean, 1e-5);
  EXPECT_LT(mean, 0.05);
  EXPECT_LT(max, 0.3);
}

// A model nothing trains afterwards is the engine itself: no second copy of
// its weights, and the same samples as a copying engine.
TEST(TextSampler, SamplesWithAFrozenModelInPlace) {
  TransformerLM m = TrainModel(4);
  SamplerOptions o;
  o.max_new_tokens = 5;
  TextSampler copying = MakeSampler(m, o);
  const void* weights = m->model->embed_tokens->weight.data_ptr();
  TextSampler in_place(m, o);
  EXPECT_EQ(in_place.engine()->model->embed_tokens->weight.data_ptr(), weights);
  EXPECT_NE(copying.engine()->model->embed_tokens->weight.data_ptr(), weights);
  auto never = [](const std::vector<TokenId>&) { return false; };
  const auto a = copying.Sample({{1, 2, 3}}, 3, never, 7), b = in_place.Sample({{1, 2, 3}}, 3, never, 7);
  for (int k = 0; k < 3; ++k) EXPECT_EQ(a[0][k].tokens, b[0][k].tokens);
  SamplerOptions bf16 = o;
  bf16.dtype = Precision::kBFloat16;
  EXPECT_THROW(TextSampler(m, bf16), InternalError);  // a float32 model is no bfloat16 engine
}

TEST(TextSampler, RejectsBadOptionsAndInputs) {
  SamplerOptions o;
  o.top_p = 0.0;
  EXPECT_THROW(TextSampler(Config(), o, torch::kCPU), ConfigError);
  o = {};
  o.max_new_tokens = 0;
  EXPECT_THROW(TextSampler(Config(), o, torch::kCPU), ConfigError);
  TextSampler s(Config(), {}, torch::kCPU);
  EXPECT_THROW(s.Sample({{}}, 1, nullptr, 0), ConfigError);
  EXPECT_THROW(s.Sample({{53}}, 1, nullptr, 0), ConfigError);
  EXPECT_THROW(s.Sample({{1}}, 0, nullptr, 0), ConfigError);
  ModelConfig other = Config();
  other.vocab_size = 54;
  TransformerLM wrong(other);
  EXPECT_THROW(s.SyncWeights(wrong), ConfigError);
}

}  // namespace
}  // namespace rlid::policy

// Response scoring: the shared-prefix forward (each distinct prompt encoded
// once) gives the same log-probs and gradients as the plain batched forward,
// equals per-response naive scoring, reports entropy, and counts fewer tokens.
#include "policy/reading/scoring.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "policy/reading/readout.h"
#include "tests/policy/family_models.h"

namespace rlid::policy {
namespace {

// family: qwen3 (the default model), mistral / gemma3_text with a 4-token window, or
// qwen3_5_text (a recurrent Gated DeltaNet layer).
TransformerLM Model(uint64_t seed, const std::string& family = "qwen3") {
  ModelConfig c;
  c.ApplyPreset("tiny");
  c.vocab_size = 67;
  c.num_layers = 2;
  if (family != "qwen3") c = rlid::testing::FamilyConfig(family, 67);
  return rlid::testing::SharpenedModel(c, seed, 8.0);
}

// Two groups of three responses (lengths 4, 1, 0 / 2, 5, 3) and a lone prompt.
std::vector<ScoreRequest> Requests() {
  std::vector<TokenId> a = {5, 9, 12, 40, 3, 3, 8}, b = {61, 2, 7},
                       c = {30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 1};
  return {{a, {1, 2, 3, 4}}, {b, {9, 9}},    {a, {7}},     {b, {1, 0, 5, 6, 2}},
          {a, {}},           {b, {3, 4, 5}}, {c, {11, 12}}};
}

std::vector<torch::Tensor> GradsOf(TransformerLM& m, const ScoreBatch& s, const torch::Tensor& w) {
  m->zero_grad();
  (s.logp * s.mask * w).sum().backward();
  std::vector<torch::Tensor> g;
  for (auto& p : m->parameters())
    g.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
  return g;
}

void ExpectSharedPrefixEqualsPlain(const std::string& family) {
  SCOPED_TRACE(family);
  TransformerLM m = Model(1, family);
  auto reqs = Requests();
  ScoreOptions shared, plain;
  plain.shared_prefix = false;
  auto s = ScoreResponses(m, reqs, shared);
  auto p = ScoreResponses(m, reqs, plain);
  ASSERT_EQ(s.logp.sizes(), (std::vector<int64_t>{7, 5}));
  EXPECT_TRUE(torch::equal(s.mask, p.mask));
  EXPECT_EQ(s.mask.sum().item<float>(), 4 + 2 + 1 + 5 + 0 + 3 + 2);
  double diff = (s.logp - p.logp).abs().max().item<double>();
  // Fixed weights (the global generator is unseeded), so the gradients' scale is the same every
  // run.
  auto gen = at::detail::createCPUGenerator(7);
  auto w = torch::rand({7, 5}, gen);
  auto gs = GradsOf(m, s, w), gp = GradsOf(m, p, w);
  double gdiff = 0, gmax = 0;
  for (size_t i = 0; i < gs.size(); ++i) {
    gdiff = std::max(gdiff, (gs[i] - gp[i]).abs().max().item<double>());
    gmax = std::max(gmax, gp[i].abs().max().item<double>());
  }
  std::printf("shared vs plain: max |logp diff| = %.3g, max |grad diff| = %.3g (max |grad| %.3g)\n",
              diff, gdiff, gmax);
  EXPECT_LT(diff, 1e-5);
  // float32 sums in another order: within 1e-5 of the gradients' own scale.
  EXPECT_LT(gdiff, 1e-5 * std::max(1.0, gmax));
  // Shared: prompts 7 + 3 + 11, then (|r| - 1) per response: 3+1+0+4+2+1.
  EXPECT_EQ(s.cost.tokens, 21 + 11);
  // Plain: |prompt| + |r| - 1 per non-empty response.
  EXPECT_EQ(p.cost.tokens, (7 + 3) + (3 + 1) + (7 + 0) + (3 + 4) + (3 + 2) + (11 + 1));
}

TEST(ScoreResponses, SharedPrefixEqualsPlainForwardIncludingGradients) {
  ExpectSharedPrefixEqualsPlain("qwen3");
  ExpectSharedPrefixEqualsPlain("mistral");  // prompts of 7 and 11 tokens, windows of 4
  ExpectSharedPrefixEqualsPlain("gemma3_text");
  ExpectSharedPrefixEqualsPlain("qwen3_5_text");  // responses continue each prompt's state
  ExpectSharedPrefixEqualsPlain("qwen3_moe");  // gradients reach the router and the chosen experts
}

TEST(ScoreResponses, SinglePromptGroupBroadcastsAndMatchesNaive) {
  TransformerLM m = Model(2);
  std::vector<TokenId> prompt = {4, 8, 15, 16, 23, 42};
  std::vector<ScoreRequest> reqs = {{prompt, {1, 2, 3}}, {prompt, {5}}, {prompt, {6, 7, 8, 9}}};
  torch::NoGradGuard ng;
  ScoreOptions o;
  o.entropy = true;
  auto s = ScoreResponses(m, reqs, o);
  EXPECT_EQ(s.cost.tokens, 6 + 2 + 0 + 3);
  for (size_t i = 0; i < reqs.size(); ++i) {
    auto naive = NaiveRealisationLogProbs(m, prompt, reqs[i].response);
    const int64_t n = static_cast<int64_t>(reqs[i].response.size());
    EXPECT_LT((s.logp[i].slice(0, 0, n) - naive).abs().max().item<double>(), 1e-5) << i;
    EXPECT_EQ(s.logp[i].slice(0, n).abs().sum().item<float>(), 0.0f);  // padding is 0
  }
  // Entropy of the row that predicts response 2, token 1 (after prompt ++ [6]).
  std::vector<int64_t> seq(prompt.begin(), prompt.end());
  seq.push_back(6);
  const int64_t T = static_cast<int64_t>(seq.size());
  auto h = m->forward(torch::tensor(seq).view({1, T}), torch::arange(T).view({1, T}),
                      TransformerLMImpl::CausalMask(torch::full({1}, T, torch::kInt64), T))
               .hidden;
  auto row = torch::log_softmax(m->Logits(h[0][T - 1]), -1);
  EXPECT_NEAR(s.entropy[2][1].item<double>(), -(row.exp() * row).sum().item<double>(), 1e-4);
  EXPECT_EQ(s.entropy[1][1].item<float>(), 0.0f);
}

TEST(ScoreResponses, TemperatureScalesLogits) {
  TransformerLM m = Model(3);
  torch::NoGradGuard ng;
  std::vector<TokenId> prompt = {1, 2, 3};
  ScoreOptions hot;
  hot.temperature = 2.0;
  auto s = ScoreResponses(m, {{prompt, {4}}}, hot);
  auto h = m->forward(torch::tensor({1, 2, 3}, torch::kInt64).view({1, 3}),
                      torch::arange(3).view({1, 3}),
                      TransformerLMImpl::CausalMask(torch::full({1}, 3, torch::kInt64), 3))
               .hidden;
  auto expect = torch::log_softmax(m->Logits(h[0][2]) / 2.0, -1)[4];
  EXPECT_NEAR(s.logp[0][0].item<double>(), expect.item<double>(), 1e-5);
}

TEST(ScoreResponses, RejectsBadInput) {
  TransformerLM m = Model(4);
  EXPECT_THROW(ScoreResponses(m, {}, {}), ConfigError);
  EXPECT_THROW(ScoreResponses(m, {{{}, {1}}}, {}), ConfigError);
  EXPECT_THROW(ScoreResponses(m, {{{1}, {67}}}, {}), ConfigError);
  ScoreOptions cold;
  cold.temperature = 0.0;
  EXPECT_THROW(ScoreResponses(m, {{{1}, {2}}}, cold), ConfigError);
  // All responses empty: valid, all padding.
  auto s = ScoreResponses(m, {{{1}, {}}}, {});
  EXPECT_EQ(s.mask.numel(), 0);
}

}  // namespace
}  // namespace rlid::policy

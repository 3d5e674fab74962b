// Qwen3.5-shaped hybrid models (Gated DeltaNet layers beside gated full
// attention): names and counts, the chunked and the recurrent forms, padding
// on either side, continuing a past state, activation checkpointing.
#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "policy/model/model.h"
#include "tests/policy/family_models.h"

namespace rlid::policy {
namespace {

constexpr int64_t kVocab = 97;

TransformerLM Hybrid(uint64_t seed) {
  return rlid::testing::SharpenedModel(rlid::testing::FamilyConfig("qwen3_5_text", kVocab), seed, 4.0);
}

torch::Tensor Positions(int64_t B, int64_t T, int64_t start = 0) {
  return (torch::arange(T, torch::kInt64) + start).unsqueeze(0).expand({B, T}).contiguous();
}

torch::Tensor Causal(const std::vector<int64_t>& lengths, int64_t T) {
  return TransformerLMImpl::CausalMask(torch::tensor(lengths, torch::kInt64), T);
}

// max |a - b| relative to b's largest entry (at least 1): hidden states reach
// several units, and sums in another order (a batch's BLAS blocking, thread
// count) move them by a few 1e-6 of that.
double MaxDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a - b).abs().max().item<double>() / std::max(1.0, b.abs().max().item<double>());
}

TEST(HybridModel, Qwen35NamesCountAndInit) {
  const auto c = rlid::testing::FamilyConfig("qwen3_5_text", kVocab);
  EXPECT_TRUE(c.IsLinear(0));
  EXPECT_FALSE(c.IsLinear(1));
  EXPECT_EQ(c.RotaryDim(), 16);
  TransformerLM m(c);
  std::map<std::string, torch::Tensor> params;
  for (const auto& p : m->named_parameters()) params[p.key()] = p.value();
  const std::map<std::string, std::vector<int64_t>> shapes = {
      {"model.layers.0.linear_attn.in_proj_qkv.weight", {2 * 2 * 32 + 4 * 24, 128}},
      {"model.layers.0.linear_attn.in_proj_z.weight", {4 * 24, 128}},
      {"model.layers.0.linear_attn.in_proj_b.weight", {4, 128}},
      {"model.layers.0.linear_attn.in_proj_a.weight", {4, 128}},
      {"model.layers.0.linear_attn.conv1d.weight", {2 * 2 * 32 + 4 * 24, 1, 4}},
      {"model.layers.0.linear_attn.dt_bias", {4}},
      {"model.layers.0.linear_attn.A_log", {4}},
      {"model.layers.0.linear_attn.norm.weight", {24}},
      {"model.layers.0.linear_attn.out_proj.weight", {128, 4 * 24}},
      {"model.layers.1.self_attn.q_proj.weight", {2 * 2 * 64, 128}},  // query and gate per head
      {"model.layers.1.self_attn.q_norm.weight", {64}},
  };
  for (const auto& [name, shape] : shapes) {
    ASSERT_TRUE(params.count(name)) << name;
    EXPECT_EQ(params[name].sizes().vec(), shape) << name;
  }
  EXPECT_FALSE(params.count("model.layers.0.self_attn.q_proj.weight"));
  EXPECT_EQ(params["model.layers.0.linear_attn.norm.weight"].min().item<float>(), 1.0f);  // plain w
  EXPECT_EQ(params["model.layers.1.input_layernorm.weight"].abs().max().item<float>(),
            0.0f);  // 1 + w
  int64_t count = 0;
  for (const auto& p : m->parameters()) count += p.numel();
  EXPECT_EQ(count, c.NumParameters());
}

// Right-padded rows of 70, 5 and 130 tokens (chunks of 64 and a partial one):
// the chunked and the token-by-token forms agree, and each row equals itself alone.
TEST(HybridModel, ChunkedAndRecurrentFormsAgreeAndPaddingIsInvisible) {
  TransformerLM m = Hybrid(3);
  torch::NoGradGuard ng;
  const std::vector<int64_t> lengths = {70, 5, 130};
  const int64_t T = 130;
  auto ids = torch::randint(0, kVocab, {3, T}, at::detail::createCPUGenerator(7));
  auto run = [&](RecurrentForm form) {
    m->set_recurrent_form(form);
    return m->forward(ids, Positions(3, T), Causal(lengths, T)).hidden;
  };
  auto chunked = run(RecurrentForm::kChunked), recurrent = run(RecurrentForm::kRecurrent);
  m->set_recurrent_form(RecurrentForm::kAuto);
  for (int64_t b = 0; b < 3; ++b) {
    const int64_t n = lengths[b];
    // The two forms sum in different orders: float noise grows with length.
    EXPECT_LT(MaxDiff(chunked[b].slice(0, 0, n), recurrent[b].slice(0, 0, n)), 1e-4) << b;
    auto alone =
        m->forward(ids.slice(0, b, b + 1).slice(1, 0, n), Positions(1, n), Causal({n}, n)).hidden;
    EXPECT_LT(MaxDiff(chunked[b].slice(0, 0, n), alone[0]), 1e-5) << b;
  }
  // Left padding (a Hugging Face attention_mask) reads the same.
  auto left = torch::zeros({1, 20}, torch::kInt64);
  left.slice(1, 7).fill_(1);
  auto shifted = torch::zeros({1, 20}, torch::kInt64);
  shifted.slice(1, 7) = ids.slice(0, 0, 1).slice(1, 0, 13);
  auto pos = torch::clamp_min(torch::arange(20, torch::kInt64) - 7, 0).unsqueeze(0);
  auto padded = m->forward(shifted, pos, TransformerLMImpl::CausalMaskFromAttention(left)).hidden;
  EXPECT_LT(MaxDiff(padded[0].slice(0, 7), chunked[0].slice(0, 0, 13)), 1e-5);
}

// A prefix's state (conv inputs, delta-rule state, keys) continued by a
// right-padded suffix equals the whole sequence, and so does token-by-token decoding.
TEST(HybridModel, ContinuingThePresentEqualsTheFullForward) {
  TransformerLM m = Hybrid(4);
  torch::NoGradGuard ng;
  auto ids = torch::randint(0, kVocab, {2, 90}, at::detail::createCPUGenerator(11));
  auto full = m->forward(ids, Positions(2, 90), Causal({90, 90}, 90)).hidden;
  // Prefixes of 66 and 60 tokens (right-padded), then the next 24 and 30.
  auto pre = m->forward(ids.slice(1, 0, 66), Positions(2, 66), Causal({66, 60}, 66), nullptr, true);
  EXPECT_EQ(pre.present[0].conv.sizes().vec(), (std::vector<int64_t>{2, 2 * 2 * 32 + 4 * 24, 3}));
  EXPECT_EQ(pre.present[0].state.sizes().vec(), (std::vector<int64_t>{2, 4, 32, 24}));
  auto rest = torch::stack({ids[0].slice(0, 66, 90), ids[1].slice(0, 60, 84)});
  auto key_mask = torch::zeros({2, 1, 24, 66 + 24}, torch::kBool);
  key_mask[0].slice(2, 0, 66) = true;
  key_mask[1].slice(2, 0, 60) = true;
  key_mask.slice(3, 66) = Causal({24, 24}, 24);
  auto pos = torch::stack({torch::arange(66, 90), torch::arange(60, 84)});
  auto cont = m->forward(rest, pos, key_mask, &pre.present).hidden;
  // The continuation cuts the delta rule's chunks elsewhere than the full
  // forward (its 64-token chunks): float32 rounding, up to 1.3e-5 on the
  // unseeded inputs this test once drew.
  EXPECT_LT(MaxDiff(cont[0], full[0].slice(0, 66, 90)), 5e-5);
  EXPECT_LT(MaxDiff(cont[1], full[1].slice(0, 60, 84)), 5e-5);
  PastKV past =
      m->forward(ids.slice(1, 0, 80), Positions(2, 80), Causal({80, 80}, 80), nullptr, true)
          .present;
  for (int64_t t = 80; t < 90; ++t) {
    auto o = m->forward(ids.slice(1, t, t + 1), Positions(2, 1, t),
                        torch::ones({2, 1, 1, t + 1}, torch::kBool), &past, true);
    past = o.present;
    // Decoding runs the recurrent form, the full forward the chunked one.
    EXPECT_LT(MaxDiff(o.hidden.squeeze(1), full.select(1, t)), 1e-4) << "t=" << t;
  }
}

TEST(HybridModel, CheckpointedLayersGiveTheSameGradients) {
  auto grads = [](bool checkpoint) {
    TransformerLM m = Hybrid(5);
    m->train();
    m->set_checkpointing(checkpoint);
    auto ids = torch::randint(0, kVocab, {2, 40}, at::detail::createCPUGenerator(9));
    auto h = m->forward(ids, Positions(2, 40), Causal({40, 23}, 40)).hidden;
    m->Logits(h).log_softmax(-1).select(-1, 3).sum().backward();
    std::map<std::string, torch::Tensor> g;
    for (const auto& p : m->named_parameters())
      if (p.value().grad().defined()) g[p.key()] = p.value().grad().clone();
    return g;
  };
  const auto plain = grads(false), checkpointed = grads(true);
  ASSERT_EQ(plain.size(), checkpointed.size());
  EXPECT_TRUE(plain.count("model.layers.0.linear_attn.A_log"));
  for (const auto& [name, g] : plain) EXPECT_LT(MaxDiff(g, checkpointed.at(name)), 1e-5) << name;
}

}  // namespace
}  // namespace rlid::policy

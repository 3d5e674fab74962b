// Qwen3-MoE-shaped models: config.json in and out, names and counts, the sparse
// MLP against a per-token reference written from its definition, routing
// recorded per forward, gradients reaching only the experts a token chose.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "policy/model/lora.h"
#include "policy/model/model.h"
#include "tests/policy/family_models.h"

namespace rlid::policy {
namespace {

constexpr int64_t kVocab = 97;
using json = nlohmann::json;

json MoeJson() {
  return {{"model_type", "qwen3_moe"}, {"vocab_size", kVocab},         {"hidden_size", 32},
          {"intermediate_size", 48},   {"num_hidden_layers", 4},       {"num_attention_heads", 2},
          {"num_key_value_heads", 1},  {"head_dim", 16},               {"num_local_experts", 6},
          {"num_experts_per_tok", 3},  {"moe_intermediate_size", 24},  {"decoder_sparse_step", 2},
          {"mlp_only_layers", {3}},    {"tie_word_embeddings", false}};
}

TEST(MoeConfig, ReadsSparseLayersAsTransformersDoes) {
  const auto c = ModelConfig::FromJson(MoeJson());
  EXPECT_EQ(c.ModelType(), "qwen3_moe");
  EXPECT_EQ(c.num_experts, 6);  // from num_local_experts, as transformers 5 writes it
  EXPECT_EQ(c.experts_per_token, 3);
  EXPECT_FALSE(c.norm_topk_prob);  // Qwen3MoeConfig's default
  EXPECT_TRUE(c.qk_norm);
  // Sparse: (l + 1) % 2 == 0 and not in mlp_only_layers: layer 1 only.
  EXPECT_EQ(c.sparse, (std::vector<bool>{false, true, false, false}));
  // ToJson states the dense layers explicitly; reading it back gives the same model.
  const auto j = c.ToJson();
  EXPECT_EQ(j["architectures"][0], "Qwen3MoeForCausalLM");
  EXPECT_EQ(j["mlp_only_layers"], json({0, 2, 3}));
  const auto back = ModelConfig::FromJson(j);
  EXPECT_EQ(back.sparse, c.sparse);
  EXPECT_EQ(back.num_experts, 6);
  EXPECT_EQ(back.moe_intermediate_size, 24);
  EXPECT_EQ(back.NumParameters(), c.NumParameters());
}

TEST(MoeConfig, CountsStoredAndActiveExpertsApart) {
  const auto c = ModelConfig::FromJson(MoeJson());
  const int64_t attention = 32 * 16 * (2 * 2 + 2 * 1);
  EXPECT_EQ(c.LayerMatmulParameters(0), attention + 3 * 32 * 48);
  // One token runs the router and 3 of the 6 experts; all 6 are stored.
  EXPECT_EQ(c.LayerMatmulParameters(1), attention + 32 * 6 + 3 * 3 * 32 * 24);
  EXPECT_EQ(c.LayerMatmulParameters(1, /*all_experts=*/true), attention + 32 * 6 + 6 * 3 * 32 * 24);
  TransformerLM m(c);
  int64_t stored = 0;
  for (const auto& p : m->parameters()) stored += p.numel();
  EXPECT_EQ(c.NumParameters(), stored);
}

TEST(MoeConfig, RefusesWhatItCannotRun) {
  const std::vector<std::pair<std::string, std::function<void(json&)>>> cases = {
      {"num_experts_per_tok", [](json& j) { j["num_experts_per_tok"] = 7; }},
      {"shared_expert_intermediate_size", [](json& j) { j["shared_expert_intermediate_size"] = 64; }},
      {"mlp_only_layers", [](json& j) { j["mlp_only_layers"] = {4}; }},
      {"decoder_sparse_step", [](json& j) { j["decoder_sparse_step"] = 0; }},
      {"moe_intermediate_size", [](json& j) { j["moe_intermediate_size"] = 0; }},
  };
  for (const auto& [field, edit] : cases) {
    json j = MoeJson();
    edit(j);
    try {
      ModelConfig::FromJson(j);
      ADD_FAILURE() << field << " was accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(field), std::string::npos) << e.what();
    }
  }
}

TransformerLM Moe(uint64_t seed) {
  return rlid::testing::SharpenedModel(rlid::testing::FamilyConfig("qwen3_moe", kVocab), seed, 8.0);
}

// The sparse MLP of one token, from the definition: softmax over every expert's
// router logit, the k largest, renormalised, each expert's SwiGLU weighted.
torch::Tensor Reference(MoeImpl& moe, const torch::Tensor& x, int64_t k) {
  auto p = torch::softmax(torch::matmul(x, moe.gate->weight.t()), -1);
  std::vector<std::pair<float, int64_t>> ranked;
  for (int64_t e = 0; e < p.size(0); ++e) ranked.emplace_back(p[e].item<float>(), e);
  std::sort(ranked.rbegin(), ranked.rend());
  float total = 0;
  for (int64_t i = 0; i < k; ++i) total += ranked[i].first;
  auto out = torch::zeros_like(x);
  for (int64_t i = 0; i < k; ++i) {
    auto& expert = *moe.expert_list[ranked[i].second];
    auto h = torch::silu(torch::matmul(x, expert.gate_proj->weight.t())) *
             torch::matmul(x, expert.up_proj->weight.t());
    out += ranked[i].first / total * torch::matmul(h, expert.down_proj->weight.t());
  }
  return out;
}

TEST(MoeModel, NamesAndSparseBlockMatchTheDefinition) {
  torch::NoGradGuard ng;
  TransformerLM m = Moe(3);
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const auto& p : m->named_parameters()) shapes[p.key()] = p.value().sizes().vec();
  EXPECT_EQ(shapes["model.layers.0.mlp.gate.weight"], (std::vector<int64_t>{4, 128}));
  EXPECT_EQ(shapes["model.layers.0.mlp.experts.3.down_proj.weight"], (std::vector<int64_t>{128, 96}));
  EXPECT_EQ(shapes["model.layers.1.mlp.up_proj.weight"], (std::vector<int64_t>{384, 128}));
  EXPECT_EQ(shapes.count("model.layers.1.mlp.gate.weight"), 0u);
  auto& moe = *m->model->layer_list[0]->moe;
  auto x = torch::randn({2, 5, 128}, torch::TensorOptions().dtype(torch::kFloat32));
  torch::Tensor routing;
  auto y = moe.forward(x, &routing);
  EXPECT_EQ(routing.sizes().vec(), (std::vector<int64_t>{2, 5, 2}));
  double worst = 0;  // relative to the output's scale (sharpened weights make it large)
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t t = 0; t < 5; ++t) {
      const auto ref = Reference(moe, x[b][t], 2);
      worst = std::max(worst, (y[b][t] - ref).abs().max().item<double>() /
                                  std::max(1.0, ref.abs().max().item<double>()));
    }
  EXPECT_LT(worst, 1e-5);
}

TEST(MoeModel, RecordsEachSparseLayersRoutingPerForward) {
  torch::NoGradGuard ng;
  TransformerLM m = Moe(4);
  auto ids = torch::randint(0, kVocab, {3, 6}, torch::kInt64);
  auto pos = torch::arange(6, torch::kInt64).unsqueeze(0).expand({3, 6}).contiguous();
  auto mask = TransformerLMImpl::CausalMask(torch::full({3}, 6, torch::kInt64), 6);
  m->forward(ids, pos, mask);
  EXPECT_TRUE(m->routing().empty());  // off by default
  m->set_record_routing(true);
  m->forward(ids, pos, mask);
  ASSERT_EQ(m->routing().size(), 1u);  // layer 0 is sparse, layer 1 dense
  const auto r = m->routing()[0];
  EXPECT_EQ(r.sizes().vec(), (std::vector<int64_t>{3, 6, 2}));
  EXPECT_GE(r.min().item<int64_t>(), 0);
  EXPECT_LT(r.max().item<int64_t>(), 4);
  EXPECT_TRUE((r.select(-1, 0) != r.select(-1, 1)).all().item<bool>());  // two distinct experts
  // Each row routes as it does alone (routing is per token).
  m->forward(ids.slice(0, 1, 2), pos.slice(0, 0, 1), mask.slice(0, 0, 1));
  EXPECT_TRUE(torch::equal(m->routing()[0], r.slice(0, 1, 2)));
}

TEST(MoeModel, GradientsReachTheRouterAndOnlyChosenExperts) {
  TransformerLM m = Moe(5);
  m->set_record_routing(true);
  auto ids = torch::tensor({{3, 14, 15}}, torch::kInt64);
  auto pos = torch::arange(3, torch::kInt64).unsqueeze(0);
  auto mask = TransformerLMImpl::CausalMask(torch::tensor({3}, torch::kInt64), 3);
  auto logits = m->Logits(m->forward(ids, pos, mask).hidden);
  logits.sum().backward();
  auto& moe = *m->model->layer_list[0]->moe;
  EXPECT_GT(moe.gate->weight.grad().abs().sum().item<double>(), 0);
  const auto chosen = m->routing()[0].flatten();
  for (int64_t e = 0; e < 4; ++e) {
    const bool used = (chosen == e).any().item<bool>();
    const auto& g = moe.expert_list[e]->up_proj->weight.grad();
    const double norm = g.defined() ? g.abs().sum().item<double>() : 0.0;
    EXPECT_EQ(norm > 0, used) << "expert " << e;
  }
}

// LoRA's default targets reach every expert's projections (PEFT's per-expert layout,
// "mlp.experts.<e>.gate_proj"), never the router.
TEST(MoeModel, AdaptersAttachToEveryExpert) {
  TransformerLM m = Moe(6);
  LoraConfig lora;
  lora.rank = 2;
  AttachLora(m, lora, 1);
  std::set<std::string> trainable;
  for (const auto& p : m->named_parameters())
    if (p.value().requires_grad()) trainable.insert(p.key());
  for (int64_t e = 0; e < 4; ++e)
    for (const char* proj : {"gate_proj", "up_proj", "down_proj"})
      EXPECT_TRUE(trainable.count(
          "model.layers.0.mlp.experts." + std::to_string(e) + "." + proj + ".lora_A.weight"));
  EXPECT_TRUE(trainable.count("model.layers.1.mlp.gate_proj.lora_B.weight"));
  for (const auto& name : trainable) EXPECT_EQ(name.find("mlp.gate.lora"), std::string::npos) << name;
  // 4 attention + 3 dense MLP projections, and 3 per expert, two matrices each; the value head.
  EXPECT_EQ(trainable.size(), static_cast<size_t>(2 * (4 * 2 + 3 + 3 * 4) + 2));
}

}  // namespace
}  // namespace rlid::policy

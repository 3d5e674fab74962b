// Transformer LM: shapes, causality, KV-cache = full recomputation, shared
// past broadcast, deterministic init, safetensors round trip.
#include "policy/model/model.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <limits>
#include <map>
#include <set>

#include "core/config.h"
#include "core/error.h"
#include "policy/model/safetensors.h"
#include "tests/policy/family_models.h"

namespace rlid::policy {
namespace {

ModelConfig Tiny() {
  ModelConfig c;
  c.ApplyPreset("tiny");
  c.vocab_size = 97;
  c.num_layers = 2;
  return c;
}

torch::Tensor Positions(int64_t B, int64_t T, int64_t start = 0) {
  return torch::arange(start, start + T, torch::kInt64).unsqueeze(0).expand({B, T}).contiguous();
}

TEST(Model, ShapesAndNames) {
  TransformerLM m(Tiny());
  auto ids = torch::randint(0, 97, {3, 7}, torch::kInt64);
  auto mask = TransformerLMImpl::CausalMask(torch::full({3}, 7, torch::kInt64), 7);
  auto out = m->forward(ids, Positions(3, 7), mask);
  EXPECT_EQ(out.hidden.sizes(), (std::vector<int64_t>{3, 7, 128}));
  EXPECT_EQ(m->Logits(out.hidden).sizes(), (std::vector<int64_t>{3, 7, 97}));
  EXPECT_EQ(m->Value(out.hidden).sizes(), (std::vector<int64_t>{3, 7}));
  std::set<std::string> names;
  for (const auto& p : m->named_parameters()) names.insert(p.key());
  for (const char* n : {"model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                        "model.layers.1.self_attn.k_norm.weight", "model.layers.0.mlp.gate_proj.weight",
                        "model.layers.0.input_layernorm.weight",
                        "model.layers.0.post_attention_layernorm.weight", "model.norm.weight",
                        "value_head.weight"})
    EXPECT_TRUE(names.count(n)) << n;
  EXPECT_FALSE(names.count("lm_head.weight"));  // tied
  int64_t count = 0;
  for (const auto& p : m->parameters()) count += p.numel();
  EXPECT_EQ(count, Tiny().NumParameters());
}

TEST(Model, Causality) {
  TransformerLM m(Tiny());
  torch::NoGradGuard ng;
  auto ids = torch::randint(0, 97, {1, 9}, torch::kInt64);
  auto mask = TransformerLMImpl::CausalMask(torch::full({1}, 9, torch::kInt64), 9);
  auto a = m->Logits(m->forward(ids, Positions(1, 9), mask).hidden);
  auto ids2 = ids.clone();
  ids2[0][6] = (ids[0][6].item<int64_t>() + 1) % 97;
  auto b = m->Logits(m->forward(ids2, Positions(1, 9), mask).hidden);
  EXPECT_LT((a.slice(1, 0, 6) - b.slice(1, 0, 6)).abs().max().item<float>(), 1e-6);
  EXPECT_GT((a.slice(1, 6) - b.slice(1, 6)).abs().max().item<float>(), 1e-4);
}

TEST(Model, KvCacheEqualsFullRecomputation) {
  TransformerLM m(Tiny());
  torch::NoGradGuard ng;
  auto ids = torch::randint(0, 97, {2, 10}, torch::kInt64);
  auto full_mask = TransformerLMImpl::CausalMask(torch::full({2}, 10, torch::kInt64), 10);
  auto full = m->forward(ids, Positions(2, 10), full_mask).hidden;
  // Prefix of 6, then one token at a time.
  auto pre = m->forward(ids.slice(1, 0, 6), Positions(2, 6),
                        TransformerLMImpl::CausalMask(torch::full({2}, 6, torch::kInt64), 6), nullptr, true);
  PastKV past = pre.present;
  for (int64_t t = 6; t < 10; ++t) {
    auto step_mask = torch::ones({2, 1, 1, t + 1}, torch::kBool);
    auto o = m->forward(ids.slice(1, t, t + 1), Positions(2, 1, t), step_mask, &past, true);
    past = o.present;
    float diff = (o.hidden.squeeze(1) - full.select(1, t)).abs().max().item<float>();
    EXPECT_LT(diff, 1e-5) << "t=" << t;
  }
}

// A one-layer Mistral-shaped model with a window of 3: position t reads tokens
// t-2..t, so a change at position 2 reaches positions 2, 3 and 4 and no further.
TEST(Model, SlidingWindowHidesKeysThatFarBackAndNoCloser) {
  auto c = rlid::testing::FamilyConfig("mistral", 97, /*window=*/3);
  c.num_layers = 1;
  c.sliding.resize(1);
  TransformerLM m(c);
  torch::NoGradGuard ng;
  auto ids = torch::randint(0, 97, {1, 9}, torch::kInt64);
  auto mask = TransformerLMImpl::CausalMask(torch::full({1}, 9, torch::kInt64), 9);
  auto a = m->forward(ids, Positions(1, 9), mask).hidden;
  auto changed = ids.clone();
  changed[0][2] = (ids[0][2].item<int64_t>() + 1) % 97;
  auto b = m->forward(changed, Positions(1, 9), mask).hidden;
  auto moved = (a - b).abs().amax(-1).squeeze(0);  // [9]
  for (int64_t t = 0; t < 9; ++t) {
    if (t >= 2 && t <= 4)
      EXPECT_GT(moved[t].item<float>(), 1e-4) << "t=" << t;
    else
      EXPECT_EQ(moved[t].item<float>(), 0.0f) << "t=" << t;
  }
  // The window counts position differences: the same tokens at positions 100..108
  // (RoPE is relative) give the same outputs.
  auto shifted = m->forward(ids, Positions(1, 9, 100), mask).hidden;
  EXPECT_LT((shifted - a).abs().max().item<float>(), 1e-4);
}

// Gemma 3's modules under their Hugging Face names, counted by NumParameters;
// (1 + w) norms start at w = 0; KV-cached decoding through a sliding and a
// global layer (each with its own RoPE) equals the full forward.
TEST(Model, Gemma3ShapedNamesCountAndKvCache) {
  const auto c = rlid::testing::FamilyConfig("gemma3_text", 97, /*window=*/4);
  TransformerLM m(c);
  std::map<std::string, torch::Tensor> params;
  for (const auto& p : m->named_parameters()) params[p.key()] = p.value();
  for (const char* n : {"model.layers.0.pre_feedforward_layernorm.weight",
                        "model.layers.1.post_feedforward_layernorm.weight",
                        "model.layers.0.self_attn.q_norm.weight", "model.norm.weight"}) {
    ASSERT_TRUE(params.count(n)) << n;
    EXPECT_EQ(params[n].abs().max().item<float>(), 0.0f) << n;  // gain 1 + 0
  }
  int64_t count = 0;
  for (const auto& p : m->parameters()) count += p.numel();
  EXPECT_EQ(count, c.NumParameters());
  torch::NoGradGuard ng;
  auto ids = torch::randint(0, 97, {2, 12}, torch::kInt64);
  auto full = m->forward(ids, Positions(2, 12),
                         TransformerLMImpl::CausalMask(torch::full({2}, 12, torch::kInt64), 12))
                  .hidden;
  auto pre = m->forward(ids.slice(1, 0, 5), Positions(2, 5),
                        TransformerLMImpl::CausalMask(torch::full({2}, 5, torch::kInt64), 5), nullptr, true);
  PastKV past = pre.present;
  for (int64_t t = 5; t < 12; ++t) {
    auto o = m->forward(ids.slice(1, t, t + 1), Positions(2, 1, t), torch::ones({2, 1, 1, t + 1}, torch::kBool),
                        &past, true);
    past = o.present;
    EXPECT_LT((o.hidden.squeeze(1) - full.select(1, t)).abs().max().item<float>(), 1e-5) << "t=" << t;
  }
  // Without the keys' positions a sliding model cannot continue a past it did not make.
  for (auto& kv : past) kv.pos = torch::Tensor();
  EXPECT_ANY_THROW(m->forward(ids.slice(1, 0, 1), Positions(2, 1, 12),
                              torch::ones({2, 1, 1, 13}, torch::kBool), &past));
}

TEST(Model, SharedPastBroadcastsOverBatch) {
  TransformerLM m(Tiny());
  auto prompt = torch::randint(0, 97, {1, 5}, torch::kInt64);
  auto resp = torch::randint(0, 97, {3, 4}, torch::kInt64);
  // Plain batched forward of [prompt ++ response] for each of the 3 responses.
  auto joined = torch::cat({prompt.expand({3, 5}), resp}, 1);
  auto mask = TransformerLMImpl::CausalMask(torch::full({3}, 9, torch::kInt64), 9);
  auto plain = m->forward(joined, Positions(3, 9), mask).hidden.slice(1, 5);
  auto pre = m->forward(prompt, Positions(1, 5),
                        TransformerLMImpl::CausalMask(torch::full({1}, 5, torch::kInt64), 5), nullptr, true);
  auto causal = TransformerLMImpl::CausalMask(torch::full({1}, 4, torch::kInt64), 4);
  auto m2 = torch::cat({torch::ones({1, 1, 4, 5}, torch::kBool), causal}, -1);
  auto shared = m->forward(resp, Positions(3, 4, 5), m2, &pre.present).hidden;
  EXPECT_LT((plain - shared).abs().max().item<float>(), 1e-5);
}

TEST(Model, DeterministicInitAndSafetensorsRoundTrip) {
  TransformerLM a(Tiny()), b(Tiny());
  a->InitWeights(5);
  b->InitWeights(5);
  TransformerLM c(Tiny());
  c->InitWeights(6);
  auto pa = a->named_parameters(), pb = b->named_parameters(), pc = c->named_parameters();
  EXPECT_TRUE(torch::equal(pa["model.layers.0.self_attn.q_proj.weight"], pb["model.layers.0.self_attn.q_proj.weight"]));
  EXPECT_FALSE(torch::equal(pa["model.layers.0.self_attn.q_proj.weight"], pc["model.layers.0.self_attn.q_proj.weight"]));
  TensorMap map;
  for (const auto& p : a->named_parameters()) map[p.key()] = p.value();
  map["bf16"] = torch::randn({3, 2}).to(torch::kBFloat16);
  auto path = (std::filesystem::temp_directory_path() / "rlid_model_test.safetensors").string();
  SaveSafetensors(path, map, {{"format", "pt"}});
  std::map<std::string, std::string> meta;
  auto loaded = LoadSafetensors(path, &meta);
  EXPECT_EQ(meta["format"], "pt");
  ASSERT_EQ(loaded.size(), map.size());
  for (const auto& [k, v] : map) EXPECT_TRUE(torch::equal(loaded[k], v.detach())) << k;
  std::filesystem::remove(path);
  EXPECT_THROW(LoadSafetensors("/nonexistent/x.safetensors"), IoError);
}

TEST(Model, ConfigValidation) {
  ModelConfig c = Tiny();
  c.num_kv_heads = 3;
  EXPECT_THROW(c.Validate(), ConfigError);
  ModelConfig d = ModelConfig::FromJson(Tiny().ToJson());
  EXPECT_EQ(d.hidden_size, 128);
  EXPECT_EQ(d.head_dim, 64);
  EXPECT_TRUE(d.qk_norm);
  for (auto bad : {&ModelConfig::rope_theta, &ModelConfig::rms_norm_eps}) {
    for (double v : {0.0, -1.0, std::nan(""), std::numeric_limits<double>::infinity()}) {
      ModelConfig e = Tiny();
      e.*bad = v;
      EXPECT_THROW(e.Validate(), ConfigError) << v;
    }
  }
  ModelConfig odd = Tiny();
  odd.head_dim = 63;
  EXPECT_THROW(odd.Validate(), ConfigError);
}

// The ConfigError message of `[policy]` TOML `text` loaded by ModelConfig::Load.
std::string LoadError(const std::string& text) {
  Config cfg = Config::FromString("[policy]\n" + text + "\n", "m.toml");
  ModelConfig m;
  try {
    m.Load(cfg.Root().Section("policy"));
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(Model, LoadRejectsEveryBadSizeNamingKeyAndPosition) {
  for (const char* key : {"hidden_size", "intermediate_size", "num_layers", "num_heads",
                          "num_kv_heads", "head_dim", "max_position"}) {
    std::string msg = LoadError(std::string(key) + " = 0");
    const size_t column = std::string(key).size() + 4;  // the value's position
    EXPECT_NE(msg.find(fmt::format("m.toml:2:{}: 'policy.{}' must be in [1, ", column, key)),
              std::string::npos)
        << msg;
    EXPECT_NE(msg.find("], found 0"), std::string::npos) << msg;
  }
  for (const char* key : {"rope_theta", "rms_norm_eps"}) {
    std::string msg = LoadError(std::string(key) + " = 0.0");
    const size_t column = std::string(key).size() + 4;
    EXPECT_NE(msg.find(fmt::format("m.toml:2:{}: 'policy.{}' must be > 0, found 0", column, key)),
              std::string::npos)
        << msg;
    msg = LoadError(std::string(key) + " = nan");
    EXPECT_NE(msg.find(fmt::format("'policy.{}' must be a finite number, found nan", key)),
              std::string::npos)
        << msg;
  }
  // Consistency between keys: reported with the section's position.
  std::string msg = LoadError("num_heads = 3\nnum_kv_heads = 2");
  EXPECT_NE(msg.find("m.toml"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not a multiple of num_kv_heads = 2"), std::string::npos) << msg;
  EXPECT_EQ(LoadError("preset = 'small'\nnum_layers = 1"), "");
  // Sizes no model has are refused before anything is allocated.
  msg = LoadError("num_layers = 100000");
  EXPECT_NE(msg.find("'policy.num_layers' must be in [1, 1024], found 100000"), std::string::npos)
      << msg;
  msg = LoadError("hidden_size = 9223372036854775807");
  EXPECT_NE(msg.find("'policy.hidden_size' must be in [1, 65536]"), std::string::npos) << msg;
  msg = LoadError("max_position = 1e12");
  EXPECT_NE(msg.find("max_position"), std::string::npos) << msg;
  ModelConfig huge_vocab = Tiny();
  huge_vocab.vocab_size = int64_t{1'000'000'000'000};
  try {
    huge_vocab.Validate();
    ADD_FAILURE() << "vocab_size = 1e12 was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'policy.vocab_size' must be at most 4194304"),
              std::string::npos)
        << e.what();
  }
}

TEST(Model, ConfigJsonWithoutHeadsIsAConfigError) {
  // head_dim absent: it would be hidden_size / num_attention_heads (a division by zero).
  nlohmann::json j = Tiny().ToJson();
  j.erase("head_dim");
  for (int heads : {0, -2}) {
    j["num_attention_heads"] = heads;
    try {
      ModelConfig::FromJson(j);
      FAIL() << "num_attention_heads = " << heads << " was accepted";
    } catch (const ConfigError& e) {
      // Named by its config.json field, before head_dim = hidden / heads is computed.
      EXPECT_NE(std::string(e.what()).find(fmt::format("config.json: num_attention_heads = {} must be >= 1", heads)),
                std::string::npos)
          << e.what();
      EXPECT_NE(e.hint().find("config.json"), std::string::npos) << e.hint();
    }
  }
  j["num_attention_heads"] = 2;
  j["num_key_value_heads"] = 0;
  EXPECT_THROW(ModelConfig::FromJson(j), ConfigError);
}

}  // namespace
}  // namespace rlid::policy

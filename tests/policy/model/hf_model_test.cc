// Hugging Face model directories: logits equal transformers' own (the fixtures
// in tests/data/hf, computed by its modeling code) through `rlid policy
// logits`, for Qwen3, Qwen2, Llama-3 (llama3 rope) and a sharded BF16 copy;
// both config layouts; rope scaling rules; and a ConfigError naming the field
// for everything rlid cannot run exactly.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "policy/model/checkpoint.h"
#include "policy/model/model.h"
#include "policy/model/safetensors.h"
#include "tests/agents/fixtures.h"
#include "tests/cli/run_cli.h"
#include "tests/test_paths.h"

namespace rlid::policy {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

const char* kFixtures[] = {"qwen3_tiny",   "qwen2_tiny",  "llama3_tiny", "qwen3_tiny_bf16_sharded",
                           "mistral_tiny", "gemma3_tiny", "qwen3_5_tiny"};

fs::path FixtureDir(const std::string& name) {
  return fs::path(RLID_SOURCE_DIR) / "tests" / "data" / "hf" / name;
}

json ReadJsonFile(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

void WriteJsonFile(const fs::path& p, const json& j) { std::ofstream(p) << j.dump(2); }

using testing::RunRlid;

// A writable copy of a fixture directory.
fs::path CopyFixture(const std::string& name, const testing::TempDir& tmp) {
  fs::path dst = tmp.path() / name;
  fs::create_directories(dst);
  for (const auto& e : fs::directory_iterator(FixtureDir(name)))
    if (e.path().filename() != "reference.json") fs::copy_file(e.path(), dst / e.path().filename());
  for (const auto& e : fs::directory_iterator(dst))
    fs::permissions(e.path(), fs::perms::owner_write, fs::perm_options::add);
  return dst;
}

// Logits [B, T, V] of the model in `dir` for ids/mask/positions.
torch::Tensor ModelLogits(const fs::path& dir, const torch::Tensor& ids, const torch::Tensor& mask,
                          const torch::Tensor& pos, torch::Dtype dtype = torch::kFloat32) {
  LoadOptions lo;
  lo.dtype = dtype;
  lo.require_tokenizer = false;
  auto ck = LoadCheckpoint(dir.string(), torch::kCPU, lo);
  torch::NoGradGuard ng;
  return ck.model->Logits(
      ck.model->forward(ids, pos, TransformerLMImpl::CausalMaskFromAttention(mask)).hidden);
}

torch::Tensor Ids(std::initializer_list<int64_t> v) { return torch::tensor(std::vector<int64_t>(v)).unsqueeze(0); }

TEST(HfParity, EveryFixtureCaseMatchesTransformersThroughTheCli) {
  testing::TempDir tmp("hf_parity");
  int cases = 0;
  for (const char* name : kFixtures) {
    const json ref = ReadJsonFile(FixtureDir(name) / "reference.json");
    ASSERT_FALSE(ref.at("cases").empty()) << name;
    for (const auto& c : ref.at("cases")) {
      json in = {{"input_ids", c.at("input_ids")}, {"attention_mask", c.at("attention_mask")}};
      if (!c.at("position_ids_passed").is_null()) in["position_ids"] = c.at("position_ids_passed");
      const fs::path input = tmp.path() / "in.json";
      WriteJsonFile(input, in);
      auto r = RunRlid({"policy", "logits", "--checkpoint", FixtureDir(name).string(), "--input",
                    input.string(), "--json"});
      ASSERT_EQ(r.code, 0) << name << " " << c.at("name") << ": " << r.err;
      const json got = json::parse(r.out).at("logits");
      const auto& want = c.at("logits");
      ASSERT_EQ(got.size(), want.size());
      double max_diff = 0;
      int64_t compared = 0;
      for (size_t b = 0; b < want.size(); ++b) {
        ASSERT_EQ(got[b].size(), want[b].size());
        for (size_t t = 0; t < want[b].size(); ++t) {
          if (!c.at("valid")[b][t].get<bool>()) continue;
          ASSERT_EQ(got[b][t].size(), want[b][t].size());
          for (size_t v = 0; v < want[b][t].size(); ++v) {
            max_diff = std::max(max_diff, std::abs(got[b][t][v].get<double>() - want[b][t][v].get<double>()));
            ++compared;
          }
        }
      }
      EXPECT_GT(compared, 0);
      EXPECT_LE(max_diff, 1e-4) << name << " " << c.at("name");
      std::cout << name << " / " << c.at("name").get<std::string>() << ": max |logit diff| "
                << max_diff << " over " << compared << " values\n";
      ++cases;
    }
  }
  EXPECT_EQ(cases, 35);
}

// Qwen3.5's token-by-token form against the same reference (transformers' chunked rule).
TEST(HfParity, Qwen35RecurrentFormMatchesTransformersToo) {
  testing::TempDir tmp("hf_parity_recurrent");
  const json ref = ReadJsonFile(FixtureDir("qwen3_5_tiny") / "reference.json");
  for (const auto& c : ref.at("cases")) {
    json in = {{"input_ids", c.at("input_ids")}, {"attention_mask", c.at("attention_mask")}};
    if (!c.at("position_ids_passed").is_null()) in["position_ids"] = c.at("position_ids_passed");
    WriteJsonFile(tmp.path() / "in.json", in);
    auto r =
        RunRlid({"policy", "logits", "--checkpoint", FixtureDir("qwen3_5_tiny").string(), "--input",
                 (tmp.path() / "in.json").string(), "--json", "--recurrent-form", "recurrent"});
    ASSERT_EQ(r.code, 0) << r.err;
    const json got = json::parse(r.out).at("logits");
    double max_diff = 0;
    for (size_t b = 0; b < got.size(); ++b)
      for (size_t t = 0; t < got[b].size(); ++t)
        if (c.at("valid")[b][t].get<bool>())
          for (size_t v = 0; v < got[b][t].size(); ++v)
            max_diff = std::max(max_diff, std::abs(got[b][t][v].get<double>() -
                                                   c.at("logits")[b][t][v].get<double>()));
    EXPECT_LE(max_diff, 1e-4) << c.at("name");
  }
}

// A Qwen3_5ForConditionalGeneration directory: config.json with text_config
// and vision_config, the language model under model.language_model., a vision
// tower and MTP head rlid skips. It reads as the text model does.
TEST(HfWeights, Qwen35MultimodalCheckpointReadsItsLanguageModel) {
  testing::TempDir tmp("hf_qwen35_vl");
  auto dir = CopyFixture("qwen3_5_tiny", tmp);
  json text = ReadJsonFile(dir / "config.json");
  json composite = {{"architectures", {"Qwen3_5ForConditionalGeneration"}},
                    {"model_type", "qwen3_5"},
                    {"tie_word_embeddings", false},
                    {"text_config", text},
                    {"vision_config", {{"model_type", "qwen3_5_vision"}, {"depth", 1}}}};
  WriteJsonFile(dir / "config.json", composite);
  TensorMap renamed;
  for (auto& [name, t] : LoadSafetensors((dir / "model.safetensors").string()))
    renamed[name.rfind("model.", 0) == 0 ? "model.language_model." + name.substr(6) : name] = t;
  renamed["model.visual.blocks.0.attn.qkv.weight"] = torch::zeros({6, 2});
  renamed["mtp.fc.weight"] = torch::zeros({2, 2});
  SaveSafetensors((dir / "model.safetensors").string(), renamed);
  auto ids = Ids({5, 17, 42, 7, 99, 250, 3, 64});
  auto mask = torch::ones_like(ids);
  auto pos = torch::arange(8).unsqueeze(0);
  EXPECT_TRUE(torch::equal(ModelLogits(dir, ids, mask, pos),
                           ModelLogits(FixtureDir("qwen3_5_tiny"), ids, mask, pos)));
  renamed["model.embed_tokens.weight"] =
      renamed["model.language_model.embed_tokens.weight"];  // stored twice
  SaveSafetensors((dir / "model.safetensors").string(), renamed);
  EXPECT_THROW(ModelLogits(dir, ids, mask, pos), IoError);
}

TEST(HfParity, Bfloat16WeightsStayCloseToFloat32) {
  const json ref = ReadJsonFile(FixtureDir("qwen3_tiny_bf16_sharded") / "reference.json");
  const auto& c = ref.at("cases")[2];  // 40 tokens
  auto ids = torch::tensor(c.at("input_ids")[0].get<std::vector<int64_t>>()).unsqueeze(0);
  auto mask = torch::ones_like(ids);
  auto pos = torch::arange(ids.size(1)).unsqueeze(0);
  auto f32 = ModelLogits(FixtureDir("qwen3_tiny_bf16_sharded"), ids, mask, pos);
  auto bf16 = ModelLogits(FixtureDir("qwen3_tiny_bf16_sharded"), ids, mask, pos, torch::kBFloat16);
  EXPECT_EQ(bf16.scalar_type(), torch::kFloat32);  // logits are float32 whatever the weights
  const double scale = f32.abs().max().item<double>();
  const double diff = (f32 - bf16).abs().max().item<double>();
  EXPECT_GT(diff, 0.0);  // bf16 activations round: not the float32 path
  EXPECT_LT(diff, 0.05 * scale) << "bf16 logits drifted " << diff << " (max logit " << scale << ")";
}

TEST(HfConfig, OlderLayoutGivesTheSameModel) {
  testing::TempDir tmp("hf_layout");
  for (const char* name : {"llama3_tiny", "qwen3_tiny"}) {
    auto dir = CopyFixture(name, tmp);
    json j = ReadJsonFile(dir / "config.json");
    json rope = j["rope_parameters"];
    j.erase("rope_parameters");
    j["rope_theta"] = rope["rope_theta"];
    rope.erase("rope_theta");
    if (rope["rope_type"] == "default") {
      j["rope_scaling"] = nullptr;
    } else {
      rope["type"] = rope["rope_type"];  // some old files carry both
      j["rope_scaling"] = rope;
    }
    j["torch_dtype"] = j["dtype"];
    j.erase("dtype");
    WriteJsonFile(dir / "config.json", j);
    const auto now = ModelConfig::FromJson(ReadJsonFile(FixtureDir(name) / "config.json"));
    const auto old = ModelConfig::FromJson(j);
    EXPECT_EQ(old.RopeInvFreq(), now.RopeInvFreq()) << name;
    EXPECT_EQ(old.rope_theta, now.rope_theta);
    auto ids = Ids({5, 17, 42, 7, 99, 250, 3, 64});
    auto mask = torch::ones_like(ids);
    auto pos = torch::arange(8).unsqueeze(0);
    EXPECT_TRUE(torch::equal(ModelLogits(dir, ids, mask, pos), ModelLogits(FixtureDir(name), ids, mask, pos)))
        << name;
  }
}

// A key config.json leaves out means what transformers' config class of the family
// assumes (Qwen3Config: head_dim 128, 32 KV heads, 32768 positions; LlamaConfig:
// D / heads, all heads, 2048), and a top-level original_max_position_embeddings
// overrides the rope parameters' (transformers' standardize_rope_params).
TEST(HfConfig, AbsentKeysTakeTheFamilyDefaultsOfTransformers) {
  json qwen3 = ReadJsonFile(FixtureDir("qwen3_tiny") / "config.json");
  for (const char* key : {"head_dim", "num_key_value_heads", "max_position_embeddings"}) qwen3.erase(key);
  qwen3["num_attention_heads"] = 64;
  auto c = ModelConfig::FromJson(qwen3);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.num_kv_heads, 32);
  EXPECT_EQ(c.max_position, 32768);
  qwen3["num_key_value_heads"] = nullptr;  // null: as many as query heads
  EXPECT_EQ(ModelConfig::FromJson(qwen3).num_kv_heads, 64);

  json llama = ReadJsonFile(FixtureDir("llama3_tiny") / "config.json");
  for (const char* key : {"head_dim", "num_key_value_heads", "max_position_embeddings"}) llama.erase(key);
  llama["rope_parameters"].erase("original_max_position_embeddings");
  c = ModelConfig::FromJson(llama);
  EXPECT_EQ(c.head_dim, 64 / 4);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.max_position, 2048);
  EXPECT_EQ(c.rope.original_max_position, 2048);
  llama["rope_parameters"]["original_max_position_embeddings"] = 64;
  EXPECT_EQ(ModelConfig::FromJson(llama).rope.original_max_position, 64);
  llama["original_max_position_embeddings"] = 32;
  EXPECT_EQ(ModelConfig::FromJson(llama).rope.original_max_position, 32);
}

TEST(HfConfig, SavedConfigRoundTripsEveryFixture) {
  for (const char* name : kFixtures) {
    const auto a = ModelConfig::FromJson(ReadJsonFile(FixtureDir(name) / "config.json"));
    const auto b = ModelConfig::FromJson(a.ToJson());
    EXPECT_EQ(b.ModelType(), a.ModelType()) << name;
    EXPECT_EQ(b.NumParameters(), a.NumParameters()) << name;
    EXPECT_EQ(b.RopeInvFreq(), a.RopeInvFreq()) << name;
    EXPECT_EQ(b.qk_norm, a.qk_norm);
    EXPECT_EQ(b.attention_bias, a.attention_bias);
    EXPECT_EQ(b.tie_embeddings, a.tie_embeddings);
  }
  EXPECT_EQ(ModelConfig::FromJson(ReadJsonFile(FixtureDir("llama3_tiny") / "config.json")).ModelType(), "llama");
  EXPECT_EQ(ModelConfig::FromJson(ReadJsonFile(FixtureDir("qwen2_tiny") / "config.json")).ModelType(), "qwen2");
}

// An edit of config.json rlid must refuse, and what its ConfigError names.
struct RefusalCase {
  const char* field;
  std::function<void(json&)> edit;
};

// Each edit of `base` is a ConfigError whose message contains the case's field.
void ExpectEachEditRefusedNamingTheField(const json& base, const std::vector<RefusalCase>& cases) {
  for (const auto& c : cases) {
    json j = base;
    c.edit(j);
    try {
      ModelConfig::FromJson(j);
      ADD_FAILURE() << c.field << ": accepted";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(c.field), std::string::npos) << e.what();
    }
  }
}

// Each unsupported setting is a ConfigError whose message names the field.
TEST(HfConfig, UnsupportedSettingsNameTheField) {
  const json base = ReadJsonFile(FixtureDir("llama3_tiny") / "config.json");
  const std::vector<RefusalCase> cases = {
      {"num_local_experts", [](json& j) { j["num_local_experts"] = 8; }},
      {"num_experts", [](json& j) { j["num_experts"] = 4; }},
      {"use_sliding_window", [](json& j) { j["use_sliding_window"] = true; }},
      {"layer_types", [](json& j) { j["layer_types"] = {"full_attention", "sliding_attention", "full_attention"}; }},
      {"rope_parameters.rope_type", [](json& j) { j["rope_parameters"]["rope_type"] = "dynamic"; }},
      {"rope_parameters.long_factor", [](json& j) { j["rope_parameters"]["long_factor"] = {1, 2}; }},
      {"rope_parameters.factor", [](json& j) { j["rope_parameters"].erase("factor"); }},
      {"rope_parameters.partial_rotary_factor", [](json& j) { j["rope_parameters"]["partial_rotary_factor"] = 0.5; }},
      {"rope_scaling.rope_type",
       [](json& j) {
         j.erase("rope_parameters");
         j["rope_theta"] = 1e4;
         j["rope_scaling"] = {{"type", "longrope"}, {"factor", 2.0}};
       }},
      {"model_type", [](json& j) { j["model_type"] = "mixtral"; }},
      {"hidden_act", [](json& j) { j["hidden_act"] = "gelu"; }},
      {"mlp_bias", [](json& j) { j["mlp_bias"] = true; }},
      {"num_hidden_layers", [](json& j) { j.erase("num_hidden_layers"); }},
      {"hidden_size", [](json& j) { j["hidden_size"] = "64"; }},
      // Sizes that would divide by zero (SIGFPE) or allocate nonsense.
      {"num_attention_heads = 0", [](json& j) { j["num_attention_heads"] = 0; }},
      {"num_key_value_heads = 0", [](json& j) { j["num_key_value_heads"] = 0; }},
      {"num_attention_heads = 0", [](json& j) {
         j["num_attention_heads"] = 0;
         j.erase("head_dim");
       }},
      {"not a multiple of num_key_value_heads", [](json& j) { j["num_key_value_heads"] = 3; }},
      {"hidden_size = -64", [](json& j) { j["hidden_size"] = -64; }},
      {"head_dim = 0", [](json& j) { j["head_dim"] = 0; }},
      // transformers reads a top-level partial_rotary_factor too; rlid rotates whole heads.
      {"config.json: partial_rotary_factor = 0.5", [](json& j) { j["partial_rotary_factor"] = 0.5; }},
      // Sizes no model has: refused before anything is allocated.
      {"num_hidden_layers = 100000 exceeds the 1024", [](json& j) { j["num_hidden_layers"] = 100000; }},
      {"vocab_size = 1000000000000 exceeds", [](json& j) { j["vocab_size"] = int64_t{1'000'000'000'000}; }},
      {"hidden_size = 9223372036854775807 exceeds", [](json& j) { j["hidden_size"] = INT64_MAX; }},
      {"num_hidden_layers", [](json& j) { j["num_hidden_layers"] = 1e5; }},  // not an integer
      {"'policy.head_dim' must be at most 1024", [](json& j) { j["head_dim"] = 4096; }},
      {"'policy.max_position' must be at most", [](json& j) { j["max_position_embeddings"] = int64_t{1} << 40; }},
  };
  ExpectEachEditRefusedNamingTheField(base, cases);
  json ok = base;
  ok["num_experts"] = 0;  // dense models sometimes state zero experts
  ok["partial_rotary_factor"] = 1.0;
  EXPECT_NO_THROW(ModelConfig::FromJson(ok));
}

// Gemma 3 and Mistral settings rlid cannot run exactly, by field; and how the
// window and layer types are read (defaults as transformers' config classes).
TEST(HfConfig, Gemma3AndMistralReadAsTransformersDoesOrNameTheField) {
  const json gemma = {{"model_type", "gemma3_text"}, {"vocab_size", 64},        {"hidden_size", 32},
                      {"intermediate_size", 48},     {"num_hidden_layers", 7},  {"num_attention_heads", 2},
                      {"num_key_value_heads", 1},    {"head_dim", 16}};
  const auto g = ModelConfig::FromJson(gemma);
  EXPECT_EQ(g.ModelType(), "gemma3_text");
  EXPECT_EQ(g.sliding_window, 4096);  // Gemma3TextConfig's default
  EXPECT_EQ(g.sliding, (std::vector<bool>{true, true, true, true, true, false, true}));  // every 6th global
  EXPECT_TRUE(g.tie_embeddings && g.qk_norm && g.unit_offset_norm && g.sandwich_norm);
  EXPECT_DOUBLE_EQ(g.query_scale, 1.0 / 16.0);  // query_pre_attn_scalar 256
  EXPECT_DOUBLE_EQ(g.rope_theta, 1e6);
  EXPECT_DOUBLE_EQ(g.local_rope_theta, 1e4);
  EXPECT_DOUBLE_EQ(g.embed_scale, std::sqrt(32.0));
  const auto back = ModelConfig::FromJson(g.ToJson());
  EXPECT_EQ(back.sliding, g.sliding);
  EXPECT_EQ(back.sliding_window, g.sliding_window);
  EXPECT_DOUBLE_EQ(back.query_scale, g.query_scale);
  EXPECT_EQ(back.LocalRopeInvFreq(), g.LocalRopeInvFreq());
  EXPECT_EQ(back.NumParameters(), g.NumParameters());

  json mistral = gemma;
  mistral["model_type"] = "mistral";
  EXPECT_EQ(ModelConfig::FromJson(mistral).sliding_window, 4096);  // MistralConfig's default
  mistral["sliding_window"] = nullptr;
  const auto m = ModelConfig::FromJson(mistral);
  EXPECT_FALSE(m.IsSliding(0));
  EXPECT_FALSE(m.tie_embeddings);
  EXPECT_EQ(ModelConfig::FromJson(m.ToJson()).sliding_window, 0);
  mistral["attention_bias"] = true;  // transformers' Mistral has no biases whatever it says
  EXPECT_FALSE(ModelConfig::FromJson(mistral).attention_bias);

  const std::vector<RefusalCase> cases = {
      {"attn_logit_softcapping", [](json& j) { j["attn_logit_softcapping"] = 50.0; }},
      {"use_bidirectional_attention", [](json& j) { j["use_bidirectional_attention"] = true; }},
      {"hidden_activation", [](json& j) { j["hidden_activation"] = "gelu"; }},
      {"layer_types", [](json& j) { j["layer_types"] = {"sliding_attention"}; }},  // 1 type, 7 layers
      {"layer_types", [](json& j) {
         j["layer_types"] = json::array();
         for (int i = 0; i < 7; ++i) j["layer_types"].push_back("linear_attention");
       }},
      {"sliding_window", [](json& j) { j["sliding_window"] = nullptr; }},
      {"rope_parameters.sliding_attention.rope_type",
       [](json& j) {
         j["rope_parameters"] = {{"sliding_attention", {{"rope_type", "linear"}, {"factor", 2.0}}}};
       }},
      {"rope_parameters.rope_type", [](json& j) { j["rope_parameters"] = {{"rope_type", "default"}}; }},
  };
  ExpectEachEditRefusedNamingTheField(gemma, cases);
}

// Qwen3.5: the text model of a Qwen3_5ForConditionalGeneration config.json
// (text_config) or a qwen3_5_text one, with Qwen3_5TextConfig's defaults; what
// rlid cannot run is named.
TEST(HfConfig, Qwen35ReadsTheTextModelAsTransformersDoesOrNamesTheField) {
  const json text = {
      {"model_type", "qwen3_5_text"}, {"vocab_size", 64},       {"hidden_size", 32},
      {"intermediate_size", 48},      {"num_hidden_layers", 8}, {"num_attention_heads", 2},
      {"num_key_value_heads", 1},     {"head_dim", 16}};
  const auto q = ModelConfig::FromJson(text);
  EXPECT_EQ(q.ModelType(), "qwen3_5_text");
  EXPECT_EQ(q.linear,
            (std::vector<bool>{true, true, true, false, true, true, true, false}));  // interval 4
  EXPECT_EQ(q.linear_key_heads, 16);
  EXPECT_EQ(q.linear_value_heads, 32);
  EXPECT_EQ(q.linear_key_dim, 128);
  EXPECT_EQ(q.linear_conv_kernel, 4);
  EXPECT_DOUBLE_EQ(q.partial_rotary, 0.25);  // Qwen3_5TextConfig's default
  EXPECT_EQ(q.RotaryDim(), 4);
  EXPECT_EQ(q.RopeInvFreq().size(), 2u);
  EXPECT_TRUE(q.qk_norm && q.unit_offset_norm && q.attn_output_gate && !q.sandwich_norm);
  EXPECT_FALSE(q.tie_embeddings);
  const auto back = ModelConfig::FromJson(q.ToJson());
  EXPECT_EQ(back.linear, q.linear);
  EXPECT_EQ(back.RopeInvFreq(), q.RopeInvFreq());
  EXPECT_EQ(back.NumParameters(), q.NumParameters());
  EXPECT_EQ(back.ToJson(), q.ToJson());

  // The composite checkpoint's config: text_config, tie and dtype from the top level.
  json composite = {{"model_type", "qwen3_5"},
                    {"architectures", {"Qwen3_5ForConditionalGeneration"}},
                    {"tie_word_embeddings", true},
                    {"dtype", "bfloat16"},
                    {"vision_config", {{"model_type", "qwen3_5_vision"}, {"depth", 2}}},
                    {"text_config", text}};
  composite["text_config"].erase("model_type");
  composite["text_config"]["rope_parameters"] = {{"rope_type", "default"},
                                                 {"rope_theta", 1e7},
                                                 {"partial_rotary_factor", 0.5},
                                                 {"mrope_section", {1, 1, 0}},
                                                 {"mrope_interleaved", true}};
  const auto c = ModelConfig::FromJson(composite);
  EXPECT_EQ(c.ModelType(), "qwen3_5_text");
  EXPECT_TRUE(c.tie_embeddings);
  EXPECT_EQ(c.source_dtype, "bfloat16");
  EXPECT_DOUBLE_EQ(c.rope_theta, 1e7);
  EXPECT_EQ(c.RotaryDim(), 8);

  const std::vector<RefusalCase> cases = {
      {"layer_types",
       [](json& j) { j["layer_types"] = {"linear_attention"}; }},  // 1 type, 8 layers
      {"layer_types",
       [](json& j) {
         j["layer_types"] = json::array();
         for (int i = 0; i < 8; ++i)
           j["layer_types"].push_back(i == 3 ? "sliding_attention" : "full_attention");
       }},
      {"every layer is linear_attention",
       [](json& j) {
         j["layer_types"] = json::array();
         for (int i = 0; i < 8; ++i) j["layer_types"].push_back("linear_attention");
       }},
      {"linear_num_value_heads",
       [](json& j) { j["linear_num_value_heads"] = 24; }},  // 16 key heads
      {"linear_conv_kernel_dim", [](json& j) { j["linear_conv_kernel_dim"] = 0; }},
      {"partial_rotary_factor",
       [](json& j) { j["partial_rotary_factor"] = 0.1; }},  // 1.6 dimensions
      {"model_type", [](json& j) { j["model_type"] = "qwen3_5_moe_text"; }},
      {"num_experts", [](json& j) { j["num_experts"] = 64; }},
      {"hidden_act", [](json& j) { j["hidden_act"] = "gelu"; }},
  };
  ExpectEachEditRefusedNamingTheField(text, cases);
  json no_text = composite;
  no_text.erase("text_config");
  EXPECT_THROW(ModelConfig::FromJson(no_text), ConfigError);
}

TEST(HfWeights, MissingExtraAndMisplacedTensorsAreNamed) {
  testing::TempDir tmp("hf_weights");
  auto tensors_of = [](const fs::path& f) { return LoadSafetensors(f.string()); };
  {  // a tensor the config needs is absent
    auto dir = CopyFixture("qwen2_tiny", tmp);
    auto t = tensors_of(dir / "model.safetensors");
    t.erase("model.layers.1.self_attn.k_proj.bias");
    SaveSafetensors((dir / "model.safetensors").string(), t);
    try {
      LoadCheckpoint(dir.string(), torch::kCPU, {torch::kFloat32, false});
      ADD_FAILURE() << "loaded without a k_proj bias";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("model.layers.1.self_attn.k_proj.bias"), std::string::npos) << e.what();
    }
  }
  {  // a tensor the model does not use (an MLP bias: another architecture)
    testing::TempDir t2("hf_weights2");
    auto dir = CopyFixture("llama3_tiny", t2);
    auto t = tensors_of(dir / "model.safetensors");
    t["model.layers.0.mlp.up_proj.bias"] = torch::zeros({96});
    SaveSafetensors((dir / "model.safetensors").string(), t);
    try {
      LoadCheckpoint(dir.string(), torch::kCPU, {torch::kFloat32, false});
      ADD_FAILURE() << "loaded with an unused tensor";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("mlp.up_proj.bias"), std::string::npos) << e.what();
    }
  }
  {  // the index maps a tensor to a shard that does not hold it
    testing::TempDir t3("hf_weights3");
    auto dir = CopyFixture("qwen3_tiny_bf16_sharded", t3);
    json idx = ReadJsonFile(dir / "model.safetensors.index.json");
    auto& wm = idx["weight_map"];
    const std::string name = wm.begin().key();
    const std::string file = wm.begin()->get<std::string>();
    wm[name] = file == "model-00001-of-00002.safetensors" ? "model-00002-of-00002.safetensors"
                                                          : "model-00001-of-00002.safetensors";
    WriteJsonFile(dir / "model.safetensors.index.json", idx);
    EXPECT_THROW(LoadCheckpoint(dir.string(), torch::kCPU, {torch::kFloat32, false}), IoError);
    wm[name] = "../model.safetensors";
    WriteJsonFile(dir / "model.safetensors.index.json", idx);
    EXPECT_THROW(LoadCheckpoint(dir.string(), torch::kCPU, {torch::kFloat32, false}), IoError);
  }
}

// tie_word_embeddings = true with a stored lm_head.weight: as transformers
// loads it, a head equal to the embedding is tied, one that differs is kept.
TEST(HfWeights, TiedModelsTieAnEqualStoredHeadKeepADifferentOneAndNeedNoTokenizer) {
  testing::TempDir tmp("hf_tied");
  auto dir = CopyFixture("qwen3_tiny", tmp);
  auto ids = Ids({1, 2, 3, 200, 150});
  auto mask = torch::ones_like(ids);
  auto pos = torch::arange(5).unsqueeze(0);
  auto before = ModelLogits(dir, ids, mask, pos);
  auto t = LoadSafetensors((dir / "model.safetensors").string());
  ASSERT_EQ(t.count("lm_head.weight"), 0u);
  t["lm_head.weight"] = t["model.embed_tokens.weight"].clone();  // equal: tied, the same logits
  SaveSafetensors((dir / "model.safetensors").string(), t);
  EXPECT_TRUE(torch::equal(before, ModelLogits(dir, ids, mask, pos)));
  t["lm_head.weight"] = torch::randn({300, 64});  // different: its own tensor, other logits
  SaveSafetensors((dir / "model.safetensors").string(), t);
  EXPECT_FALSE(torch::allclose(before, ModelLogits(dir, ids, mask, pos)));
  t["lm_head.weight"] = t["model.embed_tokens.weight"].clone();
  SaveSafetensors((dir / "model.safetensors").string(), t);
  // Without tokenizer.json: fine when not required, a clear IoError otherwise.
  try {
    LoadCheckpoint(dir.string());
    ADD_FAILURE() << "loaded without tokenizer.json";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos);
  }
}

TEST(Rope, LinearScalingEqualsDividedPositions) {
  testing::TempDir tmp("hf_linear");
  auto dir = CopyFixture("qwen2_tiny", tmp);
  json j = ReadJsonFile(dir / "config.json");
  j["rope_parameters"]["rope_type"] = "linear";
  j["rope_parameters"]["factor"] = 2.0;
  WriteJsonFile(dir / "config.json", j);
  auto ids = Ids({9, 8, 7, 6, 5, 4});
  auto mask = torch::ones_like(ids);
  auto even = (torch::arange(6) * 2).unsqueeze(0);
  auto scaled = ModelLogits(dir, ids, mask, even);
  auto plain = ModelLogits(FixtureDir("qwen2_tiny"), ids, mask, torch::arange(6).unsqueeze(0));
  EXPECT_LT((scaled - plain).abs().max().item<double>(), 1e-4);
  EXPECT_GT((ModelLogits(FixtureDir("qwen2_tiny"), ids, mask, even) - plain).abs().max().item<double>(), 1e-3);
}

TEST(Rope, Llama3KeepsShortWavelengthsAndStretchesLongOnes) {
  auto c = ModelConfig::FromJson(ReadJsonFile(FixtureDir("llama3_tiny") / "config.json"));
  ASSERT_EQ(c.rope.type, "llama3");
  auto plain = c;
  plain.rope = RopeScaling{};
  const auto a = c.RopeInvFreq(), p = plain.RopeInvFreq();
  const double old_len = 64, low_wl = old_len / 1.0, high_wl = old_len / 4.0;
  int kept = 0, stretched = 0, blended = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double wl = 2 * M_PI / p[i];
    if (wl < high_wl) {
      EXPECT_DOUBLE_EQ(a[i], p[i]);
      ++kept;
    } else if (wl > low_wl) {
      EXPECT_DOUBLE_EQ(a[i], p[i] / 8.0);
      ++stretched;
    } else {
      EXPECT_LT(a[i], p[i]);
      EXPECT_GT(a[i], p[i] / 8.0);
      ++blended;
    }
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(stretched, 0);
  EXPECT_EQ(c.RopeAttentionScale(), 1.0);
}

TEST(Rope, YarnRampsBetweenExtrapolationAndInterpolation) {
  ModelConfig c;
  c.head_dim = 64;
  c.rope_theta = 10000;
  c.max_position = 8192;
  c.rope.type = "yarn";
  c.rope.factor = 4;
  c.rope.original_max_position = 2048;
  c.Validate();
  ModelConfig plain = c;
  plain.rope = RopeScaling{};
  const auto a = c.RopeInvFreq(), p = plain.RopeInvFreq();
  // Correction range from the YaRN paper: dims that rotate more than beta_fast
  // times over the original context keep their frequency, fewer than beta_slow
  // times are interpolated by the factor.
  auto corr = [&](double rot) { return 64 * std::log(2048 / (rot * 2 * M_PI)) / (2 * std::log(10000.0)); };
  const double low = std::floor(corr(32)), high = std::ceil(corr(1));
  for (size_t i = 0; i < a.size(); ++i) {
    if (i <= low) EXPECT_DOUBLE_EQ(a[i], p[i]) << i;
    else if (i >= high) EXPECT_DOUBLE_EQ(a[i], p[i] / 4) << i;
    else {
      const double w = (i - low) / (high - low);  // interpolated share
      EXPECT_NEAR(a[i], p[i] * (1 - w) + p[i] / 4 * w, 1e-15) << i;
    }
  }
  EXPECT_DOUBLE_EQ(c.RopeAttentionScale(), 0.1 * std::log(4.0) + 1.0);
  c.rope.attention_factor = 1.5;
  EXPECT_DOUBLE_EQ(c.RopeAttentionScale(), 1.5);
}

TEST(HfSafetensors, RejectsDamagedHeaders) {
  testing::TempDir tmp("st_bad");
  auto write = [&](const std::string& header, size_t data_bytes, uint64_t declared_len = 0) {
    const fs::path p = tmp.path() / "bad.safetensors";
    std::ofstream out(p, std::ios::binary | std::ios::trunc);
    uint64_t len = declared_len ? declared_len : header.size();
    for (int i = 0; i < 8; ++i) out.put(static_cast<char>((len >> (8 * i)) & 0xff));
    out << header << std::string(data_bytes, '\0');
    return p.string();
  };
  // Overlapping ranges, a range past the data, a length that disagrees with the
  // shape, an offset that would wrap, an unknown dtype, a 200 MB header claim.
  const std::vector<std::pair<std::string, size_t>> bad = {
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})", 16},
      {R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 8},
      {R"({"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8},
      {R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[18446744073709551612,4]}})", 8},
      {R"({"a":{"dtype":"F32","shape":[4611686018427387904,8],"data_offsets":[0,8]}})", 8},
      {R"({"a":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", 8},
  };
  for (const auto& [h, n] : bad) EXPECT_THROW(SafetensorsReader r(write(h, n)), IoError) << h;
  EXPECT_THROW(SafetensorsReader r(write("{}", 0, 200ull << 20)), IoError);
  SafetensorsReader ok(write(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 8));
  EXPECT_EQ(ok.entries().size(), 1u);
  auto t = torch::empty({3});
  EXPECT_THROW(ok.ReadInto("a", t), IoError);  // wrong shape
}

}  // namespace
}  // namespace rlid::policy

// LoRA adapters on the Hugging Face fixtures: a fresh adapter changes nothing,
// only adapters and the value head train, merged weights compute what the
// adapters do (in memory, in the sampler engine and through `rlid export
// --merge` + `rlid policy logits`), the KL reference shares the base's
// storage, checkpoints are PEFT adapter directories with PEFT's tensor names,
// and adapter configs rlid cannot run exactly are ConfigErrors naming the field.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <filesystem>
#include <functional>
#include <map>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "core/error.h"
#include "envs/api/env.h"
#include "policy/model/checkpoint.h"
#include "policy/model/lora.h"
#include "policy/model/safetensors.h"
#include "policy/reading/sampler.h"
#include "tests/agents/fixtures.h"
#include "tests/cli/run_cli.h"
#include "tests/test_paths.h"

namespace rlid::policy {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;
using testing::RunRlid;
using testing::TempDir;

fs::path Fixture(const std::string& name = "qwen3_tiny") {
  return fs::path(RLID_SOURCE_DIR) / "tests" / "data" / "hf" / name;
}

LoadedCheckpoint LoadBase(torch::Dtype dtype = torch::kFloat32) {
  LoadOptions lo;
  lo.dtype = dtype;
  lo.require_tokenizer = false;
  return LoadCheckpoint(Fixture().string(), torch::kCPU, lo);
}

LoraConfig Lora(int64_t rank = 4, double alpha = 8) {
  LoraConfig c;
  c.rank = rank;
  c.alpha = alpha;
  c.base_model = fs::absolute(Fixture()).string();
  return c;
}

const torch::Tensor& Ids() {
  static const torch::Tensor ids = torch::tensor(std::vector<int64_t>{5, 17, 42, 99, 3, 250, 7, 1}).view({2, 4});
  return ids;
}

torch::Tensor Logits(TransformerLM& m, const torch::Tensor& ids = Ids()) {
  torch::NoGradGuard ng;
  auto pos = torch::arange(ids.size(1)).unsqueeze(0).expand_as(ids).contiguous();
  auto mask = TransformerLMImpl::CausalMaskFromAttention(torch::ones_like(ids));
  return m->Logits(m->forward(ids, pos, mask).hidden);
}

// Trained-looking adapters: lora_B drawn (it starts at zero).
void PerturbAdapters(TransformerLM& m, uint64_t seed = 11) {
  torch::NoGradGuard ng;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  for (auto& p : m->named_parameters())
    if (p.key().find(".lora_B.") != std::string::npos) p.value().normal_(0.0, 0.05, gen);
}

double MaxDiff(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

json ReadJson(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

TEST(Lora, StartsAsTheBaseModelAndOnlyAdaptersAndTheValueHeadTrain) {
  auto ck = LoadBase();
  const auto before = Logits(ck.model);
  AttachLora(ck.model, Lora(), 1);
  EXPECT_TRUE(torch::equal(Logits(ck.model), before));  // lora_B = 0: exactly the base
  std::set<std::string> trainable;
  for (const auto& p : ck.model->named_parameters())
    if (p.value().requires_grad()) trainable.insert(p.key());
  const int64_t layers = ck.model->config().num_layers;
  EXPECT_EQ(trainable.size(), static_cast<size_t>(2 * 7 * layers + 2));
  EXPECT_TRUE(trainable.count("model.layers.0.self_attn.q_proj.lora_A.weight"));
  EXPECT_TRUE(trainable.count("model.layers.2.mlp.down_proj.lora_B.weight"));
  EXPECT_TRUE(trainable.count("value_head.weight"));
  EXPECT_FALSE(trainable.count("model.layers.0.self_attn.q_proj.weight"));
  EXPECT_FALSE(trainable.count("model.norm.weight"));
  const auto& q = ck.model->model->layer_list[0]->self_attn->q_proj;
  EXPECT_EQ(q->lora_A->weight.sizes(), (std::vector<int64_t>{4, 64}));
  EXPECT_EQ(q->lora_B->weight.sizes(), (std::vector<int64_t>{4 * 32, 4}));
  // PEFT's initialisation bound 1/sqrt(in).
  EXPECT_LE(q->lora_A->weight.abs().max().item<double>(), 1.0 / std::sqrt(64.0));
  EXPECT_GT(q->lora_A->weight.abs().max().item<double>(), 0.5 / std::sqrt(64.0));
  // A backward reaches the adapters and nothing of the base.
  auto pos = torch::arange(4).unsqueeze(0).expand({2, 4}).contiguous();
  auto h = ck.model->forward(Ids(), pos, TransformerLMImpl::CausalMaskFromAttention(torch::ones_like(Ids()))).hidden;
  (ck.model->Logits(h).logsumexp(-1).sum() + ck.model->Value(h).sum()).backward();
  EXPECT_FALSE(q->weight.grad().defined());
  ASSERT_TRUE(q->lora_B->weight.grad().defined());
  EXPECT_GT(q->lora_B->weight.grad().abs().sum().item<double>(), 0);
  EXPECT_GT(ck.model->value_head->weight.grad().abs().sum().item<double>(), 0);
  // Only the named targets get adapters.
  auto two = LoadBase();
  LoraConfig qv = Lora();
  qv.target_modules = {"q_proj", "v_proj"};
  AttachLora(two.model, qv, 1);
  EXPECT_TRUE(two.model->model->layer_list[1]->self_attn->v_proj->has_adapter());
  EXPECT_FALSE(two.model->model->layer_list[1]->self_attn->k_proj->has_adapter());
  EXPECT_FALSE(two.model->model->layer_list[1]->mlp->up_proj->has_adapter());
  EXPECT_THROW(AttachLora(two.model, qv, 1), ConfigError);  // already attached
}

TEST(Lora, MergedWeightsComputeWhatTheAdaptersDo) {
  auto ck = LoadBase();
  const auto base = Logits(ck.model);
  AttachLora(ck.model, Lora(8, 16), 1);
  PerturbAdapters(ck.model);
  const auto adapted = Logits(ck.model);
  EXPECT_GT(MaxDiff(adapted, base), 1e-3);  // the adapters matter
  auto merged = CloneModel(ck.model);        // no adapters: CopyWeights folds them in
  EXPECT_FALSE(merged->lora().has_value());
  EXPECT_LT(MaxDiff(Logits(merged), adapted), 1e-4);  // float32 rounding of W + s B A
  // The token plane's engine receives merged weights.
  TextSampler sampler(ck.model->config(), SamplerOptions{}, torch::kCPU);
  sampler.SyncWeights(ck.model);
  EXPECT_LT(MaxDiff(Logits(sampler.engine()), adapted), 1e-4);
  // The KL reference: the base's own storage, adapters off.
  auto ref = ShareBaseWeights(ck.model);
  EXPECT_EQ(ref->model->layer_list[0]->self_attn->q_proj->weight.data_ptr(),
            ck.model->model->layer_list[0]->self_attn->q_proj->weight.data_ptr());
  EXPECT_TRUE(torch::equal(Logits(ref), base));
}

TEST(Lora, Bfloat16BaseTrainsFloat32Adapters) {
  auto ck = LoadBase(torch::kBFloat16);
  AttachLora(ck.model, Lora(), 1);
  PerturbAdapters(ck.model);
  const auto& q = ck.model->model->layer_list[0]->self_attn->q_proj;
  EXPECT_EQ(q->weight.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(q->lora_A->weight.scalar_type(), torch::kFloat32);
  EXPECT_EQ(ck.model->value_head->weight.scalar_type(), torch::kFloat32);
  auto pos = torch::arange(4).unsqueeze(0).expand({2, 4}).contiguous();
  auto h = ck.model->forward(Ids(), pos, TransformerLMImpl::CausalMaskFromAttention(torch::ones_like(Ids()))).hidden;
  auto logits = ck.model->Logits(h);
  EXPECT_EQ(logits.scalar_type(), torch::kFloat32);
  torch::log_softmax(logits, -1).select(-1, 7).sum().backward();
  ASSERT_TRUE(q->lora_A->weight.grad().defined());
  EXPECT_EQ(q->lora_A->weight.grad().scalar_type(), torch::kFloat32);
  EXPECT_TRUE(torch::isfinite(q->lora_A->weight.grad()).all().item<bool>());
  EXPECT_GT(q->lora_A->weight.grad().abs().sum().item<double>(), 0);
  EXPECT_FALSE(q->weight.grad().defined());
  // Close to the float32 model with the same adapters (bf16 base rounding only):
  // within 5% in relative norm.
  auto f32 = LoadBase();
  AttachLora(f32.model, Lora(), 1);
  PerturbAdapters(f32.model);
  const auto lf = Logits(f32.model), lb = Logits(ck.model);
  EXPECT_LT((lf - lb).norm().item<double>() / lf.norm().item<double>(), 0.05);
}

// Gradients of a loss over logits and values, by parameter name.
std::map<std::string, torch::Tensor> Gradients(TransformerLM& m, uint64_t seed) {
  for (auto& p : m->parameters()) p.mutable_grad() = torch::Tensor();
  torch::manual_seed(seed);
  auto pos = torch::arange(4).unsqueeze(0).expand({2, 4}).contiguous();
  auto h = m->forward(Ids(), pos, TransformerLMImpl::CausalMaskFromAttention(torch::ones_like(Ids()))).hidden;
  (torch::log_softmax(m->Logits(h), -1).select(-1, 9).sum() + m->Value(h).pow(2).sum()).backward();
  std::map<std::string, torch::Tensor> g;
  for (const auto& p : m->named_parameters())
    if (p.value().grad().defined()) g[p.key()] = p.value().grad().clone();
  return g;
}

// Activation checkpointing recomputes each layer in backward: the same
// gradients for adapters (dropout masks included) and for full fine-tuning.
TEST(Checkpointing, GivesTheGradientsOfAPlainBackward) {
  for (int variant : {0, 1, 2}) {
    const bool lora = variant < 2;
    SCOPED_TRACE(variant == 0 ? "LoRA with dropout" : variant == 1 ? "LoRA" : "every weight");
    auto ck = LoadBase();
    if (lora) {
      LoraConfig c = Lora();
      c.dropout = variant == 0 ? 0.3 : 0.0;
      AttachLora(ck.model, c, 1);
      PerturbAdapters(ck.model);
    }
    ck.model->train();
    const auto plain = Gradients(ck.model, 5);
    ck.model->set_checkpointing(true);
    const auto recomputed = Gradients(ck.model, 5);
    ASSERT_EQ(plain.size(), recomputed.size());
    EXPECT_EQ(plain.size(), lora ? static_cast<size_t>(2 * 7 * 3 + 2) : ck.model->parameters().size());
    for (const auto& [name, g] : plain) {
      ASSERT_TRUE(recomputed.count(name)) << name;
      EXPECT_LE(MaxDiff(g, recomputed.at(name)), 1e-6 * (1 + g.abs().max().item<double>())) << name;
    }
    if (variant == 0) {  // dropout really acts: another seed gives other gradients
      const auto other = Gradients(ck.model, 6);
      EXPECT_GT(MaxDiff(other.at("model.layers.0.self_attn.q_proj.lora_B.weight"),
                        plain.at("model.layers.0.self_attn.q_proj.lora_B.weight")),
                1e-6);
    }
  }
}

// A checkpoint of an adapted model, written the way training writes them.
fs::path SaveAdapted(const TempDir& tmp, TransformerLM& model, const Tokenizer& tok) {
  const fs::path dir = tmp.path() / "ckpt";
  SaveCheckpoint(dir.string(), model, tok, {{"iteration", 3}});
  return dir;
}

TEST(Lora, CheckpointsArePeftAdapterDirectories) {
  TempDir tmp("lora_ckpt");
  auto ck = LoadBase();
  AttachLora(ck.model, Lora(), 1);
  PerturbAdapters(ck.model);
  {
    torch::NoGradGuard ng;
    ck.model->value_head->weight.fill_(0.25);
  }
  const fs::path dir = SaveAdapted(tmp, ck.model, ck.tokenizer);
  EXPECT_TRUE(fs::exists(dir / "adapter_config.json"));
  EXPECT_TRUE(fs::exists(dir / "adapter_model.safetensors"));
  EXPECT_TRUE(fs::exists(dir / kValueHeadFile));
  EXPECT_TRUE(fs::exists(dir / "rlid.json"));
  EXPECT_FALSE(fs::exists(dir / "model.safetensors"));  // the frozen base is not copied
  const json cfg = ReadJson(dir / "adapter_config.json");
  EXPECT_EQ(cfg["peft_type"], "LORA");
  EXPECT_EQ(cfg["task_type"], "CAUSAL_LM");
  EXPECT_EQ(cfg["r"], 4);
  EXPECT_EQ(cfg["lora_alpha"], 8.0);
  EXPECT_EQ(cfg["bias"], "none");
  EXPECT_EQ(cfg["base_model_name_or_path"], fs::absolute(Fixture()).string());
  EXPECT_EQ(cfg["target_modules"].size(), 7u);
  SafetensorsReader adapters((dir / "adapter_model.safetensors").string());
  EXPECT_EQ(adapters.entries().size(), static_cast<size_t>(2 * 7 * 3));
  const auto* a = adapters.Find("base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight");
  const auto* b = adapters.Find("base_model.model.model.layers.2.mlp.gate_proj.lora_B.weight");
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(a->shape, (std::vector<int64_t>{4, 64}));
  EXPECT_EQ(b->shape, (std::vector<int64_t>{96, 4}));
  EXPECT_EQ(a->dtype_name, "F32");
  // Loading rebuilds the same model: base + adapters + value head.
  auto back = LoadCheckpoint(dir.string());
  ASSERT_TRUE(back.model->lora().has_value());
  EXPECT_EQ(back.model->lora()->rank, 4);
  EXPECT_EQ(back.base_dir, fs::absolute(Fixture()).string());
  EXPECT_EQ(back.meta["extra"]["iteration"], 3);
  EXPECT_TRUE(torch::equal(Logits(back.model), Logits(ck.model)));
  EXPECT_EQ(back.model->value_head->weight.mean().item<double>(), 0.25);
  // Resume reads the adapters into a freshly attached model in place.
  auto fresh = LoadBase();
  AttachLora(fresh.model, Lora(), 2);
  RestoreWeights(dir.string(), fresh.model);
  EXPECT_TRUE(torch::equal(Logits(fresh.model), Logits(ck.model)));
  auto full = LoadBase();
  EXPECT_THROW(RestoreWeights(dir.string(), full.model), ConfigError);  // no adapters to fill
}

TEST(Lora, ExportMergeGivesTheAdapterModelsLogitsThroughTheCli) {
  TempDir tmp("lora_export");
  auto ck = LoadBase();
  AttachLora(ck.model, Lora(8, 32), 1);
  PerturbAdapters(ck.model);
  const fs::path dir = SaveAdapted(tmp, ck.model, ck.tokenizer);
  const fs::path merged = tmp.path() / "merged", peft = tmp.path() / "peft";
  auto m = RunRlid({"export", "--checkpoint", dir.string(), "--out", merged.string(), "--merge"});
  ASSERT_EQ(m.code, 0) << m.err;
  EXPECT_NE(m.out.find("adapters merged"), std::string::npos) << m.out;
  // A plain Hugging Face model directory: the base's config.json, HF tensor names only.
  EXPECT_TRUE(fs::exists(merged / "config.json"));
  EXPECT_FALSE(fs::exists(merged / "rlid.json"));
  EXPECT_FALSE(fs::exists(merged / "adapter_config.json"));
  EXPECT_EQ(ReadJson(merged / "config.json")["model_type"], "qwen3");
  SafetensorsReader weights((merged / "model.safetensors").string());
  SafetensorsReader base((Fixture() / "model.safetensors").string());
  std::set<std::string> names, base_names;
  for (const auto& [n, e] : weights.entries()) names.insert(n);
  for (const auto& [n, e] : base.entries()) base_names.insert(n);
  EXPECT_EQ(names, base_names);
  // The issue's check: the merged model's logits equal the adapter model's.
  const fs::path input = tmp.path() / "input.json";
  std::ofstream(input) << R"({"input_ids": [[5, 17, 42, 99, 3], [0, 250, 7, 1, 12]],
                             "attention_mask": [[1, 1, 1, 1, 1], [0, 1, 1, 1, 1]]})";
  auto la = RunRlid({"policy", "logits", "--checkpoint", dir.string(), "--input", input.string(), "--json"});
  auto lm = RunRlid({"policy", "logits", "--checkpoint", merged.string(), "--input", input.string(), "--json"});
  ASSERT_EQ(la.code, 0) << la.err;
  ASSERT_EQ(lm.code, 0) << lm.err;
  const auto ja = json::parse(la.out)["logits"], jm = json::parse(lm.out)["logits"];
  double worst = 0, spread = 0;
  for (size_t b = 0; b < 2; ++b)
    for (size_t t = b; t < 5; ++t)  // valid positions
      for (size_t v = 0; v < 300; ++v) {
        worst = std::max(worst, std::abs(ja[b][t][v].get<double>() - jm[b][t][v].get<double>()));
        spread = std::max(spread, std::abs(ja[b][t][v].get<double>()));
      }
  EXPECT_LE(worst, 1e-4);
  EXPECT_GT(spread, 0.1);
  // Without --merge: a PEFT adapter directory naming the base.
  auto p = RunRlid({"export", "--checkpoint", dir.string(), "--out", peft.string()});
  ASSERT_EQ(p.code, 0) << p.err;
  EXPECT_TRUE(fs::exists(peft / "adapter_model.safetensors"));
  EXPECT_FALSE(fs::exists(peft / kValueHeadFile));
  EXPECT_EQ(ReadJson(peft / "adapter_config.json")["base_model_name_or_path"], fs::absolute(Fixture()).string());
  // An existing directory is never overwritten.
  auto again = RunRlid({"export", "--checkpoint", dir.string(), "--out", merged.string(), "--merge"});
  EXPECT_NE(again.code, 0);
  EXPECT_NE(again.err.find("already exists"), std::string::npos) << again.err;
  EXPECT_TRUE(fs::exists(merged / "model.safetensors"));
  // bfloat16 export of the merged weights.
  auto bf = RunRlid({"export", "--checkpoint", dir.string(), "--out", (tmp.path() / "bf16").string(), "--merge",
                     "--dtype", "bfloat16"});
  ASSERT_EQ(bf.code, 0) << bf.err;
  EXPECT_EQ(ReadJson(tmp.path() / "bf16" / "config.json")["torch_dtype"], "bfloat16");
  SafetensorsReader bw((tmp.path() / "bf16" / "model.safetensors").string());
  EXPECT_EQ(bw.entries().begin()->second.dtype_name, "BF16");
}

TEST(Lora, AdapterConfigsRlidCannotRunAreConfigErrorsNamingTheField) {
  TempDir tmp("lora_bad");
  auto ck = LoadBase();
  AttachLora(ck.model, Lora(), 1);
  PerturbAdapters(ck.model);
  const fs::path good = SaveAdapted(tmp, ck.model, ck.tokenizer);
  const json cfg = ReadJson(good / "adapter_config.json");
  auto expect_error = [&](const std::string& what, const std::function<void(json&)>& edit,
                          const std::string& needle) {
    const fs::path d = tmp.path() / what;
    fs::copy(good, d, fs::copy_options::recursive);
    json j = cfg;
    edit(j);
    std::ofstream(d / "adapter_config.json", std::ios::trunc) << j.dump(2);
    try {
      LoadCheckpoint(d.string());
      ADD_FAILURE() << what << ": loaded";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << what << ": " << e.what();
    }
  };
  expect_error("dora", [](json& j) { j["use_dora"] = true; }, "use_dora");
  expect_error("rslora", [](json& j) { j["use_rslora"] = true; }, "use_rslora");
  expect_error("bias", [](json& j) { j["bias"] = "all"; }, "bias");
  expect_error("ranks", [](json& j) { j["rank_pattern"] = {{"q_proj", 8}}; }, "rank_pattern");
  expect_error("save", [](json& j) { j["modules_to_save"] = {"lm_head"}; }, "modules_to_save");
  expect_error("target", [](json& j) { j["target_modules"] = {"q_proj", "c_attn"}; }, "c_attn");
  expect_error("regex", [](json& j) { j["target_modules"] = ".*proj"; }, "target_modules");
  expect_error("prefix", [](json& j) { j["peft_type"] = "PREFIX_TUNING"; }, "peft_type");
  expect_error("hub", [](json& j) { j["base_model_name_or_path"] = "Qwen/Qwen3-0.6B"; },
               "base_model_name_or_path");
  // Rank in the config and in the file disagree: the tensor is named.
  expect_error("rank", [](json& j) { j["r"] = 8; }, "lora_A.weight");
  // Ranks no adapter has, and non-integers, before anything is allocated.
  expect_error("huge_rank", [](json& j) { j["r"] = int64_t{1'000'000'000'000}; },
               "policy.lora.rank must be at most 16384, found 1000000000000");
  expect_error("float_rank", [](json& j) { j["r"] = 1e12; }, "r = 1000000000000.0 is not an integer");
  // Fewer targets than the file holds: the unused tensor is named.
  expect_error("fewer", [](json& j) { j["target_modules"] = {"q_proj"}; }, "does not use");
  // PEFT fields that change the forward (aLoRA, a bias on lora_B, excluded modules) or that
  // make PEFT's loader rewrite the base weights (PiSSA): found in adapters PEFT 0.21 writes.
  expect_error("alora", [](json& j) { j["alora_invocation_tokens"] = {5, 6}; }, "alora_invocation_tokens");
  expect_error("lora_bias", [](json& j) { j["lora_bias"] = true; }, "lora_bias");
  expect_error("exclude", [](json& j) { j["exclude_modules"] = {"model.layers.0.self_attn.q_proj"}; },
               "exclude_modules");
  expect_error("pissa", [](json& j) { j["init_lora_weights"] = "pissa"; }, "init_lora_weights");
  // A full module name adapts that layer only: a projection in some layers only is refused.
  std::vector<std::string> full_names;  // what PEFT 0.21 saves for target_modules="all-linear"
  for (int layer = 0; layer < ck.model->config().num_layers; ++layer)
    for (const char* m : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                          "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"})
      full_names.push_back(fmt::format("model.layers.{}.{}", layer, m));
  expect_error("one_layer", [&](json& j) {
    j["target_modules"] = full_names;
    j["target_modules"][0] = "k_proj";  // layer 0's q_proj is no longer selected
  }, "selects q_proj in some layers only");
  auto load_with = [&](const std::string& what, const std::function<void(json&)>& edit) {
    const fs::path d = tmp.path() / what;
    fs::copy(good, d, fs::copy_options::recursive);
    json j = cfg;
    edit(j);
    std::ofstream(d / "adapter_config.json", std::ios::trunc) << j.dump(2);
    return LoadCheckpoint(d.string());
  };
  // "all-linear" is PEFT's name for every projection, and so are their full names in every layer;
  // the defaults PEFT writes for the fields above are accepted.
  EXPECT_EQ(load_with("all_linear", [](json& j) { j["target_modules"] = "all-linear"; }).model->lora()->target_modules.size(), 7u);
  auto full = load_with("full_names", [&](json& j) {
    j["target_modules"] = full_names;
    j["alora_invocation_tokens"] = nullptr;
    j["lora_bias"] = false;
    j["exclude_modules"] = nullptr;
    j["trainable_token_indices"] = nullptr;
    j["init_lora_weights"] = "gaussian";
  });
  EXPECT_EQ(full.model->lora()->target_modules,
            ck.model->lora()->target_modules);  // the seven it has
  EXPECT_LT(MaxDiff(Logits(full.model), Logits(ck.model)), 1e-6);
}

// The README's command: configs/maze_lora.toml on a Hugging Face directory
// (the Qwen3 fixture with a tokenizer trained on maze text), then the export.
TEST(Lora, ReadmeCommandTrainsMazeLoraOnAHuggingFaceDirectory) {
  TempDir tmp("lora_readme");
  const fs::path model = tmp.path() / "model", run = tmp.path() / "run";
  fs::create_directories(model);
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(Fixture() / f, model / f);
  testing::EnvTokenizer(*envs::MakeEnv("maze"), 300).SaveDirectory(model.string());
  const std::string config = std::string(RLID_SOURCE_DIR) + "/configs/maze_lora.toml";
  auto t = RunRlid({"train", config, "--set", "policy.init=" + model.string(), "--set", "trainer.iterations=1",
                    "--set", "trainer.episodes_per_iteration=4", "--set", "trainer.num_envs=4", "--set",
                    "trainer.eval_episodes=2", "--threads", "1", "--log-level", "warn", "--out", run.string()});
  ASSERT_EQ(t.code, 0) << t.err;
  const fs::path latest = run / "checkpoints" / "latest";
  EXPECT_TRUE(fs::exists(latest / "adapter_model.safetensors"));
  EXPECT_EQ(ReadJson(latest / "adapter_config.json")["r"], 16);
  EXPECT_EQ(ReadJson(run / "model.json")["lora"]["rank"], 16);
  auto e = RunRlid({"export", "--checkpoint", latest.string(), "--out", (tmp.path() / "merged").string(), "--merge"});
  ASSERT_EQ(e.code, 0) << e.err;
  EXPECT_TRUE(fs::exists(tmp.path() / "merged" / "tokenizer.json"));
  EXPECT_EQ(LoadCheckpoint((tmp.path() / "merged").string()).model->config().ModelType(), "qwen3");
}

TEST(LoraConfig, KeysAreCheckedWhereTheyAreRead) {
  const std::string toml = "[env]\nname = \"bandit\"\n[policy.lora]\nrank = 4\n";
  auto ok = testing::Experiment(toml, {"policy.lora.target_modules=[\"q_proj\", \"v_proj\"]"});
  EXPECT_EQ(ok->lora.rank, 4);
  EXPECT_EQ(ok->lora.target_modules.size(), 2u);
  auto error_of = [&](const std::string& set) {
    try {
      testing::Experiment(toml, {set});
    } catch (const ConfigError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_NE(error_of("policy.lora.target_modules=[\"q_proj\", \"qkv\"]").find("'qkv'"), std::string::npos);
  EXPECT_NE(error_of("policy.lora.target_modules=[]").find("empty"), std::string::npos);
  EXPECT_NE(error_of("policy.lora.dropout=1").find("policy.lora.dropout"), std::string::npos);
  EXPECT_NE(error_of("policy.lora.rank=-1").find("policy.lora.rank"), std::string::npos);
  EXPECT_NE(error_of("policy.lora.rank=1000000000000").find("'policy.lora.rank' must be in [0, 16384]"),
            std::string::npos)
      << error_of("policy.lora.rank=1000000000000");
  EXPECT_NE(error_of("policy.lora.alpha=0").find("policy.lora.alpha"), std::string::npos);
}

}  // namespace
}  // namespace rlid::policy

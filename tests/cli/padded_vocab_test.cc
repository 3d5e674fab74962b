// Checkpoints pad their embedding rows past the tokenizer (Qwen3: 151,936 rows
// for 151,669 ids). A padded id has no text, so no engine may sample one: on a
// model whose padded rows outscore every real token, `rlid policy sample` and
// a GRPO iteration with LoRA (the real Qwen3 layout) still draw real ids only.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "policy/model/checkpoint.h"
#include "policy/model/config.h"
#include "policy/model/model.h"
#include "policy/tokenizer/tokenizer.h"
#include "tests/agents/fixtures.h"
#include "tests/cli/run_cli.h"
#include "tests/test_paths.h"

namespace rlid::cli {
namespace {

namespace fs = std::filesystem;
using testing::RunRlid;
using testing::TempDir;

constexpr int64_t kRows = 151936;  // Qwen3's embedding rows

// A tiny untied Qwen3 with the real tokenizer and padded rows whose head
// weights point along the final norm's output: they win every argmax.
fs::path PaddedQwen3(const fs::path& dir) {
  const fs::path tok_json = fs::path(RLID_SOURCE_DIR) / "build/assets/qwen3/tokenizer.json";
  const auto tok = policy::Tokenizer::FromFile(tok_json.string());
  EXPECT_EQ(tok.VocabSize(), 151669);
  const nlohmann::json j = {
      {"model_type", "qwen3"},       {"vocab_size", kRows},    {"hidden_size", 32},
      {"intermediate_size", 64},     {"num_hidden_layers", 1}, {"num_attention_heads", 2},
      {"num_key_value_heads", 1},    {"head_dim", 16},         {"max_position_embeddings", 4096},
      {"tie_word_embeddings", false}};
  policy::TransformerLM model(policy::ModelConfig::FromJson(j));
  model->InitWeights(7);
  {
    torch::NoGradGuard ng;
    auto head = model->named_parameters()["lm_head.weight"];
    head.slice(0, tok.VocabSize()).fill_(5.0);  // every padded id far above the real ones
  }
  const fs::path out = dir / "padded_qwen3";
  policy::SaveCheckpoint(out.string(), model, tok);
  return out;
}

TEST(PaddedVocabulary, NoEngineSamplesAnIdTheTokenizerLacks) {
  TempDir dir("padded_vocab");
  const fs::path model = PaddedQwen3(dir.path());
  const auto sample = RunRlid(
      {"policy", "sample", "--checkpoint", model.string(), "--env", "bandit", "-n", "8", "--json"});
  ASSERT_EQ(sample.code, 0) << sample.err;
  const auto answers = nlohmann::json::parse(sample.out);
  ASSERT_EQ(answers.size(), 8u);
  for (const auto& a : answers)
    for (const auto& t : a["tokens"]) EXPECT_LT(t.get<int64_t>(), 151669) << a.dump();

  // GRPO with LoRA on that layout: one iteration samples, scores and updates.
  const auto train =
      RunRlid({"train", (fs::path(RLID_SOURCE_DIR) / "configs/bandit_grpo.toml").string(),
               "--out", (dir.path() / "run").string(),
               "--set", "policy.init=" + model.string(),
               "--set", "policy.lora.rank=2",
               "--set", "trainer.iterations=1",
               "--set", "trainer.episodes_per_iteration=4",
               "--set", "trainer.num_envs=4",
               "--set", "trainer.group_size=4",
               "--set", "trainer.eval_episodes=2",
               "--set", "trainer.epochs=1",
               "--set", "trainer.minibatch_size=4",
               "--set", "trainer.eval_sampled=false",
               "--set", "run.threads=1"});
  EXPECT_EQ(train.code, 0) << train.err;
}

}  // namespace
}  // namespace rlid::cli

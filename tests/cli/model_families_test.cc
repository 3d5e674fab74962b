// The families beyond Qwen3 / Llama run end to end from the CLI: a Mistral-,
// a Gemma 3- and a Qwen3.5-shaped Hugging Face directory (the fixtures of
// tests/data/hf, with a tokenizer for the bandit's text) read a menu in one
// pass, sample answers, warm start by SFT, train LoRA adapters in the decision
// plane (also thinking before it decides) and the token plane, pass the
// audit's marginalisation check and export merged weights.
#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "envs/api/env.h"
#include "policy/model/checkpoint.h"
#include "tests/agents/fixtures.h"
#include "tests/cli/run_cli.h"
#include "tests/test_paths.h"

namespace rlid {
namespace {
namespace fs = std::filesystem;
using testing::RunRlid;

// The fixtures hold 256 positions; the bandit's afterstates, spelled with a
// 300-id tokenizer, would overflow them.
constexpr const char* kShortPrompt = "prompt.show_afterstates=false";

// The fixture `name` with a 300-id tokenizer trained on the bandit's text.
fs::path ModelDirectory(const std::string& name, const fs::path& root) {
  const fs::path src = fs::path(RLID_SOURCE_DIR) / "tests" / "data" / "hf" / name,
                 dst = root / name;
  fs::create_directories(dst);
  for (const char* f : {"config.json", "model.safetensors"}) fs::copy_file(src / f, dst / f);
  testing::EnvTokenizer(*envs::MakeEnv("bandit"), 300).SaveDirectory(dst.string());
  return dst;
}

std::vector<std::string> TrainArgs(const std::string& config, const fs::path& model,
                                   const fs::path& out, std::vector<std::string> sets) {
  std::vector<std::string> args = {
      "train",       std::string(RLID_SOURCE_DIR) + "/configs/" + config,
      "--out",       out.string(),
      "--threads",   "1",
      "--log-level", "warn"};
  sets.insert(sets.end(), {kShortPrompt, "policy.init=" + model.string(), "trainer.iterations=1",
                           "trainer.episodes_per_iteration=8", "trainer.num_envs=8",
                           "trainer.eval_episodes=4", "trainer.minibatch_size=8"});
  for (const auto& s : sets) args.insert(args.end(), {"--set", s});
  return args;
}

TEST(ModelFamilies, MistralGemma3AndQwen35RunFromTheCli) {
  const testing::TempDir tmp("model_families");
  for (const char* name : {"mistral_tiny", "gemma3_tiny", "qwen3_5_tiny"}) {
    SCOPED_TRACE(name);
    const fs::path model = ModelDirectory(name, tmp.path());
    const fs::path runs = tmp.path() / (std::string(name) + "_runs");
    auto audit = RunRlid({"audit", "--checkpoint", model.string(), "--env", "bandit", "--states",
                          "3", "--only", "marginalisation"});
    EXPECT_EQ(audit.code, 0) << audit.out << audit.err;
    EXPECT_NE(audit.out.find("all checks passed"), std::string::npos) << audit.out;
    // The menu's probabilities from one readout pass, and sampled answers.
    auto readout =
        RunRlid({"policy", "readout", "--checkpoint", model.string(), "--env", "bandit", "--json"});
    ASSERT_EQ(readout.code, 0) << readout.err;
    double total = 0;
    const auto menu = nlohmann::json::parse(readout.out)["menu"];
    EXPECT_EQ(menu.size(), 4u);
    for (const auto& item : menu) total += item["p"].get<double>();
    EXPECT_NEAR(total, 1.0, 1e-5) << readout.out;
    auto sample = RunRlid({"policy", "sample", "--checkpoint", model.string(), "--env", "bandit",
                           "-n", "2", "--max-new-tokens", "6", "--json"});
    EXPECT_EQ(sample.code, 0) << sample.err;
    auto sft = RunRlid({"sft", std::string(RLID_SOURCE_DIR) + "/configs/bandit_ppo.toml", "--out",
                        (runs / "sft").string(), "--threads", "1", "--set",
                        "policy.init=" + model.string(), "--set", "sft.episodes=8", "--set",
                        "sft.epochs=1", "--set", kShortPrompt});
    ASSERT_EQ(sft.code, 0) << sft.err;
    auto decision = RunRlid(TrainArgs("bandit_lora.toml", model, runs / "ppo", {}));
    ASSERT_EQ(decision.code, 0) << decision.err;
    // Think-then-decide: a sampled scratchpad, then the menu read after it.
    auto think = RunRlid(TrainArgs("bandit_lora.toml", model, runs / "think",
                                   {"prompt.reasoning=true", "prompt.max_think_tokens=4"}));
    ASSERT_EQ(think.code, 0) << think.err;
    auto token = RunRlid(
        TrainArgs("bandit_grpo.toml", model, runs / "grpo",
                  {"policy.lora.rank=4", "policy.lora.alpha=8", "sampler.max_new_tokens=6"}));
    ASSERT_EQ(token.code, 0) << token.err;
    for (const char* arm : {"ppo", "grpo"}) {
      const fs::path latest = runs / arm / "checkpoints" / "latest";
      ASSERT_TRUE(fs::exists(latest / "adapter_model.safetensors")) << arm;
      const auto adapted = policy::LoadCheckpoint(latest.string());
      int linear_attention_adapters = 0;
      for (const auto& p : adapted.model->named_parameters())
        linear_attention_adapters +=
            p.key().find("linear_attn.in_proj_qkv.lora_A") != std::string::npos;
      EXPECT_EQ(linear_attention_adapters > 0, std::string(name) == "qwen3_5_tiny") << arm;
    }
    const fs::path merged = tmp.path() / (std::string(name) + "_merged");
    auto e = RunRlid({"export", "--checkpoint", (runs / "ppo" / "checkpoints" / "latest").string(),
                      "--out", merged.string(), "--merge"});
    ASSERT_EQ(e.code, 0) << e.err;
    const auto loaded = policy::LoadCheckpoint(merged.string());
    EXPECT_FALSE(loaded.model->lora().has_value());
    EXPECT_EQ(loaded.model->config().ModelType(),
              policy::LoadCheckpoint(model.string()).model->config().ModelType());
  }
}

}  // namespace
}  // namespace rlid

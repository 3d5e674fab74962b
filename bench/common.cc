// Helpers shared by the benchmarks (bench/bench.h).
#include <ATen/CPUGeneratorImpl.h>
#include <sys/resource.h>

#include <fstream>

#include "bench/bench.h"
#include "envs/api/env.h"
#include "policy/model/model.h"
#include "policy/model/safetensors.h"
#include "policy/reading/menu_request.h"
#include "policy/tokenizer/tokenizer_corpus.h"

namespace rlid::bench {

double PeakRssBytes() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024.0;  // ru_maxrss is in KiB on Linux
}

policy::Tokenizer SmallEnvTokenizer(const envs::Env& env) {
  policy::EnvCorpusOptions co;
  co.episodes = 100;
  policy::TokenizerTrainOptions to;
  to.vocab_size = 512;
  return policy::Tokenizer::Train(policy::EnvTextCorpus(env, co), to);
}

MenuPrompts RenderMenuPrompts(const envs::Env& env, const policy::PromptRenderer& renderer, int64_t n) {
  MenuPrompts out;
  for (int64_t i = 0; i < n; ++i) {
    auto st = env.NewState(static_cast<uint64_t>(i));
    auto menu = st->CompileMenu();
    policy::ReadoutRequest rq = policy::MenuReadoutRequest(
        renderer,
        renderer.Render(env.Instructions(), st->Observation(), {}, menu, policy::Plane::kDecision)
            .tokens,
        menu, /*all_realisations=*/true);
    out.readout_prompt_tokens += static_cast<int64_t>(rq.prompt.size());
    out.readouts.push_back(std::move(rq));
    out.token_prompts.push_back(
        renderer.Render(env.Instructions(), st->Observation(), {}, menu, policy::Plane::kToken).tokens);
  }
  return out;
}

namespace {

// Qwen3-0.6B's config.json (layers may be reduced for a quick run).
nlohmann::json Qwen3SmallConfig(int64_t layers) {
  return {{"architectures", {"Qwen3ForCausalLM"}},
          {"model_type", "qwen3"},
          {"vocab_size", 151936},
          {"hidden_size", 1024},
          {"intermediate_size", 3072},
          {"num_hidden_layers", layers},
          {"num_attention_heads", 16},
          {"num_key_value_heads", 8},
          {"head_dim", 128},
          {"hidden_act", "silu"},
          {"max_position_embeddings", 40960},
          {"rms_norm_eps", 1e-6},
          {"rope_theta", 1000000.0},
          {"rope_scaling", nullptr},
          {"tie_word_embeddings", true},
          {"attention_bias", false},
          {"use_sliding_window", false},
          {"sliding_window", nullptr},
          {"max_window_layers", layers},
          {"torch_dtype", "bfloat16"},
          {"bos_token_id", 151643},
          {"eos_token_id", 151645}};
}

}  // namespace

// Random BF16 weights under HF names, one tensor at a time from a seeded stream.
void GenerateQwen3ShapedCheckpoint(const std::filesystem::path& dir, int64_t layers) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  const nlohmann::json cfg_json = Qwen3SmallConfig(layers);
  std::ofstream(dir / "config.json") << cfg_json.dump(2);
  const auto cfg = policy::ModelConfig::FromJson(cfg_json);
  policy::TransformerLM shape(cfg, torch::kBFloat16, /*initialise=*/false);
  auto gen = at::make_generator<at::CPUGeneratorImpl>(12345);
  policy::TensorMap tensors;
  torch::NoGradGuard ng;
  for (const auto& p : shape->named_parameters()) {
    if (p.key().rfind("value_head.", 0) == 0) continue;  // not part of HF files
    auto t = torch::empty(p.value().sizes(), torch::kFloat32);
    if (p.key().find("norm") != std::string::npos) t.normal_(1.0, 0.05, gen);
    else t.normal_(0.0, 0.02, gen);
    tensors[p.key()] = t.to(torch::kBFloat16);
  }
  policy::SaveSafetensors((dir / "model.safetensors").string(), tensors, {{"format", "pt"}});
  // A small tokenizer for the menu env the training part runs on (its ids lie
  // far below the vocabulary).
  SmallEnvTokenizer(*envs::MakeEnv("bandit")).SaveDirectory(dir.string());
}

}  // namespace rlid::bench

// rlid's token-plane rollout engine: a separate inference copy of the policy
// (its own weights, optionally bf16) that decodes batches of prompts
// incrementally with a KV cache, temperature, top-k and top-p, and reports the engine's log-probs of the
// sampled tokens. Its log-probs differ from the fp32 training forward
// (precision, kernels): that gap is what TIS/IcePop corrections measure.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "policy/reading/rollout_engine.h"
#include "policy/model/model.h"
#include "policy/model/precision.h"
#include "policy/tokenizer/types.h"

namespace rlid::policy {

// logits [..., V] -> the same with -inf outside the nucleus: the smallest set of
// most probable tokens whose softmax mass reaches top_p (the top token always stays).
torch::Tensor TopPFilter(const torch::Tensor& logits, double top_p);
// logits [..., V] -> the same with -inf outside the k largest (ties at the
// k-th value stay); k <= 0 or k >= V: unchanged.
torch::Tensor TopKFilter(const torch::Tensor& logits, int top_k);

// rlid's own engine ([sampler] engine = "rlid").
class TextSampler : public RolloutEngine {
 public:
  TextSampler(const ModelConfig& config, SamplerOptions options, torch::Device device);
  // Samples with `model` itself as the engine, without a copy of its weights:
  // for a model nothing trains afterwards (rlid policy sample, evaluation).
  // The model is frozen (requires_grad off) and put in eval mode; it must have
  // no LoRA adapters and be in options.dtype (InternalError otherwise).
  TextSampler(TransformerLM model, SamplerOptions options);

  // Copies (and casts) the training model's weights, LoRA adapters merged into
  // them; call after every update.
  void SyncWeights(TransformerLM& train_model);
  EngineSync Sync(TransformerLM& model, int64_t version) override;

  // For each prompt, n samples. A group shares its prompt's KV cache (the prompt
  // is encoded once). Deterministic given `seed` and the inputs.
  std::vector<std::vector<SampleResult>> Sample(const std::vector<std::vector<TokenId>>& prompts, int n,
                                                const StopFn& stop, uint64_t seed);
  // The same with a random stream per row: row r (prompt r / n, sample r % n)
  // draws its k-th token with a uniform that depends only on row_seeds[r] and
  // k, so a row's text does not depend on which other rows share the batch
  // (num_envs, data-parallel ranks). row_seeds.size() must be prompts.size() * n.
  std::vector<std::vector<SampleResult>> Sample(const std::vector<std::vector<TokenId>>& prompts, int n,
                                                const StopRule& stop,
                                                const std::vector<uint64_t>& row_seeds) override;

  // Budget counters since construction / ResetCounters(): the engine's work
  // in Sample() as the engine counts it (prompt encodings + decoding steps,
  // recomputations included; the last sampled token is never fed), prompt
  // tokens encoded, tokens sampled.
  const ForwardCost& cost() const { return cost_; }
  ForwardCost work() const override { return cost_; }
  int64_t prompt_tokens_encoded() const override { return prompt_tokens_; }
  int64_t tokens_generated() const override { return tokens_generated_; }
  const ModelConfig& model_config() const override { return engine_->config(); }
  std::string name() const override { return "rlid"; }
  bool calls_back() const override { return true; }
  void ResetCounters() {
    cost_ = {};
    prompt_tokens_ = tokens_generated_ = 0;
  }

  const SamplerOptions& options() const override { return options_; }
  // Changes decoding settings (temperature, top_p, top_k, max_new_tokens,
  // kv_cache); the engine dtype is fixed at construction.
  void SetOptions(const SamplerOptions& options) override;
  TransformerLM& engine() { return engine_; }
  TransformerLM* local_model() override { return &engine_; }

 private:
  // One token per row from logits [A, V] with uniforms u [A] (float64), on the
  // logits' device: tokens [A] int64 and their log-probs [A] float32.
  struct Drawn {
    torch::Tensor tokens, logprobs;
  };
  Drawn Draw(const torch::Tensor& logits, const torch::Tensor& u) const;

  SamplerOptions options_;
  torch::Device device_;
  TransformerLM engine_{nullptr};
  ForwardCost cost_;
  int64_t prompt_tokens_ = 0, tokens_generated_ = 0;
};

}  // namespace rlid::policy

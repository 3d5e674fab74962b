// Token-plane rollout engine: a separate inference copy of the policy (its own
// weights, optionally bf16) that decodes batches of prompts incrementally with a
// KV cache, temperature and top-p, and reports the engine's log-probs of the
// sampled tokens. Its log-probs differ from the fp32 training forward
// (precision, kernels): that gap is what TIS/IcePop corrections measure.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "policy/model/model.h"
#include "policy/model/precision.h"
#include "policy/tokenizer/types.h"

namespace rlid::policy {

struct SamplerOptions {
  double temperature = 1.0;     // 0 = greedy; > 0 scales logits by 1/temperature
  double top_p = 1.0;           // nucleus mass in (0, 1]; 1 = no truncation
  int max_new_tokens = 16;      // >= 1
  Precision dtype = Precision::kFloat32;  // engine weights
  bool kv_cache = true;         // false: recompute the whole sequence every step
  // On CUDA, a float32 engine's forward runs under bf16 autocast (matmuls and
  // attention in bf16, norms, softmax and log-probs in float32); ignored on the CPU.
  bool autocast = true;
  // Ids >= this are never sampled (0: every id of the model). Set to the
  // tokenizer's size: checkpoints pad their embedding rows (Qwen3: 151,936
  // rows for 151,669 ids), and a padded id has no text. Like top-p, this
  // truncates what is sampled, not the reported log-probs (still over the full
  // vocabulary, as the trainer scores them).
  int64_t vocab_limit = 0;
};

struct SampleResult {
  std::vector<TokenId> tokens;
  // logprobs[i] = log-softmax(logits / temperature)[tokens[i]] under the engine,
  // over the full vocabulary (not renormalised over the top-p nucleus), so it is
  // comparable with the trainer's recomputation at the same temperature. With
  // temperature 0 (greedy) the untempered log-softmax is reported.
  std::vector<float> logprobs;
  std::string finish;  // "stop" (the stop callback fired) | "length" (max_new_tokens)
};

// Called after each new token with the tokens generated so far for one sample;
// true ends that sample (finish = "stop"; the token that triggered it is kept).
using StopFn = std::function<bool(const std::vector<TokenId>& generated)>;

// logits [..., V] -> the same with -inf outside the nucleus: the smallest set of
// most probable tokens whose softmax mass reaches top_p (the top token always stays).
torch::Tensor TopPFilter(const torch::Tensor& logits, double top_p);

class TextSampler {
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

  // For each prompt, n samples. A group shares its prompt's KV cache (the prompt
  // is encoded once). Deterministic given `seed` and the inputs.
  std::vector<std::vector<SampleResult>> Sample(const std::vector<std::vector<TokenId>>& prompts, int n,
                                                const StopFn& stop, uint64_t seed);
  // The same with a random stream per row: row r (prompt r / n, sample r % n)
  // draws its k-th token with a uniform that depends only on row_seeds[r] and
  // k, so a row's text does not depend on which other rows share the batch
  // (num_envs, data-parallel ranks). row_seeds.size() must be prompts.size() * n.
  std::vector<std::vector<SampleResult>> Sample(const std::vector<std::vector<TokenId>>& prompts, int n,
                                                const StopFn& stop,
                                                const std::vector<uint64_t>& row_seeds);

  // Budget counters since construction / ResetCounters(): the engine's work
  // in Sample() as the engine counts it (prompt encodings + decoding steps,
  // recomputations included; the last sampled token is never fed), prompt
  // tokens encoded, tokens sampled.
  const ForwardCost& cost() const { return cost_; }
  int64_t prompt_tokens_encoded() const { return prompt_tokens_; }
  int64_t tokens_generated() const { return tokens_generated_; }
  void ResetCounters() {
    cost_ = {};
    prompt_tokens_ = tokens_generated_ = 0;
  }

  const SamplerOptions& options() const { return options_; }
  // Changes decoding settings (temperature, top_p, max_new_tokens, kv_cache);
  // the engine dtype is fixed at construction.
  void SetOptions(const SamplerOptions& options);
  TransformerLM& engine() { return engine_; }

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

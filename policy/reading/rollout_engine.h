// The token plane's rollout engine: what samples free text (token-plane
// answers, decision-plane scratchpads) from prompts given as token ids, and
// reports each sampled token's log-prob. rlid's own LibTorch engine
// (policy::TextSampler) and an engine behind an OpenAI-compatible server
// (policy::ServerEngine: a vLLM server rlid owns, or one the user runs) both
// implement it, so every trainer gets an engine the same way.
//
// Contract shared by every engine:
// - ids in, ids out: the prompt is sent as the token ids rlid built, and the
//   result is the sampled ids, which the trainer scores as they are (no text
//   round trip);
// - logprobs[i] is the engine's own log-prob of tokens[i] (SampleResult);
// - a row's text depends only on its seed and prompt (where the engine allows);
// - work() counts the engine's forward work with rlid's engine's formulas, so
//   FLOPs budgets match across engines.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "policy/model/config.h"
#include "policy/model/model.h"
#include "policy/model/precision.h"
#include "policy/tokenizer/types.h"

namespace rlid::policy {

struct SamplerOptions {
  double temperature = 1.0;     // 0 = greedy; > 0 scales logits by 1/temperature
  double top_p = 1.0;           // nucleus mass in (0, 1]; 1 = no truncation
  int top_k = 0;                // keep the k most probable tokens; 0 = no truncation
  int max_new_tokens = 16;      // >= 1
  Precision dtype = Precision::kFloat32;  // engine weights
  bool kv_cache = true;         // false: recompute the whole sequence every step (rlid's engine)
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
  // The engine's log-prob of each sampled token at the sampling temperature
  // (temperature 0, greedy: the untempered log-softmax). rlid's engine reports
  // it over the full vocabulary, as the trainer scores it; vLLM over what it
  // sampled from (renormalised over the top-k / top-p set). The two agree when
  // top_p = 1 and top_k = 0; with truncation the importance ratio between the
  // trainer and vLLM is biased by it (docs/engines.md).
  std::vector<float> logprobs;
  std::string finish;  // "stop" (the stop rule fired) | "length" (max_new_tokens)
};

// Called after each new token with the tokens generated so far for one sample;
// true ends that sample (finish = "stop"; the token that triggered it is kept).
using StopFn = std::function<bool(const std::vector<TokenId>& generated)>;

// When a sample ends. `done` decides; `at` lists the only tokens after which
// it can say yes. An engine that decodes token by token asks `done` after
// every token; a server engine cannot call back, so it stops at the tokens of
// `at` (stop_token_ids), asks `done`, and continues the sample when it says
// no: the same samples either way. A rule with `done` and an empty `at` can
// only run on an engine that calls back (ConfigError on a server engine).
struct StopRule {
  StopFn done;
  std::vector<TokenId> at;
  StopRule() = default;
  StopRule(StopFn fn) : done(std::move(fn)) {}  // NOLINT: any token may stop
  StopRule(StopFn fn, std::vector<TokenId> at_tokens) : done(std::move(fn)), at(std::move(at_tokens)) {}
};

// What one weight sync did (metrics engine/sync_*).
struct EngineSync {
  double seconds = 0;       // writing, loading and probing the new weights
  int64_t version = 0;      // the policy version the engine serves now
  // max |log p_engine − log p_trainer| on the probe's fixed tokens after the
  // sync (NaN when the engine has no probe: rlid's own engine copies weights).
  double probe_max_abs_diff = std::numeric_limits<double>::quiet_NaN();
  bool restarted = false;   // the engine was restarted to load the weights
};

class RolloutEngine {
 public:
  virtual ~RolloutEngine() = default;

  // For each prompt, n samples; row r = (prompt r / n, sample r % n) draws from
  // row_seeds[r] (row_seeds.size() == prompts.size() * n).
  virtual std::vector<std::vector<SampleResult>> Sample(const std::vector<std::vector<TokenId>>& prompts,
                                                        int n, const StopRule& stop,
                                                        const std::vector<uint64_t>& row_seeds) = 0;
  virtual const SamplerOptions& options() const = 0;
  // Changes decoding settings (temperature, top_p, top_k, max_new_tokens);
  // the engine dtype is fixed at construction.
  virtual void SetOptions(const SamplerOptions& options) = 0;
  // Makes the engine serve `model`'s current weights (LoRA adapters merged or
  // loaded as an adapter) as policy version `version`; call after every update.
  virtual EngineSync Sync(TransformerLM& model, int64_t version) = 0;
  // The model config the engine's work is counted with.
  virtual const ModelConfig& model_config() const = 0;
  // Work since construction: forwards as rlid's engine counts them (prompt
  // encodings + decoding steps; the last sampled token is never fed), prompt
  // tokens encoded, tokens sampled.
  virtual ForwardCost work() const = 0;
  virtual int64_t prompt_tokens_encoded() const = 0;
  virtual int64_t tokens_generated() const = 0;
  // "rlid", "vllm" or "openai".
  virtual std::string name() const = 0;
  // Whether the engine asks a StopRule after every token (rlid's engine);
  // otherwise it needs the rule's `at` tokens.
  virtual bool calls_back() const { return false; }
  // The model the engine samples with, when it runs in this process (rlid's
  // engine); nullptr for a server, whose internals rlid cannot read (the
  // routing-mismatch metric needs them).
  virtual TransformerLM* local_model() { return nullptr; }
};

}  // namespace rlid::policy

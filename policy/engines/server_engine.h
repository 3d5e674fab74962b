// A rollout engine behind an OpenAI-compatible completions server (vLLM's
// /v1/completions, SGLang's too): prompts go out as token ids, the sampled
// token ids and their log-probs come back (vLLM's return_token_ids), one
// request per sample with its own seed, all in flight at once. What serves
// which weights is a WeightSync's business (weight_sync.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/http.h"
#include "policy/reading/rollout_engine.h"

namespace rlid::policy {

// Where requests go.
struct ServerTarget {
  std::string base_url;  // "http://127.0.0.1:8000/v1"
  std::string model;     // the served name requests ask for (a LoRA adapter's name after a sync)
  std::string api_key;   // sent as "Authorization: Bearer ..." when not empty
  std::string log_hint;  // where the server's log is, for error hints ("" = not rlid's to know)
};

// A POST of `body` (JSON text) to target.base_url + path, with the target's
// API key: every request rlid sends to an engine's server is built here.
HttpRequest ServerPost(const ServerTarget& target, const std::string& path, std::string body, double timeout_s);

struct ServerOptions {
  double request_timeout_s = 600;  // one sampling request, queueing included
  int max_parallel_requests = 64;  // requests in flight at once
  // A sync's probe fails above this max |Δ log p| (EngineError): the engine
  // does not serve the weights it was asked to.
  double probe_tolerance = 0.05;
};

class WeightSync;
class VllmServer;

class ServerEngine : public RolloutEngine {
 public:
  // `name`: "vllm" or "openai" (metrics, messages). `sync` makes the server
  // serve new weights (never null: NoSync keeps the server's own). `owned`:
  // the vLLM server rlid started for this engine (stopped with it), if any.
  ServerEngine(std::string name, const ModelConfig& config, SamplerOptions options, ServerOptions server,
               ServerTarget target, std::unique_ptr<WeightSync> sync,
               std::unique_ptr<VllmServer> owned = nullptr);
  ~ServerEngine() override;

  // One request per row: prompt ++ what the row generated so far, seed from
  // row_seeds[r] and the round, stop_token_ids = stop.at, ignore_eos (only
  // rlid's stop rule ends a sample). A row that stops at a token of stop.at
  // for which stop.done says no is continued in the next round. EngineError
  // when the server fails or answers with something malformed.
  std::vector<std::vector<SampleResult>> Sample(const std::vector<std::vector<TokenId>>& prompts, int n,
                                                const StopRule& stop,
                                                const std::vector<uint64_t>& row_seeds) override;
  EngineSync Sync(TransformerLM& model, int64_t version) override;
  const SamplerOptions& options() const override { return options_; }
  void SetOptions(const SamplerOptions& options) override;
  const ModelConfig& model_config() const override { return config_; }
  ForwardCost work() const override { return work_; }
  int64_t prompt_tokens_encoded() const override { return prompt_tokens_; }
  int64_t tokens_generated() const override { return tokens_generated_; }
  std::string name() const override { return name_; }
  const ServerTarget& target() const { return target_; }
  VllmServer* owned_server() { return owned_.get(); }

  // The engine's log-probs of tokens[1:] given their prefixes (the server's
  // prompt_logprobs at temperature 1): what a probe compares with the trainer.
  std::vector<float> PromptLogProbs(const std::vector<TokenId>& tokens);

 private:
  // EngineError when the server rlid owns has died (its exit and log tail).
  void CheckOwnedServer();

  std::string name_;
  ModelConfig config_;
  SamplerOptions options_;
  ServerOptions server_;
  ServerTarget target_;
  std::unique_ptr<VllmServer> owned_;  // outlives sync_, which may restart it
  std::unique_ptr<WeightSync> sync_;
  ForwardCost work_;
  int64_t prompt_tokens_ = 0, tokens_generated_ = 0;
};

// What rlid's KV-cached engine counts for this work: each distinct prompt
// encoded once (its last position projected onto the vocabulary), then one
// decoding step per generated token but the last. calls: one encoding and
// one step per decoding round, as a batched decode makes them.
ForwardCost ServerWork(const std::vector<std::vector<TokenId>>& prompts,
                       const std::vector<std::vector<SampleResult>>& results);

}  // namespace rlid::policy

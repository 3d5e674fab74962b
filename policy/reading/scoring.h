// Training forward of the token plane: log π(response_t | prompt, response_<t)
// for a batch of sampled responses, with gradients. Responses that share a
// prompt (a GRPO group) reuse one encoding of that prompt: its keys/values are
// computed once and gathered per response, and gradients flow back through them.
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "policy/model/model.h"
#include "policy/tokenizer/types.h"

namespace rlid::policy {

struct ScoreRequest {
  std::vector<TokenId> prompt;    // non-empty
  std::vector<TokenId> response;  // may be empty (its row is all padding)
};

struct ScoreOptions {
  double temperature = 1.0;   // > 0; log-probs of logits / temperature (match the sampler)
  bool shared_prefix = true;  // encode each distinct prompt once
  bool entropy = false;       // also return the per-token entropy
};

struct ScoreBatch {
  torch::Tensor logp;     // [N, Tmax] log π(response_t | ...), 0 at padding, with grad
  torch::Tensor mask;     // [N, Tmax] float, 1 = valid
  torch::Tensor entropy;  // [N, Tmax] entropy of the tempered row (0 at padding); if asked
  // What the forward computed. Tokens fed: shared, Σ_distinct prompts |prompt| +
  // Σ (|response| - 1); plain, Σ (|prompt| + |response| - 1) (the last response
  // token is never fed). Logit rows: one per response token.
  ForwardCost cost;
};

// Throws ConfigError for an empty batch, an empty prompt, token ids outside the
// vocabulary, or temperature <= 0.
ScoreBatch ScoreResponses(TransformerLM& model, const std::vector<ScoreRequest>& reqs,
                          const ScoreOptions& options = {});

}  // namespace rlid::policy

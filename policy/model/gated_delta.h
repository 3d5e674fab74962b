// The gated delta rule (Yang et al. 2024, "Gated Delta Networks"), the
// recurrence of Qwen3.5's linear-attention layers, in three forms that compute
// the same numbers up to float rounding. Per head a state S [dk, dv] reads and
// writes one token at a time:
//   S'  = exp(g_t) S
//   S_t = S' + k_t (beta_t (v_t - S'^T k_t))^T        (the delta-rule write)
//   o_t = S_t^T q_t
// Inputs (value heads H; q and k already l2-normalised and q scaled, as the
// layer does it): q, k [B, H, T, dk], v [B, H, T, dv], g (log decay, <= 0) and
// beta [B, H, T], all in one floating dtype; the starting state [B|1, H, dk, dv]
// or undefined for zero. A step with g = 0 and beta = 0 leaves S unchanged
// (padding). Pure functions: no parameters, autograd flows through all of them.
#pragma once

#include <torch/torch.h>

namespace rlid::policy {

struct DeltaRuleOut {
  torch::Tensor out;    // [B, H, T, dv]
  torch::Tensor state;  // [B, H, dk, dv] after the last token
};

// Token by token, as written above (transformers' torch_recurrent_gated_delta_rule).
DeltaRuleOut RecurrentGatedDeltaRule(const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v, const torch::Tensor& g,
                                     const torch::Tensor& beta, const torch::Tensor& state);

// Chunks of `chunk` tokens (transformers' torch_chunk_gated_delta_rule): inside
// a chunk the writes are solved at once (the UT transform, a unit lower
// triangular system), between chunks the state carries over.
DeltaRuleOut ChunkedGatedDeltaRule(const torch::Tensor& q, const torch::Tensor& k,
                                   const torch::Tensor& v, const torch::Tensor& g,
                                   const torch::Tensor& beta, const torch::Tensor& state,
                                   int64_t chunk = 64);

// A forest of tokens instead of a sequence: ancestors [B|1, T, T] bool holds
// whether token j is token i or one of its ancestors (which come before i);
// every token continues the state after its parent, a root the starting
// state. This is the chunked form with one chunk whose causal triangle is the
// ancestor relation and whose cumulative decay runs along each path, so every
// branch of a trie reads its own prefix only, in one batched solve. Returns
// the outputs [B, H, T, dv] (no state: a forest has no single last token).
torch::Tensor TreeGatedDeltaRule(const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v, const torch::Tensor& g,
                                 const torch::Tensor& beta, const torch::Tensor& state,
                                 const torch::Tensor& ancestors);

}  // namespace rlid::policy

// Token-plane answers to one prompt, drawn the way `rlid policy sample` and
// rlid.Policy.sample draw them (the trainers batch their own rollouts).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "policy/model/checkpoint.h"
#include "policy/reading/sampler.h"

namespace rlid::policy {

// At most this many samples per call, of at most this many tokens each
// (ConfigError beyond, before any allocation).
inline constexpr int kMaxAnswerSamples = 4096;
inline constexpr int kMaxAnswerTokens = 8192;

// `n` samples of `prompt` under `options`, deterministic given `seed`. The
// loaded weights are the engine (no second copy) unless LoRA adapters or
// another engine dtype call for a merged copy on `device`. An answer ends at
// a stop token or at a token whose text holds a newline (kept in the answer).
std::vector<SampleResult> SampleAnswers(LoadedCheckpoint& ck, const std::vector<TokenId>& prompt,
                                        const SamplerOptions& options, int n, uint64_t seed,
                                        torch::Device device);

}  // namespace rlid::policy

#include "policy/reading/answers.h"

#include <optional>
#include <string>

namespace rlid::policy {

std::vector<SampleResult> SampleAnswers(LoadedCheckpoint& ck, const std::vector<TokenId>& prompt,
                                        const SamplerOptions& options, int n, uint64_t seed,
                                        torch::Device device) {
  const auto engine_dtype = options.dtype == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;
  std::optional<TextSampler> engine;
  if (ck.model->lora() || ck.model->dtype() != engine_dtype) {
    engine.emplace(ck.model->config(), options, device);
    engine->SyncWeights(ck.model);
  } else {
    engine.emplace(ck.model, options);
  }
  const Tokenizer& tok = ck.tokenizer;
  auto res = engine->Sample(
      {prompt}, n,
      [&](const std::vector<TokenId>& g) {
        return tok.IsStop(g.back()) || tok.DecodeToken(g.back()).find('\n') != std::string::npos;
      },
      seed);
  return std::move(res[0]);
}

}  // namespace rlid::policy

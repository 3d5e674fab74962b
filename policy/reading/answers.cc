#include "policy/reading/answers.h"

#include <fmt/format.h>

#include <optional>
#include <string>

#include "core/error.h"
#include "policy/model/device.h"

namespace rlid::policy {

std::vector<SampleResult> SampleAnswers(LoadedCheckpoint& ck, const std::vector<TokenId>& prompt,
                                        const SamplerOptions& options, int n, uint64_t seed,
                                        torch::Device device) {
  // Bounded before anything is allocated: n rows of max_new_tokens each.
  if (n < 1 || n > kMaxAnswerSamples)
    throw ConfigError(fmt::format("{} samples asked for; between 1 and {} can be drawn at once", n,
                                  kMaxAnswerSamples),
                      "draw fewer, or call again with other seeds");
  if (options.max_new_tokens > kMaxAnswerTokens)
    throw ConfigError(fmt::format("max_new_tokens = {} is more than {}", options.max_new_tokens,
                                  kMaxAnswerTokens),
                      "an answer is a decision; ask for fewer tokens");
  const auto engine_dtype = TorchDtype(options.dtype);
  SamplerOptions opts = options;
  if (ck.has_tokenizer) opts.vocab_limit = ck.tokenizer.VocabSize();  // never a padded id
  std::optional<TextSampler> engine;
  if (ck.model->lora() || ck.model->dtype() != engine_dtype) {
    engine.emplace(ck.model->config(), opts, device);
    engine->SyncWeights(ck.model);
  } else {
    engine.emplace(ck.model, opts);
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

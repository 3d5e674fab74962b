#include "policy/engines/probe.h"

#include <cmath>

#include "core/rng.h"
#include "policy/reading/scoring.h"

namespace rlid::policy {

std::vector<TokenId> ProbeTokens(int64_t vocab) {
  std::vector<TokenId> out;
  for (int i = 0; i < 24; ++i)
    out.push_back(static_cast<TokenId>(Rng::DeriveSeed(0x70726f6265ULL, "probe", i) % static_cast<uint64_t>(vocab)));
  return out;
}

double ProbeMaxAbsDiff(ServerEngine& engine, TransformerLM& model) {
  const int64_t vocab = engine.options().vocab_limit > 0 ? engine.options().vocab_limit
                                                         : engine.model_config().vocab_size;
  const std::vector<TokenId> tokens = ProbeTokens(vocab);
  const std::vector<float> served = engine.PromptLogProbs(tokens);
  torch::NoGradGuard no_grad;
  ScoreRequest req;
  req.prompt = {tokens.front()};
  req.response.assign(tokens.begin() + 1, tokens.end());
  const ScoreBatch scored = ScoreResponses(model, {req});
  const auto trainer = scored.logp[0].to(torch::kCPU, torch::kFloat64);
  double worst = 0;
  for (size_t i = 0; i < served.size(); ++i)
    worst = std::max(worst, std::abs(static_cast<double>(served[i]) - trainer[static_cast<int64_t>(i)].item<double>()));
  return worst;
}

}  // namespace rlid::policy

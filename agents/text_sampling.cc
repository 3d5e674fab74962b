// Free text after a batch of prompts: the token plane's answers and the
// decision plane's scratchpads, sampled with the agent's rollout engine and booked
// in the budget. Declared in agents/rollout_internal.h.
#include <map>

#include "agents/rollout_internal.h"
#include "core/rng.h"

namespace rlid::agents::internal {

SamplerScope::SamplerScope(policy::RolloutEngine* sampler, bool greedy, int max_new_tokens)
    : sampler_(sampler), saved_(sampler->options()) {
  auto o = saved_;
  if (greedy) o.temperature = 0;
  if (max_new_tokens > 0) o.max_new_tokens = max_new_tokens;
  sampler_->SetOptions(o);
}

SamplerScope::~SamplerScope() { sampler_->SetOptions(saved_); }

void SampleTexts(AgentContext& ctx, const std::vector<StepData*>& steps, const policy::StopRule& stop,
                 const char* stream, Budget& budget) {
  const auto& tok = ctx.renderer->tokenizer();
  std::map<uint64_t, std::vector<size_t>> by_prompt;
  for (size_t b = 0; b < steps.size(); ++b) by_prompt[steps[b]->prompt.hash].push_back(b);
  std::map<size_t, std::vector<uint64_t>> by_count;
  for (const auto& [h, members] : by_prompt) by_count[members.size()].push_back(h);
  const int64_t before_prompt = ctx.sampler->prompt_tokens_encoded();
  const int64_t before_gen = ctx.sampler->tokens_generated();
  const policy::ForwardCost work_before = ctx.sampler->work();
  for (const auto& [count, hashes] : by_count) {
    std::vector<std::vector<policy::TokenId>> prompts;
    std::vector<uint64_t> row_seeds;
    for (uint64_t h : hashes) {
      prompts.push_back(steps[by_prompt[h][0]]->prompt.tokens);
      for (size_t member : by_prompt[h]) row_seeds.push_back(Rng::DeriveSeed(steps[member]->sample_seed, stream));
    }
    auto results = ctx.sampler->Sample(prompts, static_cast<int>(count), stop, row_seeds);
    for (size_t p = 0; p < hashes.size(); ++p) {
      const auto& members = by_prompt[hashes[p]];
      for (size_t j = 0; j < members.size(); ++j) {
        SampledText& text = steps[members[j]]->text;
        const auto& r = results[p][j];
        text.response = r.tokens;
        text.rollout_logp = r.logprobs;
        text.response_text = tok.Decode(r.tokens, /*skip_special=*/true);
      }
    }
  }
  BookWork(budget.rollout, ctx.sampler->model_config(), policy::Difference(ctx.sampler->work(), work_before));
  budget.prompt_tokens += ctx.sampler->prompt_tokens_encoded() - before_prompt;
  budget.generated_tokens += ctx.sampler->tokens_generated() - before_gen;
}

}  // namespace rlid::agents::internal

// The helpers the audit's checks share (audit_internal.h documents them).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>

#include "agents/rollout.h"
#include "core/error.h"
#include "core/rng.h"
#include "policy/reading/menu_request.h"
#include "policy/reading/sampler.h"
#include "trainers/analysis/audit/audit_internal.h"
#include "trainers/runtime/optim.h"

namespace rlid::trainers::audit_internal {

void AppendGreedyThoughts(policy::TransformerLM& model, const policy::PromptRenderer& renderer,
                          std::vector<AuditState>& states) {
  policy::SamplerOptions o;
  o.temperature = 0;
  o.max_new_tokens = renderer.config().max_think_tokens;
  policy::TextSampler sampler(model->config(), o, model->device());
  sampler.SyncWeights(model);
  const auto& tok = renderer.tokenizer();
  const policy::StopFn end_of_line = agents::EndOfThought(tok).done;
  for (auto& a : states) {
    const auto z = sampler.Sample({a.prompt.tokens}, 1, end_of_line, 0)[0][0].tokens;
    auto& t = a.prompt.tokens;
    a.think_begin = static_cast<int64_t>(t.size());
    t.insert(t.end(), z.begin(), z.end());
    a.think_end = static_cast<int64_t>(t.size());
    const auto suffix = renderer.AfterThought(tok.Decode(z, /*skip_special=*/true));
    t.insert(t.end(), suffix.begin(), suffix.end());
  }
}

std::vector<AuditState> CollectStates(const envs::Env& env, const policy::PromptRenderer& renderer,
                                      int64_t n, uint64_t seed) {
  std::vector<AuditState> out;
  Rng rng = Rng::Stream(seed, "audit_states");
  for (uint64_t i = 0; static_cast<int64_t>(out.size()) < n && i < 1000; ++i) {
    auto s = env.NewState(envs::SplitSeed(envs::Split::kTest, i));
    int steps = static_cast<int>(rng.UniformInt(3));
    for (int k = 0; k < steps && !s->IsTerminal(); ++k) {
      auto legal = s->LegalActions();
      s->Apply(legal[rng.UniformInt(legal.size())]);
    }
    if (s->IsTerminal()) continue;
    AuditState a;
    a.menu = s->CompileMenu();
    envs::ShuffleMenu(a.menu, rng);
    a.prompt =
        renderer.Render(env.Instructions(), s->Observation(), {}, a.menu, policy::Plane::kDecision);
    a.state = std::move(s);
    out.push_back(std::move(a));
  }
  if (out.empty()) throw ConfigError("audit: could not reach any non-terminal test state");
  return out;
}

policy::ReadoutRequest DistinctRequest(const policy::PromptRenderer& renderer,
                                       const AuditState& a) {
  policy::ReadoutRequest r =
      policy::MenuReadoutRequest(renderer, a.prompt.tokens, a.menu, /*all_realisations=*/true);
  r.scored_begin = a.think_begin, r.scored_end = a.think_end;
  for (auto& words : r.realisations) {
    std::vector<std::vector<TokenId>> distinct;
    std::set<std::vector<TokenId>> seen;
    for (auto& w : words)
      if (seen.insert(w).second) distinct.push_back(w);
    words = std::move(distinct);
  }
  return r;
}

FlatRealisations ScoredRealisations(const policy::ReadoutRequest& r) {
  std::vector<std::vector<TokenId>> all;
  for (const auto& item : r.realisations)
    for (const auto& w : item) all.push_back(w);
  auto is_prefix = [](const std::vector<TokenId>& a, const std::vector<TokenId>& b) {
    return a.size() < b.size() && std::equal(a.begin(), a.end(), b.begin());
  };
  FlatRealisations out;
  for (size_t k = 0; k < r.realisations.size(); ++k)
    for (auto w : r.realisations[k]) {
      bool prefix = false;
      for (const auto& o : all) prefix |= is_prefix(w, o);
      if (prefix) w.push_back(r.end_token);
      out.tokens.push_back(w);
      out.owner.push_back(static_cast<int64_t>(k));
    }
  return out;
}

torch::Tensor SeparateLogProb(policy::TransformerLM& m, const std::vector<TokenId>& prompt,
                              const std::vector<TokenId>& w) {
  return policy::NaiveRealisationLogProbs(m, prompt, w).sum();
}

double LogSumExp(const std::vector<double>& v) {
  double mx = -std::numeric_limits<double>::infinity();
  for (double x : v) mx = std::max(mx, x);
  if (!std::isfinite(mx)) return mx;
  double s = 0;
  for (double x : v) s += std::exp(x - mx);
  return mx + std::log(s);
}

std::string Num(double v) { return fmt::format("{:.4g}", v); }

std::vector<double> MenuProbs(const policy::ReadoutBatch& rb, size_t K, FiniteGuard& finite,
                              const std::function<std::string(size_t)>& item,
                              bool* all_finite) {
  std::vector<double> p;
  for (size_t k = 0; k < K; ++k) {
    p.push_back(std::exp(rb.log_p[0][static_cast<int64_t>(k)].item<double>()));
    const bool ok = finite(p.back(), [&] { return item(k); });
    if (all_finite) *all_finite &= ok;
  }
  return p;
}

double SquaredNormOfSum(const std::vector<std::pair<double, torch::Tensor>>& terms) {
  std::vector<std::pair<double, torch::Tensor>> flat;
  for (const auto& [c, t] : terms)
    if (t.defined() && c != 0) flat.push_back({c, t.detach().reshape(-1)});
  if (flat.empty()) return 0;
  const int64_t n = flat[0].second.numel();
  double s = 0;
  for (int64_t i = 0; i < n; i += kChunk) {
    const int64_t j = std::min(n, i + kChunk);
    torch::Tensor acc;
    for (const auto& [c, t] : flat) {
      auto x = t.slice(0, i, j).to(torch::kFloat64);
      acc = acc.defined() ? acc.add_(x, c) : (c == 1 ? x.clone() : x * c);
    }
    s += acc.dot(acc).item<double>();
  }
  return s;
}

double SumSquares(const torch::Tensor& t) { return SquaredNormOfSum({{1.0, t}}); }

double SumProducts(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.detach().to(torch::kFloat64) * b.detach().to(torch::kFloat64)).sum().item<double>();
}

std::vector<torch::Tensor> TrainableParams(policy::TransformerLM& m) {
  return TrainableParameters(m).tensors;
}

void Backward(const torch::Tensor& y, double weight, bool retain_graph) {
  y.backward(torch::full_like(y, weight), retain_graph);
}

}  // namespace rlid::trainers::audit_internal

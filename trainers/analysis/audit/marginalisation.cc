// Audit check 1, marginalisation: the single-pass readout's log p(a|s) vs
// log sum_r pi(r|s) from one plain forward per realisation.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "trainers/analysis/audit/audit_internal.h"

namespace rlid::trainers::audit_internal {

AuditCheck Marginalisation(policy::TransformerLM& model, policy::TransformerLM& ref,
                           const policy::PromptRenderer& renderer,
                           const std::vector<AuditState>& states) {
  AuditCheck c{"marginalisation",
               "Marginalisation identity: single-pass log p(a|s) = log sum_r pi(r|s) from "
               "separate passes"};
  torch::NoGradGuard ng;
  FiniteGuard finite;
  double max_other = 0, max_menu = 0, max_think = 0;
  int64_t scored_realisations = 0, thoughts = 0, think_tokens = 0;
  for (size_t si = 0; si < states.size(); ++si) {
    auto req = DistinctRequest(renderer, states[si]);
    auto other = policy::Readout(model, {req}, {policy::Normalisation::kOther, false});
    auto menu = policy::Readout(model, {req}, {policy::Normalisation::kMenu, false});
    if (req.scored_end > req.scored_begin) {  // log π(z|s) read in the pass vs scored alone
      const std::vector<TokenId> s(req.prompt.begin(), req.prompt.begin() + req.scored_begin),
          z(req.prompt.begin() + req.scored_begin, req.prompt.begin() + req.scored_end);
      const double sep = SeparateLogProb(ref, s, z).item<double>();
      const double pass = menu.span_logp[0].item<double>();
      if (finite(sep, [&] { return fmt::format("state {} separate log pi(z|s)", si + 1); }) &
          finite(pass, [&] { return fmt::format("state {} single-pass log pi(z|s)", si + 1); }))
        max_think = std::max(max_think, std::abs(pass - sep));
      ++thoughts;
      think_tokens += req.scored_end - req.scored_begin;
    }
    auto scored = ScoredRealisations(req);
    const size_t K = req.realisations.size();
    std::vector<std::vector<double>> per_item(K);
    std::vector<double> all;
    for (size_t r = 0; r < scored.tokens.size(); ++r) {
      double lp = SeparateLogProb(ref, req.prompt, scored.tokens[r]).item<double>();
      finite(lp,
             [&] { return fmt::format("state {} realisation {} separate log pi", si + 1, r + 1); });
      per_item[scored.owner[r]].push_back(lp);
      all.push_back(lp);
      ++scored_realisations;
    }
    const double log_z = LogSumExp(all);
    for (size_t k = 0; k < K; ++k) {
      const double sep = LogSumExp(per_item[k]);
      const double lo = other.log_p[0][static_cast<int64_t>(k)].item<double>();
      const double lm = menu.log_p[0][static_cast<int64_t>(k)].item<double>();
      auto name = [&](const char* what) {
        return [&, what] { return fmt::format("state {} item {} {}", si + 1, k + 1, what); };
      };
      bool ok = finite(lo, name("single-pass log p (unnormalised)")) &
                finite(lm, name("single-pass log p (menu)")) &
                finite(sep, name("separate log sum_r pi"));
      if (!ok) continue;
      max_other = std::max(max_other, std::abs(lo - sep));
      max_menu = std::max(max_menu, std::abs(lm - (sep - log_z)));
    }
  }
  c.passed = max_other <= kLogPTolerance && max_menu <= kLogPTolerance;
  if (thoughts > 0) {
    // A sum over the scratchpad's tokens: the tolerance scales with its length.
    const double think_tol = kLogPTolerance * static_cast<double>(std::max<int64_t>(1, think_tokens));
    c.passed = c.passed && max_think <= think_tol;
    c.note = fmt::format(
        "Given a scratchpad z (prompt.reasoning): the model's greedy z, {} tokens over {} states; "
        "max |single-pass log pi(z|s) - separate| = {} (tolerance {}).",
        think_tokens, thoughts, Num(max_think), Num(think_tol));
  }
  c.numbers = {{"states", std::to_string(states.size())},
               {"realisations scored separately (one plain forward each)",
                std::to_string(scored_realisations)},
               {"forward passes: single-pass vs separate",
                fmt::format("{} vs {}", 2 * states.size(), scored_realisations)},
               {"max |log p(a|s) - log sum_r pi(r|s)| (unnormalised)", Num(max_other)},
               {"max |log p(a|s) - log(sum_r pi(r|s) / Z)| (menu-normalised)", Num(max_menu)},
               {"tolerance (log space = relative error in p)", Num(kLogPTolerance)}};
  finite.Apply(c);
  return c;
}

}  // namespace rlid::trainers::audit_internal

// Audit check 5, label bias (informational): the position prior under shuffled
// menus, the order flip rate and the candidate mass.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/rng.h"
#include "policy/reading/menu_request.h"
#include "trainers/analysis/audit/audit_internal.h"

namespace rlid::trainers::audit_internal {
namespace {

// The menu readout of `menu` at `state` (decision prompt without memory, the
// labels only); one forward.
policy::ReadoutBatch ReadMenu(policy::TransformerLM& model, const policy::PromptRenderer& renderer,
                              const envs::Env& env, const envs::State& state,
                              const envs::Menu& menu) {
  auto prompt =
      renderer.Render(env.Instructions(), state.Observation(), {}, menu, policy::Plane::kDecision);
  return policy::Readout(model, {policy::MenuReadoutRequest(renderer, prompt.tokens, menu, false)},
                         {policy::Normalisation::kMenu, false});
}

// The content-free prior over the first K labels, "A=0.250 B=0.250 ...": the
// same prompt frame with the observation and the menu contents removed; what
// is left is the model's preference for letters.
std::string ContentFreePriorText(policy::TransformerLM& model,
                                 const policy::PromptRenderer& renderer, const envs::Env& env,
                                 size_t K, FiniteGuard& finite) {
  envs::Menu blank;
  std::vector<TokenId> label_tokens;
  for (size_t k = 0; k < K; ++k) {
    envs::MenuItem it;
    it.label = envs::LabelFor(static_cast<int>(k));
    blank.items.push_back(it);
    label_tokens.push_back(renderer.LabelToken(it.label));
  }
  auto frame = renderer.Render(env.Instructions(), "", {}, blank, policy::Plane::kDecision);
  auto prior = policy::ContentFreePrior(model, frame.tokens, label_tokens);
  std::string prior_text;
  for (int64_t k = 0; k < prior.size(0); ++k) {
    const double pk = std::exp(prior[k].item<double>());
    finite(pk, [k] { return fmt::format("content-free prior of label {}", k + 1); });
    prior_text += fmt::format("{}{}={:.3f}", prior_text.empty() ? "" : " ",
                              envs::LabelFor(static_cast<int>(k)), pk);
  }
  return prior_text;
}

}  // namespace

AuditCheck LabelBias(policy::TransformerLM& model, const policy::PromptRenderer& renderer,
                     const std::vector<AuditState>& states, const envs::Env& env, uint64_t seed) {
  AuditCheck c{"label_bias",
               "Label bias: position prior under shuffled menus, order flip rate, candidate mass"};
  c.informational = true;
  FiniteGuard finite;
  torch::NoGradGuard ng;
  policy::LabelPositionStats stats;
  Rng rng = Rng::Stream(seed, "audit_labels");
  double mass = 0;
  int64_t menus = 0;
  auto item = [&](const char* which) {
    return [&, which](size_t k) {
      return fmt::format("menu {} ({}) item {} p(a|s)", menus, which, k + 1);
    };
  };
  for (const auto& a : states) {
    for (int rep = 0; rep < 4; ++rep) {
      envs::Menu m = a.menu;
      envs::ShuffleMenu(m, rng);
      auto rb = ReadMenu(model, renderer, env, *a.state, m);
      ++menus;
      auto fwd = MenuProbs(rb, m.size(), finite, item("forward"));
      double cm = rb.candidate_mass[0].item<double>();
      finite(cm, [&] { return fmt::format("menu {} candidate mass", menus); });
      mass += cm;
      // The same menu in reversed order.
      std::vector<int> rev(m.size());
      for (size_t k = 0; k < m.size(); ++k) rev[k] = static_cast<int>(m.size() - 1 - k);
      envs::Menu mr = m;
      envs::PermuteMenu(mr, rev);
      auto back = MenuProbs(ReadMenu(model, renderer, env, *a.state, mr), mr.size(), finite,
                            item("reversed"));
      stats.AddReversedPair(fwd, back);
    }
  }
  std::string lift;
  for (double l : stats.LiftByPosition())
    lift += fmt::format("{}{:.2f}", lift.empty() ? "" : " ", l);
  const std::string prior =
      ContentFreePriorText(model, renderer, env, states[0].menu.size(), finite);
  c.numbers = {
      {"menus (shuffled, each also reversed)", std::to_string(stats.pairs())},
      {"lift by position A, B, C, ... (1 = no position preference)", lift},
      {"content-free prior over the labels", prior},
      {"order flip rate (argmax changes when the menu is reversed)", Num(stats.FlipRate())},
      {"mean candidate mass (share of the row on menu labels)",
       Num(mass / std::max<int64_t>(menus, 1))}};
  c.note =
      "Informational: a letter/position prior is not an action preference; shuffle labels per step "
      "(prompt.label_order) to decorrelate.";
  finite.Apply(c);
  return c;
}

}  // namespace rlid::trainers::audit_internal

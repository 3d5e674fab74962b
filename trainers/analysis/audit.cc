#include "trainers/analysis/audit.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <set>

#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "policy/checkpoint.h"
#include "policy/readout.h"
#include "trainers/losses/advantages.h"
#include "trainers/losses/decision_losses.h"
#include "trainers/losses/losses.h"

namespace rlid::trainers {
namespace {

using policy::TokenId;

struct AuditState {
  envs::Menu menu;
  policy::RenderedPrompt prompt;
  std::unique_ptr<envs::State> state;
};

// Test-split states reached by seeded random play, menus shuffled per state.
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

// The request with duplicate wordings of an item removed (so realisation
// indices address distinct events).
policy::ReadoutRequest DistinctRequest(const policy::PromptRenderer& renderer,
                                       const AuditState& a) {
  policy::ReadoutRequest r;
  r.prompt = a.prompt.tokens;
  r.end_token = renderer.tokenizer().eos_id();
  for (auto& words : renderer.Realisations(a.menu, /*all=*/true)) {
    std::vector<std::vector<TokenId>> distinct;
    std::set<std::vector<TokenId>> seen;
    for (auto& w : words)
      if (seen.insert(w).second) distinct.push_back(w);
    r.realisations.push_back(distinct);
  }
  return r;
}

// The token sequences the readout scores: a wording that is a token-prefix of
// another gets the end token (same rule as policy::Readout).
std::vector<std::vector<std::vector<TokenId>>> ScoredWordings(const policy::ReadoutRequest& r) {
  std::vector<std::vector<TokenId>> all;
  for (const auto& item : r.realisations)
    for (const auto& w : item) all.push_back(w);
  auto is_prefix = [](const std::vector<TokenId>& a, const std::vector<TokenId>& b) {
    return a.size() < b.size() && std::equal(a.begin(), a.end(), b.begin());
  };
  std::vector<std::vector<std::vector<TokenId>>> out;
  for (const auto& item : r.realisations) {
    std::vector<std::vector<TokenId>> words;
    for (auto w : item) {
      bool prefix = false;
      for (const auto& o : all) prefix |= is_prefix(w, o);
      if (prefix) w.push_back(r.end_token);
      words.push_back(w);
    }
    out.push_back(words);
  }
  return out;
}

std::vector<torch::Tensor> Params(policy::TransformerLM& m) {
  std::vector<torch::Tensor> p;
  for (auto& t : m->parameters())
    if (t.requires_grad()) p.push_back(t);
  return p;
}

torch::Tensor FlatGrad(const torch::Tensor& y, const std::vector<torch::Tensor>& params) {
  auto g =
      torch::autograd::grad({y}, params, {}, /*retain_graph=*/true, false, /*allow_unused=*/true);
  std::vector<torch::Tensor> flat;
  for (size_t i = 0; i < g.size(); ++i)
    flat.push_back(g[i].defined() ? g[i].reshape(-1).to(torch::kFloat64)
                                  : torch::zeros({params[i].numel()}, torch::kFloat64));
  return torch::cat(flat);
}

std::string G(double v) { return fmt::format("{:.4g}", v); }

// ---- 1 ----------------------------------------------------------------------------
AuditCheck Marginalisation(policy::TransformerLM& model, const policy::PromptRenderer& renderer,
                           const std::vector<AuditState>& states) {
  AuditCheck c{"marginalisation",
               "Marginalisation identity: single-pass p(a|s) = sum_r pi(r|s) from separate passes"};
  torch::NoGradGuard ng;
  double max_other = 0, max_menu = 0;
  int64_t naive_passes = 0, wordings = 0;
  for (const auto& a : states) {
    auto req = DistinctRequest(renderer, a);
    auto other = policy::Readout(model, {req}, {"other", false});
    auto menu = policy::Readout(model, {req}, {"menu", false});
    auto scored = ScoredWordings(req);
    std::vector<double> sums;
    double total = 0;
    for (const auto& item : scored) {
      double s = 0;
      for (const auto& w : item) {
        s += std::exp(policy::NaiveRealisationLogProbs(model, req.prompt, w).sum().item<double>());
        ++naive_passes;
        ++wordings;
      }
      sums.push_back(s);
      total += s;
    }
    for (size_t k = 0; k < sums.size(); ++k) {
      max_other =
          std::max(max_other, std::abs(std::exp(other.log_p[0][k].item<double>()) - sums[k]));
      max_menu =
          std::max(max_menu, std::abs(std::exp(menu.log_p[0][k].item<double>()) - sums[k] / total));
    }
  }
  c.passed = max_other < 1e-4 && max_menu < 1e-4;
  c.numbers = {{"states", std::to_string(states.size())},
               {"realisations scored separately", std::to_string(wordings)},
               {"forward passes: single-pass vs separate",
                fmt::format("{} vs {}", states.size(), naive_passes)},
               {"max |p(a|s) - sum_r pi(r|s)| (unnormalised)", G(max_other)},
               {"max |p(a|s) - sum_r pi(r|s) / Z| (menu-normalised)", G(max_menu)},
               {"tolerance", "1e-4"}};
  return c;
}

// ---- 2 ----------------------------------------------------------------------------
AuditCheck RaoBlackwell(policy::TransformerLM& model, const policy::PromptRenderer& renderer,
                        const std::vector<AuditState>& states, int64_t mc, uint64_t seed) {
  AuditCheck c{"rao_blackwell",
               "Rao-Blackwell: sampled-realisation vs marginal (label) gradient estimator"};
  auto params = Params(model);
  Rng rng = Rng::Stream(seed, "audit_rao_blackwell");
  double worst_rel = 0, var_sampled = 0, var_marginal = 0, worst_z = 0;
  const size_t n_states = std::min<size_t>(states.size(), 3);
  bool lower = true;
  for (size_t si = 0; si < n_states; ++si) {
    auto req = DistinctRequest(renderer, states[si]);
    auto rb = policy::Readout(model, {req}, {"menu", false});
    const int64_t K = static_cast<int64_t>(req.realisations.size());
    // Fixed per-action "advantages" for this state.
    std::vector<double> A(K);
    for (auto& v : A) v = 2.0 * rng.Uniform() - 1.0;
    // log q(r) over the distinct wordings, q = pi / Z.
    std::vector<torch::Tensor> logq;
    std::vector<int64_t> owner;
    std::vector<torch::Tensor> all;
    for (int64_t k = 0; k < K; ++k)
      for (size_t w = 0; w < req.realisations[k].size(); ++w) {
        all.push_back(rb.realisation_logp[0][k][static_cast<int64_t>(w)]);
        owner.push_back(k);
      }
    auto stacked = torch::stack(all);
    auto logz = torch::logsumexp(stacked, 0);
    std::vector<double> q, p(K);
    std::vector<torch::Tensor> Gr, Ha;
    for (size_t r = 0; r < all.size(); ++r) {
      auto lq = stacked[static_cast<int64_t>(r)] - logz;
      q.push_back(std::exp(lq.item<double>()));
      Gr.push_back(FlatGrad(lq, params));
    }
    for (int64_t k = 0; k < K; ++k) {
      p[k] = std::exp(rb.log_p[0][k].item<double>());
      Ha.push_back(FlatGrad(rb.log_p[0][k], params));
    }
    auto E1 = torch::zeros_like(Gr[0]), E2 = torch::zeros_like(Gr[0]);
    double m1 = 0, m2 = 0;
    for (size_t r = 0; r < Gr.size(); ++r) {
      E1 += q[r] * A[owner[r]] * Gr[r];
      m1 += q[r] * A[owner[r]] * A[owner[r]] * Gr[r].pow(2).sum().item<double>();
    }
    for (int64_t k = 0; k < K; ++k) {
      E2 += p[k] * A[k] * Ha[k];
      m2 += p[k] * A[k] * A[k] * Ha[k].pow(2).sum().item<double>();
    }
    double n1 = E1.norm().item<double>();
    double rel = (E1 - E2).norm().item<double>() / std::max(n1, 1e-12);
    double v1 = m1 - n1 * n1, v2 = m2 - std::pow(E2.norm().item<double>(), 2);
    worst_rel = std::max(worst_rel, rel);
    var_sampled += v1, var_marginal += v2;
    lower = lower && v2 <= v1 * (1 + 1e-9) + 1e-15;
    // Monte Carlo: independent draws of r ~ q and a ~ p.
    auto S1 = torch::zeros_like(E1), S2 = torch::zeros_like(E1);
    for (int64_t i = 0; i < mc; ++i) {
      size_t r = rng.Categorical(q);
      S1 += A[owner[r]] * Gr[r];
      size_t a = rng.Categorical(p);
      S2 += A[a] * Ha[a];
    }
    double d = ((S1 - S2) / static_cast<double>(mc)).norm().item<double>();
    double se = std::sqrt(std::max(v1 + v2, 0.0) / static_cast<double>(mc));
    worst_z = std::max(worst_z, se > 0 ? d / se : 0.0);
  }
  c.passed = worst_rel < 1e-3 && lower && worst_z < 4.0;
  c.numbers = {
      {"states", std::to_string(n_states)},
      {"exact means: max ||E_sampled - E_marginal|| / ||E||", G(worst_rel)},
      {"Monte-Carlo: max ||mean diff|| / standard error",
       fmt::format("{:.2f} ({} draws per state)", worst_z, mc)},
      {"variance, sampled-realisation estimator", G(var_sampled)},
      {"variance, marginal estimator", G(var_marginal)},
      {"variance ratio marginal / sampled", G(var_marginal / std::max(var_sampled, 1e-300))}};
  c.note =
      "Same expectation E_y[A(g(y)) grad log pi(y|s)] = E_a[A(a) grad log p(a|s)]; realisation "
      "noise is removed.";
  return c;
}

// ---- 3 ----------------------------------------------------------------------------
AuditCheck PpoGradient(policy::TransformerLM& model, const policy::PromptRenderer& renderer,
                       const std::vector<AuditState>& states, uint64_t seed) {
  AuditCheck c{"ppo_gradient",
               "PPO gradient check: autograd vs central finite differences (float64)"};
  auto m64 = policy::CloneModel(model);
  m64->to(torch::kFloat64);
  for (auto& p : m64->parameters()) p.set_requires_grad(true);
  Rng rng = Rng::Stream(seed, "audit_ppo");
  std::vector<policy::ReadoutRequest> reqs;
  for (size_t i = 0; i < std::min<size_t>(states.size(), 4); ++i)
    reqs.push_back(DistinctRequest(renderer, states[i]));
  const int64_t B = static_cast<int64_t>(reqs.size());
  std::vector<int64_t> chosen;
  std::vector<double> adv, noise, vnoise, ret;
  for (const auto& r : reqs) {
    chosen.push_back(static_cast<int64_t>(rng.UniformInt(r.realisations.size())));
    adv.push_back(2 * rng.Uniform() - 1);
    noise.push_back(0.3 * (2 * rng.Uniform() - 1));
    vnoise.push_back(0.2 * (2 * rng.Uniform() - 1));
    ret.push_back(2 * rng.Uniform() - 1);
  }
  LossConfig lc;
  lc.clip_low = lc.clip_high = 0.2;
  torch::Tensor old_logp, old_v;
  {
    torch::NoGradGuard ng;
    auto rb = policy::Readout(m64, reqs, {"menu", false});
    old_logp = rb.log_p.gather(1, torch::tensor(chosen).unsqueeze(1)).squeeze(1) +
               torch::tensor(noise, torch::kFloat64);
    old_v = rb.value + torch::tensor(vnoise, torch::kFloat64);
  }
  auto loss_fn = [&]() {
    auto rb = policy::Readout(m64, reqs, {"menu", false});
    auto logp = rb.log_p.gather(1, torch::tensor(chosen).unsqueeze(1)).squeeze(1);
    auto pg = DecisionPpoLoss(lc, logp, old_logp, torch::tensor(adv, torch::kFloat64)).loss;
    auto v = ValueLoss(rb.value, old_v, torch::tensor(ret, torch::kFloat64), 0.2);
    auto ent = MenuEntropy(rb.log_p, rb.item_mask).mean();
    return pg + 0.5 * v - 0.01 * ent;
  };
  auto params = Params(m64);
  auto grad = FlatGrad(loss_fn(), params);
  double worst = 0;
  const double eps = 1e-6;
  for (int d = 0; d < 3; ++d) {
    std::vector<torch::Tensor> dir;
    double sq = 0;
    for (auto& p : params) {
      auto g = torch::randn(p.sizes(), torch::TensorOptions().dtype(torch::kFloat64));
      dir.push_back(g);
      sq += g.pow(2).sum().item<double>();
    }
    for (auto& g : dir) g /= std::sqrt(sq);
    std::vector<torch::Tensor> flat;
    for (auto& g : dir) flat.push_back(g.reshape(-1));
    double analytic = (grad * torch::cat(flat)).sum().item<double>();
    auto shift = [&](double s) {
      torch::NoGradGuard ng;
      for (size_t i = 0; i < params.size(); ++i) params[i].add_(dir[i], s);
    };
    double lp, lm;
    {
      shift(eps);
      torch::NoGradGuard ng;
      lp = loss_fn().item<double>();
    }
    {
      shift(-2 * eps);
      torch::NoGradGuard ng;
      lm = loss_fn().item<double>();
    }
    shift(eps);
    double fd = (lp - lm) / (2 * eps);
    double rel = std::abs(analytic - fd) / std::max({std::abs(analytic), std::abs(fd), 1e-10});
    worst = std::max(worst, rel);
    c.numbers.push_back({fmt::format("direction {}: autograd vs finite difference", d + 1),
                         fmt::format("{:.10g} vs {:.10g}", analytic, fd)});
  }
  c.numbers.push_back({"max relative error", G(worst)});
  c.numbers.push_back({"tolerance", "1e-5"});
  c.passed = worst < 1e-5;
  c.note =
      "Loss = clipped surrogate on p(a|s) ratios + 0.5 * clipped value loss - 0.01 * menu entropy, "
      "B = " +
      std::to_string(B) + ".";
  return c;
}

// ---- 4 ----------------------------------------------------------------------------
AuditCheck Teaching(policy::TransformerLM& model, const policy::PromptRenderer& renderer,
                    const std::vector<AuditState>& states) {
  AuditCheck c{"teaching", "GRPO-family teaching cases"};
  auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  bool ok = true;
  // (a) an all-wrong group gives zero advantage under GRPO and Dr. GRPO.
  for (bool std_norm : {true, false}) {
    AdvantageConfig ac;
    ac.estimator = "grpo";
    ac.std_norm = std_norm;
    AdvantageInputs in;
    in.scores = torch::zeros({4}, f64);
    in.response_mask = torch::ones({4, 1}, f64);
    in.groups = {0, 0, 0, 0};
    double m = ComputeAdvantages(ac, in).advantages.abs().max().item<double>();
    ok = ok && m == 0.0;
    c.numbers.push_back(
        {fmt::format("all-wrong group, {}: max |A|", std_norm ? "GRPO" : "Dr. GRPO"), G(m)});
  }
  // (b) GSPO's sequence clip vs per-token clipping with one outlier token.
  auto old = torch::full({1, 4}, -1.0, f64);
  auto lp_data = torch::tensor({-1.0, -1.0, -1.0, 1.0}, f64).unsqueeze(0);
  int nonzero[2];
  double losses[2];
  for (int which = 0; which < 2; ++which) {
    LossConfig lc;
    lc.policy_loss = which == 0 ? "ppo_clip" : "gspo";
    lc.clip_low = which == 0 ? 0.2 : 3e-4;
    lc.clip_high = which == 0 ? 0.2 : 4e-4;
    lc.aggregation = "seq_mean_token_mean";
    PolicyLossInputs in;
    in.log_prob = lp_data.clone().requires_grad_(true);
    in.old_log_prob = old;
    in.advantages = torch::ones({1}, f64);
    in.response_mask = torch::ones({1, 4}, f64);
    auto res = PolicyLoss(lc, KlConfig{}, in);
    auto g = torch::autograd::grad({res.loss}, {in.log_prob})[0];
    nonzero[which] = static_cast<int>((g.abs() > 0).sum().item<int64_t>());
    losses[which] = res.loss.item<double>();
  }
  ok = ok && nonzero[0] == 3 && nonzero[1] == 0;
  c.numbers.push_back(
      {"outlier token (log-ratio 2 on 1 of 4 tokens): tokens with gradient, per-token PPO clip",
       fmt::format("{} of 4 (loss {:.4f})", nonzero[0], losses[0])});
  c.numbers.push_back({"same sequence, GSPO sequence clip",
                       fmt::format("{} of 4 (loss {:.4f}; geometric-mean ratio {:.3f} is clipped)",
                                   nonzero[1], losses[1], std::exp(0.5))});
  // (c) TIS keeps a very small engine ratio, IcePop zeroes it.
  auto o = torch::full({1, 1}, -1.0, f64), r = torch::full({1, 1}, -1.0 + std::log(1000.0), f64);
  auto mask = torch::ones({1, 1}, torch::kBool);
  EngineConfig tis;
  tis.kind = "tis";
  EngineConfig ice;
  ice.kind = "icepop";
  double wt = CorrectEngine(tis, o, r, mask).weight.item<double>();
  double wi = CorrectEngine(ice, o, r, mask).weight.item<double>();
  ok = ok && std::abs(wt - 1e-3) < 1e-9 && wi == 0.0;
  c.numbers.push_back({"engine ratio k = 1e-3: TIS weight (cap 2, floor 0)", G(wt)});
  c.numbers.push_back({"engine ratio k = 1e-3: IcePop weight ([0.5, 5])", G(wi)});
  // (d) label-marginal KL/entropy vs the full-vocabulary row on the same state.
  {
    torch::NoGradGuard ng;
    auto rb = policy::Readout(model, {DistinctRequest(renderer, states[0])}, {"menu", false});
    double hm = rb.menu_entropy[0].item<double>(), hr = rb.row_entropy[0].item<double>();
    double K = static_cast<double>(states[0].menu.size()),
           V = static_cast<double>(model->config().vocab_size);
    c.numbers.push_back({"state 1: menu entropy H(p(.|s)) / KL(p || uniform menu)",
                         fmt::format("{:.4f} / {:.4f} nats", hm, std::log(K) - hm)});
    c.numbers.push_back({"state 1: full-row entropy / KL(row || uniform vocab)",
                         fmt::format("{:.4f} / {:.4f} nats", hr, std::log(V) - hr)});
    c.numbers.push_back({"state 1: candidate mass", G(rb.candidate_mass[0].item<double>())});
  }
  c.passed = ok;
  c.note =
      "The menu KL that decision PPO uses is exact over K actions; the row statistics spread over "
      "the whole vocabulary.";
  return c;
}

// ---- 5 ----------------------------------------------------------------------------
AuditCheck LabelBias(policy::TransformerLM& model, const policy::PromptRenderer& renderer,
                     const std::vector<AuditState>& states, const envs::Env& env, uint64_t seed) {
  AuditCheck c{"label_bias",
               "Label bias: position prior under shuffled menus, order flip rate, candidate mass"};
  c.informational = true;
  torch::NoGradGuard ng;
  policy::LabelPositionStats stats;
  Rng rng = Rng::Stream(seed, "audit_labels");
  double mass = 0;
  int64_t menus = 0;
  for (const auto& a : states) {
    for (int rep = 0; rep < 4; ++rep) {
      envs::Menu m = a.menu;
      envs::ShuffleMenu(m, rng);
      auto prompt = renderer.Render(env.Instructions(), a.state->Observation(), {}, m,
                                    policy::Plane::kDecision);
      policy::ReadoutRequest req;
      req.prompt = prompt.tokens;
      req.realisations = renderer.Realisations(m, false);
      req.end_token = renderer.tokenizer().eos_id();
      auto rb = policy::Readout(model, {req}, {"menu", false});
      std::vector<double> fwd;
      for (size_t k = 0; k < m.size(); ++k)
        fwd.push_back(std::exp(rb.log_p[0][static_cast<int64_t>(k)].item<double>()));
      mass += rb.candidate_mass[0].item<double>();
      ++menus;
      // The same menu in reversed order.
      std::vector<int> rev(m.size());
      for (size_t k = 0; k < m.size(); ++k) rev[k] = static_cast<int>(m.size() - 1 - k);
      envs::Menu mr = m;
      envs::PermuteMenu(mr, rev);
      auto pr = renderer.Render(env.Instructions(), a.state->Observation(), {}, mr,
                                policy::Plane::kDecision);
      req.prompt = pr.tokens;
      req.realisations = renderer.Realisations(mr, false);
      auto rr = policy::Readout(model, {req}, {"menu", false});
      std::vector<double> back;
      for (size_t k = 0; k < mr.size(); ++k)
        back.push_back(std::exp(rr.log_p[0][static_cast<int64_t>(k)].item<double>()));
      stats.AddReversedPair(fwd, back);
    }
  }
  std::string lift;
  for (double l : stats.LiftByPosition())
    lift += fmt::format("{}{:.2f}", lift.empty() ? "" : " ", l);
  // Content-free prior: the same prompt frame with the observation and the
  // menu contents removed; what is left is the model's preference for letters.
  envs::Menu blank;
  std::vector<TokenId> label_tokens;
  for (size_t k = 0; k < states[0].menu.size(); ++k) {
    envs::MenuItem it;
    it.label = envs::LabelFor(static_cast<int>(k));
    blank.items.push_back(it);
    label_tokens.push_back(renderer.LabelToken(it.label));
  }
  auto frame = renderer.Render(env.Instructions(), "", {}, blank, policy::Plane::kDecision);
  auto prior = policy::ContentFreePrior(model, frame.tokens, label_tokens);
  std::string prior_text;
  for (int64_t k = 0; k < prior.size(0); ++k)
    prior_text +=
        fmt::format("{}{}={:.3f}", prior_text.empty() ? "" : " ",
                    envs::LabelFor(static_cast<int>(k)), std::exp(prior[k].item<double>()));
  c.numbers = {{"menus (shuffled, each also reversed)", std::to_string(stats.pairs())},
               {"lift by position A, B, C, ... (1 = no position preference)", lift},
               {"content-free prior over the labels", prior_text},
               {"order flip rate (argmax changes when the menu is reversed)", G(stats.FlipRate())},
               {"mean candidate mass (share of the row on menu labels)",
                G(mass / std::max<int64_t>(menus, 1))}};
  c.note =
      "Informational: a letter/position prior is not an action preference; shuffle labels per step "
      "(prompt.label_order) to decorrelate.";
  return c;
}

}  // namespace

std::vector<AuditCheck> RunAudit(policy::TransformerLM model,
                                 const policy::PromptRenderer& renderer, const envs::Env& env,
                                 const AuditOptions& options) {
  model->eval();
  auto states = CollectStates(env, renderer, options.states, options.seed);
  auto want = [&](const char* id) {
    return options.only.empty() ||
           std::find(options.only.begin(), options.only.end(), id) != options.only.end();
  };
  for (const auto& id : options.only)
    if (id != "marginalisation" && id != "rao_blackwell" && id != "ppo_gradient" &&
        id != "teaching" && id != "label_bias")
      throw ConfigError(
          fmt::format("unknown audit check '{}'", id),
          "checks: marginalisation, rao_blackwell, ppo_gradient, teaching, label_bias");
  std::vector<AuditCheck> out;
  if (want("marginalisation")) out.push_back(Marginalisation(model, renderer, states));
  if (want("rao_blackwell"))
    out.push_back(RaoBlackwell(model, renderer, states, options.mc_samples, options.seed));
  if (want("ppo_gradient")) out.push_back(PpoGradient(model, renderer, states, options.seed));
  if (want("teaching")) out.push_back(Teaching(model, renderer, states));
  if (want("label_bias")) out.push_back(LabelBias(model, renderer, states, env, options.seed));
  return out;
}

std::string FormatAudit(const std::vector<AuditCheck>& checks) {
  std::string out;
  int i = 0;
  for (const auto& c : checks) {
    out += fmt::format("{}. {}  [{}]\n", ++i, c.title,
                       c.informational ? "INFO" : (c.passed ? "PASS" : "FAIL"));
    size_t w = 0;
    for (const auto& [k, v] : c.numbers) w = std::max(w, k.size());
    for (const auto& [k, v] : c.numbers) out += fmt::format("   {:<{}}  {}\n", k, w, v);
    if (!c.note.empty()) out += "   " + c.note + "\n";
    out += "\n";
  }
  return out;
}

}  // namespace rlid::trainers

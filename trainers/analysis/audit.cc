#include "trainers/analysis/audit.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <optional>
#include <set>
#include <tuple>
#include <utility>

#include "agents/rollout.h"
#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/rng.h"
#include "policy/reading/menu_request.h"
#include "policy/reading/readout.h"
#include "policy/reading/sampler.h"
#include "trainers/losses/advantages.h"
#include "trainers/losses/decision_losses.h"
#include "trainers/losses/losses.h"
#include "trainers/runtime/optim.h"

namespace rlid::trainers {
namespace {

using policy::TokenId;

// Tolerances. Each is on a quantity that is 0 in exact arithmetic and of order
// 1 when a readout or gradient is wrong; the measured float32/float64 noise on
// the tiny test models and on a random Qwen3-0.6B-shaped model is far below
// them (README, "The audit").
constexpr double kLogPTolerance = 1e-3;       // |log p1 - log p2|, i.e. relative error in p
constexpr double kMeanTolerance = 1e-3;       // ||E1 - E2|| / max(||E1||, ||E2||)
constexpr double kVarianceTolerance = 1e-3;   // (v_marginal - v_sampled) / E||g_sampled||^2
constexpr double kMonteCarloZ = 4.0;          // ||MC mean diff|| / standard error
constexpr double kFdTolerance = 1e-5;         // |autograd - FD| / max(|autograd|, |FD|, floor)
constexpr double kFdStep = 1e-4;              // along a unit direction (4-point stencil)
constexpr int64_t kRaoBlackwellStates = 3;    // multi-action states the check compares
constexpr int64_t kPpoStates = 4;             // batch of the PPO gradient check
constexpr int64_t kChunk = int64_t{1} << 20;  // elements per float64 reduction chunk

struct AuditState {
  envs::Menu menu;
  policy::RenderedPrompt prompt;  // with [prompt] reasoning: tokens end with z ++ answer prefix
  std::unique_ptr<envs::State> state;
  int64_t think_begin = 0, think_end = 0;  // the scratchpad z in prompt.tokens (empty: none)
};

// With [prompt] reasoning the checks run given a scratchpad: the model's own
// greedy one (at most max_think_tokens, ending its line), appended with the
// answer prefix as a thinking rollout does (agents::RunDecisionEpisodes).
void AppendGreedyThoughts(policy::TransformerLM& model, const policy::PromptRenderer& renderer,
                          std::vector<AuditState>& states) {
  policy::SamplerOptions o;
  o.temperature = 0;
  o.max_new_tokens = renderer.config().max_think_tokens;
  policy::TextSampler sampler(model->config(), o, model->device());
  sampler.SyncWeights(model);
  const auto& tok = renderer.tokenizer();
  const policy::StopFn end_of_line = agents::EndOfThought(tok);
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

// The request with duplicate realisations of an item removed (so realisation
// indices address distinct events).
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

// The distinct realisations of a menu as the readout scores them, flattened: a
// realisation that is a token-prefix of another gets the end token (same rule as
// policy::Readout). owner[r] is the item of realisation r.
struct FlatRealisations {
  std::vector<std::vector<TokenId>> tokens;
  std::vector<int64_t> owner;
};

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

// log pi(w|s) of one realisation by one plain forward of prompt ++ w: a scalar with
// its graph when grad mode is on.
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

// Records the non-finite numbers a check compares; any makes the check fail.
// `what` is only formatted for a non-finite value.
class FiniteGuard {
 public:
  bool operator()(double v, const std::function<std::string()>& what) {
    if (std::isfinite(v)) return true;
    if (names_.size() < 4) names_.push_back(fmt::format("{} = {}", what(), v));
    ++count_;
    return false;
  }
  bool ok() const { return count_ == 0; }
  // Fails `c` (also an informational one) with a note naming the values.
  void Apply(AuditCheck& c) const {
    if (ok()) return;
    c.passed = false;
    c.informational = false;
    c.numbers.push_back({"non-finite values (check fails)", std::to_string(count_)});
    std::string list;
    for (const auto& n : names_) list += (list.empty() ? "" : "; ") + n;
    if (count_ > static_cast<int64_t>(names_.size())) list += "; ...";
    c.note = "FAIL: non-finite " + list + (c.note.empty() ? "" : ". " + c.note);
  }

 private:
  std::vector<std::string> names_;
  int64_t count_ = 0;
};

// p(a_k|s) = exp(log p) of the readout's first row for k < K, each checked by
// `finite` under the name item(k) (k from 0); a non-finite one clears
// *all_finite when given.
std::vector<double> MenuProbs(const policy::ReadoutBatch& rb, size_t K, FiniteGuard& finite,
                              const std::function<std::string(size_t)>& item,
                              bool* all_finite = nullptr) {
  std::vector<double> p;
  for (size_t k = 0; k < K; ++k) {
    p.push_back(std::exp(rb.log_p[0][static_cast<int64_t>(k)].item<double>()));
    const bool ok = finite(p.back(), [&] { return item(k); });
    if (all_finite) *all_finite &= ok;
  }
  return p;
}

// ---- streaming gradient accumulation ------------------------------------------------
// Every gradient vector the checks need is built by weighted backwards into the
// parameters' own .grad and reduced to float64 scalars at once, tensor by
// tensor, in chunks of kChunk elements: no flat or float64 copy of the model.

// float64 squared norm of sum_k c_k t_k over same-shaped tensors (undefined ones
// count as zero), chunked: the temporaries are kChunk elements long.
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

// The gradient vector X = sum over the given models of their parameters' .grad
// (one model when the audited and the reference model are the same; two when a
// separate reference model scores the independent side). With two models the
// parameters pair up by position (same config), and X_i = a_i.grad + b_i.grad.
class GradAccumulator {
 public:
  GradAccumulator(policy::TransformerLM& a, policy::TransformerLM& b) {
    sides_.push_back(TrainableParams(a));
    if (b.ptr() != a.ptr()) {
      sides_.push_back(TrainableParams(b));
      if (sides_[1].size() != sides_[0].size())
        throw ConfigError(
            fmt::format("audit: the reference model has {} tensors that require grad, the "
                        "audited model {}",
                        sides_[1].size(), sides_[0].size()),
            "use a reference model with the audited model's config and requires_grad set "
            "(policy::CloneModel turns it off)");
    }
  }
  ~GradAccumulator() { Release(); }
  // X = 0 (in place; keeps the buffers).
  void Zero() {
    for (auto& side : sides_)
      for (auto& p : side)
        if (p.grad().defined()) p.mutable_grad().zero_();
  }
  size_t size() const { return sides_[0].size(); }
  // ||g - c X_i||^2 for a tensor g shaped like parameter i (g undefined = 0).
  double SquaredNormMinus(size_t i, const torch::Tensor& g, double c) const {
    std::vector<std::pair<double, torch::Tensor>> terms = {{1.0, g}};
    for (const auto& side : sides_) terms.push_back({-c, side[i].grad()});
    return SquaredNormOfSum(terms);
  }
  // ||X||^2 in float64.
  double SquaredNorm() const {
    double s = 0;
    for (size_t i = 0; i < size(); ++i) s += SquaredNormMinus(i, torch::Tensor(), -1.0);
    return s;
  }
  // Frees every .grad.
  void Release() {
    for (auto& side : sides_)
      for (auto& p : side) p.mutable_grad() = torch::Tensor();
  }
  const std::vector<std::vector<torch::Tensor>>& sides() const { return sides_; }

 private:
  std::vector<std::vector<torch::Tensor>> sides_;
};

// While alive, every backward's incoming gradient g_i of each parameter i is
// reduced at once to ||g_i - c X_i||^2 (float64, chunked; c = 1 with
// `minus_accumulated`, else 0) and then dropped: the hook hands autograd a
// broadcast zero, so X (the .grad) is unchanged. Take() adds ||c X_i||^2 for
// the parameters the backwards did not reach. One backward thus yields the
// squared norm of (its gradient - X) without a second parameter-sized buffer
// or a backward to undo it. Use one backward per Take().
class GradientNormProbe {
 public:
  GradientNormProbe(const GradAccumulator& acc, bool minus_accumulated)
      : acc_(acc), state_(std::make_shared<State>()) {
    state_->c = minus_accumulated ? 1.0 : 0.0;
    state_->reached.assign(acc.size(), false);
    for (const auto& side : acc.sides())
      for (size_t i = 0; i < side.size(); ++i) {
        auto st = state_;
        const GradAccumulator* a = &acc;
        unsigned h = side[i].register_hook([st, a, i](const torch::Tensor& g) {
          st->sum += a->SquaredNormMinus(i, g, st->c);
          st->reached[i] = true;
          return torch::zeros({}, g.options()).expand(g.sizes());
        });
        hooks_.push_back({side[i], h});
      }
  }
  ~GradientNormProbe() {
    for (auto& [p, h] : hooks_) p.remove_hook(h);
  }
  GradientNormProbe(const GradientNormProbe&) = delete;
  GradientNormProbe& operator=(const GradientNormProbe&) = delete;
  // ||g - c X||^2 of the backward since the last Take().
  double Take() {
    double s = std::exchange(state_->sum, 0.0);
    for (size_t i = 0; i < acc_.size(); ++i) {
      if (!state_->reached[i] && state_->c != 0)
        s += acc_.SquaredNormMinus(i, torch::Tensor(), state_->c);
      state_->reached[i] = false;
    }
    return s;
  }

 private:
  struct State {
    double c = 0, sum = 0;
    std::vector<bool> reached;
  };
  const GradAccumulator& acc_;
  std::vector<std::pair<torch::Tensor, unsigned>> hooks_;
  std::shared_ptr<State> state_;
};

// g += weight * grad y (y a scalar).
void Backward(const torch::Tensor& y, double weight, bool retain_graph = false) {
  y.backward(torch::full_like(y, weight), retain_graph);
}

// ---- 0 ----------------------------------------------------------------------------
AuditCheck Finite(policy::TransformerLM& model) {
  AuditCheck c{"finite", "Finite weights: every parameter of the model is finite"};
  torch::NoGradGuard ng;
  int64_t tensors = 0, values = 0, bad_tensors = 0;
  std::string list;
  for (const auto& item : model->named_parameters()) {
    const auto flat = item.value().detach().reshape(-1);
    const int64_t n = flat.numel();
    int64_t nan = 0, inf = 0;
    for (int64_t i = 0; i < n; i += kChunk) {
      auto ch = flat.slice(0, i, std::min(n, i + kChunk));
      nan += torch::isnan(ch).sum().item<int64_t>();
      inf += torch::isinf(ch).sum().item<int64_t>();
    }
    ++tensors;
    values += n;
    if (nan + inf == 0) continue;
    if (++bad_tensors <= 4)
      list += fmt::format("{}{}: {} NaN, {} Inf of {}", list.empty() ? "" : "; ", item.key(), nan,
                          inf, n);
  }
  c.passed = bad_tensors == 0;
  c.numbers = {{"parameter tensors checked", std::to_string(tensors)},
               {"values checked", std::to_string(values)},
               {"tensors with non-finite values", std::to_string(bad_tensors)}};
  if (!c.passed)
    c.note = "FAIL: non-finite weights: " + list + (bad_tensors > 4 ? "; ..." : "") +
             ". The other checks were not run; reload or retrain the checkpoint.";
  return c;
}

// ---- 1 ----------------------------------------------------------------------------
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
    auto other = policy::Readout(model, {req}, {"other", false});
    auto menu = policy::Readout(model, {req}, {"menu", false});
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

// ---- 2 ----------------------------------------------------------------------------
// Per state with K >= 2 actions, fixed advantages A(a) and the menu-normalised
// realisation distribution q(r) = pi(r|s) / Z over the distinct realisations:
//   sampled-realisation estimator g1(r) = A(a(r)) grad log q(r),  r ~ q, from the
//     separately scored realisations (one plain forward per realisation);
//   marginal estimator g2(a) = A(a) grad log p(a|s), a ~ p, from the single-pass
//     readout (one forward).
// With n_r = log pi(r|s) and G = grad log Z = sum_r q_r grad n_r,
//   E1 = sum_r q_r (A_r - Abar) grad n_r          (Abar = sum_r q_r A_r)
//   E2 = grad sum_a sg(p_a A_a) log p_a
//   m1 = sum_r q_r A_r^2 ||grad n_r - G||^2,  m2 = sum_a p_a A_a^2 ||grad log p_a||^2
// are weighted backwards: E1 accumulates in .grad, and a probed single-pass
// backward of E2 reduces ||E2 - E1|| on the fly (GradientNormProbe); likewise
// for the Monte-Carlo means. For m1, .grad holds G and the probe reduces each
// realisation's ||grad n_r - G||^2 during its backward.

// Forward and backward passes the Rao-Blackwell check ran.
struct PassCounts {
  int64_t separate_forwards = 0, backwards = 0;
};

// One state's two sides and the weighted backwards both estimators are built
// from; X is the accumulator's .grad. The single-pass side's graph lives only
// while its own backwards run (each Readout() is a fresh forward), so that it
// never sits in memory next to a separate realisation's graph.
class EstimatorSides {
 public:
  EstimatorSides(policy::TransformerLM& model, policy::TransformerLM& ref,
                 policy::ReadoutRequest req, GradAccumulator& g, PassCounts& counts)
      : model_(model),
        ref_(ref),
        req_(std::move(req)),
        words_(ScoredRealisations(req_)),
        g_(g),
        counts_(counts) {}

  const FlatRealisations& words() const { return words_; }
  size_t R() const { return words_.tokens.size(); }

  // n_r = log pi(r|s) of every realisation, one plain forward each, no graph.
  std::vector<double> SeparateLogProbs() {
    torch::NoGradGuard ng;
    std::vector<double> n(R());
    for (size_t r = 0; r < R(); ++r) {
      n[r] = SeparateLogProb(ref_, req_.prompt, words_.tokens[r]).item<double>();
      ++counts_.separate_forwards;
    }
    return n;
  }
  // The single-pass readout (one forward), with its graph.
  policy::ReadoutBatch Readout() { return policy::Readout(model_, {req_}, {"menu", false}); }
  // X += grad sum_k w_k log p(a_k|s).
  void Marginal(const policy::ReadoutBatch& rb, const std::vector<double>& w, bool retain) {
    torch::Tensor y = torch::zeros({}, rb.log_p.options());
    for (size_t k = 0; k < w.size(); ++k) y = y + w[k] * rb.log_p[0][static_cast<int64_t>(k)];
    Backward(y, 1.0, retain);
    ++counts_.backwards;
  }
  // X += sum_r w_r grad n_r, one realisation's graph at a time.
  void Separate(const std::vector<double>& w) {
    for (size_t r = 0; r < R(); ++r) {
      if (w[r] == 0) continue;
      Backward(SeparateLogProb(ref_, req_.prompt, words_.tokens[r]), w[r]);
      ++counts_.separate_forwards, ++counts_.backwards;
    }
  }
  // ||grad sum_k w_k log p(a_k|s) - X|| by a fresh forward and a probed
  // backward (X unchanged).
  double MarginalDistance(const std::vector<double>& w) {
    auto rb = Readout();
    GradientNormProbe probe(g_, /*minus_accumulated=*/true);
    Marginal(rb, w, false);
    return std::sqrt(probe.Take());
  }
  // ||E2||^2 and m2 = sum_k p_k A_k^2 ||grad log p_k||^2 from the readout `rb`
  // (X = 0), each backward's norm probed; pa_k = p_k A_k.
  std::pair<double, double> MarginalMoments(const policy::ReadoutBatch& rb,
                                            const std::vector<double>& p,
                                            const std::vector<double>& A,
                                            const std::vector<double>& pa) {
    const int64_t K = static_cast<int64_t>(p.size());
    GradientNormProbe probe(g_, /*minus_accumulated=*/false);
    Marginal(rb, pa, true);
    const double e2_sq = probe.Take();
    double m2 = 0;
    for (int64_t k = 0; k < K; ++k) {
      Backward(rb.log_p[0][k], 1.0, /*retain_graph=*/k + 1 < K);
      ++counts_.backwards;
      m2 += p[k] * A[k] * A[k] * probe.Take();
    }
    return {e2_sq, m2};
  }
  // m1 = sum_r q_r A(a(r))^2 ||grad n_r - X||^2, one probed backward per
  // realisation (X = G when called).
  double SampledSecondMoment(const std::vector<double>& q, const std::vector<double>& A) {
    double m1 = 0;
    GradientNormProbe probe(g_, /*minus_accumulated=*/true);
    for (size_t r = 0; r < R(); ++r) {
      Backward(SeparateLogProb(ref_, req_.prompt, words_.tokens[r]), 1.0);
      ++counts_.separate_forwards, ++counts_.backwards;
      const double a = A[words_.owner[r]];
      m1 += q[r] * a * a * probe.Take();
    }
    return m1;
  }

 private:
  policy::TransformerLM& model_;
  policy::TransformerLM& ref_;
  const policy::ReadoutRequest req_;
  const FlatRealisations words_;
  GradAccumulator& g_;
  PassCounts& counts_;
};

// One compared state's numbers (see the comment above EstimatorSides).
struct EstimatorMoments {
  double e1_sq = 0, e2_sq = 0;  // ||E_sampled||^2, ||E_marginal||^2
  double diff = 0;              // ||E_sampled - E_marginal||
  double mc_diff = 0;           // ||MC mean difference||
  double m1 = 0, m2 = 0;        // second moments, sampled and marginal
};

// A FiniteGuard name "state <si + 1> <what>".
std::function<std::string()> StateValue(size_t si, std::string what) {
  return [si, what = std::move(what)] { return fmt::format("state {} {}", si + 1, what); };
}

// The Monte-Carlo weights: `mc` independent draws r ~ q and a ~ p; the means
// are weighted backwards with the draw counts as weights. Returns u (separate
// side, taking .grad from E1 = sum_r w1_r grad n_r to MC1) and the marginal
// side's weights.
std::pair<std::vector<double>, std::vector<double>> MonteCarloWeights(
    Rng& rng, int64_t mc, const std::vector<double>& q, const std::vector<double>& p,
    const std::vector<double>& A, const std::vector<int64_t>& owner,
    const std::vector<double>& w1) {
  const size_t R = q.size();
  const int64_t K = static_cast<int64_t>(p.size());
  std::vector<double> cr(R, 0), da(K, 0);
  for (int64_t i = 0; i < mc; ++i) {
    cr[rng.Categorical(q)] += 1.0 / static_cast<double>(mc);
    da[rng.Categorical(p)] += 1.0 / static_cast<double>(mc);
  }
  double c_bar = 0;
  for (size_t r = 0; r < R; ++r) c_bar += cr[r] * A[owner[r]];
  std::vector<double> u(R), mc2(K);
  for (size_t r = 0; r < R; ++r) u[r] = cr[r] * A[owner[r]] - c_bar * q[r] - w1[r];
  for (int64_t k = 0; k < K; ++k) mc2[k] = da[k] * A[k];
  return {u, mc2};
}

// Both estimators' exact means, Monte-Carlo means and second moments on one
// state with advantages A; nullopt when a number is not finite (`finite`
// records it). Leaves .grad zero.
std::optional<EstimatorMoments> CompareEstimators(EstimatorSides& x, GradAccumulator& g,
                                                  const std::vector<double>& A, Rng& rng,
                                                  int64_t mc, FiniteGuard& finite, size_t si) {
  const int64_t K = static_cast<int64_t>(A.size());
  const size_t R = x.R();
  const auto& owner = x.words().owner;
  // The independent side: q over the separately scored realisations.
  const std::vector<double> n = x.SeparateLogProbs();
  bool ok = true;
  for (size_t r = 0; r < R; ++r)
    ok &= finite(n[r], StateValue(si, fmt::format("realisation {} separate log pi", r + 1)));
  // ||E2||^2 and m2.
  EstimatorMoments out;
  g.Zero();
  std::vector<double> p, pa(K);
  {
    auto rb = x.Readout();
    auto item = [si](size_t k) {
      return fmt::format("state {} item {} single-pass p(a|s)", si + 1, k + 1);
    };
    p = MenuProbs(rb, static_cast<size_t>(K), finite, item, &ok);
    if (!ok) return std::nullopt;
    for (int64_t k = 0; k < K; ++k) pa[k] = p[k] * A[k];
    std::tie(out.e2_sq, out.m2) = x.MarginalMoments(rb, p, A, pa);
  }
  const double log_z = LogSumExp(n);
  double a_bar = 0;
  std::vector<double> q(R);
  for (size_t r = 0; r < R; ++r) {
    q[r] = std::exp(n[r] - log_z);
    a_bar += q[r] * A[owner[r]];
  }
  // .grad = E1: ||E1||^2, then ||E2 - E1|| by a probed single-pass backward.
  std::vector<double> w1(R);
  for (size_t r = 0; r < R; ++r) w1[r] = q[r] * (A[owner[r]] - a_bar);
  x.Separate(w1);
  out.e1_sq = g.SquaredNorm();
  out.diff = x.MarginalDistance(pa);
  // Monte Carlo: .grad goes from E1 to MC1.
  const auto [u, mc2] = MonteCarloWeights(rng, mc, q, p, A, owner, w1);
  x.Separate(u);
  out.mc_diff = x.MarginalDistance(mc2);
  // m1: .grad = G, then per realisation one probed backward: ||grad n_r - G||^2.
  g.Zero();
  x.Separate(q);
  out.m1 = x.SampledSecondMoment(q, A);
  g.Zero();

  ok = finite(out.e1_sq, StateValue(si, "||E_sampled||^2")) &
       finite(out.e2_sq, StateValue(si, "||E_marginal||^2")) &
       finite(out.diff, StateValue(si, "||E_sampled - E_marginal||")) &
       finite(out.mc_diff, StateValue(si, "||MC mean difference||")) &
       finite(out.m1, StateValue(si, "second moment, sampled")) &
       finite(out.m2, StateValue(si, "second moment, marginal"));
  if (!ok) return std::nullopt;
  return out;
}

// The Rao-Blackwell check's summary over the compared states.
struct RaoBlackwellTally {
  double worst_rel = 0, worst_z = 0, worst_var = -std::numeric_limits<double>::infinity();
  double var_sampled = 0, var_marginal = 0;
  int64_t compared = 0, one_action = 0, zero_means = 0, zero_se = 0;

  void Add(const EstimatorMoments& e, int64_t mc) {
    const double v1 = e.m1 - e.e1_sq, v2 = e.m2 - e.e2_sq;
    ++compared;
    const double scale = std::sqrt(std::max(e.e1_sq, e.e2_sq));
    if (scale == 0) {
      ++zero_means;
    } else {
      worst_rel = std::max(worst_rel, e.diff / scale);
    }
    var_sampled += v1, var_marginal += v2;
    if (e.m1 > 0) worst_var = std::max(worst_var, (v2 - v1) / e.m1);
    const double se = std::sqrt(std::max(v1 + v2, 0.0) / static_cast<double>(mc));
    if (se > 0)
      worst_z = std::max(worst_z, e.mc_diff / se);
    else
      ++zero_se;
  }

  // The verdict, numbers and note of the check.
  void Report(AuditCheck& c, const FiniteGuard& finite, size_t states, const PassCounts& passes,
              int64_t mc) const {
    const bool any = compared > zero_means;
    c.passed = worst_rel <= kMeanTolerance && worst_z <= kMonteCarloZ &&
               (worst_var <= kVarianceTolerance || compared == 0);
    if (compared == 0 && finite.ok()) c.informational = true;
    c.numbers = {
        {"states compared", fmt::format("{} of {} collected (the first {} with >= 2 actions)",
                                        compared, states, kRaoBlackwellStates)},
        {"states excluded: one action (both estimators exactly 0)", std::to_string(one_action)},
        {"forward + backward passes", fmt::format("{} separate forwards, {} backwards",
                                                  passes.separate_forwards, passes.backwards)},
        {"exact means: max ||E_sampled - E_marginal|| / max(||E_sampled||, ||E_marginal||)",
         any ? Num(worst_rel) : "n/a"},
        {"  tolerance (relative)", Num(kMeanTolerance)},
        {"Monte-Carlo: max ||mean diff|| / standard error",
         fmt::format("{} ({} draws per state; tolerance {:g})",
                     compared > zero_se ? fmt::format("{:.2f}", worst_z) : "n/a", mc,
                     kMonteCarloZ)},
        {"variance, sampled-realisation estimator (sum over states)", Num(var_sampled)},
        {"variance, marginal estimator (sum over states)", Num(var_marginal)},
        {"variance ratio marginal / sampled",
         var_sampled > 0 ? Num(var_marginal / var_sampled) : "n/a"},
        {"variance gap: max (v_marginal - v_sampled) / E||g_sampled||^2",
         compared > 0 ? Num(worst_var) : "n/a"},
        {"  tolerance (<=, relative)", Num(kVarianceTolerance)}};
    if (zero_means > 0)
      c.numbers.push_back({"states with both exact means exactly 0 (excluded from the ratio)",
                           std::to_string(zero_means)});
    if (zero_se > 0)
      c.numbers.push_back(
          {"states with zero variance (excluded from the MC ratio)", std::to_string(zero_se)});
    c.note = compared == 0 && finite.ok()
                 ? "No state with two or more actions: nothing to compare (raise --states)."
                 : "Same expectation E_r[A(a(r)) grad log q(r)] = E_a[A(a) grad log p(a|s)]; "
                   "realisation noise is removed.";
  }
};

AuditCheck RaoBlackwell(policy::TransformerLM& model, policy::TransformerLM& ref,
                        const policy::PromptRenderer& renderer,
                        const std::vector<AuditState>& states, int64_t mc, uint64_t seed) {
  AuditCheck c{"rao_blackwell",
               "Rao-Blackwell: sampled-realisation (separate passes) vs marginal (single pass) "
               "gradient estimator"};
  if (mc < 1) throw ConfigError(fmt::format("audit: --mc-samples must be >= 1, found {}", mc));
  FiniteGuard finite;
  GradAccumulator g(model, ref);
  Rng rng = Rng::Stream(seed, "audit_rao_blackwell");
  RaoBlackwellTally tally;
  PassCounts passes;
  for (size_t si = 0; si < states.size() && tally.compared < kRaoBlackwellStates; ++si) {
    auto req = DistinctRequest(renderer, states[si]);
    const int64_t K = static_cast<int64_t>(req.realisations.size());
    if (K < 2) {  // p(a|s) = 1: both estimators are exactly 0 by construction
      ++tally.one_action;
      continue;
    }
    std::vector<double> A(K);
    for (auto& v : A) v = 2.0 * rng.Uniform() - 1.0;
    EstimatorSides sides(model, ref, std::move(req), g, passes);
    if (auto e = CompareEstimators(sides, g, A, rng, mc, finite, si)) tally.Add(*e, mc);
  }
  g.Release();
  tally.Report(c, finite, states.size(), passes, mc);
  finite.Apply(c);
  return c;
}

// ---- 3 ----------------------------------------------------------------------------
// The model converted to float64 in place for the scope's lifetime, with
// requires_grad only on the parameters `keep` selects. The destructor releases
// every .grad, converts each parameter back to its original dtype and restores
// its requires_grad flag. The round trip is exact: every float32 (and bf16/f16)
// value is a float64 value, and rounding it back gives the original. Memory: the
// tensors are converted one at a time, so the model holds its float64 weights
// (2x the float32 bytes) plus one tensor in flight, never a float64 clone next
// to the original.
class Float64Scope {
 public:
  Float64Scope(policy::TransformerLM& model, const std::function<bool(const std::string&)>& keep) {
    torch::NoGradGuard ng;
    for (auto& item : model->named_parameters()) {
      auto p = item.value();
      entries_.push_back({p, p.scalar_type(), p.requires_grad()});
      p.mutable_grad() = torch::Tensor();
      p.set_data(p.detach().to(torch::kFloat64));
      const bool k = keep(item.key());
      p.set_requires_grad(k);
      if (k) selected_.push_back({item.key(), p});
    }
  }
  ~Float64Scope() {
    torch::NoGradGuard ng;
    for (auto& e : entries_) {
      e.param.mutable_grad() = torch::Tensor();
      e.param.set_data(e.param.detach().to(e.dtype));
      e.param.set_requires_grad(e.requires_grad);
    }
  }
  Float64Scope(const Float64Scope&) = delete;
  Float64Scope& operator=(const Float64Scope&) = delete;
  const std::vector<std::pair<std::string, torch::Tensor>>& selected() const { return selected_; }

 private:
  struct Entry {
    torch::Tensor param;
    torch::Dtype dtype;
    bool requires_grad;
  };
  std::vector<Entry> entries_;
  std::vector<std::pair<std::string, torch::Tensor>> selected_;
};

// The PPO check's batch: the first kPpoStates states, with a chosen item each,
// random advantages and returns, and offsets of the old log-probs and values
// from the model's own (so ratios and value clipping are exercised).
struct PpoBatch {
  std::vector<policy::ReadoutRequest> reqs;
  std::vector<int64_t> chosen;
  std::vector<double> adv, noise, vnoise, ret;
  int64_t size() const { return static_cast<int64_t>(reqs.size()); }
};

PpoBatch DrawPpoBatch(const policy::PromptRenderer& renderer, const std::vector<AuditState>& states,
                      uint64_t seed) {
  Rng rng = Rng::Stream(seed, "audit_ppo");
  PpoBatch b;
  for (size_t i = 0; i < std::min<size_t>(states.size(), kPpoStates); ++i)
    b.reqs.push_back(DistinctRequest(renderer, states[i]));
  for (const auto& r : b.reqs) {
    b.chosen.push_back(static_cast<int64_t>(rng.UniformInt(r.realisations.size())));
    b.adv.push_back(2 * rng.Uniform() - 1);
    b.noise.push_back(0.3 * (2 * rng.Uniform() - 1));
    b.vnoise.push_back(0.2 * (2 * rng.Uniform() - 1));
    b.ret.push_back(2 * rng.Uniform() - 1);
  }
  return b;
}

// The parameters the directions live on: the first and last decoder layer, the
// final norm and the value head, i.e. every kind of tensor the loss reaches
// except the embedding.
std::function<bool(const std::string&)> PerturbedParameters(int64_t num_layers) {
  const std::string first = "model.layers.0.",
                    last = fmt::format("model.layers.{}.", num_layers - 1);
  return [first, last](const std::string& name) {
    return name.rfind(first, 0) == 0 || name.rfind(last, 0) == 0 || name == "model.norm.weight" ||
           name.rfind("value_head.", 0) == 0;
  };
}

// The audited loss: clipped surrogate on p(a|s) ratios + 0.5 * clipped value
// loss - 0.01 * menu entropy, against old log-probs and values read once at
// construction (without grad). It is the batch mean of per-state losses,
// evaluated state by state (the same function as one batched readout, since
// every term is a mean over states) so that autograd keeps only one state's
// float64 activations.
class PpoAuditLoss {
 public:
  PpoAuditLoss(policy::TransformerLM& model, const PpoBatch& b) : model_(model), b_(b) {
    lc_.clip_low = lc_.clip_high = 0.2;
    {
      torch::NoGradGuard ng;
      auto rb = policy::Readout(model_, b_.reqs, {"menu", false});
      old_logp_ = rb.log_p.gather(1, torch::tensor(b_.chosen).unsqueeze(1)).squeeze(1) +
                  torch::tensor(b_.noise, torch::kFloat64);
      old_v_ = rb.value + torch::tensor(b_.vnoise, torch::kFloat64);
    }
    adv_t_ = torch::tensor(b_.adv, torch::kFloat64);
    ret_t_ = torch::tensor(b_.ret, torch::kFloat64);
  }
  // State b's term (with its graph when grad mode is on).
  torch::Tensor State(int64_t b) const {
    auto rb = policy::Readout(model_, {b_.reqs[b]}, {"menu", false});
    auto logp = rb.log_p[0][b_.chosen[b]].reshape({1});
    auto pg = DecisionPpoLoss(lc_, logp, old_logp_[b].reshape({1}), adv_t_[b].reshape({1})).loss;
    auto v = ValueLoss(rb.value, old_v_[b].reshape({1}), ret_t_[b].reshape({1}), 0.2);
    auto ent = MenuEntropy(rb.log_p, rb.item_mask).mean();
    return (pg + 0.5 * v - 0.01 * ent) / static_cast<double>(b_.size());
  }
  // The loss, state by state.
  double Value() const {
    double total = 0;
    for (int64_t b = 0; b < b_.size(); ++b) total += State(b).item<double>();
    return total;
  }

 private:
  policy::TransformerLM& model_;
  const PpoBatch& b_;
  LossConfig lc_;
  torch::Tensor old_logp_, old_v_, adv_t_, ret_t_;
};

// Accumulates the loss's autograd gradient in the parameters' .grad (one
// backward per state); returns its squared norm over `sel`.
double AutogradGradient(const PpoAuditLoss& loss_fn, int64_t B,
                        const std::vector<std::pair<std::string, torch::Tensor>>& sel,
                        FiniteGuard& finite) {
  double loss = 0;
  for (int64_t b = 0; b < B; ++b) {
    auto l = loss_fn.State(b);
    loss += l.item<double>();
    l.backward();
  }
  finite(loss, [] { return std::string("loss"); });
  double grad_sq = 0;
  for (const auto& [name, p] : sel) {
    if (!p.grad().defined()) continue;  // the loss does not reach it
    const double s = SumSquares(p.grad());
    if (finite(s, [&] { return "||autograd gradient of " + name + "||^2"; })) grad_sq += s;
  }
  return grad_sq;
}

// The loss's derivative along one direction over `sel` (dir[i] shaped like
// parameter i; unit norm overall), by a fourth-order central difference with
// step h: truncation O(h^4), rounding ~1e-16 / h. Restores the parameters.
double CentralDifference(const std::vector<std::pair<std::string, torch::Tensor>>& sel,
                         const std::vector<torch::Tensor>& orig,
                         const std::vector<torch::Tensor>& dir, double h,
                         const PpoAuditLoss& loss_fn) {
  auto loss_at = [&](double s) {
    for (size_t i = 0; i < sel.size(); ++i) sel[i].second.copy_(orig[i] + s * dir[i]);
    return loss_fn.Value();
  };
  const double p2 = loss_at(2 * h), p1 = loss_at(h), n1 = loss_at(-h), n2 = loss_at(-2 * h);
  for (size_t i = 0; i < sel.size(); ++i) sel[i].second.copy_(orig[i]);
  return (n2 - 8 * n1 + 8 * p1 - p2) / (12 * h);
}

// Three random unit directions over `sel` (drawn from `seed`): autograd's
// directional derivative (from .grad) vs CentralDifference, each pair added to
// c.numbers. Returns the worst relative error, its denominator floored at
// `typical`. Call without grad mode.
double WorstDirectionalError(const std::vector<std::pair<std::string, torch::Tensor>>& sel,
                             double typical, const PpoAuditLoss& loss_fn, uint64_t seed,
                             FiniteGuard& finite, AuditCheck& c) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed ^ 0x9e3779b97f4a7c15ULL);
  std::vector<torch::Tensor> orig;
  for (const auto& [name, p] : sel) orig.push_back(p.detach().clone());
  double worst = 0;
  for (int d = 0; d < 3; ++d) {
    std::vector<torch::Tensor> dir;
    double sq = 0;
    for (const auto& [name, p] : sel) {
      dir.push_back(torch::randn(p.sizes(), gen, torch::TensorOptions().dtype(torch::kFloat64)));
      sq += SumSquares(dir.back());
    }
    double analytic = 0;
    for (size_t i = 0; i < sel.size(); ++i) {
      dir[i] /= std::sqrt(sq);
      if (sel[i].second.grad().defined()) analytic += SumProducts(sel[i].second.grad(), dir[i]);
    }
    const double fd = CentralDifference(sel, orig, dir, kFdStep, loss_fn);
    auto name = [d](const char* what) {
      return [d, what] { return fmt::format("direction {} {}", d + 1, what); };
    };
    if (!(finite(analytic, name("autograd")) & finite(fd, name("finite difference")))) continue;
    const double rel =
        std::abs(analytic - fd) / std::max({std::abs(analytic), std::abs(fd), typical, 1e-300});
    worst = std::max(worst, rel);
    c.numbers.push_back({fmt::format("direction {}: autograd vs finite difference", d + 1),
                         fmt::format("{:.10g} vs {:.10g}", analytic, fd)});
  }
  return worst;
}

AuditCheck PpoGradient(policy::TransformerLM& model, const policy::PromptRenderer& renderer,
                       const std::vector<AuditState>& states, uint64_t seed) {
  AuditCheck c{"ppo_gradient",
               "PPO gradient check: autograd vs central finite differences (float64)"};
  FiniteGuard finite;
  const PpoBatch batch = DrawPpoBatch(renderer, states, seed);
  const int64_t B = batch.size();
  const int64_t L = model->config().num_layers;
  int64_t total_values = 0;
  for (auto& p : model->parameters()) total_values += p.numel();
  Float64Scope f64(model, PerturbedParameters(L));
  const auto& sel = f64.selected();
  int64_t sel_values = 0;
  for (const auto& [name, p] : sel) sel_values += p.numel();

  const PpoAuditLoss loss_fn(model, batch);
  const double grad_sq = AutogradGradient(loss_fn, B, sel, finite);
  torch::NoGradGuard ng;
  // A random unit direction's derivative is typically ||grad|| / sqrt(n); it
  // floors the relative error's denominator so that a direction that happens
  // to be nearly orthogonal to the gradient does not turn float64 rounding
  // into a failure, while a wrong gradient still shows at ||error|| / ||grad||.
  const double typical = std::sqrt(grad_sq / static_cast<double>(std::max<int64_t>(sel_values, 1)));
  const double worst = WorstDirectionalError(sel, typical, loss_fn, seed, finite, c);
  c.numbers.push_back(
      {"parameters perturbed",
       fmt::format("{} tensors, {} of {} values (layers 0 and {}, final norm, value head)",
                   sel.size(), sel_values, total_values, L - 1)});
  c.numbers.push_back({"||grad|| on those parameters", Num(std::sqrt(grad_sq))});
  c.numbers.push_back(
      {"max |autograd - FD| / max(|autograd|, |FD|, ||grad|| / sqrt(n))", Num(worst)});
  c.numbers.push_back({"tolerance (relative)", Num(kFdTolerance)});
  c.passed = worst <= kFdTolerance;
  c.note = fmt::format(
      "Loss = clipped surrogate on p(a|s) ratios + 0.5 * clipped value loss - 0.01 * menu "
      "entropy, B = {}; unit random directions, 4-point central differences with step {:g}; "
      "the model is converted to float64 in place and back (exact).",
      B, kFdStep);
  finite.Apply(c);
  return c;
}

// ---- 4 ----------------------------------------------------------------------------
// Each teaching case adds its numbers to `c` and returns whether it holds.

// (a) An all-wrong group gives zero advantage under GRPO and Dr. GRPO.
bool AllWrongGroupHasNoAdvantage(AuditCheck& c) {
  auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  bool ok = true;
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
        {fmt::format("all-wrong group, {}: max |A|", std_norm ? "GRPO" : "Dr. GRPO"), Num(m)});
  }
  return ok;
}

// (b) GSPO's sequence clip vs per-token clipping with one outlier token.
bool SequenceClipDropsTheOutlier(AuditCheck& c) {
  auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
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
  c.numbers.push_back(
      {"outlier token (log-ratio 2 on 1 of 4 tokens): tokens with gradient, per-token PPO clip",
       fmt::format("{} of 4 (loss {:.4f})", nonzero[0], losses[0])});
  c.numbers.push_back({"same sequence, GSPO sequence clip",
                       fmt::format("{} of 4 (loss {:.4f}; geometric-mean ratio {:.3f} is clipped)",
                                   nonzero[1], losses[1], std::exp(0.5))});
  return nonzero[0] == 3 && nonzero[1] == 0;
}

// (c) TIS keeps a very small engine ratio, IcePop zeroes it.
bool EngineCorrectionsTreatASmallRatio(AuditCheck& c) {
  auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  auto o = torch::full({1, 1}, -1.0, f64), r = torch::full({1, 1}, -1.0 + std::log(1000.0), f64);
  auto mask = torch::ones({1, 1}, torch::kBool);
  EngineConfig tis;
  tis.kind = "tis";
  EngineConfig ice;
  ice.kind = "icepop";
  double wt = CorrectEngine(tis, o, r, mask).weight.item<double>();
  double wi = CorrectEngine(ice, o, r, mask).weight.item<double>();
  c.numbers.push_back({"engine ratio k = 1e-3: TIS weight (cap 2, floor 0)", Num(wt)});
  c.numbers.push_back({"engine ratio k = 1e-3: IcePop weight ([0.5, 5])", Num(wi)});
  return std::abs(wt - 1e-3) < 1e-9 && wi == 0.0;
}

// (d) Label-marginal KL/entropy vs the full-vocabulary row on the same state
// (reported, not judged).
void MenuVsRowEntropy(policy::TransformerLM& model, const policy::PromptRenderer& renderer,
                      const AuditState& state, FiniteGuard& finite, AuditCheck& c) {
  torch::NoGradGuard ng;
  auto rb = policy::Readout(model, {DistinctRequest(renderer, state)}, {"menu", false});
  double hm = rb.menu_entropy[0].item<double>(), hr = rb.row_entropy[0].item<double>();
  double mass = rb.candidate_mass[0].item<double>();
  finite(hm, [] { return std::string("state 1 menu entropy"); });
  finite(hr, [] { return std::string("state 1 row entropy"); });
  finite(mass, [] { return std::string("state 1 candidate mass"); });
  double K = static_cast<double>(state.menu.size()),
         V = static_cast<double>(model->config().vocab_size);
  c.numbers.push_back({"state 1: menu entropy H(p(.|s)) / KL(p || uniform menu)",
                       fmt::format("{:.4f} / {:.4f} nats", hm, std::log(K) - hm)});
  c.numbers.push_back({"state 1: full-row entropy / KL(row || uniform vocab)",
                       fmt::format("{:.4f} / {:.4f} nats", hr, std::log(V) - hr)});
  c.numbers.push_back({"state 1: candidate mass", Num(mass)});
}

AuditCheck Teaching(policy::TransformerLM& model, const policy::PromptRenderer& renderer,
                    const std::vector<AuditState>& states) {
  AuditCheck c{"teaching", "GRPO-family teaching cases"};
  FiniteGuard finite;
  const bool advantages = AllWrongGroupHasNoAdvantage(c);
  const bool clip = SequenceClipDropsTheOutlier(c);
  const bool engine = EngineCorrectionsTreatASmallRatio(c);
  MenuVsRowEntropy(model, renderer, states[0], finite, c);
  c.passed = advantages && clip && engine;
  c.note =
      "The menu KL that decision PPO uses is exact over K actions; the row statistics spread over "
      "the whole vocabulary.";
  finite.Apply(c);
  return c;
}

// ---- 5 ----------------------------------------------------------------------------
// The menu readout of `menu` at `state` (decision prompt without memory, the
// labels only); one forward.
policy::ReadoutBatch ReadMenu(policy::TransformerLM& model, const policy::PromptRenderer& renderer,
                              const envs::Env& env, const envs::State& state,
                              const envs::Menu& menu) {
  auto prompt =
      renderer.Render(env.Instructions(), state.Observation(), {}, menu, policy::Plane::kDecision);
  return policy::Readout(model, {policy::MenuReadoutRequest(renderer, prompt.tokens, menu, false)},
                         {"menu", false});
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

}  // namespace

// Before the checks: what one readout with its gradient costs on this machine
// (the checks' unit of work: each runs many per state) and what makes the
// audit cheaper.
void LogAuditCost(policy::TransformerLM& model, const policy::PromptRenderer& renderer,
                  const std::vector<AuditState>& states, const AuditOptions& options,
                  int64_t checks) {
  const double t0 = MonotonicSeconds();
  auto rb = policy::Readout(model, {DistinctRequest(renderer, states.front())}, {"menu", false});
  if (rb.log_p.requires_grad()) {
    torch::where(torch::isfinite(rb.log_p), rb.log_p, torch::zeros_like(rb.log_p)).sum().backward();
    for (auto& p : model->parameters()) p.mutable_grad() = torch::Tensor();
  }
  const double unit = MonotonicSeconds() - t0;
  spdlog::info(
      "audit: {} check(s) on {} state(s), {} Monte-Carlo draws each (rao_blackwell), "
      "ppo_gradient in float64; one readout with its gradient takes {} here (the checks run "
      "many per state). Cheaper: fewer states (--states), fewer draws (--mc-samples), or only "
      "some checks (--only)",
      checks, states.size(), options.mc_samples, FormatDuration(unit));
}

std::vector<AuditCheck> RunAudit(policy::TransformerLM model,
                                 const policy::PromptRenderer& renderer, const envs::Env& env,
                                 const AuditOptions& options) {
  static const std::vector<std::string> kIds = {"finite",       "marginalisation", "rao_blackwell",
                                                "ppo_gradient", "teaching",        "label_bias"};
  for (const auto& id : options.only)
    if (std::find(kIds.begin(), kIds.end(), id) == kIds.end())
      throw ConfigError(fmt::format("unknown audit check '{}'", id),
                        "checks: finite, marginalisation, rao_blackwell, ppo_gradient, teaching, "
                        "label_bias");
  auto want = [&](const std::string& id) {
    return options.only.empty() ||
           std::find(options.only.begin(), options.only.end(), id) != options.only.end();
  };
  model->eval();
  policy::TransformerLM ref = options.reference_model.is_empty() ? model : options.reference_model;
  ref->eval();
  std::vector<AuditCheck> out;
  out.push_back(Finite(model));
  if (!out[0].passed) {
    for (size_t i = 1; i < kIds.size(); ++i)
      if (want(kIds[i])) {
        AuditCheck s{kIds[i], kIds[i]};
        s.skipped = true;
        s.note = "Not run: the model's weights are not finite (check 'finite').";
        out.push_back(s);
      }
    return out;
  }
  auto states = CollectStates(env, renderer, options.states, options.seed);
  if (renderer.config().reasoning) AppendGreedyThoughts(model, renderer, states);
  int64_t wanted = 0;
  for (size_t i = 1; i < kIds.size(); ++i) wanted += want(kIds[i]);
  if (options.progress && !states.empty()) LogAuditCost(model, renderer, states, options, wanted);
  Progress progress("audit checks", wanted, options.progress, /*every_s=*/0);
  auto run = [&](const std::string& id, const std::function<AuditCheck()>& check) {
    if (!want(id)) return;
    out.push_back(check());
    progress.Update(static_cast<int64_t>(out.size()) - 1,
                    fmt::format("({} {})", id, out.back().skipped ? "skipped" : out.back().passed ? "passed" : "failed"));
  };
  run("marginalisation", [&] { return Marginalisation(model, ref, renderer, states); });
  run("rao_blackwell",
      [&] { return RaoBlackwell(model, ref, renderer, states, options.mc_samples, options.seed); });
  run("ppo_gradient", [&] { return PpoGradient(model, renderer, states, options.seed); });
  run("teaching", [&] { return Teaching(model, renderer, states); });
  run("label_bias", [&] { return LabelBias(model, renderer, states, env, options.seed); });
  return out;
}

bool Failed(const AuditCheck& c) { return !c.skipped && !c.informational && !c.passed; }

int CountFailed(const std::vector<AuditCheck>& checks) {
  return static_cast<int>(std::count_if(checks.begin(), checks.end(), Failed));
}

std::string FormatAudit(const std::vector<AuditCheck>& checks) {
  std::string out;
  int i = 0;
  for (const auto& c : checks) {
    const char* verdict = c.skipped         ? "SKIPPED"
                          : c.informational ? "INFO"
                                            : (c.passed ? "PASS" : "FAIL");
    out += fmt::format("{}. {}  [{}]\n", i++, c.title, verdict);
    size_t w = 0;
    for (const auto& [k, v] : c.numbers) w = std::max(w, k.size());
    for (const auto& [k, v] : c.numbers) out += fmt::format("   {:<{}}  {}\n", k, w, v);
    if (!c.note.empty()) out += "   " + c.note + "\n";
    out += "\n";
  }
  return out;
}

}  // namespace rlid::trainers

// Audit check 2, Rao-Blackwell: the sampled-realisation gradient estimator vs
// the marginal one, exact means, Monte-Carlo means and variances.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <tuple>

#include "core/error.h"
#include "core/rng.h"
#include "trainers/analysis/audit/audit_internal.h"

namespace rlid::trainers::audit_internal {
namespace {

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
  policy::ReadoutBatch Readout() { return policy::Readout(model_, {req_}, {policy::Normalisation::kMenu, false}); }
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

}  // namespace

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

}  // namespace rlid::trainers::audit_internal

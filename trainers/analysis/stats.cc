// Success estimates, Welch intervals and Student's t (regularised incomplete
// beta by Lentz's continued fraction, inverted by bisection).
#include "trainers/analysis/stats.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace rlid::trainers {
namespace {

// Continued fraction of the incomplete beta function (modified Lentz).
double BetaContinuedFraction(double a, double b, double x) {
  constexpr double kTiny = 1e-300, kEps = 1e-15;
  double c = 1, d = 1 - (a + b) * x / (a + 1);
  if (std::abs(d) < kTiny) d = kTiny;
  d = 1 / d;
  double h = d;
  for (int m = 1; m <= 10000; ++m) {
    const double m2 = 2.0 * m;
    double aa = m * (b - m) * x / ((a - 1 + m2) * (a + m2));
    d = 1 + aa * d;
    if (std::abs(d) < kTiny) d = kTiny;
    c = 1 + aa / c;
    if (std::abs(c) < kTiny) c = kTiny;
    d = 1 / d;
    h *= d * c;
    aa = -(a + m) * (a + b + m) * x / ((a + m2) * (a + 1 + m2));
    d = 1 + aa * d;
    if (std::abs(d) < kTiny) d = kTiny;
    c = 1 + aa / c;
    if (std::abs(c) < kTiny) c = kTiny;
    d = 1 / d;
    const double del = d * c;
    h *= del;
    if (std::abs(del - 1) < kEps) break;
  }
  return h;
}

// I_x(a, b), given x and y = 1 - x (computed without cancellation by the caller).
double RegularisedBeta(double x, double y, double a, double b) {
  if (x <= 0) return 0;
  if (y <= 0) return 1;
  const double front = std::exp(std::lgamma(a + b) - std::lgamma(a) - std::lgamma(b) +
                                a * std::log(x) + b * std::log(y));
  if (x < (a + 1) / (a + b + 2)) return front * BetaContinuedFraction(a, b, x) / a;
  return 1 - front * BetaContinuedFraction(b, a, y) / b;
}

}  // namespace

double StudentTCdf(double t, double df) {
  if (!(df > 0)) throw InternalError(fmt::format("Student t with df = {}", df));
  const double x = df / (df + t * t), y = t * t / (df + t * t);
  const double tail = 0.5 * RegularisedBeta(x, y, df / 2, 0.5);
  return t >= 0 ? 1 - tail : tail;
}

double StudentTQuantile(double p, double df) {
  if (!(p > 0 && p < 1)) throw InternalError(fmt::format("t quantile of p = {}", p));
  double lo = -1e6, hi = 1e6;
  for (int i = 0; i < 200 && hi - lo > 1e-12 * std::max(1.0, std::abs(hi)); ++i) {
    const double mid = 0.5 * (lo + hi);
    (StudentTCdf(mid, df) < p ? lo : hi) = mid;
  }
  return 0.5 * (lo + hi);
}

SuccessEstimate EstimateSuccess(const std::vector<double>& per_seed, int64_t episodes) {
  SuccessEstimate e;
  e.seeds = static_cast<int>(per_seed.size());
  if (per_seed.empty()) return e;
  const double S = static_cast<double>(e.seeds);
  double binom_var = 0;
  for (double p : per_seed) {
    e.mean += p / S;
    if (episodes > 0) {
      // Agresti-Coull: 0/n and n/n successes still carry test noise.
      const double n = static_cast<double>(episodes), q = (p * n + 2) / (n + 4);
      binom_var += q * (1 - q) / (n + 4);
    }
  }
  double ss = 0;
  for (double p : per_seed) ss += (p - e.mean) * (p - e.mean);
  e.seed_sd = e.seeds > 1 ? std::sqrt(ss / (S - 1)) : 0.0;
  e.binomial_se = std::sqrt(binom_var) / S;
  e.se = std::max(e.seed_sd / std::sqrt(S), e.binomial_se);
  return e;
}

GapEstimate CompareSuccess(const SuccessEstimate& a, const SuccessEstimate& b, double level) {
  GapEstimate g;
  g.gap = a.mean - b.mean;
  g.lo = g.hi = g.gap;
  if (a.seeds < 2 || b.seeds < 2) return g;  // comparable = false, tie = true
  g.comparable = true;
  const double va = a.se * a.se, vb = b.se * b.se, v = va + vb;
  if (v <= 0) {  // both arms exact (all seeds 0 or all 1 with no test noise)
    g.df = a.seeds + b.seeds - 2;
    g.tie = g.gap == 0;
    return g;
  }
  g.df = v * v / (va * va / (a.seeds - 1) + vb * vb / (b.seeds - 1));
  const double q = StudentTQuantile(0.5 + level / 2, g.df);
  g.lo = g.gap - q * std::sqrt(v);
  g.hi = g.gap + q * std::sqrt(v);
  g.tie = g.lo <= 0 && g.hi >= 0;
  return g;
}

}  // namespace rlid::trainers

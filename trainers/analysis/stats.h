// The statistics behind `rlid compare`'s verdict: an arm's test success over
// seeds with the test episodes' own (binomial) noise, and a Welch confidence
// interval for the gap between two arms. Pure functions, no trainer state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace rlid::trainers {

// An arm's mean test success over seeds and the standard error of that mean.
struct SuccessEstimate {
  int seeds = 0;
  double mean = 0;
  double seed_sd = 0;      // sample sd of the per-seed success rates (0 for one seed)
  // The test episodes' noise: sqrt(sum_s q_s (1 - q_s) / (n + 4)) / S with the
  // Agresti-Coull q_s = (n p_s + 2) / (n + 4), so 0/n and n/n still count.
  double binomial_se = 0;
  // Standard error of `mean`: the seed spread sd / sqrt(S) (which already holds
  // the test noise of each seed's evaluation), floored by binomial_se so that
  // seeds that happen to agree do not claim a precision the test set cannot give.
  double se = 0;
};
// per_seed: the final success rate of each seed, each from `episodes` test episodes.
SuccessEstimate EstimateSuccess(const std::vector<double>& per_seed, int64_t episodes);

// a.mean - b.mean with a two-sided confidence interval.
struct GapEstimate {
  double gap = 0, lo = 0, hi = 0;
  double df = 0;         // Welch-Satterthwaite degrees of freedom
  bool comparable = false;  // false: an arm has a single seed — no claim about the gap
  bool tie = true;          // the interval includes 0 (or not comparable)
};
GapEstimate CompareSuccess(const SuccessEstimate& a, const SuccessEstimate& b,
                           double level = 0.95);

// Quantile of Student's t with `df` > 0 degrees of freedom (p in (0, 1)).
double StudentTQuantile(double p, double df);
// CDF of Student's t.
double StudentTCdf(double t, double df);

}  // namespace rlid::trainers

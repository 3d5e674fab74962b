// See rank_metrics.h: one Sum collective of (value, weight) pairs per rule.
#include "trainers/runtime/rank_metrics.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"

namespace rlid::trainers {

std::map<std::string, double> CombineRanks(const std::map<std::string, double>& local,
                                           double weight, const CombineRules& rules, Comm& comm,
                                           const char* what) {
  for (const auto& [k, v] : local)
    if (!rules.count(k))
      throw InternalError(fmt::format("{}: metric '{}' has no rule for combining ranks", what, k),
                          "add it to the CombineRules its trainer passes");
  if (!comm.distributed()) return local;
  std::vector<double> v;
  std::map<std::string, double> maxima;  // one collective each (few keys)
  for (const auto& [k, how] : rules) {
    if (how != Combine::kMax) continue;
    auto it = local.find(k);
    const double m = comm.Max(it != local.end() ? it->second : -std::numeric_limits<double>::infinity(), what);
    if (std::isfinite(m)) maxima[k] = m;
  }
  for (const auto& [k, how] : rules) {
    if (how == Combine::kMax) continue;
    auto it = local.find(k);
    const bool has = it != local.end();
    const bool sum = how == Combine::kSum;
    v.push_back(has ? (sum ? it->second : it->second * weight) : 0.0);
    v.push_back(has ? (sum ? 1.0 : weight) : 0.0);
  }
  v = comm.Sum(v, what);
  std::map<std::string, double> out;
  size_t i = 0;
  for (const auto& [k, how] : rules) {
    if (how == Combine::kMax) {
      if (maxima.count(k)) out[k] = maxima[k];
      continue;
    }
    const double value = v[i], w = v[i + 1];
    i += 2;
    if (w <= 0) continue;
    out[k] = how == Combine::kSum ? value : value / w;
  }
  return out;
}

}  // namespace rlid::trainers

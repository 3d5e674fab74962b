// Combining a metric that every rank computed over its own share of a batch
// into the value one process would have computed over the whole batch.
#pragma once

#include <map>
#include <string>

#include "trainers/runtime/dist.h"

namespace rlid::trainers {

// How the ranks' values of one metric combine.
enum class Combine {
  kSum,           // a term already divided by the job's count: the ranks' values add up
  kWeightedMean,  // a mean over the rank's items: the job's mean weights each rank by its items
  kMax,           // a maximum over the rank's items: the job's is the largest
};
using CombineRules = std::map<std::string, Combine>;

// The job's values of this rank's `local` metrics, each combined by its rule
// in `rules`; `weight` is this rank's item count (the weight of its means). A
// key that no rank reported stays absent. On one process: `local` itself.
// Every rank must call it with the same `rules` (one collective, `what`
// names it in errors). InternalError when `local` has a key without a rule.
std::map<std::string, double> CombineRanks(const std::map<std::string, double>& local,
                                           double weight, const CombineRules& rules, Comm& comm,
                                           const char* what);

}  // namespace rlid::trainers

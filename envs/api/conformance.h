// The conformance suite every environment must pass (OpenSpiel style):
// determinism by seed, clone independence, the menu contract, afterstates =
// Clone()+Apply(), free-text compilation of every realisation (and rejection of
// garbage), oracle optimality, exact state-graph values, and split-disjoint
// seeds. One implementation serves the unit tests (every registered env) and
// `rlid env check` (any env, external ones included), which prints what failed.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "envs/api/env.h"

namespace rlid::envs {

struct ConformanceOptions {
  int seeds = 12;                    // instances played by each check
  int graph_seeds = 4;               // instances whose state graph is enumerated
  size_t max_graph_states = 200000;  // a larger graph is not checked (counted as skipped)
  double max_graph_seconds = 60;     // per instance; a slower enumeration is not checked either
  int split_pairs = 200;             // train/test instance pairs compared
  bool huge_inputs = true;           // also compile 1 MB of garbage (costs ms per state)
  bool require_afterstates = false;  // a menu item without an afterstate is a failure
  int max_failures = 8;              // failure messages kept per check
};

struct ConformanceResult {
  enum class Status { kPassed, kFailed, kSkipped };
  std::string check;        // "menu", "compile", ...
  std::string description;  // what the check asserts
  Status status = Status::kPassed;
  std::vector<std::string> failures;  // the first max_failures, each with seed and step
  int64_t failure_count = 0;
  std::vector<std::string> fixes;  // how to fix the failures, each kind once
  std::string error;               // the error that stopped the check early ("" when none)
  std::string note;  // why skipped, or what was covered ("4 of 4 graphs")
  int64_t covered = 0;  // instances (graph check: graphs) actually checked
  double seconds = 0;
};
const char* StatusName(ConformanceResult::Status s);

// An error's message as an env's author should read it: the source location
// and expression of a failed internal check (core/check.h) are left out.
std::string AuthorMessage(const std::string& message);

// The checks, in the order RunConformance runs them.
const std::vector<std::string>& ConformanceChecks();
// One check by name (ConfigError for an unknown name, listing the known ones).
ConformanceResult RunConformanceCheck(const Env& env, std::string_view check,
                                      const ConformanceOptions& opt = {});
// Every check; `on_done` (optional) sees each result as it finishes. Checks
// that throw (an external env's process dying, say) fail with the message.
// An env-level error is reported once: when a check is stopped by an error
// and the env cannot play even one episode, the remaining checks are skipped
// (their note says why); a check stopped by the same error as an earlier one
// refers to it instead of repeating it.
std::vector<ConformanceResult> RunConformance(
    const Env& env, const ConformanceOptions& opt = {},
    const std::function<void(const ConformanceResult&)>& on_done = {});

}  // namespace rlid::envs

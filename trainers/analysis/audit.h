// `rlid audit`: checks the decision-plane theory on the user's own checkpoint
// and env, printing every result with its numbers and tolerance. Every check
// compares quantities computed independently of each other:
//   0. finite: every parameter of the model is finite (checked first; when it
//      fails the other checks are skipped, and the audit fails)
//   1. marginalisation: the single-pass readout's log p(a|s) vs log sum_r pi(r|s)
//      from one plain forward per realisation (log space, i.e. relative in p)
//   2. Rao-Blackwell: the sampled-realisation estimator's exact mean, Monte-Carlo
//      mean and variance from separately scored realisations vs the marginal
//      estimator's from the single-pass readout's log p(a|s); same mean, and the
//      marginal one has no more variance
//   3. PPO gradient check: decision-PPO loss gradient vs central finite
//      differences in float64, on a stated subset of the parameters
//   4. GRPO-family teaching cases on the loss library
//   5. label bias: position prior under shuffled menus, order flip rate, candidate
//      mass (informational)
// Any non-finite number a check compares fails that check, naming the number.
// Memory: the gradient checks stream; beyond the parameters and their .grad they
// hold O(1) parameter-tensor-sized temporaries (see RunAudit).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "envs/api/env.h"
#include "policy/model/model.h"
#include "policy/reading/prompt.h"

namespace rlid::trainers {

struct AuditOptions {
  int64_t states = 6;             // test-split states the checks run on
  int64_t mc_samples = 2000;      // Monte-Carlo draws per state (Rao-Blackwell)
  uint64_t seed = 0;              // seeds state selection, advantages, draws, directions
  std::vector<std::string> only;  // check ids to run (empty = all; "finite" always runs)
  // The model that scores realisations separately (the independent side of the
  // marginalisation and Rao-Blackwell checks); null = the audited model. Set a
  // different model (same config) only to show that the checks detect a
  // disagreement between the two sides; its parameters must require grad. Its
  // weights are not checked by `finite`.
  policy::TransformerLM reference_model{nullptr};
  bool progress = false;  // an info line with the ETA after each check (`rlid audit`)
};

struct AuditCheck {
  // finite | marginalisation | rao_blackwell | ppo_gradient | teaching | label_bias
  std::string id;
  std::string title;
  bool passed = true;
  bool informational = false;  // reports numbers without a pass/fail claim
  bool skipped = false;        // not run (the weights are not finite)
  std::vector<std::pair<std::string, std::string>> numbers;
  std::string note;
};

// Runs `finite` and then the selected checks on up to options.states test-split
// states. The model is shared with the caller and is modified temporarily:
// every .grad is released, and the ppo_gradient check converts the weights to
// float64 in place and back (exact), restoring each requires_grad flag; do not
// use the model concurrently. Throws ConfigError for an unknown check id or an
// env with no reachable non-terminal test state.
std::vector<AuditCheck> RunAudit(policy::TransformerLM model,
                                 const policy::PromptRenderer& renderer, const envs::Env& env,
                                 const AuditOptions& options);
std::string FormatAudit(const std::vector<AuditCheck>& checks);
// A check that ran, claims pass/fail and failed.
bool Failed(const AuditCheck& check);
int CountFailed(const std::vector<AuditCheck>& checks);

}  // namespace rlid::trainers

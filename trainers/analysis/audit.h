// `rlid audit`: checks the decision-plane theory on the user's own checkpoint
// and env, printing every result with its numbers:
//   1. marginalisation identity: single-pass p(a|s) = sum of separately scored pi(r|s)
//   2. Rao-Blackwell: sampled-realisation vs marginal gradient estimators have
//      the same mean (exactly, and within Monte-Carlo error) and the marginal
//      one has lower variance
//   3. PPO gradient check: decision-PPO loss gradient vs finite differences (float64)
//   4. GRPO-family teaching cases on the loss library
//   5. label bias: position prior under shuffled menus, order flip rate, candidate mass
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "envs/env.h"
#include "policy/model.h"
#include "policy/prompt.h"

namespace rlid::trainers {

struct AuditOptions {
  int64_t states = 6;             // test-split states the checks run on
  int64_t mc_samples = 2000;      // Monte-Carlo draws per state (Rao-Blackwell)
  uint64_t seed = 0;              // seeds state selection, advantages and draws
  std::vector<std::string> only;  // check ids to run (empty = all)
};

struct AuditCheck {
  std::string id;  // marginalisation | rao_blackwell | ppo_gradient | teaching | label_bias
  std::string title;
  bool passed = true;
  bool informational = false;  // reports numbers without a pass/fail claim
  std::vector<std::pair<std::string, std::string>> numbers;
  std::string note;
};

std::vector<AuditCheck> RunAudit(policy::TransformerLM model,
                                 const policy::PromptRenderer& renderer, const envs::Env& env,
                                 const AuditOptions& options);
std::string FormatAudit(const std::vector<AuditCheck>& checks);

}  // namespace rlid::trainers

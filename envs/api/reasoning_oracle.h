// An optional State capability (query with dynamic_cast, like those of
// envs/api/env.h): the worked reasoning behind the optimal action, for envs where
// a scratchpad matters (arith).
#pragma once

#include <string>

namespace rlid::envs {

// A State that can show how to work its optimal action out: a short worked
// scratchpad, one line (no newline), ending with the answer, for the warm
// start of policies that think before they decide. InternalError when terminal.
class ReasoningOracle {
 public:
  virtual ~ReasoningOracle() = default;
  virtual std::string OracleReasoning() const = 0;
};

}  // namespace rlid::envs

// How `rlid train`, `rlid sft` and `rlid eval` print an evaluation.
#pragma once

#include <string>

#include "trainers/runtime/trainer.h"

namespace rlid::cli {

// One line: success, return, length, invalid rate, p(optimal) when known,
// and how many test episodes it rests on.
void PrintEval(const std::string& what, const trainers::EvalResult& r);

}  // namespace rlid::cli

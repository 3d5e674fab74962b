// The JSON side of `rlid loss` and `rlid advantage` (docs/algorithms.md,
// "Checking"): one JSON object in, one out, float64 throughout. Exposed so tests
// can run the reference cases in-process; the commands in loss_command.cc wrap
// these with file / stdin handling.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace rlid::cli {

// {"loss": {...}, "kl": {...}, "inputs": {...}} ->
// {"loss": x, "grad_log_prob": [[..]], "metrics": {...}}. Throws ConfigError for
// unknown keys, bad values and shape mismatches; `source` names the input in messages.
nlohmann::json EvaluateLossCase(const nlohmann::json& doc, const std::string& source = "<json>");

// {"advantage": {...}, "kl": {...}, "inputs": {...}} -> {"advantages": [[..]], "returns": [[..]]}.
nlohmann::json EvaluateAdvantageCase(const nlohmann::json& doc,
                                     const std::string& source = "<json>");

// A JSON number, or "inf" / "-inf" / "nan" for non-finite values.
nlohmann::json JsonNumber(double x);

}  // namespace rlid::cli

// The one way a menu becomes a readout request: the rendered state's prompt,
// every item's realisations as the renderer writes them, and the tokenizer's end
// token. The decision rollout, the `policy` commands, the Python package, the
// audit and the benchmarks all build their requests here.
#pragma once

#include <vector>

#include "envs/api/menu.h"
#include "policy/reading/prompt.h"
#include "policy/reading/readout.h"

namespace rlid::policy {

// `prompt` ends with the answer prefix; all_realisations = false reads each
// item's label only (readout.realisations = "labels").
ReadoutRequest MenuReadoutRequest(const PromptRenderer& renderer, std::vector<TokenId> prompt,
                                  const envs::Menu& menu, bool all_realisations);

}  // namespace rlid::policy

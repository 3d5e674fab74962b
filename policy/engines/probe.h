// The weight-sync probe: after a sync, the engine's log-probs of a fixed token
// sequence must equal the trainer's (the training forward of the weights just
// synced) within the engine's tolerance; a stale engine, or one serving
// another adapter, fails it.
#pragma once

#include <vector>

#include "policy/engines/server_engine.h"
#include "policy/model/model.h"

namespace rlid::policy {

// 24 ids drawn from a fixed stream below `vocab` (the same for every run).
std::vector<TokenId> ProbeTokens(int64_t vocab);

// max over the probe's tokens of |log p_engine − log p_trainer| at temperature 1.
double ProbeMaxAbsDiff(ServerEngine& engine, TransformerLM& model);

}  // namespace rlid::policy

// The [readout] and [trainer.invalid] config tables of agents/rollout.h.
#include "agents/rollout.h"

namespace rlid::agents {

void ReadoutConfig::Load(ConfigNode n) {
  n.GetEnum("realisations", realisations,
            "realisations marginalised into p(a|s): the label and every realisation, or the label "
            "only");
  n.GetEnum("normalisation", normalisation,
            "renormalise over the menu, or keep the off-menu mass as an explicit outcome");
  n.Get("share_prefix", share_prefix,
        "compute a readout batch's common prompt prefix once (same numbers up to float "
        "rounding, fewer FLOPs)");
}

void InvalidConfig::Load(ConfigNode n) {
  n.GetEnum("rule", rule,
            "token plane: what an answer that compiles to no action does");
  n.Get("penalty", penalty, "reward of an invalid answer");
  n.Get("max_retries", max_retries,
        "penalty_retry: extra tries at the same state before the episode ends",
        IntRange::NonNegative());
}

}  // namespace rlid::agents

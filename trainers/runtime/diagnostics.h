// Run diagnostics: warnings a user can act on when a run cannot learn for a
// reason its own episodes show — token-plane answers that are mostly invalid,
// warm-start demonstrations that rarely succeed, episodes that end far earlier
// than the env's oracle ends them. The checks are pure functions of tallies;
// Train and RunSft log what they return (docs/training.md, "Bringing up a new
// env", says what to do about each).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "agents/rollout.h"

namespace rlid::trainers {

// What a batch of episodes did, for the checks below.
struct EpisodeTally {
  int64_t episodes = 0, successes = 0, steps = 0, invalid_steps = 0;
  // Invalid answers by kind: the reason with what varies elided (InvalidReasonKind:
  // "no menu action matches '…'"), so one kind counts every such answer.
  std::map<std::string, int64_t> invalid_reasons;
  void Add(const agents::EpisodeData& e);
  double SuccessRate() const { return episodes ? double(successes) / double(episodes) : 0.0; }
  double MeanLength() const { return episodes ? double(steps) / double(episodes) : 0.0; }
  double InvalidRate() const { return steps ? double(invalid_steps) / double(steps) : 0.0; }
};

// The reason's kind: quoted text -> '…', bracketed text -> (…), a lone
// capital (a label) -> X, digit runs -> N.
std::string InvalidReasonKind(const std::string& reason);

// Every answer invalid, or more than half of at least kMinAnswersToWarn: the
// share and the three commonest kinds of invalid answer, with what to try.
inline constexpr int64_t kMinAnswersToWarn = 8;
std::optional<std::string> InvalidAnswersWarning(const EpisodeTally& rollouts);

// Demonstrations that succeed in under half of their episodes teach the
// policy to fail (the oracle's success rate and sft.random_action_frac);
// none with random_action_frac = 1, whose demonstrations are random on purpose.
std::optional<std::string> DemonstrationsWarning(double demo_success, double random_action_frac);

// How the env's oracle plays the train seeds (episodes == 0: the env has none).
struct OracleReference {
  int64_t episodes = 0;
  double success = 0, mean_length = 0;
};
// Plays `episodes` train-seed episodes with the env's oracle (no model).
OracleReference MeasureOracle(agents::AgentContext ctx, int64_t episodes);

// The policy's episodes fail and last under half as long as the oracle's:
// something makes ending early pay (a step cost, the invalid rule "end").
std::optional<std::string> EarlyEndWarning(const EpisodeTally& rollouts, const OracleReference& oracle);

}  // namespace rlid::trainers

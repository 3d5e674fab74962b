// The token-plane trainer shared by GRPO, Dr. GRPO, DAPO and GSPO (one small
// file each sets its algorithm's defaults). It plays G episodes per env seed
// with the rollout engine, turns episode returns (or per-step discounted
// returns) into group-relative advantages broadcast over every response token,
// recomputes old log-probs with the training forward (shared-prefix scoring),
// keeps the rollout-engine log-probs for TIS/IcePop/reject, and optimises the
// policy loss of the shared library. DAPO's zero-variance group filtering
// (on the same shaped rewards the advantages use) resamples until the batch is
// full (bounded rounds) with honest accounting: generated = kept + dropped, for
// groups, responses and response tokens; the learner's scoring of dropped
// groups is counted in the update budget.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/rng.h"
#include "policy/reading/scoring.h"
#include "trainers/losses/loss_config.h"
#include "trainers/runtime/optim.h"
#include "trainers/runtime/trainer.h"

namespace rlid::trainers {

// One response of a kept episode, ready for the update.
struct TokenSample {
  const agents::StepData* step = nullptr;
  int episode = 0;  // index into the kept episodes
  double advantage = 0;
  // log pi_prox per response token: the learner's weights before this update,
  // when the episode was played with older ones (asynchronous rollouts with
  // loss.staleness.kind = decoupled); step->text.train_logp is then pi_behav.
  // Empty: the batch is on-policy, and train_logp is the surrogate's anchor.
  std::vector<float> prox_logp;
};

class TokenTrainer : public Trainer {
 public:
  TokenTrainer();
  ~TokenTrainer() override;
  policy::Plane plane() const override { return policy::Plane::kToken; }
  void Setup(const TrainerConfig& cfg, policy::TransformerLM model) override;
  RolloutAhead::Play Play(const IterationContext& c) override;
  Metrics Complete(IterationContext& c, PlayedBatch& batch) override;
  Metrics Prepare(IterationContext& c, const PlayedBatch& batch) override;
  Metrics Learn(IterationContext& c, const PlayedBatch& batch) override;
  void SaveState(const std::string& dir) const override;
  void LoadState(const std::string& dir) override;

 private:
  struct Prepared;
  Metrics Snr(IterationContext& c, const std::vector<TokenSample>& samples,
              const LossConfig& loss_cfg, const policy::ScoreOptions& sopts);
  std::unique_ptr<Optimizer> opt_;
  std::unique_ptr<Prepared> prepared_;  // from Prepare to Learn
};

// The shaped scores the advantages compare, and their groups. The score of a response is
//   return_mode "episode":    the episode's shaped return Σ_t r'_t, the same for every step;
//   return_mode "discounted": its step's return-to-go G_t = r'_t + γ G_{t+1} (γ = advantage.gamma),
// where r'_t = r_t + overlong shaping (DAPO, when overlong_buffer > 0) − kl.coef ·
// kl_per_step[e][t] (KL in the reward; empty = none). Scores are compared within the episode's
// group (spec.group): in "discounted" mode every step of every episode of the group is one member.
// An estimator that reads steps (gigpo) gets step rows instead: r'_t itself, with the step's
// episode and its state hash (the anchor), and computes its own returns.
struct ShapedScores {
  std::vector<double> scores;   // one per episode, or one per step ("discounted", step rows)
  std::vector<int64_t> groups;  // the episode's spec.group, per score
  std::vector<int64_t> episodes;  // step rows: the step's episode (index into `episodes`)
  std::vector<uint64_t> anchors;  // step rows: StepData::state_hash
};
ShapedScores ScoreEpisodes(const TrainerConfig& cfg, int max_new_tokens,
                           const std::vector<agents::EpisodeData>& episodes,
                           const std::vector<std::vector<double>>& kl_per_step = {});

// Group-relative advantages of ScoreEpisodes, one per response; steps without
// a response get no sample. With a distributed `comm` the estimator sees every
// rank's scores (groups are numbered job-wide), so batch-level statistics are
// the job's. Exposed for tests.
// `step_groups` (when given) receives the estimator's metrics over the job
// (gigpo: GigpoStepGroupMetrics).
std::vector<TokenSample> TokenAdvantages(
    const TrainerConfig& cfg, int max_new_tokens, const std::vector<agents::EpisodeData>& episodes,
    const std::vector<std::vector<double>>& kl_per_step = {}, Comm* comm = nullptr,
    std::vector<std::pair<std::string, double>>* step_groups = nullptr);

// Groups (by spec.group) whose shaped scores are all equal — std exactly 0, no
// gradient: DAPO's filter drops them. It uses the scores the advantages use.
std::vector<int64_t> ZeroVarianceGroups(const ShapedScores& s);

// Minibatches (indices into `samples`) of at most `size` responses that keep
// responses to the same prompt adjacent, so the shared-prefix forward encodes
// that prompt once: prompt buckets are shuffled by `rng` (in first-seen order
// when rng is null), concatenated, and cut every `size` responses.
std::vector<std::vector<size_t>> PromptMinibatches(const std::vector<TokenSample>& samples,
                                                   int64_t size, Rng* rng);
// The same over the responses' prompt hashes.
std::vector<std::vector<size_t>> PromptMinibatches(const std::vector<uint64_t>& prompt_hashes,
                                                   int64_t size, Rng* rng);

}  // namespace rlid::trainers

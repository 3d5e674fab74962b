// One training iteration of any algorithm, read top to bottom:
//
//   play     this rank's share of the train seeds, with the weights of the
//            batch's version (ahead on the rollout worker when
//            trainer.max_staleness > 0; rollout_ahead.h), then whatever the
//            trainer plays on top of it (DAPO's resampling);
//   record   every played episode into the store, with the weights that
//            played it (policy_version), and the rollout metrics of the job;
//   prepare  the trainer's scores and advantages;
//   learn    the trainer's update; the rollout engine takes the new weights;
//   measure  how stale the batch was and how long the learner waited for it.
//
// The loop around it (Train in trainer.h) adds the numeric guards, the budget,
// evaluation, checkpoints and the progress line. Every trainer gets
// asynchronous rollouts and recording from here, once.
#pragma once

#include <string>

#include "trainers/runtime/rollout_ahead.h"
#include "trainers/runtime/trainer.h"

namespace rlid::trainers {

class IterationRunner {
 public:
  // Sets `trainer` up on `model` (the learner's policy) and holds the rollout
  // worker of cfg.max_staleness.
  IterationRunner(Trainer& trainer, const TrainerConfig& cfg, policy::TransformerLM model);

  // One iteration (c.iteration): play -> record -> prepare -> learn; returns
  // its metrics. With no episode to learn from in the whole job (env failures
  // dropped every one) the update is skipped and the metrics say so.
  Metrics Run(IterationContext& c);

  // Checkpoints (--resume): the trainer's optimiser state and the weight
  // versions that later batches are played with.
  void SaveState(const std::string& dir) const;
  void LoadState(const std::string& dir);

  Trainer& trainer() { return trainer_; }

 private:
  Trainer& trainer_;
  RolloutAhead ahead_;
};

}  // namespace rlid::trainers

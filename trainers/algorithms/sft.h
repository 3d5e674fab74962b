// Warm start by behaviour cloning (`rlid sft`): oracle trajectories on train
// seeds (optionally with a fraction of random actions, so the start is
// imperfect) teach both planes at once — cross-entropy on the decision-plane
// label readout, LM loss on the token-plane answer text — plus a plain LM loss
// on the prompt text so a fresh model learns the vocabulary of observations
// and menus. The checkpoint it writes is the shared start of every arm.
#pragma once

#include <string>

#include "trainers/runtime/run.h"
#include "trainers/runtime/trainer.h"

namespace rlid::trainers {

struct SftResult {
  std::string checkpoint;  // <run_dir>/checkpoints/sft
  int64_t examples = 0;    // decisions in the demonstrations
  double final_loss = 0;
  double demo_success = 0;  // success rate of the demonstrations themselves
  EvalResult decision_greedy, token_greedy;
};

// Demonstrations, training and evaluation of both planes; the checkpoint goes
// to <run.dir>/checkpoints/sft. The model work is logged as the run's update
// budget (budget/update_*), evaluation as budget/eval_*.
SftResult RunSft(Run& run, bool quiet = false);

}  // namespace rlid::trainers

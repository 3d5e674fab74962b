// `--nproc N` and torchrun's variables for the commands that train
// (train, compare): whether this process launches ranks, is one, or is alone.
#pragma once

#include <memory>

#include "cli/command.h"
#include "trainers/runtime/dist.h"
#include "trainers/runtime/experiment.h"

namespace rlid::cli {

class DistJob {
 public:
  ~DistJob();
  void Add(CLI::App& app);
  // Call first in the command, with its loaded config. With --nproc N > 1 in a
  // process that is not a rank yet (no WORLD_SIZE): starts N ranks running
  // this command line, waits for them and returns false (the command is done;
  // DistError when a rank failed). Otherwise joins the job the torchrun
  // variables describe (a job of one without them), makes it the process's
  // Comm (trainers::ProcessComm) and returns true: run the command as this rank.
  bool Enter(const trainers::ExperimentConfig& cfg);
  // Rank 0 (or a job of one): the rank that prints results.
  bool lead() const { return !comm_ || comm_->rank() == 0; }

 private:
  int nproc_ = 1;
  std::unique_ptr<trainers::Comm> comm_;
};

}  // namespace rlid::cli

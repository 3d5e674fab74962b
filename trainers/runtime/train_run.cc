#include "trainers/runtime/train_run.h"

#include "trainers/runtime/run.h"

namespace rlid::trainers {

TrainRunResult TrainRun(const ExperimentConfig& cfg, const TrainRunOptions& opt) {
  auto trainer = TrainerRegistry::Global().Make(cfg.trainer.algorithm);
  Run run(cfg, {.out_dir = opt.out,
                .kind = RunKind::kTrain,
                .arm = cfg.trainer.algorithm,
                .resume = opt.resume,
                .record = opt.record,
                .new_run_directory = true});
  TrainRunResult out;
  out.result = Train(run, *trainer, {.resume = opt.resume, .quiet = false});
  run.End("completed");
  out.run_dir = run.dir;
  return out;
}

}  // namespace rlid::trainers

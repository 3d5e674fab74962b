// A run: the objects one experiment is made of, built from its config — run
// directory, SQLite store and its writer, env, tokenizer, prompt renderer,
// model (+ frozen reference, + rollout engine), memory bank, budget. `Run` is
// only the owner that builds them; the layers below it (an algorithm's
// iteration, evaluation, rollouts, losses) receive just the parts they use:
// an agents::AgentContext to play episodes, a Recorder for what goes to the
// store, the agents::Budget they spend.
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "agents/budget.h"
#include "agents/rollout.h"
#include "memory/memory_bank.h"
#include "memory/store.h"
#include "memory/writer.h"
#include "policy/model/model.h"
#include "policy/reading/prompt.h"
#include "policy/reading/rollout_engine.h"
#include "policy/reading/sampler.h"
#include "policy/tokenizer/tokenizer.h"
#include "trainers/runtime/diagnostics.h"
#include "trainers/runtime/dist.h"
#include "trainers/runtime/experiment.h"
#include "trainers/runtime/resume_point.h"

namespace rlid::trainers {

using Metrics = std::vector<std::pair<std::string, double>>;

// Where a run's records go: its row in the store, through the store's single
// writer. Episodes (steps, menus, memory items and reads) are recorded only
// when provenance recording is on; metrics and checkpoints always are. Time
// spent submitting counts as `times->logging` when given.
class Recorder {
 public:
  Recorder(memory::Writer& writer, int64_t run_id, bool record_episodes,
           agents::StageTimes* times = nullptr)
      : writer_(writer), run_id_(run_id), record_(record_episodes), times_(times) {}
  void Episodes(const std::vector<agents::EpisodeData>& episodes, const agents::AgentContext& ctx);
  void Metrics(int64_t iteration, const trainers::Metrics& metrics);
  void Checkpoint(int64_t iteration, const std::string& path);
  // Blocks until everything submitted so far is committed.
  void Flush();
  int64_t run_id() const { return run_id_; }
  bool records_episodes() const { return record_; }
  // What the training rollouts submitted since the last call did (recorded or
  // not), for the run diagnostics; resets the tally.
  EpisodeTally TakeRolloutTally() { return std::exchange(rollouts_, {}); }

 private:
  memory::Writer& writer_;
  int64_t run_id_;
  bool record_;
  agents::StageTimes* times_;
  EpisodeTally rollouts_;
};

// What a run is (runs.kind in the store).
// kInit: a comparison's saved fresh initialisation (compare.warm_start = "none");
// kBench: `rlid bench train`'s runs.
enum class RunKind { kTrain, kSft, kEval, kCompare, kInit, kBench };
constexpr auto Spellings(RunKind) {
  return ModeNames<RunKind>({{RunKind::kTrain, "train"},
                             {RunKind::kSft, "sft"},
                             {RunKind::kEval, "eval"},
                             {RunKind::kCompare, "compare"},
                             {RunKind::kInit, "init"},
                             {RunKind::kBench, "bench"}});
}

struct RunOptions {
  std::string out_dir;                      // run directory; empty = runs/<name>-<timestamp>
  RunKind kind = RunKind::kTrain;
  std::string arm;                          // runs.arm
  // Continue the run of out_dir from checkpoints/latest: its tokenizer.json,
  // the same `runs` row, the store truncated to what the checkpoint had seen
  // and the memory bank restored from it (see Run::resume_checkpoint).
  bool resume = false;
  std::string config_file = "config.toml";  // where the resolved config is written ("" = not)
  bool quiet = false;                       // no info log line
  // Provenance records (episodes, steps, menus, memory items and reads) go to
  // the store; off = only runs, metrics and checkpoints (`rlid bench train`
  // measures the overhead of recording this way).
  bool record = true;
  // Where Train writes checkpoints, relative to the run directory (compare
  // gives every arm x seed its own, so their iter_N never collide).
  std::string checkpoints = "checkpoints";
  // The directory is another run's (`rlid eval` of a checkpoint records into
  // the run that wrote it): only the store is written, as a new `runs` row;
  // its config.toml, model.json, tokenizer.json and checkpoints stay untouched.
  bool shared_directory = false;
  // false: this process alone, outside its data-parallel job (the warm start
  // of `rlid compare --nproc N`, which rank 0 trains while the others wait).
  bool job = true;
  // A new run of its own (train and sft without --resume): a directory that
  // already holds a run is refused (RefuseExistingRun) before anything is made.
  bool new_run_directory = false;
};

// True when `dir` holds a run: its store, a resolved config or checkpoints.
bool HoldsRun(const std::string& dir);
// ConfigError (exit 2) when `dir` holds a run: a new run there would overwrite
// its config.toml and move its checkpoints/latest, so a later --resume would
// continue the wrong weights. `command` (train | sft | compare) shapes the hint.
void RefuseExistingRun(const std::string& dir, RunKind command);

// Points runs/latest at `dir` when `dir` sits directly in ./runs (a symlink
// replaced atomically); elsewhere it does nothing. Every run directory a
// command makes goes through here.
// Returns the link's previous target ("" when there was none or nothing changed).
std::string PointRunsLatestAt(const std::string& dir);
// runs/latest back at `before` (removed when empty), if it still points at `dir`.
void RestoreRunsLatest(const std::string& dir, const std::string& before);
// The run directory that holds `checkpoint` (its nearest ancestor, up to three
// levels up, that contains rlid.db), or "" when it belongs to no run (an HF
// model directory, a copied checkpoint).
std::string RunDirectoryOf(const std::string& checkpoint);

class Run {
 public:
  // Builds the env, tokenizer and loaded model first (a bad config, policy.init
  // or env creates nothing), then creates the run directory, writes the
  // resolved config, opens the store,
  // (a data-parallel rank r > 0: its shard, memory::ShardFileName; only rank 0
  // writes the directory's other files and owns the `runs` row, which the
  // shards mirror),
  // builds env/tokenizer/model/renderer/bank, and begins a `runs` row — or,
  // with RunOptions::resume, reopens the checkpoint's row after deleting
  // everything recorded after the checkpoint (one transaction) and restores
  // the memory bank, so the resumed run continues exactly where it stood.
  Run(const ExperimentConfig& cfg, RunOptions options);
  ~Run();  // ends the run row as "interrupted" (a stop signal arrived) or "failed" unless End() was called

  // The parts a rollout of `plane` at `iteration` uses (the token plane's
  // rollout engine is created on first use and synced with the policy).
  agents::AgentContext Agent(policy::Plane plane, int64_t iteration);
  // The rollout engine [sampler] engine names, created on first use serving
  // the policy's weights as `version`. A server engine writes under
  // dir/engine (dir/engine/rank<r> for rank r of a multi-rank job: every rank
  // has its own engine).
  policy::RolloutEngine& Sampler(int64_t version = 0);
  // Makes the rollout engine, when one exists, serve the policy's weights as
  // `version` (after an update or a restore; a new engine serves them when it
  // is created); the seconds go into budget.engine_sync_seconds.
  void SyncSampler(int64_t version);
  Recorder& recorder() { return *recorder_; }
  void End(const std::string& status);

  const ExperimentConfig& cfg;
  Comm& comm;                   // the job this run is one rank of (ProcessComm)
  std::string dir;              // the run directory
  std::string checkpoints_dir;  // dir / RunOptions::checkpoints
  torch::Device device{torch::kCPU};
  std::unique_ptr<envs::Env> env;
  policy::Tokenizer tokenizer;
  std::unique_ptr<policy::PromptRenderer> renderer;
  policy::TransformerLM model{nullptr};
  policy::TransformerLM ref_model{nullptr};  // frozen copy of the initial policy (KL)
  std::unique_ptr<memory::Store> store;
  std::unique_ptr<memory::Writer> writer;
  std::unique_ptr<memory::MemoryBank> bank;
  int64_t run_id = 0;
  agents::Budget budget;
  agents::StageTimes times;  // where the run's wall-clock went (rollout contexts add to it)
  // With RunOptions::resume: the checkpoint the run continues from (weights,
  // trainer state, budget and iteration are Train's to load); empty otherwise.
  std::string resume_checkpoint;
  // Resumed with fewer ranks than the checkpoint's job had: the last episode
  // and memory item ids of the shards of ranks >= comm.size() at that
  // checkpoint (they keep their history; every later checkpoint repeats them).
  std::map<int, std::pair<int64_t, int64_t>> idle_shards;

 private:
  // Loads policy.init (+ new or continued LoRA adapters) into model and
  // tokenizer; returns what was loaded, for model.json.
  nlohmann::json LoadInitModel();
  // A model of the [policy] size keys for the run's tokenizer, initialised
  // from the run seed; with LoRA its base is saved once in dir/base.
  void BuildFreshModel();
  // Finds checkpoints/latest and checks what it says against the store
  // (trainers/runtime/resume_point.h) before any file of the run changes;
  // sets resume_checkpoint and resume_point_.
  void FindResumePoint();
  // Truncates the store to the resume point, reopens its run row (a rank new
  // to the run mirrors `rec` under the run's id); sets run_id.
  void ResumeStore(memory::RunRecord rec);
  ResumePoint resume_point_;
  nlohmann::json resume_extra_;  // the checkpoint's rlid.json extra
  // Rank r > 0: ids of its shard start at r * memory::kShardIdStride + 1.
  void ApplyShardIdFloor();
  // The constructor's steps, in order. LoadEnvAndPolicy builds what a bad
  // config, env or policy.init can fail on, before any file is made, and
  // returns what policy.init loaded (model.json; null for a fresh model).
  // OpenRunDirectory creates dir and takes the store's one-writer lock.
  // WriteRunFiles writes the resolved config (returned, with the loaded
  // model's note) and model.json, or builds the fresh model. BeginRecords
  // opens the writer, the run row (new or resumed) and the memory bank.
  nlohmann::json LoadEnvAndPolicy(bool resume);
  void OpenRunDirectory();
  std::string WriteRunFiles(const RunOptions& options, bool own_files, const nlohmann::json& loaded);
  void BeginRecords(const RunOptions& options, const std::string& resolved);
  std::unique_ptr<policy::RolloutEngine> sampler_;
  std::unique_ptr<Recorder> recorder_;
  bool ended_ = false;
  std::string latest_before_;  // where runs/latest pointed before rank 0 pointed it at dir
  bool evaluation_ = false;  // kind "eval": nothing trains, policy.dtype applies to every weight
};

}  // namespace rlid::trainers

// An experiment: the TOML config of one run (every section as a typed struct
// with defaults in code) and the objects a run is made of — run directory,
// env, tokenizer, prompt renderer, model (+ frozen reference), SQLite store,
// writer and memory bank. `rlid train/sft/eval/compare` all build a Session.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agents/budget.h"
#include "agents/rollout.h"
#include "core/config.h"
#include "core/registry.h"
#include "envs/env.h"
#include "memory/memory_bank.h"
#include "memory/store.h"
#include "memory/writer.h"
#include "policy/model.h"
#include "policy/prompt.h"
#include "policy/sampler.h"
#include "policy/tokenizer.h"
#include "trainers/losses/loss_config.h"
#include "trainers/algorithms/optim.h"

namespace rlid::trainers {

struct RunConfig {
  std::string name = "run";    // run name (directory prefix under runs/)
  uint64_t seed = 1;           // every random stream derives from it
  std::string device = "cpu";  // cpu | cuda
  int threads = 0;             // LibTorch intra-op threads (0 = one per core)
  void Load(ConfigNode n);
};

struct TokenizerConfig {
  std::string path;               // tokenizer.json to use; empty = train one from env text
  int vocab_size = 1024;          // when training
  int64_t corpus_episodes = 200;  // random-play episodes per env for the training corpus
  void Load(ConfigNode n);
};

// [trainer] keys shared by every algorithm (+ sub-tables of the loss library).
struct TrainerConfig {
  std::string algorithm = "ppo_decision";  // registered trainer (rlid train --help lists them)
  int64_t iterations = 50;                 // outer iterations (rollout -> update)
  int64_t episodes_per_iteration = 32;     // rollout episodes per iteration
  int64_t group_size = 1;                  // episodes per env seed (group advantages)
  int64_t train_seed_pool = 0;             // > 0: draw train seeds from this many; 0 = fresh seeds
  int num_envs = 16;                       // episodes played in lockstep (batch of one forward)
  int64_t epochs = 4;                      // passes over the rollout batch
  int64_t minibatch_size = 64;             // decisions (decision plane) / responses (token plane)
  // Whiten GAE advantages per minibatch. Off by default: rewards here are
  // bounded, and once a task is solved the advantages are all ~0, so whitening
  // blows value-head noise up into full-size updates (measured on bandit).
  bool normalize_advantages = false;
  double vf_coef = 0.5;    // value loss weight
  double vf_clip = 0.0;    // value clip (0 = off)
  double ent_coef = 0.01;  // menu-entropy bonus
  double target_kl = 0.0;  // stop an iteration's epochs once the epoch's mean menu KL(old||new)
                           // exceeds it (0 = off)
  std::string estimator = "sampled";  // sampled | all_action (Rao-Blackwellised, decision plane)
  int64_t grad_variance_every =
      0;  // measure per-sample gradient variance every k iterations (0 = off)
  int64_t grad_variance_samples = 8;  // states per measurement
  int64_t eval_every = 5;         // evaluate on test seeds every k iterations (0 = only at the end)
  int64_t eval_episodes = 32;     // test episodes per evaluation
  bool eval_sampled = true;       // also evaluate the sampled (not only greedy) policy
  int64_t checkpoint_every = 10;  // write a checkpoint every k iterations (0 = only at the end)
  std::string budget =
      "iterations";               // iterations | env_steps | wall_clock | flops: what stops the run
  double budget_value = 0;        // the limit for env_steps / wall_clock (s) / flops
  OptimConfig optim;              // lr, schedule, clipping (keys live in [trainer])
  AdvantageConfig advantage;      // [trainer.advantage]
  LossConfig loss;                // [trainer.loss] (+ [trainer.loss.engine])
  KlConfig kl;                    // [trainer.kl]
  agents::InvalidConfig invalid;  // [trainer.invalid] (token plane)
  // DAPO extras ([trainer.sampling]).
  bool filter_zero_variance_groups = false;
  int64_t max_generation_rounds = 4;
  std::string on_partial_batch = "continue";  // continue | error
  int64_t overlong_buffer = 0;
  double overlong_factor = 1.0;
  std::string return_mode = "episode";  // token plane: episode return | discounted per-step return

  void Load(ConfigNode n);
};

// An algorithm's defining settings (advantage estimator, surrogate,
// aggregation, DAPO filtering, ...), applied to [trainer] before the user's
// keys are read, so the resolved config shows them and the user can still
// override any of them. Each algorithm file registers one under its name.
struct TrainerPreset {
  static constexpr const char* kRegistryKind = "trainer";
  std::function<void(TrainerConfig&)> apply;
};
using TrainerPresetRegistry = Registry<TrainerPreset>;

struct SftConfig {
  int64_t episodes = 256;  // oracle episodes (train seeds)
  double random_action_frac =
      0.1;  // fraction of random (non-oracle) actions, so the start is imperfect
  int64_t epochs = 3;
  int64_t batch_size = 32;
  double lr = 1e-3;
  double label_weight = 1.0;   // decision plane: cross-entropy of p(a*|s) (label readout)
  double answer_weight = 1.0;  // token plane: LM loss on the answer text
  std::string answer =
      "command";           // token-plane answer text: the command ("go north") or the label ("B")
  double lm_weight = 0.2;  // plain LM loss on the prompt text (learn the env's vocabulary)
  void Load(ConfigNode n);
};

struct ExperimentConfig {
  explicit ExperimentConfig(Config c) : raw(std::move(c)), env_section(raw.Root().Section("env")) {}
  Config raw;
  RunConfig run;
  ConfigNode env_section;  // [env] (read by the env factory)
  TokenizerConfig tokenizer;
  policy::ModelConfig model;
  std::string init_checkpoint;  // [policy] init: start from this checkpoint
  policy::PromptConfig prompt;
  agents::ReadoutConfig readout;
  policy::SamplerOptions sampler;
  memory::MemoryConfig memory;
  TrainerConfig trainer;
  SftConfig sft;

  // Loads every section, applies --set overrides, rejects unknown keys.
  static std::unique_ptr<ExperimentConfig> Load(const std::string& path,
                                                const std::vector<std::string>& sets);
  static std::unique_ptr<ExperimentConfig> FromConfig(Config cfg);
};

// Local time as YYYYmmdd-HHMMSS (default run directory names).
std::string Timestamp();

struct SessionOptions {
  std::string out_dir;                      // run directory; empty = runs/<name>-<timestamp>
  std::string kind = "train";               // train | sft | eval | compare (runs.kind)
  std::string arm;                          // runs.arm
  bool resume = false;                      // reuse the run directory's tokenizer.json
  std::string config_file = "config.toml";  // where the resolved config is written ("" = not)
  bool quiet = false;                       // no info log line
  // Provenance records (episodes, steps, menus, memory items and reads) go to
  // the store; off = only runs, metrics and checkpoints (`rlid bench train`
  // measures the overhead of recording this way).
  bool record = true;
  // Where Train writes checkpoints, relative to the run directory (compare
  // gives every arm x seed its own, so their iter_N never collide).
  std::string checkpoints = "checkpoints";
};

// The live objects of a run.
class Session {
 public:
  // Creates the run directory, writes the resolved config, opens the store,
  // builds env/tokenizer/model/renderer/bank, and begins a `runs` row.
  Session(const ExperimentConfig& cfg, SessionOptions options);
  ~Session();

  // An agent context for rollouts at this iteration.
  agents::AgentContext AgentCtx(int64_t iteration);
  // Records episodes to the store (and their memory items); nothing when
  // SessionOptions::record is off. Time spent counts as times.logging.
  void Record(const std::vector<agents::EpisodeData>& episodes, const agents::AgentContext& ctx);
  void LogMetrics(int64_t iteration, const std::vector<std::pair<std::string, double>>& metrics);
  void End(const std::string& status);

  const ExperimentConfig& cfg;
  std::string run_dir;
  std::string checkpoints_dir;  // run_dir / SessionOptions::checkpoints
  torch::Device device{torch::kCPU};
  std::unique_ptr<envs::Env> env;
  policy::Tokenizer tokenizer;
  std::unique_ptr<policy::PromptRenderer> renderer;
  policy::TransformerLM model{nullptr};
  policy::TransformerLM ref_model{nullptr};      // frozen copy of the initial policy (KL)
  std::unique_ptr<policy::TextSampler> sampler;  // token plane (created on demand)
  std::unique_ptr<memory::Store> store;
  std::unique_ptr<memory::Writer> writer;
  std::unique_ptr<memory::MemoryBank> bank;
  int64_t run_id = 0;
  agents::Budget budget;
  agents::StageTimes times;  // where the run's wall-clock went (rollout contexts add to it)
  bool record = true;        // SessionOptions::record

  policy::TextSampler& Sampler();

 private:
  bool ended_ = false;
};

// Builds or loads the tokenizer: checkpoint's, [tokenizer].path, or trained on env text.
policy::Tokenizer MakeTokenizer(const ExperimentConfig& cfg, const envs::Env& env);

}  // namespace rlid::trainers

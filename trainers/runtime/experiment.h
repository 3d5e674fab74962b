// An experiment's config: the TOML file of one run, every section a typed
// struct with its defaults in code (trainers/runtime/run.h builds the
// objects a run is made of from it).
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
#include "envs/api/env.h"
#include "memory/memory_bank.h"
#include "memory/store.h"
#include "memory/writer.h"
#include "policy/model/model.h"
#include "policy/reading/prompt.h"
#include "policy/engines/engine_config.h"
#include "policy/reading/sampler.h"
#include "policy/tokenizer/tokenizer.h"
#include "trainers/losses/loss_config.h"
#include "trainers/runtime/budget_kind.h"
#include "trainers/runtime/optim.h"

namespace rlid::trainers {

// The modes of the keys below (core/modes.h): their config spellings.
enum class KeepOptimizerState { kLatest, kAll };
constexpr auto Spellings(KeepOptimizerState) {
  return ModeNames<KeepOptimizerState>(
      {{KeepOptimizerState::kLatest, "latest"}, {KeepOptimizerState::kAll, "all"}});
}
enum class GradientEstimator { kSampled, kAllAction };
constexpr auto Spellings(GradientEstimator) {
  return ModeNames<GradientEstimator>(
      {{GradientEstimator::kSampled, "sampled"}, {GradientEstimator::kAllAction, "all_action"}});
}
enum class ReturnMode { kEpisode, kDiscounted };
constexpr auto Spellings(ReturnMode) {
  return ModeNames<ReturnMode>({{ReturnMode::kEpisode, "episode"}, {ReturnMode::kDiscounted, "discounted"}});
}
enum class PartialBatch { kContinue, kError };
constexpr auto Spellings(PartialBatch) {
  return ModeNames<PartialBatch>({{PartialBatch::kContinue, "continue"}, {PartialBatch::kError, "error"}});
}
enum class SftAnswer { kCommand, kLabel };
constexpr auto Spellings(SftAnswer) {
  return ModeNames<SftAnswer>({{SftAnswer::kCommand, "command"}, {SftAnswer::kLabel, "label"}});
}

struct RunConfig {
  std::string name = "run";      // run name (directory prefix under runs/)
  uint64_t seed = 1;             // every random stream derives from it
  std::string device = "cpu";    // cpu | cuda | cuda:N | auto (policy::ResolveDevice)
  int threads = 0;               // LibTorch intra-op threads (0 = one per core)
  int64_t keep_checkpoints = 0;  // keep the newest N iteration checkpoints (0 = all)
  // Which checkpoints keep optimizer.pt: "latest" (resume's; older ones keep
  // weights only, which is 2/3 less for Adam on LoRA) | "all".
  KeepOptimizerState optimizer_state = KeepOptimizerState::kLatest;
  // Data-parallel jobs (rlid train --nproc N, or torchrun's variables):
  double dist_timeout_s = 300;  // rendezvous and every collective wait this long for a rank
  int64_t dist_bucket_mb = 25;  // gradient all-reduce bucket size
  void Load(ConfigNode n);
};

struct TokenizerConfig {
  std::string path;               // tokenizer.json to use; empty = train one from env text
  int vocab_size = 1024;          // when training
  int64_t corpus_episodes = 200;  // random-play episodes per env for the training corpus
  void Load(ConfigNode n);
};

// [trainer] keys only decision PPO reads (the decision plane's part).
struct DecisionPlaneConfig {
  // Whiten GAE advantages per minibatch. Off by default: rewards here are
  // bounded, and once a task is solved the advantages are all ~0, so whitening
  // blows value-head noise up into full-size updates (measured on bandit).
  bool normalize_advantages = false;
  double vf_coef = 0.5;    // value loss weight
  double vf_clip = 0.0;    // value clip (0 = off)
  double ent_coef = 0.01;  // menu-entropy bonus
  // trainer.gradient_estimator: how ∇ log p(a|s) is estimated: sampled (the
  // sampled action) | all_action (Rao-Blackwellised over the whole menu).
  GradientEstimator gradient_estimator = GradientEstimator::kSampled;
  // V(s_T) for episodes the step limit cut (false: a cut ends the return at 0).
  bool bootstrap_truncated = true;
  void Load(ConfigNode n);
  bool all_action() const { return gradient_estimator == GradientEstimator::kAllAction; }
};

// [trainer] keys only the token-plane trainers read (GRPO, Dr. GRPO, DAPO, GSPO).
struct TokenPlaneConfig {
  ReturnMode return_mode = ReturnMode::kEpisode;  // episode return | discounted per-step return
  // DAPO extras ([trainer.sampling]).
  bool filter_zero_variance_groups = false;
  int64_t max_generation_rounds = 4;
  PartialBatch on_partial_batch = PartialBatch::kContinue;
  int64_t overlong_buffer = 0;
  double overlong_factor = 1.0;
  void Load(ConfigNode n);
};

// [trainer]: the shared loop's keys (iterations, batch, evaluation,
// checkpoints, budget, optimiser), the loss library's sub-tables, and each
// plane's own part. Only the part of the algorithm's plane is read.
struct TrainerConfig {
  std::string algorithm = "ppo_decision";  // registered trainer (rlid train --help lists them)
  int64_t iterations = 50;                 // outer iterations (rollout -> update)
  int64_t episodes_per_iteration = 32;     // rollout episodes per iteration
  int64_t group_size = 1;                  // episodes per env seed (group advantages)
  int64_t train_seed_pool = 0;             // > 0: draw train seeds from this many; 0 = fresh seeds
  int num_envs = 16;                       // episodes played in lockstep (batch of one forward)
  int64_t epochs = 4;                      // passes over the rollout batch
  int64_t minibatch_size = 64;             // decisions (decision plane) / responses (token plane)
  // Asynchronous rollouts (trainers/runtime/rollout_ahead.h): iteration i
  // trains on episodes played with the weights of version max(0, i - s), the
  // policy after that many updates, while a worker plays ahead. 0 = synchronous.
  int64_t max_staleness = 0;
  double target_kl = 0.0;  // stop an iteration's epochs once the epoch's mean KL(old||new)
                           // exceeds it (0 = off)
  // Per-episode policy-gradient SNR (GradientSnr) every k iterations (0 = off),
  // on the first grad_snr_episodes episodes of the batch (same count in both planes).
  int64_t grad_snr_every = 0;
  int64_t grad_snr_episodes = 16;
  int64_t eval_every = 5;         // evaluate on test seeds every k iterations (0 = only at the end)
  int64_t eval_episodes = 32;     // test episodes per evaluation
  bool eval_sampled = true;       // also evaluate the sampled (not only greedy) policy
  bool eval_at_start = false;     // also evaluate the initial weights (iteration -1, 0 env steps)
  int64_t checkpoint_every = 10;  // write a checkpoint every k iterations (0 = only at the end)
  double max_weight_growth =
      10.0;  // stop when an iteration multiplies the trainable weights' norm by more (0 = off)
  // Iterations in a row whose every rollout episode was dropped after env
  // failures ([env] on_error = "drop_episode") before the run stops with an
  // EnvError; each such iteration skips its update.
  int64_t max_empty_iterations = 3;
  // What stops the run: iterations | env_steps (decision attempts) | wall_seconds
  // (training wall-clock) | flops (rollout + update FLOPs).
  BudgetKind budget = BudgetKind::kIterations;
  double budget_value = 0;        // the limit for env_steps / wall_seconds / flops
  OptimConfig optim;              // lr, schedule, clipping (keys live in [trainer])
  AdvantageConfig advantage;      // [trainer.advantage]
  LossConfig loss;                // [trainer.loss] (+ [trainer.loss.engine])
  KlConfig kl;                    // [trainer.kl]
  agents::InvalidConfig invalid;  // [trainer.invalid]
  DecisionPlaneConfig decision;   // read when the algorithm is in the decision plane
  TokenPlaneConfig token;         // read when it is in the token plane

  // Reads [trainer]: `algorithm` first, whose preset sets the defaults, then
  // the keys that algorithm's plane reads. A key only another algorithm reads
  // is a ConfigError naming the algorithm and listing the keys it reads; a
  // renamed key is a ConfigError naming its new name.
  void Load(ConfigNode n);
  // The keys of one plane (with their ranges), on top of the current values.
  void ReadKeys(ConfigNode n, policy::Plane plane);
};

// An algorithm's defining settings (advantage estimator, surrogate,
// aggregation, DAPO filtering, ...), applied to [trainer] before the user's
// keys are read, so the resolved config shows them and the user can still
// override any of them. Each algorithm file registers one under its name.
struct TrainerPreset {
  static constexpr const char* kRegistryKind = "trainer";
  std::function<void(TrainerConfig&)> apply;
  policy::Plane plane = policy::Plane::kToken;  // which plane's [trainer] keys it reads
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
  // Token-plane answer text: the command ("go north") or the label ("B").
  SftAnswer answer = SftAnswer::kCommand;
  double lm_weight = 0.2;  // plain LM loss on the prompt text (learn the env's vocabulary)
  // With prompt.reasoning: also the label readout on the same state's prompt
  // without reasoning, so one warm start serves arms that think and arms that
  // do not (compare arms with --set prompt.reasoning=false). 0 = off.
  double plain_weight = 1.0;
  void Load(ConfigNode n);
};

struct ExperimentConfig {
  explicit ExperimentConfig(Config c) : raw(std::move(c)), env_section(raw.Root().Section("env")) {}
  Config raw;
  RunConfig run;
  ConfigNode env_section;        // [env] (read by the env factory)
  bool show_steps_left = false;  // [env] show_steps_left: observations end with "Steps left: N."
  TokenizerConfig tokenizer;
  policy::ModelConfig model;
  std::string init_checkpoint;          // [policy] init: start from this checkpoint
  policy::LoraConfig lora;              // [policy.lora]: adapters on a frozen base (rank 0 = off)
  bool gradient_checkpointing = false;  // [policy]: recompute layers in backward (less memory)
  // Frozen copies of the weights (the KL reference model) in float32 or
  // bfloat16 (half the memory; their log-probs still come out in float32).
  policy::Precision policy_dtype = policy::Precision::kFloat32;
  policy::PromptConfig prompt;
  agents::ReadoutConfig readout;
  policy::SamplerOptions sampler;
  policy::EngineConfig engine;  // [sampler] engine and [sampler.vllm] / [sampler.openai]
  memory::MemoryConfig memory;
  TrainerConfig trainer;
  SftConfig sft;

  // Loads every section, applies --set overrides, rejects unknown keys.
  static std::unique_ptr<ExperimentConfig> Load(const std::string& path,
                                                const std::vector<std::string>& sets);
  static std::unique_ptr<ExperimentConfig> FromConfig(Config cfg);
  // Rules across sections (ConfigError naming the keys): group estimators need
  // groups, the all-action estimator needs a menu-normalised readout, DAPO's
  // overlong buffer must fit in the sampler's answer length.
  void CheckConsistency() const;
};

// Local time as YYYYmmdd-HHMMSS (default run directory names).
std::string Timestamp();

// Builds or loads the tokenizer: checkpoint's, [tokenizer].path, or trained on env text.
policy::Tokenizer MakeTokenizer(const ExperimentConfig& cfg, const envs::Env& env);

}  // namespace rlid::trainers

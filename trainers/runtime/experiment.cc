#include "trainers/runtime/experiment.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "core/strings.h"
#include "policy/model/checkpoint.h"
#include "policy/model/device.h"
#include "policy/model/runtime.h"
#include "policy/tokenizer/tokenizer_corpus.h"
#include "trainers/losses/advantages.h"

namespace rlid::trainers {
namespace fs = std::filesystem;

namespace {

// Upper bounds on the counts a run allocates or loops over per iteration, far above any run
// on one machine, so a typo (episodes_per_iteration = 2^31) is a ConfigError at load time,
// not an allocation that fails (or a rollout that runs for days) much later.
constexpr int64_t kMaxEpisodes = int64_t{1} << 20;      // per iteration, eval, SFT, corpus
constexpr int64_t kMaxBatch = int64_t{1} << 24;         // minibatch / SFT batch
constexpr int64_t kMaxLockstepEnvs = int64_t{1} << 16;  // num_envs
constexpr int64_t kMaxEpochs = int64_t{1} << 16;        // passes over one batch
constexpr int64_t kMaxNewTokens = int64_t{1} << 20;     // one answer
constexpr int64_t kMaxTokenizerVocab = int64_t{1} << 22;
constexpr size_t kMaxRunNameBytes = 128;

// run.name becomes a directory name under runs/: a single path component of at most
// kMaxRunNameBytes, not starting with '.' or '-', without '/', '\\' or control characters.
// Throws ConfigError citing `where`.
void ValidateRunName(const std::string& name, const std::string& where) {
  std::string problem;
  if (name.empty()) {
    problem = "is empty";
  } else if (name.size() > kMaxRunNameBytes) {
    problem = fmt::format("is {} bytes long (at most {})", name.size(), kMaxRunNameBytes);
  } else if (name.front() == '.' || name.front() == '-') {
    problem = fmt::format("starts with '{}'", name.front());
  } else {
    for (char c : name) {
      const auto u = static_cast<unsigned char>(c);
      if (c == '/' || c == '\\' || u < 0x20 || u == 0x7f) {
        problem = "holds a path separator or a control character";
        break;
      }
    }
  }
  if (problem.empty()) return;
  throw ConfigError(
      fmt::format("{}: 'run.name' names a directory under runs/, but \"{}\" {}", where,
                  name.size() > kMaxRunNameBytes ? name.substr(0, 40) + "..." : name, problem),
      "use a plain name such as \"maze_ppo\" (letters, digits, '_', '-', '.'); --out DIR "
      "chooses the whole directory");
}

}  // namespace

void RunConfig::Load(ConfigNode n) {
  n.Get("name", name, "run name (directory prefix under runs/)");
  ValidateRunName(name, n.Where("name"));
  n.Get("seed", seed, "run seed; every random stream derives from it");
  n.Get("device", device,
        "where tensors live: cpu | cuda (cuda:LOCAL_RANK) | cuda:N | auto (CUDA when a GPU is "
        "present, else the CPU)");
  if (!policy::IsDeviceSpec(device))
    throw ConfigError(fmt::format("{}: 'run.device' must be {}, found '{}'", n.Where("device"),
                                  policy::kDeviceChoices, device),
                      "\"auto\" uses the GPU when there is one and the CPU otherwise");
  n.Get("threads", threads, "LibTorch intra-op threads (0 = one per core)",
        IntRange::NonNegative());
  n.Get("keep_checkpoints", keep_checkpoints,
        "keep only the newest N iteration checkpoints (0 = keep all)", IntRange::NonNegative());
  n.GetEnum("optimizer_state", optimizer_state,
            "which checkpoints keep the optimizer state: latest (the one --resume continues "
            "from; older ones keep their weights only) | all");
  n.Get("dist_timeout_s", dist_timeout_s,
        "data-parallel jobs: how long rendezvous and every collective wait for the other ranks",
        Range::Positive());
  n.Get("dist_bucket_mb", dist_bucket_mb, "data-parallel jobs: gradient all-reduce bucket size",
        IntRange::AtLeast(1));
}

void TokenizerConfig::Load(ConfigNode n) {
  n.Get("path", path, "tokenizer.json to use; empty = train one from env text");
  n.Get("vocab_size", vocab_size, "vocabulary size when training (256 bytes + merges)",
        IntRange::Closed(257, kMaxTokenizerVocab));
  n.Get("corpus_episodes", corpus_episodes, "random-play episodes for the training corpus",
        IntRange::Closed(1, kMaxEpisodes));
}

void TrainerConfig::ReadKeys(ConfigNode n, policy::Plane plane) {
  const bool decision_plane = plane == policy::Plane::kDecision;
  n.Get("iterations", iterations, "outer iterations (rollout -> update)", IntRange::Positive());
  n.Get("episodes_per_iteration", episodes_per_iteration, "rollout episodes per iteration",
        IntRange::Closed(1, kMaxEpisodes));
  n.Get("group_size", group_size, "episodes per env seed (group advantages)",
        IntRange::Closed(1, kMaxEpisodes));
  n.Get("train_seed_pool", train_seed_pool, "> 0: draw train seeds from this many; 0 = fresh seeds",
        IntRange::NonNegative());
  n.Get("num_envs", num_envs, "episodes played in lockstep (one forward per step)",
        IntRange::Closed(1, kMaxLockstepEnvs));
  n.Get("epochs", epochs, "passes over each rollout batch", IntRange::Closed(1, kMaxEpochs));
  n.Get("minibatch_size", minibatch_size,
        "decisions (decision plane) or responses (token plane) per step",
        IntRange::Closed(1, kMaxBatch));
  n.Get("max_staleness", max_staleness,
        "asynchronous rollouts: train on episodes played with weights up to this many updates "
        "old while a worker plays ahead (0 = synchronous)",
        IntRange::Closed(0, 64));
  n.Get("target_kl", target_kl,
        decision_plane
            ? "stop an iteration's epochs once the epoch's mean exact KL(old || new) of the "
              "decision distribution exceeds this (0 = off)"
            : "stop an iteration's epochs once the epoch's mean approx_kl exceeds this (0 = off)",
        Range::NonNegative());
  n.Get("grad_snr_every", grad_snr_every,
        "measure the per-episode policy-gradient SNR every k iterations (0 = off)",
        IntRange::NonNegative());
  n.Get("grad_snr_episodes", grad_snr_episodes,
        "episodes per gradient-SNR measurement (the same in both planes)",
        IntRange::Closed(2, kMaxEpisodes));
  n.Get("eval_every", eval_every, "evaluate on test seeds every k iterations (0 = only at the end)",
        IntRange::NonNegative());
  n.Get("eval_episodes", eval_episodes, "test episodes per evaluation",
        IntRange::Closed(1, kMaxEpisodes));
  n.Get("eval_sampled", eval_sampled, "also evaluate the sampled policy (besides greedy)");
  n.Get("eval_at_start", eval_at_start,
        "also evaluate the initial weights (logged at iteration -1, 0 env steps)");
  n.Get("checkpoint_every", checkpoint_every, "checkpoint every k iterations (0 = only at the end)",
        IntRange::NonNegative());
  n.Get("max_weight_growth", max_weight_growth,
        "stop (NumericError, nothing checkpointed) when one iteration multiplies the norm of the "
        "trainable weights by more than this: exploding updates that stay finite (0 = off)",
        Range::GreaterThan(1).Or(0));
  n.Get("max_empty_iterations", max_empty_iterations,
        "iterations in a row whose every rollout episode an env failure dropped (each skips its "
        "update) before the run stops with an env error",
        IntRange::Positive());
  n.GetEnum("budget", budget,
            "what stops the run: env steps (every decision attempt), training wall-clock "
            "seconds, or rollout + update FLOPs");
  n.Get("budget_value", budget_value, "limit for env_steps / wall_seconds / flops",
        Range::NonNegative());
  optim.Load(n);
  advantage.Load(n.Section("advantage"), /*gae_keys=*/decision_plane);
  loss.Load(n.Section("loss"), /*sequence_keys=*/!decision_plane);
  kl.Load(n.Section("kl"), /*estimator_keys=*/!decision_plane);
  invalid.Load(n.Section("invalid"));
  if (decision_plane)
    decision.Load(n);
  else
    token.Load(n);
}

void DecisionPlaneConfig::Load(ConfigNode n) {
  n.Get("normalize_advantages", normalize_advantages, "whiten GAE advantages per minibatch");
  n.Get("vf_coef", vf_coef, "value-loss weight", Range::NonNegative());
  n.Get("vf_clip", vf_clip, "value clip range (0 = off)", Range::NonNegative());
  n.Get("ent_coef", ent_coef, "entropy bonus weight (entropy of the decision distribution)",
        Range::NonNegative());
  n.GetEnum("gradient_estimator", gradient_estimator,
            "decision policy gradient: sampled action, or Rao-Blackwellised over the whole menu");
  n.Get("bootstrap_truncated", bootstrap_truncated,
        "bootstrap an episode the step limit cut with V(s_T) (false: the cut is terminal, the "
        "finite-horizon return; env.show_steps_left = true also makes it terminal)");
}

void TokenPlaneConfig::Load(ConfigNode n) {
  n.GetEnum("return_mode", return_mode,
            "advantage from the episode return, or per-step discounted returns");
  auto s = n.Section("sampling");
  s.Get("filter_zero_variance_groups", filter_zero_variance_groups,
        "DAPO: drop groups whose (shaped) returns are all equal");
  s.Get("max_generation_rounds", max_generation_rounds,
        "DAPO: rollout rounds to fill a batch before giving up", IntRange::Positive());
  s.GetEnum(
      "on_partial_batch", on_partial_batch,
      "DAPO: when the rounds run out, train on the partial batch (logged) or stop with an error");
  s.Get("overlong_buffer", overlong_buffer,
        "DAPO overlong shaping buffer L_buf in tokens (0 = off)", IntRange::NonNegative());
  s.Get("overlong_factor", overlong_factor, "DAPO overlong penalty factor", Range::NonNegative());
}

namespace {

// Every [trainer] key some registered algorithm reads, from a scratch config
// per algorithm (computed once).
const std::set<std::string>& KnownTrainerKeys() {
  static const std::set<std::string> keys = [] {
    std::set<std::string> out;
    for (const auto& name : TrainerPresetRegistry::Global().Names()) {
      Config scratch;
      TrainerConfig t;
      auto preset = TrainerPresetRegistry::Global().Get(name).factory();
      preset->apply(t);
      t.ReadKeys(scratch.Root().Section("trainer"), preset->plane);
      for (auto& k : scratch.UsedKeys("trainer")) out.insert(k);
    }
    out.insert("trainer.algorithm");
    return out;
  }();
  return keys;
}

}  // namespace

void TrainerConfig::Load(ConfigNode n) {
  n.RejectRenamed("estimator", "gradient_estimator",
                  "the decision plane's policy-gradient estimator: sampled | all_action");
  n.Get("algorithm", algorithm, "registered trainer: ppo_decision, grpo, dr_grpo, dapo, gspo");
  // An unknown name is a ConfigError that lists the known ones.
  auto preset = TrainerPresetRegistry::Global().Get(algorithm).factory();
  preset->apply(*this);
  ReadKeys(n, preset->plane);
  // A key another algorithm reads but this one does not would be silently
  // ignored: say so, with what this algorithm does read. (A key no algorithm
  // knows is left to Config::CheckAllUsed, which suggests the nearest one.)
  const auto& known = KnownTrainerKeys();
  for (const auto& key : n.PresentKeys()) {
    if (n.IsUsed(key) || !known.count(key)) continue;
    std::vector<std::string> reads;
    for (const auto& k : known)
      if (n.IsUsed(k)) reads.push_back(k.substr(std::string("trainer.").size()));
    // Where the key came from: descend to its own table.
    auto parts = Split(key.substr(n.path().size() + 1), '.');
    ConfigNode at = n;
    for (size_t i = 0; i + 1 < parts.size(); ++i) at = at.Section(parts[i]);
    throw ConfigError(
        fmt::format("{}: {} does not apply to algorithm '{}' ({} plane), which would ignore it",
                    at.Where(parts.back()), key, algorithm, policy::PlaneName(preset->plane)),
        fmt::format("remove it (in `rlid compare`, set it in the [[compare.arm]] that uses it); "
                    "{} reads: {}",
                    algorithm, Join(reads, ", ")));
  }
  if (episodes_per_iteration % group_size != 0)
    throw ConfigError(
        fmt::format("{}: episodes_per_iteration = {} is not a multiple of group_size = {}",
                    n.Where("episodes_per_iteration"), episodes_per_iteration, group_size));
  if (budget != BudgetKind::kIterations && !(budget_value > 0))
    throw ConfigError(fmt::format("{}: trainer.budget = '{}' needs budget_value > 0", n.Where("budget"),
                                  NameOf(budget)));
}

void SftConfig::Load(ConfigNode n) {
  n.Get("episodes", episodes, "oracle episodes on train seeds", IntRange::Closed(1, kMaxEpisodes));
  n.Get("random_action_frac", random_action_frac,
        "fraction of random actions (imperfect demonstrations)", Range::Unit());
  n.Get("epochs", epochs, "passes over the demonstrations", IntRange::Closed(1, kMaxEpochs));
  n.Get("batch_size", batch_size, "decisions per optimiser step", IntRange::Closed(1, kMaxBatch));
  n.Get("lr", lr, "learning rate", Range::Positive());
  n.Get("label_weight", label_weight, "decision plane: cross-entropy on the label readout",
        Range::NonNegative());
  n.Get("answer_weight", answer_weight, "token plane: LM loss on the answer text",
        Range::NonNegative());
  n.GetEnum("answer", answer,
            "token-plane demonstration answer: the command text or the label letter");
  n.Get("lm_weight", lm_weight, "plain LM loss on the prompt text", Range::NonNegative());
  n.Get("plain_weight", plain_weight,
        "with prompt.reasoning: label readout on the prompt without reasoning too (arms that do "
        "not think share the warm start)",
        Range::NonNegative());
}

namespace {
void LoadSampler(ConfigNode n, policy::SamplerOptions& o) {
  n.Get("temperature", o.temperature, "token plane sampling temperature (0 = greedy)",
        Range::NonNegative());
  n.Get("top_p", o.top_p, "nucleus mass (1 = off)", Range::Closed(0, 1).OpenLow());
  n.Get("max_new_tokens", o.max_new_tokens, "longest answer in tokens",
        IntRange::Closed(1, kMaxNewTokens));
  n.GetEnum("dtype", o.dtype,
            "rollout-engine weights (bf16 = a different engine)");
  n.Get("top_k", o.top_k, "keep the k most probable tokens (0 = off)", IntRange::AtLeast(0));
  n.Get("kv_cache", o.kv_cache, "incremental decoding with a KV cache");
  n.Get("autocast", o.autocast,
        "on CUDA, a float32 engine runs its matmuls and attention in bf16 (autocast; log-probs "
        "stay float32); no effect on the CPU");
}
// [sampler] engine, [sampler.vllm], [sampler.openai] (docs/engines.md).
void LoadEngine(ConfigNode n, policy::EngineConfig& e) {
  n.GetEnum("engine", e.backend,
            "token-plane rollout engine: rlid (its own), vllm (a vLLM server rlid starts and owns) or "
            "openai (an OpenAI-compatible server at [sampler.openai] base_url)");
  n.Get("request_timeout_s", e.request_timeout_s, "a server engine's deadline per request",
        Range::Positive());
  n.Get("max_parallel_requests", e.max_parallel_requests, "a server engine's requests in flight at once",
        IntRange::AtLeast(1));
  n.Get("probe_tolerance", e.probe_tolerance,
        "a weight sync's probe fails above this max |delta log p| (0 = 0.02 float32, 0.5 bfloat16)",
        Range::NonNegative());
  ConfigNode v = n.Section("vllm");
  v.Get("python", e.vllm.python, "interpreter that imports vllm (\"\" = RLID_VLLM_PYTHON or .venv-vllm)");
  v.Get("port", e.vllm.port, "loopback port (0 = a free one)", IntRange::Closed(0, 65535));
  v.Get("startup_timeout_s", e.vllm.startup_timeout_s, "seconds until the server must be healthy",
        Range::Positive());
  v.Get("max_model_len", e.vllm.max_model_len, "prompt + generated tokens the server holds",
        IntRange::AtLeast(16));
  v.Get("cpu_kv_cache_gib", e.vllm.cpu_kv_cache_gib,
        "KV cache of vLLM's CPU build in GiB (VLLM_CPU_KVCACHE_SPACE)", IntRange::AtLeast(1));
  v.Get("gpu_memory_utilization", e.vllm.gpu_memory_utilization, "GPU memory share of vLLM's CUDA build",
        Range::Closed(0, 1).OpenLow());
  v.GetEnum("full_sync", e.vllm.full_sync,
            "full-parameter weight sync: restart the server on the new weights, or reload in place");
  v.Get("extra_args", e.vllm.extra_args, "more `vllm serve` arguments, as they are");
  ConfigNode o = n.Section("openai");
  o.Get("base_url", e.openai.base_url, "the server's OpenAI-compatible root (\"http://host:port/v1\")");
  o.Get("model", e.openai.model, "the served model's name");
  o.Get("api_key_env", e.openai.api_key_env, "environment variable with the API key (never the key itself)");
  o.GetEnum("sync", e.openai.sync, "weight sync: lora (hot-load each version's adapter) or none");
}

}  // namespace

std::unique_ptr<ExperimentConfig> ExperimentConfig::FromConfig(Config cfg) {
  auto e = std::make_unique<ExperimentConfig>(std::move(cfg));
  ConfigNode root = e->raw.Root();
  e->run.Load(root.Section("run"));
  e->env_section.Get("show_steps_left", e->show_steps_left,
                     "observations end with 'Steps left: N.' (the time limit becomes part of the "
                     "state; a cut episode is then not bootstrapped)");
  envs::MakeEnv(e->env_section);  // validates [env] now
  e->tokenizer.Load(root.Section("tokenizer"));
  ConfigNode pol = root.Section("policy");
  e->model.Load(pol);
  pol.Get("init", e->init_checkpoint,
          "start from this checkpoint: rlid sft/train output or a Hugging Face model directory; "
          "empty = fresh model");
  pol.GetEnum("dtype", e->policy_dtype,
              "frozen weights: the base under LoRA adapters (which is also the KL reference), "
              "else the KL reference copy; float32 or bfloat16");
  e->lora.Load(pol.Section("lora"));
  pol.Get("gradient_checkpointing", e->gradient_checkpointing,
          "activation checkpointing: gradient forwards keep only each layer's input and recompute "
          "the layer in backward (same gradients, less memory, one more forward)");
  e->prompt.Load(root.Section("prompt"));
  e->readout.Load(root.Section("readout"));
  LoadSampler(root.Section("sampler"), e->sampler);
  LoadEngine(root.Section("sampler"), e->engine);
  e->memory.Load(root.Section("memory"));
  e->trainer.Load(root.Section("trainer"));
  e->sft.Load(root.Section("sft"));
  root.Section("compare").MarkAllUsed();  // validated by `rlid compare`
  e->raw.CheckAllUsed();
  e->CheckConsistency();
  return e;
}

namespace {

// An estimator on step rows (gigpo) computes its own step returns from the
// per-step rewards; in the token plane these options would compare something else.
void CheckStepRowEstimator(ConfigNode root, const TrainerConfig& t) {
  const std::string& est = t.advantage.estimator;
  const std::string where = root.Section("trainer").Section("advantage").Where("estimator");
  if (TrainerPresetRegistry::Global().Get(t.algorithm).factory()->plane != policy::Plane::kToken)
    return;
  if (t.token.return_mode != ReturnMode::kEpisode)
    throw ConfigError(
        fmt::format("{}: estimator '{}' computes its own step returns (advantage.gamma), but "
                    "trainer.return_mode = '{}'",
                    where, est, NameOf(t.token.return_mode)),
        "leave trainer.return_mode = 'episode'");
  if (t.token.filter_zero_variance_groups)
    throw ConfigError(
        fmt::format(
            "{}: trainer.sampling.filter_zero_variance_groups drops groups whose episode returns "
            "are equal, but '{}' still moves them by its step term",
            where, est),
        "set trainer.sampling.filter_zero_variance_groups = false");
}

}  // namespace

void ExperimentConfig::CheckConsistency() const {
  ConfigNode root = const_cast<Config&>(raw).Root();
  const TrainerConfig& t = trainer;
  const std::string& est = t.advantage.estimator;
  // Group-relative estimators compare episodes of one env seed: a group of one
  // gives every advantage 0, and the run would train only its value/entropy terms.
  if (AdvantageRegistry::Global().Make(est)->needs_groups() && t.group_size < 2)
    throw ConfigError(
        fmt::format("{}: trainer.advantage.estimator = '{}' needs groups of at least 2 episodes "
                    "per env seed, but trainer.group_size = {} (algorithm '{}')",
                    root.Section("trainer").Where("group_size"), est, t.group_size, t.algorithm),
        "set trainer.group_size >= 2 (and episodes_per_iteration a multiple of it), or use "
        "estimator 'gae' in the decision plane");
  if (AdvantageRegistry::Global().Make(est)->needs_steps()) CheckStepRowEstimator(root, t);
  // A server engine serves one version at a time to the learner's rollouts.
  if (t.max_staleness > 0 && engine.backend != policy::EngineBackend::kRlid)
    throw ConfigError(
        fmt::format("{}: trainer.max_staleness = {} plays batches ahead with frozen earlier weights, which "
                    "[sampler] engine = \"{}\" does not serve yet",
                    root.Section("trainer").Where("max_staleness"), t.max_staleness, engine.backend),
        "set trainer.max_staleness = 0 with a server engine, or engine = \"rlid\"");
  // A worker plays one batch ahead per iteration; dynamic sampling decides
  // within an iteration how many rounds to play, from the whole job's groups.
  if (t.max_staleness > 0 && t.token.filter_zero_variance_groups &&
      TrainerPresetRegistry::Global().Get(t.algorithm).factory()->plane == policy::Plane::kToken)
    throw ConfigError(
        fmt::format("{}: asynchronous rollouts play each batch ahead in one round, but "
                    "trainer.sampling.filter_zero_variance_groups resamples rounds until the "
                    "batch is full (DAPO)",
                    root.Section("trainer").Where("max_staleness")),
        "set trainer.max_staleness = 0, or trainer.sampling.filter_zero_variance_groups = false");
  if (t.decision.all_action() && readout.off_menu_outcome())
    throw ConfigError(
        fmt::format(
            "{}: trainer.gradient_estimator = 'all_action' sums over the menu's actions, but "
            "readout.normalisation = 'other' adds an off-menu outcome it has no afterstate for",
            root.Section("trainer").Where("gradient_estimator")),
        "use readout.normalisation = 'menu' with the all-action estimator");
  // Think-then-decide trains the joint log π(z|s) + log p(a|s,z) with PPO's
  // clipped surrogate; these options would need π(z|s) where only the menu
  // given z is read, or would sample z from another distribution.
  const bool decision =
      TrainerPresetRegistry::Global().Get(t.algorithm).factory()->plane == policy::Plane::kDecision;
  if (decision && prompt.reasoning) {
    const std::string where = root.Section("prompt").Where("reasoning");
    if (t.decision.all_action())
      throw ConfigError(fmt::format("{}: trainer.gradient_estimator = 'all_action' with "
                                    "prompt.reasoning: the all-action sum is over the menu given "
                                    "one scratchpad, not over scratchpads",
                                    where),
                        "use the sampled-action estimator with reasoning");
    if (t.kl.coef > 0)
      throw ConfigError(
          fmt::format("{}: trainer.kl with prompt.reasoning in the decision plane: the "
                      "exact menu KL does not cover the scratchpad",
                      where),
          "set trainer.kl.coef = 0, or prompt.reasoning = false");
    if (sampler.temperature != 1.0 || sampler.top_p != 1.0)
      throw ConfigError(
          fmt::format("{}: the decision plane samples its scratchpads at "
                      "sampler.temperature {} / top_p {}, but PPO's ratio uses π(z|s) "
                      "itself",
                      where, sampler.temperature, sampler.top_p),
          "set sampler.temperature = 1 and sampler.top_p = 1 with reasoning");
  }
  if (t.token.overlong_buffer > 0 && t.token.overlong_buffer >= sampler.max_new_tokens)
    throw ConfigError(
        fmt::format(
            "{}: trainer.sampling.overlong_buffer = {} must be below sampler.max_new_tokens = {}: "
            "the penalty starts at max_new_tokens - overlong_buffer tokens, so every answer "
            "would be penalised",
            root.Section("trainer").Section("sampling").Where("overlong_buffer"),
            t.token.overlong_buffer, sampler.max_new_tokens),
        "raise sampler.max_new_tokens or lower (0 = off) trainer.sampling.overlong_buffer");
}

std::unique_ptr<ExperimentConfig> ExperimentConfig::Load(const std::string& path,
                                                         const std::vector<std::string>& sets) {
  Config cfg = path.empty() ? Config() : Config::FromFile(path);
  cfg.ApplyOverrides(sets);
  return FromConfig(std::move(cfg));
}

policy::Tokenizer MakeTokenizer(const ExperimentConfig& cfg, const envs::Env& env) {
  if (!cfg.tokenizer.path.empty()) return policy::Tokenizer::FromPath(cfg.tokenizer.path);
  policy::EnvCorpusOptions opt;
  opt.episodes = static_cast<int>(cfg.tokenizer.corpus_episodes);
  opt.seed = cfg.run.seed;
  auto corpus = policy::EnvTextCorpus(env, opt);
  // Add rendered prompts, so the vocabulary covers exactly what the model reads.
  Rng rng = Rng::Stream(cfg.run.seed, "tokenizer_prompts");
  for (int64_t i = 0; i < std::min<int64_t>(cfg.tokenizer.corpus_episodes, 100); ++i) {
    auto s = env.NewState(envs::SplitSeed(envs::Split::kTrain, i));
    while (!s->IsTerminal()) {
      auto menu = s->CompileMenu();
      envs::ShuffleMenu(menu, rng);
      corpus.push_back(policy::RenderPromptText(cfg.prompt, env.Instructions(), s->Observation(),
                                                {}, menu, policy::Plane::kDecision) +
                       " " + menu.items[0].label);
      auto legal = s->LegalActions();
      s->Apply(legal[rng.UniformInt(legal.size())]);
    }
  }
  policy::TokenizerTrainOptions topt;
  topt.vocab_size = cfg.tokenizer.vocab_size;
  return policy::Tokenizer::Train(corpus, topt);
}

std::string Timestamp() {
  auto t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::localtime(&t));
  return buf;
}

}  // namespace rlid::trainers

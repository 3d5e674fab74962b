#include "trainers/algorithms/experiment.h"

#include <fmt/format.h>

#include <chrono>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "policy/checkpoint.h"
#include "policy/runtime.h"
#include "policy/tokenizer_corpus.h"

namespace rlid::trainers {
namespace fs = std::filesystem;

void RunConfig::Load(ConfigNode n) {
  n.Get("name", name, "run name (directory prefix under runs/)");
  n.Get("seed", seed, "run seed; every random stream derives from it");
  n.GetEnum("device", device, {"cpu", "cuda"}, "where tensors live");
  n.Get("threads", threads, "LibTorch intra-op threads (0 = one per core)");
}

void TokenizerConfig::Load(ConfigNode n) {
  n.Get("path", path, "tokenizer.json to use; empty = train one from env text");
  n.Get("vocab_size", vocab_size, "vocabulary size when training");
  n.Get("corpus_episodes", corpus_episodes, "random-play episodes for the training corpus");
}

void TrainerConfig::Load(ConfigNode n) {
  n.Get("algorithm", algorithm, "registered trainer: ppo_decision, grpo, dr_grpo, dapo, gspo");
  TrainerPresetRegistry::Global().Get(algorithm).factory()->apply(
      *this);  // unknown names list the known ones
  n.Get("iterations", iterations, "outer iterations (rollout -> update)");
  n.Get("episodes_per_iteration", episodes_per_iteration, "rollout episodes per iteration");
  n.Get("group_size", group_size, "episodes per env seed (group advantages)");
  n.Get("train_seed_pool", train_seed_pool,
        "> 0: draw train seeds from this many; 0 = fresh seeds");
  n.Get("num_envs", num_envs, "episodes played in lockstep (one forward per step)");
  n.Get("epochs", epochs, "passes over each rollout batch");
  n.Get("minibatch_size", minibatch_size,
        "decisions (decision plane) or responses (token plane) per step");
  n.Get("normalize_advantages", normalize_advantages, "whiten GAE advantages per minibatch");
  n.Get("vf_coef", vf_coef, "value-loss weight");
  n.Get("vf_clip", vf_clip, "value clip range (0 = off)");
  n.Get("ent_coef", ent_coef, "menu-entropy bonus weight");
  n.Get("target_kl", target_kl,
        "stop an iteration's epochs once the epoch's mean exact menu KL(old || new) exceeds this "
        "(0 = off)");
  n.GetEnum("estimator", estimator, {"sampled", "all_action"},
            "decision policy gradient: sampled action, or Rao-Blackwellised over the whole menu");
  n.Get("grad_variance_every", grad_variance_every,
        "measure per-sample gradient variance every k iterations (0 = off)");
  n.Get("grad_variance_samples", grad_variance_samples, "states per gradient-variance measurement");
  n.Get("eval_every", eval_every,
        "evaluate on test seeds every k iterations (0 = only at the end)");
  n.Get("eval_episodes", eval_episodes, "test episodes per evaluation");
  n.Get("eval_sampled", eval_sampled, "also evaluate the sampled policy (besides greedy)");
  n.Get("checkpoint_every", checkpoint_every,
        "checkpoint every k iterations (0 = only at the end)");
  n.GetEnum("budget", budget, {"iterations", "env_steps", "wall_clock", "flops"},
            "what stops the run");
  n.Get("budget_value", budget_value, "limit for env_steps / wall_clock seconds / training flops");
  n.GetEnum("return_mode", return_mode, {"episode", "discounted"},
            "token plane: advantage from the episode return, or per-step discounted returns");
  optim.Load(n);
  advantage.Load(n.Section("advantage"));
  loss.Load(n.Section("loss"));
  kl.Load(n.Section("kl"));
  invalid.Load(n.Section("invalid"));
  auto s = n.Section("sampling");
  s.Get("filter_zero_variance_groups", filter_zero_variance_groups,
        "DAPO: drop groups whose returns are all equal");
  s.Get("max_generation_rounds", max_generation_rounds,
        "DAPO: rollout rounds to fill a batch before giving up");
  s.GetEnum(
      "on_partial_batch", on_partial_batch, {"continue", "error"},
      "DAPO: when the rounds run out, train on the partial batch (logged) or stop with an error");
  s.Get("overlong_buffer", overlong_buffer,
        "DAPO overlong shaping buffer L_buf in tokens (0 = off)");
  s.Get("overlong_factor", overlong_factor, "DAPO overlong penalty factor");
  auto positive = [&](const char* key, int64_t v) {
    if (v <= 0)
      throw ConfigError(fmt::format("{}: trainer.{} must be > 0, found {}", n.Where(key), key, v));
  };
  positive("iterations", iterations);
  positive("episodes_per_iteration", episodes_per_iteration);
  positive("group_size", group_size);
  positive("epochs", epochs);
  positive("minibatch_size", minibatch_size);
  positive("num_envs", num_envs);
  if (episodes_per_iteration % group_size != 0)
    throw ConfigError(
        fmt::format("{}: episodes_per_iteration = {} is not a multiple of group_size = {}",
                    n.Where("episodes_per_iteration"), episodes_per_iteration, group_size));
  if (budget != "iterations" && !(budget_value > 0))
    throw ConfigError(
        fmt::format("{}: trainer.budget = '{}' needs budget_value > 0", n.Where("budget"), budget));
}

void SftConfig::Load(ConfigNode n) {
  n.Get("episodes", episodes, "oracle episodes on train seeds");
  n.Get("random_action_frac", random_action_frac,
        "fraction of random actions (imperfect demonstrations)");
  n.Get("epochs", epochs, "passes over the demonstrations");
  n.Get("batch_size", batch_size, "decisions per optimiser step");
  n.Get("lr", lr, "learning rate");
  n.Get("label_weight", label_weight, "decision plane: cross-entropy on the label readout");
  n.Get("answer_weight", answer_weight, "token plane: LM loss on the answer text");
  n.GetEnum("answer", answer, {"command", "label"},
            "token-plane demonstration answer: the command text or the label letter");
  n.Get("lm_weight", lm_weight, "plain LM loss on the prompt text");
  if (random_action_frac < 0 || random_action_frac > 1)
    throw ConfigError(
        fmt::format("{}: sft.random_action_frac must be in [0, 1]", n.Where("random_action_frac")));
}

namespace {
void LoadSampler(ConfigNode n, policy::SamplerOptions& o) {
  n.Get("temperature", o.temperature, "token plane sampling temperature");
  n.Get("top_p", o.top_p, "nucleus mass (1 = off)");
  n.Get("max_new_tokens", o.max_new_tokens, "longest answer in tokens");
  n.GetEnum("dtype", o.dtype, {"float32", "bfloat16"},
            "rollout-engine weights (bf16 = a different engine)");
  n.Get("kv_cache", o.kv_cache, "incremental decoding with a KV cache");
  if (o.max_new_tokens < 1)
    throw ConfigError(fmt::format("{}: max_new_tokens must be >= 1", n.Where("max_new_tokens")));
  if (!(o.top_p > 0 && o.top_p <= 1))
    throw ConfigError(fmt::format("{}: top_p must be in (0, 1]", n.Where("top_p")));
}
}  // namespace

std::unique_ptr<ExperimentConfig> ExperimentConfig::FromConfig(Config cfg) {
  auto e = std::make_unique<ExperimentConfig>(std::move(cfg));
  ConfigNode root = e->raw.Root();
  e->run.Load(root.Section("run"));
  envs::MakeEnv(e->env_section);  // validates [env] now
  e->tokenizer.Load(root.Section("tokenizer"));
  ConfigNode pol = root.Section("policy");
  e->model.Load(pol);
  pol.Get("init", e->init_checkpoint,
          "start from this checkpoint (rlid sft output); empty = fresh model");
  e->prompt.Load(root.Section("prompt"));
  e->readout.Load(root.Section("readout"));
  LoadSampler(root.Section("sampler"), e->sampler);
  e->memory.Load(root.Section("memory"));
  e->trainer.Load(root.Section("trainer"));
  e->sft.Load(root.Section("sft"));
  root.Section("compare").MarkAllUsed();  // validated by `rlid compare`
  e->raw.CheckAllUsed();
  return e;
}

std::unique_ptr<ExperimentConfig> ExperimentConfig::Load(const std::string& path,
                                                         const std::vector<std::string>& sets) {
  Config cfg = path.empty() ? Config() : Config::FromFile(path);
  cfg.ApplyOverrides(sets);
  return FromConfig(std::move(cfg));
}

policy::Tokenizer MakeTokenizer(const ExperimentConfig& cfg, const envs::Env& env) {
  if (!cfg.tokenizer.path.empty()) return policy::Tokenizer::FromFile(cfg.tokenizer.path);
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

Session::Session(const ExperimentConfig& c, SessionOptions options)
    : cfg(c), record(options.record) {
  std::string out_dir = options.out_dir;
  const bool resume = options.resume;
  policy::SetNumThreads(cfg.run.threads);
  if (cfg.run.device == "cuda") {
    if (!torch::cuda::is_available())
      throw ConfigError(
          "run.device = 'cuda' but no CUDA device is available to this LibTorch build",
          "use device = 'cpu' (Debian's libtorch is CPU-only)");
    device = torch::Device(torch::kCUDA);
  }
  // Run directory.
  if (out_dir.empty()) {
    out_dir = (fs::path("runs") / fmt::format("{}-{}", cfg.run.name, Timestamp())).string();
    for (int k = 2; fs::exists(out_dir); ++k)
      out_dir = (fs::path("runs") / fmt::format("{}-{}-{}", cfg.run.name, Timestamp(), k)).string();
  }
  run_dir = out_dir;
  checkpoints_dir = (fs::path(run_dir) / options.checkpoints).string();
  std::error_code ec;
  fs::create_directories(run_dir, ec);
  if (ec) throw IoError(fmt::format("cannot create run directory '{}': {}", run_dir, ec.message()));
  std::string resolved = cfg.raw.ResolvedToml();
  if (!options.config_file.empty()) {
    std::ofstream f(fs::path(run_dir) / options.config_file);
    if (!f)
      throw IoError(fmt::format("cannot write '{}/{}'", run_dir, options.config_file),
                    "is the directory writable?");
    f << "# resolved config of this run (rlid " << VersionString() << ")\n" << resolved;
  }
  env = envs::MakeEnv(cfg.env_section);
  // Model + tokenizer.
  if (!cfg.init_checkpoint.empty()) {
    auto ck = policy::LoadCheckpoint(cfg.init_checkpoint, device);
    tokenizer = ck.tokenizer;
    model = ck.model;
  } else {
    fs::path saved = fs::path(run_dir) / "tokenizer.json";
    tokenizer = resume && fs::exists(saved) ? policy::Tokenizer::FromFile(saved.string())
                                            : MakeTokenizer(cfg, *env);
    policy::ModelConfig mc = cfg.model;
    mc.vocab_size = tokenizer.VocabSize();
    model = policy::TransformerLM(mc);
    model->InitWeights(Rng::DeriveSeed(cfg.run.seed, "init"));
    model->to(device);
  }
  tokenizer.Save((fs::path(run_dir) / "tokenizer.json").string());
  renderer = std::make_unique<policy::PromptRenderer>(cfg.prompt, tokenizer);
  if (cfg.trainer.kl.coef > 0) ref_model = policy::CloneModel(model);
  // Store.
  store = memory::Store::Open((fs::path(run_dir) / memory::kDatabaseFileName).string(),
                              memory::Store::Mode::kReadWrite);
  writer = std::make_unique<memory::Writer>(*store);
  memory::RunRecord rec;
  rec.name = cfg.run.name;
  rec.arm = options.arm;
  rec.kind = options.kind;
  rec.config_toml = resolved;
  rec.seed = cfg.run.seed;
  rec.allow_cross_split = cfg.memory.allow_cross_split;
  run_id = writer->BeginRun(rec);
  const policy::Tokenizer* tok = &tokenizer;
  bank = std::make_unique<memory::MemoryBank>(
      cfg.memory, run_id, &store->item_ids(),
      [tok](std::string_view text) { return static_cast<int>(tok->Encode(text, false).size()); });
  if (!options.quiet)
    spdlog::info("run directory {} ({} parameters, {})", run_dir, model->config().NumParameters(),
                 policy::TorchSummary());
}

Session::~Session() {
  if (!ended_) {
    try {
      End("failed");
    } catch (const std::exception& e) {
      spdlog::error("could not close the run cleanly: {}", e.what());
    }
  }
}

policy::TextSampler& Session::Sampler() {
  if (!sampler) {
    sampler = std::make_unique<policy::TextSampler>(model->config(), cfg.sampler, device);
    sampler->SyncWeights(model);
  }
  return *sampler;
}

agents::AgentContext Session::AgentCtx(int64_t iteration) {
  agents::AgentContext ctx;
  ctx.env = env.get();
  ctx.model = model;
  ctx.ref_model = ref_model;
  ctx.sampler = sampler.get();
  ctx.renderer = renderer.get();
  ctx.readout = cfg.readout;
  ctx.invalid = cfg.trainer.invalid;
  ctx.bank = bank.get();
  ctx.episode_ids = &store->episode_ids();
  ctx.run_id = run_id;
  ctx.seed = cfg.run.seed;
  ctx.policy_version = iteration;
  ctx.iteration = iteration;
  ctx.num_envs = cfg.trainer.num_envs;
  ctx.afterstate_values = cfg.trainer.estimator == "all_action";
  ctx.times = &times;
  return ctx;
}

void Session::Record(const std::vector<agents::EpisodeData>& episodes,
                     const agents::AgentContext& ctx) {
  if (!record) return;
  agents::StageTimer timer(&times.logging);
  for (const auto& e : episodes) writer->Submit(agents::ToRecord(e, ctx));
}

void Session::LogMetrics(int64_t iteration,
                         const std::vector<std::pair<std::string, double>>& metrics) {
  agents::StageTimer timer(&times.logging);
  double now = memory::NowUnixSeconds();
  for (const auto& [k, v] : metrics)
    writer->Submit(memory::MetricRecord{run_id, iteration, k, v, now});
}

void Session::End(const std::string& status) {
  ended_ = true;
  writer->EndRun(run_id, status);
}

}  // namespace rlid::trainers

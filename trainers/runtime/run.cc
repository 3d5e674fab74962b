// Building a run's objects from its config, and the Recorder.
#include "trainers/runtime/run.h"

#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/clock.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/interrupt.h"
#include "core/log.h"
#include "core/rng.h"
#include "policy/engines/make_engine.h"
#include "policy/model/checkpoint.h"
#include "policy/model/device.h"
#include "policy/model/lora.h"
#include "policy/model/runtime.h"
#include "trainers/runtime/optim.h"
#include "trainers/runtime/resume_point.h"

namespace rlid::trainers {
namespace fs = std::filesystem;

namespace {

// Parameters the optimiser updates (LoRA: the adapters and the value head).
int64_t TrainableCount(policy::TransformerLM& model) {
  int64_t n = 0;
  for (const auto& p : TrainableParameters(model).tensors) n += p.numel();
  return n;
}

nlohmann::json LoraJson(const policy::LoraConfig& c) {
  return {{"rank", c.rank},
          {"alpha", c.alpha},
          {"dropout", c.dropout},
          {"target_modules", c.target_modules},
          {"base_model", c.base_model}};
}

// policy.init already holds adapters and [policy.lora] is set: they must
// agree on what is adapted -- the targets of [policy.lora] this model has (a
// run's config keeps every default target; its adapters hold the model's own).
void CheckSameAdapters(policy::TransformerLM& model, const policy::LoraConfig& wanted,
                       const std::string& init) {
  const policy::LoraConfig& loaded = *model->lora();
  auto sorted = [](std::vector<std::string> v) {
    std::sort(v.begin(), v.end());
    return v;
  };
  if (loaded.rank == wanted.rank && loaded.alpha == wanted.alpha &&
      sorted(loaded.target_modules) == sorted(policy::PresentTargets(model, wanted.target_modules)))
    return;
  throw ConfigError(
      fmt::format("policy.init '{}' holds LoRA adapters (rank {}, alpha {}, {}) that differ from "
                  "[policy.lora] (rank {}, alpha {}, {})",
                  init, loaded.rank, loaded.alpha, fmt::join(loaded.target_modules, " "), wanted.rank,
                  wanted.alpha, fmt::join(wanted.target_modules, " ")),
      "leave [policy.lora] unset (or equal to the adapters) to keep training them, or start from "
      "their base model");
}

// Resuming with fewer ranks: the shards of ranks >= `size` are truncated to
// the checkpoint (their episodes up to it stay part of the run).
void TruncateOrphanShards(const std::string& dir, const nlohmann::json& extra, int64_t run_id,
                          int64_t iteration, int size) {
  for (int r = size;; ++r) {
    const fs::path shard = fs::path(dir) / memory::ShardFileName(r);
    if (!fs::exists(shard)) break;
    auto s = memory::Store::Open(shard.string(), memory::Store::Mode::kReadWrite);
    const ShardMark m = CheckpointShardMark(extra, r);
    if (!s->HasRun(run_id)) continue;
    s->TruncateRun(run_id, iteration, m.recorded ? m.last_episode_id : 0);
    s->EndRun(run_id, "completed");
  }
}

}  // namespace

void Recorder::Episodes(const std::vector<agents::EpisodeData>& episodes,
                        const agents::AgentContext& ctx) {
  for (const auto& e : episodes)
    if (e.split == envs::Split::kTrain && e.mode == agents::EpisodeMode::kSampled) rollouts_.Add(e);
  if (!record_) return;
  agents::StageTimer timer(times_ ? &times_->logging : nullptr);
  for (const auto& e : episodes) writer_.Submit(agents::ToRecord(e, ctx));
}

void Recorder::Metrics(int64_t iteration, const trainers::Metrics& metrics) {
  agents::StageTimer timer(times_ ? &times_->logging : nullptr);
  const double now = memory::NowUnixSeconds();
  for (const auto& [k, v] : metrics)
    writer_.Submit(memory::MetricRecord{run_id_, iteration, k, v, now});
}

void Recorder::Checkpoint(int64_t iteration, const std::string& path) {
  writer_.Submit(memory::CheckpointRecord{run_id_, iteration, path});
}

void Recorder::Flush() {
  agents::StageTimer timer(times_ ? &times_->logging : nullptr);
  writer_.Flush();
}

std::string PointRunsLatestAt(const std::string& dir) {
  std::error_code ec;
  const fs::path runs = fs::weakly_canonical("runs", ec);
  const fs::path target = fs::weakly_canonical(dir, ec);
  if (ec || target.parent_path() != runs || target.filename() == "latest") return "";
  const std::string before = fs::read_symlink(runs / "latest", ec).string();
  ReplaceSymlink((runs / "latest").string(), target.filename().string(), ec);
  if (ec) {
    spdlog::warn("could not point runs/latest at {}", target.filename().string());
    return "";
  }
  return before;
}

void RestoreRunsLatest(const std::string& dir, const std::string& before) {
  std::error_code ec;
  const fs::path latest = fs::weakly_canonical("runs", ec) / "latest";
  if (ec || fs::read_symlink(latest, ec) != fs::weakly_canonical(dir, ec).filename()) return;
  if (before.empty())
    fs::remove(latest, ec);
  else
    ReplaceSymlink(latest.string(), before, ec);
}

std::string RunDirectoryOf(const std::string& checkpoint) {
  std::error_code ec;
  fs::path p = fs::weakly_canonical(checkpoint, ec);
  if (ec) return "";
  for (int up = 0; up <= 3 && p.has_relative_path(); ++up, p = p.parent_path())
    if (fs::is_regular_file(p / memory::kDatabaseFileName, ec)) return p.string();
  return "";
}

bool HoldsRun(const std::string& dir) {
  std::error_code ec;
  const fs::path d(dir);
  for (const char* f : {memory::kDatabaseFileName, "config.toml", "checkpoints", "compare.toml"})
    if (fs::exists(d / f, ec)) return true;
  return false;
}

void RefuseExistingRun(const std::string& dir, RunKind command) {
  if (!HoldsRun(dir)) return;
  const std::string fresh = "give a new --out directory (or none: runs/<name>-<timestamp>)";
  throw ConfigError(
      fmt::format("--out '{}' already holds a run; a new run there would overwrite its config.toml "
                  "and move its checkpoints/latest",
                  dir),
      command == RunKind::kTrain
          ? fmt::format("continue that run with `rlid train CONFIG --out {} --resume`, or {}", dir, fresh)
          : fresh);
}

namespace {

// runs/<name>-<timestamp>[-k] when `out_dir` is empty.
std::string ChooseRunDirectory(const std::string& out_dir, const std::string& name) {
  if (!out_dir.empty()) return out_dir;
  std::string d = (fs::path("runs") / fmt::format("{}-{}", name, Timestamp())).string();
  for (int k = 2; fs::exists(d); ++k)
    d = (fs::path("runs") / fmt::format("{}-{}-{}", name, Timestamp(), k)).string();
  return d;
}

}  // namespace

Run::Run(const ExperimentConfig& c, RunOptions options)
    : cfg(c), comm(options.job ? ProcessComm() : SoloComm()) {
  const bool resume = options.resume;
  evaluation_ = options.kind == RunKind::kEval;
  policy::SetNumThreads(cfg.run.threads);
  // A job's ranks resolved run.device when they joined (one GPU per local rank).
  device = comm.distributed() ? comm.device() : policy::ResolveDevice(cfg.run.device);
  const int rank = comm.rank();
  std::string out_dir = ChooseRunDirectory(options.out_dir, cfg.run.name);
  if (options.new_run_directory && !resume && rank == 0) RefuseExistingRun(out_dir, options.kind);
  // Every rank of a job writes into rank 0's choice.
  if (comm.distributed()) out_dir = comm.Broadcast(out_dir, 0, "run directory");
  dir = out_dir;
  checkpoints_dir = (fs::path(dir) / options.checkpoints).string();
  const nlohmann::json loaded = LoadEnvAndPolicy(resume);
  OpenRunDirectory();
  if (resume) FindResumePoint();
  // Rank 0 alone writes the directory's files (config, tokenizer, model.json, checkpoints).
  const bool own_files = !options.shared_directory && rank == 0;
  if (!own_files) options.config_file.clear();
  if (rank > 0) options.quiet = true;
  const std::string resolved = WriteRunFiles(options, own_files, loaded);
  model->set_checkpointing(cfg.gradient_checkpointing);
  if (own_files) tokenizer.SaveDirectory(dir);
  if (cfg.trainer.kl.coef > 0 && !evaluation_)
    ref_model = model->lora() ? policy::ShareBaseWeights(model)  // adapters off, no copy
                              : policy::CloneModel(model, policy::TorchDtype(cfg.policy_dtype));
  BeginRecords(options, resolved);
  if (!options.quiet) {
    spdlog::info("run directory {} ({} trainable of {} parameters, {})", dir, TrainableCount(model),
                 model->config().NumParameters(), policy::TorchSummary());
  }
}

nlohmann::json Run::LoadEnvAndPolicy(bool resume) {
  env = envs::MakeEnv(cfg.env_section);
  nlohmann::json loaded;  // what policy.init loaded (model.json)
  if (!cfg.init_checkpoint.empty()) {
    loaded = LoadInitModel();
  } else {
    const bool saved = resume && fs::exists(fs::path(dir) / "tokenizer.json");
    tokenizer = saved ? policy::Tokenizer::FromDirectory(dir) : MakeTokenizer(cfg, *env);
  }
  renderer = std::make_unique<policy::PromptRenderer>(cfg.prompt, tokenizer);
  const double lora_dropout = cfg.init_checkpoint.empty()
                                  ? (cfg.lora.enabled() ? cfg.lora.dropout : 0.0)
                                  : (model->lora() ? model->lora()->dropout : 0.0);
  if (cfg.gradient_checkpointing && device.type() != torch::kCPU && lora_dropout > 0)
    throw ConfigError("policy.gradient_checkpointing with LoRA dropout is exact on the CPU only (the "
                      "recomputation restores the CPU generator's state)",
                      "set policy.lora.dropout = 0 or policy.gradient_checkpointing = false");
  return loaded;
}

void Run::OpenRunDirectory() {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw IoError(fmt::format("cannot create run directory '{}': {}", dir, ec.message()));
  // The store's one-writer lock comes first: a second process pointed at a live
  // run directory is refused before it writes any file there.
  const int rank = comm.rank();
  store = memory::Store::Open(
      (fs::path(dir) / (rank == 0 ? memory::kDatabaseFileName : memory::ShardFileName(rank))).string(),
      memory::Store::Mode::kReadWrite);
  ApplyShardIdFloor();
  if (rank == 0) latest_before_ = PointRunsLatestAt(dir);
}

std::string Run::WriteRunFiles(const RunOptions& options, bool own_files,
                               const nlohmann::json& loaded) {
  std::string resolved = cfg.raw.ResolvedToml();
  if (!cfg.init_checkpoint.empty())  // the [policy] size keys describe a fresh model
    resolved += fmt::format(
        "\n# policy.init loaded {} ({} parameters, {} of them trainable, model_type {}, {} layers, "
        "hidden {}); the\n"
        "# [policy] size keys above do not apply to it. Its config.json is in model.json.\n",
        loaded["path"].get<std::string>(), model->config().NumParameters(), TrainableCount(model),
        model->config().ModelType(), model->config().num_layers, model->config().hidden_size);
  if (!options.config_file.empty())
    WriteWholeFile(
        (fs::path(dir) / options.config_file).string(),
        fmt::format("# resolved config of this run (rlid {})\n{}", VersionString(), resolved),
        "run config");
  if (own_files) policy::RemoveOrphanCheckpoints(checkpoints_dir);  // left by a killed run
  if (cfg.init_checkpoint.empty()) {
    BuildFreshModel();
    return resolved;
  }
  if (own_files)
    WriteWholeFile((fs::path(dir) / "model.json").string(), loaded.dump(2) + "\n", "model record");
  return resolved;
}

void Run::BeginRecords(const RunOptions& options, const std::string& resolved) {
  writer = std::make_unique<memory::Writer>(*store);
  const policy::Tokenizer* tok = &tokenizer;
  auto make_bank = [&] {
    bank = std::make_unique<memory::MemoryBank>(
        cfg.memory, run_id, &store->item_ids(),
        [tok](std::string_view text) { return static_cast<int>(tok->Encode(text, false).size()); });
  };
  memory::RunRecord rec;
  rec.name = cfg.run.name;
  rec.arm = options.arm;
  rec.kind = NameOf(options.kind);
  rec.config_toml = resolved;
  rec.seed = cfg.run.seed;
  rec.allow_cross_split = cfg.memory.allow_cross_split;
  rec.env_metadata = env->Info().metadata;
  if (options.resume) {
    if (!options.record && cfg.memory.enabled)
      throw ConfigError(
          "--resume with memory enabled needs the run's episodes recorded (memory items live in "
          "the store); this run records metrics only",
          "resume without --metrics-only, or with [memory] enabled = false");
    ResumeStore(rec);
    make_bank();
    bank->Restore(store->MemoryItems(run_id));
  } else {
    // Rank 0 numbers the run; every other rank's shard mirrors that row.
    const int rank = comm.rank();
    int64_t id = rank == 0 ? writer->BeginRun(rec) : 0;
    if (comm.distributed()) {
      auto t = torch::tensor({id}, torch::kInt64);
      comm.Broadcast({t}, 0, "run id");
      id = t.item<int64_t>();
      if (rank > 0) {
        rec.id = id;
        writer->BeginRun(rec);
      }
    }
    run_id = id;
    make_bank();
  }
  recorder_ = std::make_unique<Recorder>(*writer, run_id, options.record, &times);
}

nlohmann::json Run::LoadInitModel() {
  // policy.dtype applies to frozen weights: a LoRA base (adapters new or
  // loaded), or the whole model of an evaluation.
  const bool frozen = evaluation_ || cfg.lora.enabled() || policy::IsAdapterDirectory(cfg.init_checkpoint);
  policy::LoadOptions lo;
  lo.dtype = frozen ? policy::TorchDtype(cfg.policy_dtype) : torch::kFloat32;
  auto ck = policy::LoadCheckpoint(cfg.init_checkpoint, device, lo);
  tokenizer = ck.tokenizer;
  model = ck.model;
  if (cfg.lora.enabled()) {
    if (model->lora()) {
      CheckSameAdapters(model, cfg.lora, cfg.init_checkpoint);  // continue training them
    } else {
      policy::LoraConfig lc = cfg.lora;
      lc.base_model = fs::absolute(cfg.init_checkpoint).lexically_normal().string();
      policy::AttachLora(model, lc, Rng::DeriveSeed(cfg.run.seed, "lora"));
    }
  }
  nlohmann::json loaded = {{"path", fs::absolute(cfg.init_checkpoint).string()},
                           {"weight_files", ck.weight_files},
                           {"parameters", model->config().NumParameters()},
                           {"trainable_parameters", TrainableCount(model)},
                           {"dtype", c10::toString(model->dtype())},
                           {"config", ck.hf_config}};
  if (model->lora()) loaded["lora"] = LoraJson(*model->lora());
  return loaded;
}

void Run::BuildFreshModel() {
  policy::ModelConfig mc = cfg.model;
  mc.vocab_size = tokenizer.VocabSize();
  model = policy::TransformerLM(mc);
  model->InitWeights(Rng::DeriveSeed(cfg.run.seed, "init"));
  model->to(device);
  if (!cfg.lora.enabled()) return;
  // Adapter checkpoints name their base: the fresh model is saved once as the
  // run's base (resume rebuilds the same weights from the seed), by rank 0
  // only (every rank's fresh model is the same; two writers raced to publish).
  const fs::path base = fs::absolute(fs::path(dir) / "base").lexically_normal();
  if (comm.rank() == 0 && !fs::exists(base / "rlid.json"))
    policy::SaveCheckpoint(base.string(), model, tokenizer, {{"kind", "lora_base"}});
  if (cfg.policy_dtype == policy::Precision::kBFloat16) {
    model->to(torch::kBFloat16);
    model->value_head->to(torch::kFloat32);
  }
  policy::LoraConfig lc = cfg.lora;
  lc.base_model = base.string();
  policy::AttachLora(model, lc, Rng::DeriveSeed(cfg.run.seed, "lora"));
}

void Run::FindResumePoint() {
  fs::path latest = fs::path(checkpoints_dir) / "latest";
  std::error_code ec;
  fs::path name = fs::read_symlink(latest, ec);
  if (ec || name.empty())
    throw IoError(fmt::format("--resume: no checkpoint in '{}'", checkpoints_dir),
                  "resume needs a run directory with checkpoints/latest (checkpoint_every > 0)");
  resume_checkpoint = (fs::path(checkpoints_dir) / name).string();
  const nlohmann::json meta = policy::ReadCheckpointMeta(resume_checkpoint);
  resume_point_ = ReadResumePoint(resume_checkpoint, meta, *store, comm.rank(),
                                  fmt::format("{:016x}", tokenizer.Fingerprint()));
  resume_extra_ = meta.at("extra");
}

void Run::ResumeStore(memory::RunRecord rec) {
  const auto& extra = resume_extra_;
  run_id = resume_point_.run_id;
  const int64_t iteration = resume_point_.iteration;
  const ShardMark mine = resume_point_.mine;
  memory::TruncateResult removed;
  if (comm.rank() > 0 && !mine.recorded) {
    // The checkpoint's job had no rank of this number: a fresh shard of the run.
    if (store->HasRun(run_id)) {
      removed = writer->TruncateRun(run_id, iteration, 0);
      writer->ResumeRun(run_id);
    } else {
      rec.id = run_id;
      writer->BeginRun(rec);
    }
  } else {
    removed = writer->TruncateRun(run_id, iteration, mine.last_episode_id);
    writer->ResumeRun(run_id);
  }
  ApplyShardIdFloor();
  // The ids continue exactly where the checkpointed run stood (ids handed out
  // but never recorded included), so resumed records match an uninterrupted run.
  store->episode_ids().Reset(std::max(store->episode_ids().PeekNext(), mine.last_episode_id + 1));
  store->item_ids().Reset(std::max(store->item_ids().PeekNext(), mine.last_item_id + 1));
  // Shards of ranks this job no longer has keep their history up to the checkpoint.
  if (comm.rank() == 0) TruncateOrphanShards(dir, extra, run_id, iteration, comm.size());
  if (extra.contains("shards"))
    for (const auto& [key, v] : extra["shards"].items())
      if (const int r = std::stoi(key); r >= comm.size()) {
        const ShardMark m = CheckpointShardMark(extra, r);
        idle_shards[r] = {m.last_episode_id, m.last_item_id};
      }
  spdlog::info(
      "resuming run {} from {}: removed {} episodes, {} memory items, {} metrics and {} "
      "checkpoint rows written after it",
      run_id, resume_checkpoint, removed.episodes, removed.memory_items, removed.metrics,
      removed.checkpoints);
}

void Run::ApplyShardIdFloor() {
  const int rank = comm.rank();
  if (rank == 0) return;
  const int64_t floor = rank * memory::kShardIdStride + 1;
  store->episode_ids().Reset(std::max(store->episode_ids().PeekNext(), floor));
  store->item_ids().Reset(std::max(store->item_ids().PeekNext(), floor));
}

Run::~Run() {
  if (!ended_) {
    try {
      End(PendingSignal() != 0 ? "interrupted" : "failed");
    } catch (const std::exception& e) {
      spdlog::error("could not close the run cleanly: {}", e.what());
    }
  }
}

policy::RolloutEngine& Run::Sampler(int64_t version) {
  if (!sampler_) {
    policy::SamplerOptions so = cfg.sampler;
    so.vocab_limit = tokenizer.VocabSize();  // padded embedding rows are never sampled
    const auto engine_dtype = policy::TorchDtype(so.dtype);
    if (cfg.engine.backend != policy::EngineBackend::kRlid) {
      policy::EngineContext ec;
      ec.dir = (fs::path(dir) / "engine").string();
      if (comm.size() > 1) ec.dir = (fs::path(ec.dir) / fmt::format("rank{}", comm.rank())).string();
      ec.seed = cfg.run.seed;
      ec.version = version;
      const double t0 = MonotonicSeconds();
      sampler_ = policy::MakeRolloutEngine(cfg.engine, so, model, ec);
      spdlog::info("engine: {} serves version {} ({:.1f} s to start)", sampler_->name(), version,
                   MonotonicSeconds() - t0);
    } else if (evaluation_ && !model->lora() && model->dtype() == engine_dtype) {
      sampler_ = std::make_unique<policy::TextSampler>(model, so);  // nothing trains: no copy
    } else {
      auto local = std::make_unique<policy::TextSampler>(model->config(), so, device);
      local->SyncWeights(model);
      sampler_ = std::move(local);
    }
  }
  return *sampler_;
}

void Run::SyncSampler(int64_t version) {
  if (sampler_) budget.engine_sync_seconds += sampler_->Sync(model, version).seconds;
}

agents::AgentContext Run::Agent(policy::Plane plane, int64_t iteration) {
  agents::AgentContext ctx;
  ctx.env = env.get();
  ctx.model = model;
  ctx.ref_model = ref_model;
  // The token plane samples answers; a decision plane that reasons samples its scratchpads.
  ctx.sampler = plane == policy::Plane::kToken || cfg.prompt.reasoning ? &Sampler(iteration) : nullptr;
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
  ctx.afterstate_values = cfg.trainer.decision.all_action();
  ctx.show_steps_left = cfg.show_steps_left;
  ctx.times = &times;
  return ctx;
}

void Run::End(const std::string& status) {
  ended_ = true;
  // A failed run gives runs/latest back to the run it pointed at before.
  if (status == "failed" && comm.rank() == 0) RestoreRunsLatest(dir, latest_before_);
  writer->EndRun(run_id, status);
}

}  // namespace rlid::trainers

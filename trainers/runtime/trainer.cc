#include "trainers/runtime/trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <set>

#include "core/clock.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/interrupt.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/rng.h"
#include "policy/model/checkpoint.h"
#include "trainers/runtime/iteration.h"
#include "trainers/runtime/optim.h"

namespace rlid::trainers {
namespace fs = std::filesystem;

namespace {
constexpr uint64_t kEvalStreamBase = uint64_t{1} << 40;

nlohmann::json BudgetJson(const agents::Budget& b) {
  nlohmann::json j;
  for (const auto& [k, v] : b.Metrics()) j[k] = v;
  return j;
}

agents::Budget BudgetFromJson(const nlohmann::json& j) {
  std::map<std::string, double> m;
  for (const auto& [k, v] : j.items()) m[k] = v.get<double>();
  return agents::Budget::FromMetrics(m);
}

// Removes all but the newest `keep` iter_N directories (names sort by iteration).
// The newest is the one "latest" points to, so resume is never affected.
void PruneCheckpoints(const std::string& checkpoints_dir, int64_t keep) {
  std::vector<fs::path> iters;
  for (const auto& e : fs::directory_iterator(checkpoints_dir)) {
    const std::string name = e.path().filename().string();
    if (e.is_directory() && !e.is_symlink() && name.rfind("iter_", 0) == 0 &&
        name.find('.') == std::string::npos)
      iters.push_back(e.path());
  }
  std::sort(iters.begin(), iters.end());
  for (size_t i = 0; i + static_cast<size_t>(keep) < iters.size(); ++i) {
    std::error_code ec;
    fs::remove_all(iters[i], ec);
    if (ec) spdlog::warn("could not remove old checkpoint {}: {}", iters[i].string(), ec.message());
  }
}

// Removes optimizer.pt from every iteration checkpoint but `latest` (only
// --resume reads it, and only from checkpoints/latest).
void DropOlderOptimizerState(const std::string& checkpoints_dir, const fs::path& latest) {
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(checkpoints_dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.path() == latest || e.is_symlink() || name.rfind("iter_", 0) != 0) continue;
    if (fs::remove(e.path() / "optimizer.pt", ec) && !ec)
      spdlog::debug("removed the optimizer state of {} (run.optimizer_state = \"latest\")", name);
  }
}

std::string WriteCheckpoint(Run& run, const IterationRunner& runner, int64_t iteration) {
  // Only called from Train after CheckParametersFinite passed on these weights.
  // Everything recorded so far is committed first (by every rank), so a
  // checkpoint never exists without the episodes and metrics that came before it.
  run.recorder().Flush();
  agents::StageTimer timer(&run.times.checkpoint);
  fs::path dir = fs::path(run.checkpoints_dir) / fmt::format("iter_{:06d}", iteration);
  const auto ids = run.comm.Gather(std::vector<int64_t>{run.store->episode_ids().PeekNext() - 1,
                                                        run.store->item_ids().PeekNext() - 1},
                                   "checkpoint ids");
  if (run.comm.rank() != 0) return dir.string();  // rank 0 writes the job's checkpoint
  nlohmann::json extra = {{"iteration", iteration},
                          {"budget", BudgetJson(run.budget)},
                          {"algorithm", run.cfg.trainer.algorithm},
                          {"seed", run.cfg.run.seed},
                          {"run_id", run.run_id},
                          {"ranks", run.comm.size()},
                          {"last_episode_id", ids[0][0]},
                          {"last_item_id", ids[0][1]},
                          // what `rlid eval` evaluates under by default (env parameters included)
                          {"config_toml", run.cfg.raw.ResolvedToml()}};
  // What every other rank's shard had committed (resume truncates each to it).
  for (size_t r = 1; r < ids.size(); ++r)
    extra["shards"][std::to_string(r)] = {{"last_episode_id", ids[r][0]},
                                          {"last_item_id", ids[r][1]}};
  for (const auto& [r, last] : run.idle_shards)
    extra["shards"][std::to_string(r)] = {{"last_episode_id", last.first},
                                          {"last_item_id", last.second}};
  policy::SaveCheckpoint(dir.string(), run.model, run.tokenizer, extra,
                         [&](const std::string& tmp) { runner.SaveState(tmp); });
  // "latest" is a relative symlink to the newest complete checkpoint (usable
  // wherever a checkpoint directory is expected), replaced atomically.
  const fs::path latest = fs::path(run.checkpoints_dir) / "latest";
  std::error_code ec;
  ReplaceSymlink(latest.string(), dir.filename().string(), ec);
  if (ec) {
    throw IoError(fmt::format("cannot point '{}' at {}: {}", latest.string(),
                              dir.filename().string(), WriteFailure(ec.value())),
                  "free space and resume the run (rlid train CONFIG --out RUN_DIR --resume)");
  }
  run.recorder().Checkpoint(iteration, dir.string());
  if (run.cfg.run.optimizer_state == KeepOptimizerState::kLatest) DropOlderOptimizerState(run.checkpoints_dir, dir);
  if (run.cfg.run.keep_checkpoints > 0) PruneCheckpoints(run.checkpoints_dir, run.cfg.run.keep_checkpoints);
  return dir.string();
}

}  // namespace

bool NothingToLearn(const Metrics& rollout) {
  for (const auto& [k, v] : rollout)
    if (k == "rollout/episodes") return v == 0;
  return false;
}

Metrics SkippedUpdate(Metrics metrics, int64_t iteration) {
  spdlog::warn(
      "iteration {}: no episode to learn from (env failures dropped every rollout "
      "episode): the update is skipped",
      iteration);
  metrics.push_back({"charts/update_skipped", 1.0});
  return metrics;
}

bool BudgetReached(const TrainerConfig& t, const agents::Budget& b) {
  switch (t.budget) {
    case BudgetKind::kEnvSteps: return static_cast<double>(b.env_steps) >= t.budget_value;
    case BudgetKind::kWallSeconds: return b.wall_seconds >= t.budget_value;
    case BudgetKind::kFlops: return b.TrainingFlops() >= t.budget_value;
    case BudgetKind::kIterations: return false;  // the loop's own bound
  }
  return false;
}

std::vector<agents::EpisodeSpec> RankSpecs(const std::vector<agents::EpisodeSpec>& specs,
                                           const Comm& comm) {
  if (!comm.distributed()) return specs;
  std::vector<int64_t> group_start;  // index of each group's first spec
  for (size_t i = 0; i < specs.size(); ++i)
    if (i == 0 || specs[i].group != specs[i - 1].group) group_start.push_back(static_cast<int64_t>(i));
  const int64_t groups = static_cast<int64_t>(group_start.size());
  if (groups < comm.size())
    throw ConfigError(
        fmt::format("{} ranks but an iteration has only {} env-seed groups "
                    "(episodes_per_iteration / group_size); every rank needs at least one",
                    comm.size(), groups),
        "raise trainer.episodes_per_iteration or use fewer ranks (--nproc)");
  const auto [g0, g1] = RankBlock(groups, comm.rank(), comm.size());
  const int64_t begin = group_start[g0];
  const int64_t end = g1 < groups ? group_start[g1] : static_cast<int64_t>(specs.size());
  return {specs.begin() + begin, specs.begin() + end};
}

std::vector<agents::EpisodeSpec> TrainSpecs(const TrainerConfig& cfg, uint64_t run_seed,
                                            int64_t iteration) {
  const int64_t groups = cfg.episodes_per_iteration / cfg.group_size;
  Rng pool = Rng::Stream(run_seed, "train_seeds", iteration);
  std::vector<agents::EpisodeSpec> specs;
  for (int64_t g = 0; g < groups; ++g) {
    uint64_t index = cfg.train_seed_pool > 0 ? pool.UniformInt(cfg.train_seed_pool)
                                             : static_cast<uint64_t>(iteration * groups + g);
    for (int64_t k = 0; k < cfg.group_size; ++k) {
      agents::EpisodeSpec spec;
      spec.env_seed = envs::SplitSeed(envs::Split::kTrain, index);
      spec.stream =
          static_cast<uint64_t>(iteration * cfg.episodes_per_iteration + g * cfg.group_size + k);
      spec.group = static_cast<int>(g);
      specs.push_back(spec);
    }
  }
  return specs;
}

namespace {

// RolloutMetrics of the episodes of every part, in order.
Metrics MetricsOfEpisodes(std::initializer_list<const std::vector<agents::EpisodeData>*> parts,
                          Comm* comm) {
  double success = 0, ret = 0, invalid = 0, steps = 0, mass = 0, menu_h = 0, row_h = 0;
  double decision_steps = 0, n = 0;
  for (const auto* part : parts) {
    for (const auto& e : *part) {
      n += 1;
      success += e.success;
      ret += e.ret;
      invalid += e.invalid_steps;
      steps += e.steps.size();
      for (const auto& s : e.steps) {
        if (e.plane != policy::Plane::kDecision) continue;
        mass += s.decision.candidate_mass, menu_h += s.decision.menu_entropy;
        row_h += s.decision.row_entropy;
        ++decision_steps;
      }
    }
  }
  if (comm && comm->distributed()) {
    auto t = comm->Sum({n, success, ret, invalid, steps, mass, menu_h, row_h, decision_steps},
                       "rollout metrics");
    n = t[0], success = t[1], ret = t[2], invalid = t[3], steps = t[4], mass = t[5];
    menu_h = t[6], row_h = t[7], decision_steps = t[8];
  }
  if (n == 0) {
    // Every episode was dropped ([env] on_error = "drop_episode"): nothing was
    // measured, so no rate is recorded (a 0 would read as a measured failure).
    spdlog::warn("every rollout episode of this iteration was dropped after env failures: no "
                 "rollout/* metrics for it (budget/episodes_dropped counts them)");
    return {{"rollout/episodes", 0.0}};
  }
  Metrics m = {{"rollout/episodes", n},
               {"rollout/success", success / n},
               {"rollout/return", ret / n},
               {"rollout/length", steps / n},
               {"rollout/invalid_rate", steps > 0 ? invalid / steps : 0.0}};
  if (decision_steps > 0) {
    const double d = decision_steps;
    m.push_back({"policy/candidate_mass", mass / d});
    m.push_back({"policy/menu_entropy", menu_h / d});
    m.push_back({"policy/row_entropy", row_h / d});
  }
  return m;
}

}  // namespace

Metrics RolloutMetrics(const std::vector<agents::EpisodeData>& episodes, Comm* comm) {
  return MetricsOfEpisodes({&episodes}, comm);
}

Metrics RolloutMetrics(const PlayedBatch& batch, Comm* comm) {
  return MetricsOfEpisodes({&batch.episodes, &batch.dropped}, comm);
}

void CheckParametersFinite(policy::TransformerLM& model, int64_t iteration) {
  torch::NoGradGuard no_grad;
  for (const auto& p : model->named_parameters()) {
    if (torch::isfinite(p.value()).all().item<bool>()) continue;
    throw NumericError(
        fmt::format("non-finite weights in parameter '{}' after iteration {}", p.key(), iteration),
        "no checkpoint was written from these weights; lower trainer.lr (or raise "
        "max_grad_norm's strictness), check rewards, or resume from the last checkpoint");
  }
}

double TrainableNorm(policy::TransformerLM& model) {
  torch::NoGradGuard no_grad;
  double sq = 0;
  for (const auto& p : TrainableParameters(model).tensors) sq += p.to(torch::kFloat64).pow(2).sum().item<double>();
  return std::sqrt(sq);
}

void CheckWeightGrowth(double before, double after, double limit, double lr, int64_t iteration) {
  if (limit <= 0 || before <= 0 || after <= limit * before) return;
  throw NumericError(
      fmt::format("exploding weights at iteration {}: the norm of the trainable weights grew from "
                  "{:.4g} to {:.4g} in one iteration (x{:.3g} > trainer.max_weight_growth = {:g})",
                  iteration, before, after, after / before, limit),
      fmt::format("no checkpoint was written from these weights; lower trainer.lr (now {:g}), keep "
                  "trainer.max_grad_norm on, or raise max_weight_growth if such growth is intended",
                  lr));
}

namespace {

// Episodes that take longer than 10 s to play log a progress line with an ETA
// every 10 s (quick ones stay silent), unless the caller counts them itself.
void ReportSlowEpisodes(agents::AgentContext& agent, const std::string& what, int64_t total,
                        bool enabled) {
  if (agent.on_episode_end) return;
  auto progress = std::make_shared<Progress>(what, std::max<int64_t>(total, 1), enabled, 10.0,
                                             /*end_line=*/false);
  agent.on_episode_end = [progress](int64_t done, int64_t) { progress->Update(done); };
}

}  // namespace

EvalResult Evaluate(agents::AgentContext agent, policy::Plane plane, int64_t episodes,
                    bool greedy, agents::Budget& budget, Recorder* recorder, Comm* comm) {
  agents::StageTimer timer(agent.times ? &agent.times->eval : nullptr);
  const bool dist = comm && comm->distributed();
  std::vector<agents::EpisodeSpec> specs;
  for (int64_t i = 0; i < episodes; ++i) {
    if (dist && i % comm->size() != comm->rank()) continue;
    agents::EpisodeSpec spec;
    spec.env_seed = envs::SplitSeed(envs::Split::kTest, static_cast<uint64_t>(i));
    spec.stream = kEvalStreamBase + static_cast<uint64_t>(i) + (greedy ? 0 : uint64_t{1} << 30);
    specs.push_back(spec);
  }
  agents::Budget scratch;  // evaluation is not part of the training budget
  // A pass of its own: this evaluation reads no item of another evaluation (or
  // of training), so its result does not depend on which evaluations ran before.
  if (agent.bank) agent.memory_pass = agent.bank->NewPass();
  agent.ref_model = nullptr;
  agent.afterstate_values = false;
  agent.bootstrap_truncated = false;
  agent.oracle_probs = true;
  agent.times = nullptr;  // all of it is evaluation time
  // A slow evaluation (a user's model) says how far it is.
  ReportSlowEpisodes(
      agent,
      fmt::format("evaluation ({}, {} test episodes)", greedy ? "greedy" : "sampled", specs.size()),
      static_cast<int64_t>(specs.size()), !dist || comm->rank() == 0);
  std::vector<agents::EpisodeData> eps =
      plane == policy::Plane::kDecision
          ? agents::RunDecisionEpisodes(agent, specs, envs::Split::kTest, greedy, scratch)
          : agents::RunTokenEpisodes(agent, specs, envs::Split::kTest, greedy, scratch);
  if (recorder) recorder->Episodes(eps, agent);
  EvalResult r;
  double played = static_cast<double>(eps.size()), dropped = scratch.episodes_dropped;
  double steps = 0, invalid = 0, p_opt = 0, measured = 0;
  for (const auto& e : eps) {
    r.success += e.success;
    r.ret += e.ret;
    steps += e.steps.size();
    invalid += e.invalid_steps;
    for (const auto& st : e.steps)
      if (st.decision.p_optimal >= 0) p_opt += st.decision.p_optimal, measured += 1;
  }
  agents::StageCompute work = scratch.rollout;
  if (dist) {
    auto t = comm->Sum({played, dropped, r.success, r.ret, steps, invalid, p_opt, measured,
                        static_cast<double>(work.forwards), static_cast<double>(work.backwards),
                        static_cast<double>(work.tokens), work.flops},
                       "evaluation");
    played = t[0], dropped = t[1], r.success = t[2], r.ret = t[3], steps = t[4], invalid = t[5];
    p_opt = t[6], measured = t[7];
    work.forwards = static_cast<int64_t>(t[8]), work.backwards = static_cast<int64_t>(t[9]);
    work.tokens = static_cast<int64_t>(t[10]), work.flops = t[11];
  }
  budget.eval += work;
  // Episodes an env failure dropped ([env] on_error) are not in `eps`: rates
  // are over the episodes that were played to the end.
  r.episodes = static_cast<int64_t>(played);
  if (dropped > 0 && (!dist || comm->rank() == 0))
    spdlog::warn("evaluation: {} of {} episodes dropped after env failures; rates are over the "
                 "other {}",
                 dropped, episodes, r.episodes);
  double n = std::max<int64_t>(r.episodes, 1);
  r.success /= n, r.ret /= n, r.length = steps / n;
  r.invalid_rate = steps > 0 ? invalid / steps : 0;
  if (measured > 0) r.p_optimal = p_opt / measured;
  return r;
}

GradientSnr MeasureGradientSnr(policy::TransformerLM& model, int64_t n,
                               const std::function<torch::Tensor(int64_t)>& episode_loss,
                               agents::StageCompute& compute) {
  if (n < 2) throw InternalError(fmt::format("gradient SNR needs >= 2 episodes, got {}", n));
  std::vector<torch::Tensor> params = TrainableParameters(model).tensors;
  // Running sum of g_i, in float64 unless the model is too big for a second copy at that width.
  int64_t numel = 0;
  for (const auto& p : params) numel += p.numel();
  const auto acc_type = numel <= (int64_t{1} << 27) ? torch::kFloat64 : torch::kFloat32;
  std::vector<torch::Tensor> sum;
  for (const auto& p : params) sum.push_back(torch::zeros(p.sizes(), p.options().dtype(acc_type)));
  double sum_sq = 0;  // sum_i ||g_i||^2
  for (int64_t i = 0; i < n; ++i) {
    for (auto& p : params) p.mutable_grad() = torch::Tensor();
    {
      agents::ComputeScope scope(compute, {model}, agents::ComputeScope::Pass::kForwardBackward);
      episode_loss(i).backward();
    }
    torch::NoGradGuard ng;
    for (size_t k = 0; k < params.size(); ++k) {
      const auto& g = params[k].grad();
      if (!g.defined()) continue;
      sum_sq += g.to(torch::kFloat64).pow(2).sum().item<double>();
      sum[k].add_(g.to(acc_type));
    }
  }
  for (auto& p : params) p.mutable_grad() = torch::Tensor();
  double mean_sq = 0;
  for (const auto& t : sum) mean_sq += t.to(torch::kFloat64).pow(2).sum().item<double>();
  const double dn = static_cast<double>(n);
  mean_sq /= dn * dn;
  GradientSnr r;
  r.episodes = n;
  r.mean_sq_norm = mean_sq;
  r.trace_cov = std::max(0.0, (sum_sq - dn * mean_sq) / (dn - 1));
  r.snr = r.trace_cov > 0 ? mean_sq / r.trace_cov : 0.0;
  return r;
}

Metrics SnrMetrics(const GradientSnr& g) {
  return {{"grad/snr", g.snr},
          {"grad/episode_mean_sq_norm", g.mean_sq_norm},
          {"grad/episode_trace_cov", g.trace_cov},
          {"grad/snr_episodes", static_cast<double>(g.episodes)}};
}

agents::Budget ReduceBudget(const agents::Budget& before, const agents::Budget& after, Comm& comm) {
  if (!comm.distributed()) return after;
  const auto b = before.Metrics(), a = after.Metrics();  // the same keys, in the same order
  std::vector<double> delta;
  for (size_t i = 0; i < a.size(); ++i) delta.push_back(a[i].second - b[i].second);
  delta = comm.Sum(delta, "budget");
  std::map<std::string, double> m;
  for (size_t i = 0; i < a.size(); ++i) m[a[i].first] = b[i].second + delta[i];
  agents::Budget out = agents::Budget::FromMetrics(m);
  out.wall_seconds = after.wall_seconds;
  return out;
}

namespace {

// Logs each diagnostic that this iteration's rollouts trigger, once per run
// and kind (trainers/runtime/diagnostics.h).
void WarnIfNotLearning(const EpisodeTally& rollouts, const OracleReference& oracle,
                       policy::Plane plane, int64_t iteration, std::set<std::string>& warned) {
  auto warn = [&](const char* kind, const std::optional<std::string>& message) {
    if (message && warned.insert(kind).second) spdlog::warn("iteration {}: {}", iteration, *message);
  };
  if (plane == policy::Plane::kToken) warn("invalid", InvalidAnswersWarning(rollouts));
  warn("early_end", EarlyEndWarning(rollouts, oracle));
}

// Greedy (and sampled) evaluation metrics at the current weights.
Metrics EvalMetrics(Run& run, policy::Plane plane, int64_t iteration, TrainResult& result) {
  const auto& t = run.cfg.trainer;
  Metrics m;
  auto g = Evaluate(run.Agent(plane, iteration), plane, t.eval_episodes, /*greedy=*/true,
                    run.budget, &run.recorder(), &run.comm);
  result.final_greedy = g;
  if (g.episodes == 0) {
    // Every test episode was dropped after env failures: nothing measured.
    spdlog::warn("evaluation at iteration {}: every test episode was dropped after env failures; "
                 "no eval/* rates recorded",
                 iteration);
    return {{"eval/episodes", 0.0}};
  }
  m.push_back({"eval/success", g.success});
  m.push_back({"eval/return", g.ret});
  m.push_back({"eval/length", g.length});
  m.push_back({"eval/invalid_rate", g.invalid_rate});
  m.push_back({"eval/episodes", static_cast<double>(g.episodes)});
  if (g.p_optimal >= 0) m.push_back({"eval/p_optimal", g.p_optimal});
  if (t.eval_sampled) {
    auto sm = Evaluate(run.Agent(plane, iteration), plane, t.eval_episodes, /*greedy=*/false,
                       run.budget, &run.recorder(), &run.comm);
    result.final_sampled = sm;
    if (sm.episodes > 0) {
      m.push_back({"eval/success_sampled", sm.success});
      m.push_back({"eval/return_sampled", sm.ret});
      m.push_back({"eval/invalid_rate_sampled", sm.invalid_rate});
    }
  }
  return m;
}

double Find(const Metrics& m, const std::string& k) {
  for (const auto& [key, v] : m)
    if (key == k) return v;
  return std::nan("");
}

}  // namespace

namespace {

// --resume: restores weights, sampler, trainer state and budget from the run's
// checkpoint; returns the iteration to continue from.
int64_t ResumeFromCheckpoint(Run& run, IterationRunner& runner) {
  if (run.resume_checkpoint.empty())
    throw IoError(fmt::format("--resume: the run in '{}' was not opened to resume", run.dir),
                  "open it with RunOptions::resume (rlid train --resume --out DIR)");
  fs::path dir = run.resume_checkpoint;
  policy::RestoreWeights(dir.string(), run.model);
  const nlohmann::json meta = policy::ReadCheckpointMeta(dir.string());
  const int64_t start = meta.at("extra").at("iteration").get<int64_t>() + 1;
  run.SyncSampler(start);
  runner.LoadState(dir.string());
  run.budget = BudgetFromJson(meta.at("extra").at("budget"));
  spdlog::info("resumed from {} at iteration {}", dir.string(), start);
  return start;
}

// Every rank starts from rank 0's weights (fresh, loaded or resumed: version `version`).
void BroadcastInitialWeights(Run& run, int64_t version) {
  if (!run.comm.distributed()) return;
  std::vector<torch::Tensor> state;
  for (const auto& p : run.model->parameters()) state.push_back(p);
  for (const auto& b : run.model->buffers()) state.push_back(b);
  run.comm.Broadcast(state, 0, "initial weights");
  run.SyncSampler(version);
}

// One iteration of the loop: play -> record -> prepare -> learn, the numeric
// guards, the job's budget, evaluation when due, and the metrics to record.
struct IterationOutcome {
  Metrics metrics;
  bool last = false;  // the final iteration (count or budget reached)
};

IterationOutcome RunIteration(Run& run, IterationRunner& runner, int64_t it, TrainResult& result) {
  const auto& t = run.cfg.trainer;
  const policy::Plane plane = runner.trainer().plane();
  Comm& comm = run.comm;
  ThrowIfInterrupted();
  comm.Mark(fmt::format("iteration {}", it));
  comm.MaybeInjectFault(it);
  const agents::StageTimes before = run.times;
  const agents::Budget budget_before = run.budget;
  double t0 = MonotonicSeconds();
  IterationContext ctx{it, t, run.cfg.run.seed, run.Agent(plane, it), run.budget,
                       run.recorder(), comm};
  // A slow rollout (iteration 0 on a user's model) says how far it is. Not
  // with rollouts played ahead: their episodes end on the worker.
  if (t.max_staleness == 0)
    ReportSlowEpisodes(ctx.agent, fmt::format("iteration {} rollout", it), t.episodes_per_iteration,
                       comm.rank() == 0);
  // LibTorch's global generator (LoRA dropout) is re-seeded every iteration,
  // so a resumed run draws what an uninterrupted one does; every rank has a
  // stream of its own (rank 0's is a single process's).
  const std::string torch_stream =
      comm.rank() == 0 ? std::string("torch_global") : fmt::format("torch_global/rank{}", comm.rank());
  torch::manual_seed(Rng::DeriveSeed(run.cfg.run.seed, torch_stream, static_cast<uint64_t>(it)));
  const double norm_before = t.max_weight_growth > 0 ? TrainableNorm(run.model) : 0.0;
  IterationOutcome out;
  Metrics& m = out.metrics;
  m = runner.Run(ctx);
  CheckParametersFinite(run.model, it);
  if (t.max_weight_growth > 0)
    CheckWeightGrowth(norm_before, TrainableNorm(run.model), t.max_weight_growth, t.optim.lr, it);
  // The job's budget: what every rank spent; its wall-clock is the slowest rank's.
  run.budget = ReduceBudget(budget_before, run.budget, comm);
  const double iteration_s = comm.Max(MonotonicSeconds() - t0, "iteration time");
  run.budget.wall_seconds += iteration_s;
  run.times.AddUnclaimedToUpdate(before, iteration_s);
  out.last = it + 1 == t.iterations || BudgetReached(t, run.budget);
  if (out.last || (t.eval_every > 0 && (it + 1) % t.eval_every == 0))
    for (const auto& kv : EvalMetrics(run, plane, it, result)) m.push_back(kv);
  for (const auto& kv : run.budget.Metrics()) m.push_back(kv);  // after evaluation: eval_* included
  m.push_back({"time/iteration_s", iteration_s});
  return out;
}

// Before training a Hugging Face model (policy.init without rlid.json): one
// greedy test episode, timed and recorded nowhere, says what a decision costs
// on this machine and what an iteration will take.
void LogDecisionCost(Run& run, policy::Plane plane) {
  const std::string& init = run.cfg.init_checkpoint;
  std::error_code ec;
  if (init.empty() || fs::exists(fs::path(init) / "rlid.json", ec)) return;
  agents::AgentContext ctx = run.Agent(plane, 0);
  ctx.episode_ids = nullptr;  // side-effect free: no store ids, memory or progress callbacks
  ctx.bank = nullptr;
  ctx.times = nullptr;
  agents::Budget scratch;
  spdlog::info("timing one greedy test episode of {} to estimate the run's cost ...", init);
  const double t0 = MonotonicSeconds();
  const EvalResult r = Evaluate(ctx, plane, 1, /*greedy=*/true, scratch, nullptr, nullptr);
  const double seconds = MonotonicSeconds() - t0;
  const double decisions = std::max(r.length, 1.0);
  const auto& t = run.cfg.trainer;
  spdlog::info(
      "one decision takes about {} on this machine ({}, {} parameters, {} plane); the "
      "rollout of an iteration ({} episodes of about {:.0f} decisions) at most about {} "
      "played one by one (trainer.num_envs = {} in lockstep share forwards), plus the update",
      FormatDuration(seconds / decisions), run.model->config().ModelType(),
      run.model->config().NumParameters(), policy::PlaneName(plane), t.episodes_per_iteration,
      decisions, FormatDuration(seconds * static_cast<double>(t.episodes_per_iteration)),
      t.num_envs);
}

// The progress line after an iteration: by iterations, or by the budget when
// a budget stops the run; train and test success; the checkpoint written; ETA.
void LogProgress(const Run& run, const TrainOptions& opt, int64_t it, int64_t start,
                 double elapsed, const Metrics& m, const std::string& written) {
  const auto& t = run.cfg.trainer;
  double frac = static_cast<double>(it + 1 - start) / static_cast<double>(t.iterations - start);
  // The iteration number is the one metrics and checkpoints (iter_N) carry.
  std::string where = fmt::format("iteration {} ({}/{})", it, it + 1, t.iterations);
  if (t.budget == BudgetKind::kEnvSteps) {
    frac = static_cast<double>(run.budget.env_steps) / t.budget_value;
    where = fmt::format("iteration {}, env steps {}/{:g}", it, run.budget.env_steps, t.budget_value);
  } else if (t.budget == BudgetKind::kWallSeconds) {
    frac = run.budget.wall_seconds / t.budget_value;
    where = fmt::format("iteration {}, {:.0f}/{:g}s", it, run.budget.wall_seconds, t.budget_value);
  } else if (t.budget == BudgetKind::kFlops) {
    frac = run.budget.TrainingFlops() / t.budget_value;
    where = fmt::format("iteration {}, {:.0f}% of FLOPs", it, 100 * frac);
  }
  frac = std::clamp(frac, 1e-9, 1.0);
  std::string eval;
  if (!std::isnan(Find(m, "eval/success")))
    eval = fmt::format(" | test greedy {:.2f}", Find(m, "eval/success"));
  if (!std::isnan(Find(m, "eval/success_sampled")))
    eval += fmt::format(" sampled {:.2f}", Find(m, "eval/success_sampled"));
  const std::string train =
      std::isnan(Find(m, "rollout/success"))
          ? "train: every episode dropped"
          : fmt::format("train success {:.2f} return {:+.3f}", Find(m, "rollout/success"),
                        Find(m, "rollout/return"));
  spdlog::info("{}[{}] {}{}{} | ETA {}", opt.label.empty() ? "" : opt.label + " ", where, train,
               eval, written.empty() ? "" : " | saved " + written,
               FormatDuration(elapsed * (1 - frac) / frac));
}

}  // namespace

TrainResult Train(Run& run, Trainer& trainer, const TrainOptions& opt) {
  const auto& t = run.cfg.trainer;
  const policy::Plane plane = trainer.plane();
  TrainResult result;
  IterationRunner runner(trainer, t, run.model);
  const int64_t start = opt.resume ? ResumeFromCheckpoint(run, runner) : 0;
  result.iterations = start;               // a resumed run counts the iterations before it too
  const bool lead = run.comm.rank() == 0;  // rank 0 records metrics and checkpoints, and reports
  BroadcastInitialWeights(run, start);
  if (!opt.resume && t.eval_at_start) {
    // The starting point of the learning curve: 0 env steps, the initial weights.
    agents::Budget empty;
    Metrics m = EvalMetrics(run, plane, -1, result);
    for (const auto& kv : empty.Metrics()) m.push_back(kv);
    if (lead) run.recorder().Metrics(-1, m);
  }
  // How the env's oracle plays (the early-end check compares the policy with it).
  const OracleReference oracle = lead ? MeasureOracle(run.Agent(plane, start), 16) : OracleReference{};
  if (lead && !opt.quiet && !opt.resume) LogDecisionCost(run, plane);
  run.recorder().TakeRolloutTally();  // only this loop's rollouts count
  std::set<std::string> warned;  // diagnostics already logged (each kind once per run)
  double t_start = MonotonicSeconds();
  agents::StageTimes logged = run.times;  // time/* metrics are the stage times since the last metrics
  int64_t empty_in_a_row = 0;  // iterations whose update was skipped: nothing to learn from
  for (int64_t it = start; it < t.iterations; ++it) {
    IterationOutcome step = RunIteration(run, runner, it, result);
    Metrics& m = step.metrics;
    empty_in_a_row = Find(m, "charts/update_skipped") == 1.0 ? empty_in_a_row + 1 : 0;
    for (const auto& kv : run.times.Delta(logged)) m.push_back(kv);
    logged = run.times;
    if (lead) run.recorder().Metrics(it, m);
    if (lead) WarnIfNotLearning(run.recorder().TakeRolloutTally(), oracle, plane, it, warned);
    result.iterations = it + 1;
    std::string written;
    if (step.last || (t.checkpoint_every > 0 && (it + 1) % t.checkpoint_every == 0)) {
      result.final_checkpoint = WriteCheckpoint(run, runner, it);
      written = fs::path(result.final_checkpoint).filename().string();
    }
    if (!opt.quiet && lead)
      LogProgress(run, opt, it, start, MonotonicSeconds() - t_start, m, written);
    if (BudgetReached(t, run.budget)) {
      result.budget_reached = true;
      break;
    }
    if (empty_in_a_row >= t.max_empty_iterations)
      throw EnvError(
          fmt::format("{} iterations in a row had no episode to learn from: the env failed on "
                      "every rollout episode, and each failure was dropped ([env] on_error = "
                      "\"drop_episode\")",
                      empty_in_a_row),
          "run `rlid env check` on the env and read its log lines above; every episode recorded "
          "so far is kept, and --resume continues from the last checkpoint "
          "(trainer.max_empty_iterations sets how many empty iterations are tolerated)");
  }
  run.recorder().Flush();
  run.comm.Barrier("end of training");  // no rank leaves before rank 0's last checkpoint is written
  return result;
}

}  // namespace rlid::trainers

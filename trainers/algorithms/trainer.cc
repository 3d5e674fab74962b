#include "trainers/algorithms/trainer.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "policy/checkpoint.h"

namespace rlid::trainers {
namespace fs = std::filesystem;

namespace {
constexpr uint64_t kEvalStreamBase = uint64_t{1} << 40;

double Now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string Duration(double s) {
  if (s < 60) return fmt::format("{:.0f}s", s);
  if (s < 3600) return fmt::format("{:.0f}m{:02.0f}s", std::floor(s / 60), std::fmod(s, 60));
  return fmt::format("{:.0f}h{:02.0f}m", std::floor(s / 3600), std::fmod(s / 60, 60));
}

nlohmann::json BudgetJson(const agents::Budget& b) {
  nlohmann::json j;
  for (const auto& [k, v] : b.Metrics()) j[k] = v;
  return j;
}

agents::Budget BudgetFromJson(const nlohmann::json& j) {
  agents::Budget b;
  auto get = [&](const char* k) { return j.value(std::string("budget/") + k, 0.0); };
  b.episodes = static_cast<int64_t>(get("episodes"));
  b.env_steps = static_cast<int64_t>(get("env_steps"));
  b.decisions = static_cast<int64_t>(get("decisions"));
  b.invalid_steps = static_cast<int64_t>(get("invalid_steps"));
  b.forward_passes = static_cast<int64_t>(get("forward_passes"));
  b.prompt_tokens = static_cast<int64_t>(get("prompt_tokens"));
  b.generated_tokens = static_cast<int64_t>(get("generated_tokens"));
  b.samples_generated = static_cast<int64_t>(get("samples_generated"));
  b.samples_used = static_cast<int64_t>(get("samples_used"));
  b.tokens_used = static_cast<int64_t>(get("tokens_used"));
  b.groups_generated = static_cast<int64_t>(get("groups_generated"));
  b.groups_kept = static_cast<int64_t>(get("groups_kept"));
  b.train_flops = get("train_flops");
  b.rollout_flops = get("rollout_flops");
  b.wall_seconds = get("wall_seconds");
  return b;
}

bool BudgetReached(const TrainerConfig& t, const agents::Budget& b) {
  if (t.budget == "env_steps") return static_cast<double>(b.env_steps) >= t.budget_value;
  if (t.budget == "wall_clock") return b.wall_seconds >= t.budget_value;
  if (t.budget == "flops") return b.train_flops + b.rollout_flops >= t.budget_value;
  return false;
}

std::string WriteCheckpoint(Session& s, Trainer& trainer, int64_t iteration) {
  // Only called from Train after CheckParametersFinite passed on these weights.
  agents::StageTimer timer(&s.times.checkpoint);
  fs::path dir = fs::path(s.checkpoints_dir) / fmt::format("iter_{:06d}", iteration);
  nlohmann::json extra = {{"iteration", iteration},
                          {"budget", BudgetJson(s.budget)},
                          {"algorithm", s.cfg.trainer.algorithm},
                          {"seed", s.cfg.run.seed}};
  policy::SaveCheckpoint(dir.string(), s.model, s.tokenizer, extra,
                         [&](const std::string& tmp) { trainer.SaveState(tmp); });
  // "latest" is a relative symlink to the newest complete checkpoint (usable
  // wherever a checkpoint directory is expected), replaced atomically.
  fs::path latest = fs::path(s.checkpoints_dir) / "latest";
  fs::path tmp = latest.string() + ".tmp";
  fs::remove(tmp);
  fs::create_directory_symlink(dir.filename(), tmp);
  fs::rename(tmp, latest);
  s.writer->Submit(memory::CheckpointRecord{s.run_id, iteration, dir.string()});
  return dir.string();
}

}  // namespace

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

Metrics RolloutMetrics(const std::vector<agents::EpisodeData>& episodes) {
  double n = std::max<size_t>(episodes.size(), 1);
  double success = 0, ret = 0, invalid = 0, steps = 0, mass = 0, menu_h = 0, row_h = 0;
  int64_t decision_steps = 0;
  for (const auto& e : episodes) {
    success += e.success;
    ret += e.ret;
    invalid += e.invalid_steps;
    steps += e.steps.size();
    for (const auto& s : e.steps) {
      if (e.plane != policy::Plane::kDecision) continue;
      mass += s.candidate_mass, menu_h += s.menu_entropy, row_h += s.row_entropy;
      ++decision_steps;
    }
  }
  Metrics m = {{"rollout/success", success / n},
               {"rollout/return", ret / n},
               {"rollout/length", steps / n},
               {"rollout/invalid_rate", steps > 0 ? invalid / steps : 0.0}};
  if (decision_steps > 0) {
    double d = static_cast<double>(decision_steps);
    m.push_back({"policy/candidate_mass", mass / d});
    m.push_back({"policy/menu_entropy", menu_h / d});
    m.push_back({"policy/row_entropy", row_h / d});
  }
  return m;
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

EvalResult Evaluate(Session& s, policy::Plane plane, int64_t episodes, bool greedy,
                    int64_t iteration) {
  agents::StageTimer timer(&s.times.eval);
  std::vector<agents::EpisodeSpec> specs;
  for (int64_t i = 0; i < episodes; ++i) {
    agents::EpisodeSpec spec;
    spec.env_seed = envs::SplitSeed(envs::Split::kTest, static_cast<uint64_t>(i));
    spec.stream = kEvalStreamBase + static_cast<uint64_t>(i) + (greedy ? 0 : uint64_t{1} << 30);
    specs.push_back(spec);
  }
  agents::Budget scratch;  // evaluation is not part of the training budget
  agents::AgentContext ctx = s.AgentCtx(iteration);
  ctx.ref_model = nullptr;
  ctx.afterstate_values = false;
  ctx.oracle_probs = true;
  ctx.times = nullptr;  // all of it is evaluation time
  std::vector<agents::EpisodeData> eps;
  if (plane == policy::Plane::kDecision) {
    eps = agents::RunDecisionEpisodes(ctx, specs, envs::Split::kTest, greedy, scratch);
  } else {
    ctx.sampler = &s.Sampler();
    eps = agents::RunTokenEpisodes(ctx, specs, envs::Split::kTest, greedy, scratch);
  }
  if (s.record)
    for (const auto& e : eps) s.writer->Submit(agents::ToRecord(e, ctx));
  EvalResult r;
  r.episodes = episodes;
  double steps = 0, invalid = 0, p_opt = 0, measured = 0;
  for (const auto& e : eps) {
    r.success += e.success;
    r.ret += e.ret;
    steps += e.steps.size();
    invalid += e.invalid_steps;
    for (const auto& st : e.steps)
      if (st.p_optimal >= 0) p_opt += st.p_optimal, measured += 1;
  }
  double n = std::max<int64_t>(episodes, 1);
  r.success /= n, r.ret /= n, r.length = steps / n;
  r.invalid_rate = steps > 0 ? invalid / steps : 0;
  if (measured > 0) r.p_optimal = p_opt / measured;
  return r;
}

double GradientVariance(policy::TransformerLM& model,
                        const std::vector<std::function<torch::Tensor()>>& losses) {
  std::vector<torch::Tensor> params;
  for (auto& p : model->parameters())
    if (p.requires_grad()) params.push_back(p);
  std::vector<torch::Tensor> grads;
  for (const auto& f : losses) {
    auto loss = f();
    auto g =
        torch::autograd::grad({loss}, params, {}, /*retain_graph=*/false, /*create_graph=*/false,
                              /*allow_unused=*/true);
    std::vector<torch::Tensor> flat;
    for (size_t i = 0; i < g.size(); ++i)
      flat.push_back(g[i].defined() ? g[i].reshape(-1).to(torch::kFloat64)
                                    : torch::zeros({params[i].numel()}, torch::kFloat64));
    grads.push_back(torch::cat(flat));
  }
  if (grads.size() < 2) return 0.0;
  auto G = torch::stack(grads);  // [n, P]
  auto mean = G.mean(0, true);
  return (G - mean).pow(2).sum(1).mean().item<double>();
}

TrainResult Train(Session& s, Trainer& trainer, const TrainOptions& opt) {
  const auto& t = s.cfg.trainer;
  const policy::Plane plane = trainer.plane();
  TrainResult result;
  int64_t start = 0;
  trainer.Setup(s);
  if (opt.resume) {
    fs::path latest = fs::path(s.checkpoints_dir) / "latest";
    std::error_code ec;
    fs::path name = fs::read_symlink(latest, ec);
    if (ec || name.empty())
      throw IoError(fmt::format("--resume: no checkpoint in '{}'", s.checkpoints_dir),
                    "resume needs a run directory with checkpoints/latest (checkpoint_every > 0)");
    fs::path dir = fs::path(s.checkpoints_dir) / name;
    auto ck = policy::LoadCheckpoint(dir.string(), s.device);
    policy::CopyWeights(ck.model, s.model);
    if (s.sampler) s.sampler->SyncWeights(s.model);
    trainer.LoadState(dir.string());
    start = ck.meta.at("extra").at("iteration").get<int64_t>() + 1;
    s.budget = BudgetFromJson(ck.meta.at("extra").at("budget"));
    spdlog::info("resumed from {} at iteration {}", dir.string(), start);
  }
  double t_start = Now();
  agents::StageTimes logged = s.times;  // time/* metrics are the stage times since the last metrics
  for (int64_t it = start; it < t.iterations; ++it) {
    const agents::StageTimes before = s.times;
    double t0 = Now();
    Metrics m = trainer.Iterate(s, it);
    CheckParametersFinite(s.model, it);
    const double iteration_s = Now() - t0;
    s.budget.wall_seconds += iteration_s;
    for (const auto& kv : s.budget.Metrics()) m.push_back(kv);
    s.times.AddUnclaimedToUpdate(before, iteration_s);
    bool last = it + 1 == t.iterations || BudgetReached(t, s.budget);
    if (last || (t.eval_every > 0 && (it + 1) % t.eval_every == 0)) {
      auto g = Evaluate(s, plane, t.eval_episodes, /*greedy=*/true, it);
      m.push_back({"eval/success", g.success});
      m.push_back({"eval/return", g.ret});
      m.push_back({"eval/length", g.length});
      m.push_back({"eval/invalid_rate", g.invalid_rate});
      if (g.p_optimal >= 0) m.push_back({"eval/p_optimal", g.p_optimal});
      result.final_greedy = g;
      if (t.eval_sampled) {
        auto sm = Evaluate(s, plane, t.eval_episodes, /*greedy=*/false, it);
        m.push_back({"eval/success_sampled", sm.success});
        m.push_back({"eval/return_sampled", sm.ret});
        result.final_sampled = sm;
      }
    }
    m.push_back({"time/iteration_s", iteration_s});
    for (const auto& kv : s.times.Delta(logged)) m.push_back(kv);
    logged = s.times;
    s.LogMetrics(it, m);
    result.iterations = it + 1;
    if (last || (t.checkpoint_every > 0 && (it + 1) % t.checkpoint_every == 0))
      result.final_checkpoint = WriteCheckpoint(s, trainer, it);
    if (!opt.quiet) {
      auto find = [&](const std::string& k) {
        for (const auto& [key, v] : m)
          if (key == k) return v;
        return std::nan("");
      };
      double elapsed = Now() - t_start;
      // Progress by iterations, or by the budget when a budget stops the run.
      double frac = static_cast<double>(it + 1 - start) / static_cast<double>(t.iterations - start);
      std::string where = fmt::format("{}/{}", it + 1, t.iterations);
      if (t.budget == "env_steps") {
        frac = static_cast<double>(s.budget.env_steps) / t.budget_value;
        where = fmt::format("it {} env steps {}/{:g}", it + 1, s.budget.env_steps, t.budget_value);
      } else if (t.budget == "wall_clock") {
        frac = s.budget.wall_seconds / t.budget_value;
        where = fmt::format("it {} {:.0f}/{:g}s", it + 1, s.budget.wall_seconds, t.budget_value);
      } else if (t.budget == "flops") {
        frac = (s.budget.train_flops + s.budget.rollout_flops) / t.budget_value;
        where = fmt::format("it {} {:.0f}% of FLOPs", it + 1, 100 * frac);
      }
      frac = std::clamp(frac, 1e-9, 1.0);
      std::string eval;
      if (!std::isnan(find("eval/success")))
        eval = fmt::format(" | test greedy {:.2f}", find("eval/success"));
      if (!std::isnan(find("eval/success_sampled")))
        eval += fmt::format(" sampled {:.2f}", find("eval/success_sampled"));
      spdlog::info("{}[{}] train success {:.2f} return {:+.3f}{} | ETA {}",
                   opt.label.empty() ? "" : opt.label + " ", where, find("rollout/success"),
                   find("rollout/return"), eval, Duration(elapsed * (1 - frac) / frac));
    }
    if (BudgetReached(t, s.budget)) {
      result.budget_reached = true;
      break;
    }
  }
  s.writer->Flush();
  return result;
}

}  // namespace rlid::trainers

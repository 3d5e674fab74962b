#include "trainers/analysis/compare.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "core/clock.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/rng.h"
#include "memory/store.h"
#include "memory/writer_lock.h"
#include "policy/model/checkpoint.h"
#include "trainers/algorithms/sft.h"
#include "trainers/analysis/report.h"
#include "trainers/runtime/run.h"
#include "trainers/runtime/trainer.h"

namespace rlid::trainers {
namespace fs = std::filesystem;

void CompareConfig::Load(ConfigNode n) {
  std::vector<std::string> names;
  n.Get("arms", names, "arms by algorithm name (each arm = one registered trainer)");
  std::vector<int64_t> seed_list(seeds.begin(), seeds.end());
  n.Get("seeds", seed_list, "RL seeds; every arm runs every seed", IntRange::NonNegative());
  n.GetEnum("budget", budget,
            "the matched budget: env steps (every decision attempt), rollout + update FLOPs, or "
            "training wall-clock seconds",
            {BudgetKind::kEnvSteps, BudgetKind::kFlops, BudgetKind::kWallSeconds});
  n.Get("budget_value", budget_value, "budget per arm and seed (env steps, FLOPs, or seconds)",
        Range::Positive());
  n.Get("max_iterations", max_iterations, "safety cap on iterations (the budget should stop first)",
        IntRange::Positive());
  n.Get("success_threshold", success_threshold, "success level for 'env steps to reach'",
        Range::Unit());
  n.GetEnum(
      "success_metric", success_metric,
      "test evaluation reported: greedy (argmax) or sampled policy (needs trainer.eval_sampled)");
  n.Get("warm_start", warm_start,
        "sft (behaviour cloning once) | none (shared fresh init) | checkpoint dir");
  n.Get("chance_episodes", chance_episodes,
        "test episodes of the uniform-random menu policy (the chance level; 0 = not measured)",
        IntRange::NonNegative());
  n.Get("plots", plots, "render learning curves with gnuplot");
  for (const auto& a : names) arms.push_back({a, a, {}});
  for (auto& arm : n.TableArray("arm")) {
    ArmSpec spec;
    arm.Get("name", spec.name, "arm name (table column)");
    arm.Get("algorithm", spec.algorithm, "registered trainer");
    arm.Get("set", spec.sets, "overrides for this arm only (listed in the report)");
    if (spec.algorithm.empty()) spec.algorithm = spec.name;
    if (spec.name.empty()) spec.name = spec.algorithm;
    arms.push_back(spec);
  }
  seeds.clear();
  for (auto s : seed_list) seeds.push_back(static_cast<uint64_t>(s));
  if (arms.empty())
    throw ConfigError(fmt::format("{}: [compare] has no arms", n.Where()),
                      "add arms = [\"ppo_decision\", \"grpo\"] or [[compare.arm]] tables");
  if (seeds.empty())
    throw ConfigError(fmt::format("{}: [compare] needs at least one seed", n.Where("seeds")));
  std::set<std::string> seen;
  for (const auto& a : arms) {
    TrainerRegistry::Global().Get(
        a.algorithm);  // unknown algorithm -> error listing the known ones
    if (!seen.insert(a.name).second)
      throw ConfigError(fmt::format("compare: arm '{}' appears twice", a.name));
  }
}

namespace {

Config BaseConfig(const std::string& path, const std::vector<std::string>& sets) {
  Config cfg = Config::FromFile(path);
  cfg.ApplyOverrides(sets);
  return cfg;
}

using memory::NumericValue;

// Reads a run's metrics back from the store: {iteration -> {key -> value}}.
std::map<int64_t, std::map<std::string, double>> ReadMetrics(const std::string& db,
                                                             int64_t run_id) {
  auto store = memory::Store::Open(db, memory::Store::Mode::kReadOnly);
  auto q = store->Query(fmt::format(
      "SELECT iteration, key, value FROM metrics WHERE run_id = {} ORDER BY iteration", run_id));
  std::map<int64_t, std::map<std::string, double>> out;
  for (const auto& row : q.rows)
    out[static_cast<int64_t>(NumericValue(row[0]))][std::get<std::string>(row[1])] = NumericValue(row[2]);
  return out;
}

}  // namespace

ArmSeedResult Collect(const std::string& db, int64_t run_id, const ArmSpec& arm,
                      const std::string& plane, uint64_t seed, double threshold, bool sampled) {
  ArmSeedResult r;
  r.arm = arm.name;
  r.algorithm = arm.algorithm;
  r.plane = plane;
  r.seed = seed;
  r.run_id = run_id;
  auto metrics = ReadMetrics(db, run_id);
  double snr_sum = 0;
  int snr_n = 0;
  double invalid_sum = 0;
  int invalid_n = 0;
  for (const auto& [it, m] : metrics) {
    auto get = [&](const std::string& k) {
      auto f = m.find(k);
      return f == m.end() ? std::nan("") : f->second;
    };
    r.iterations = std::max(r.iterations, it + 1);
    if (!std::isnan(get("budget/env_steps"))) {
      r.env_steps = get("budget/env_steps");
      r.wall = get("budget/wall_seconds");
      r.flops = get("budget/flops");
      r.rollout_flops = get("budget/rollout_flops");
      r.update_flops = get("budget/update_flops");
      r.tokens_processed = get("budget/tokens_processed");
      r.generated_tokens = get("budget/generated_tokens");
      r.samples_generated = get("budget/samples_generated");
      r.samples_used = get("budget/samples_used");
    }
    if (!std::isnan(get("rollout/invalid_rate")))
      invalid_sum += get("rollout/invalid_rate"), ++invalid_n;
    if (!std::isnan(get("grad/snr"))) snr_sum += get("grad/snr"), ++snr_n;
    if (!std::isnan(get("eval/success"))) {
      CurvePoint p;
      p.iteration = it;
      p.env_steps = get("budget/env_steps");
      p.wall = get("budget/wall_seconds");
      p.flops = get("budget/flops");
      double greedy = get("eval/success");
      double samp = std::isnan(get("eval/success_sampled")) ? greedy : get("eval/success_sampled");
      p.success = sampled ? samp : greedy;
      p.success_sampled = samp;
      p.ret = sampled && !std::isnan(get("eval/return_sampled")) ? get("eval/return_sampled")
                                                                 : get("eval/return");
      if (!std::isnan(get("eval/episodes")))
        r.eval_episodes = static_cast<int64_t>(get("eval/episodes"));
      r.curve.push_back(p);
      if (it >= 0 && r.steps_to_threshold < 0 && p.success >= threshold)
        r.steps_to_threshold = p.env_steps;
    }
  }
  if (!r.curve.empty()) {
    r.final_success = r.curve.back().success;
    r.final_success_sampled = r.curve.back().success_sampled;
    r.final_return = r.curve.back().ret;
  }
  r.invalid_rate = invalid_n ? invalid_sum / invalid_n : 0;
  if (snr_n) r.grad_snr = snr_sum / snr_n;
  return r;
}

namespace {

// Test success of the uniform-random menu policy on the test seeds (the same
// interface both planes act through), for the curves' chance level.
double ChanceLevel(const ExperimentConfig& cfg, int64_t episodes) {
  if (episodes <= 0) return -1;
  auto env = envs::MakeEnv(cfg.env_section);
  agents::AgentContext ctx;
  ctx.env = env.get();
  policy::Tokenizer tok;  // byte-level: the prompts are not read by anyone
  policy::PromptConfig pc = cfg.prompt;
  pc.label_order = policy::LabelOrder::kFixed;
  policy::PromptRenderer renderer(pc, tok);
  ctx.renderer = &renderer;
  ctx.seed = cfg.run.seed;
  std::vector<agents::EpisodeSpec> specs;
  for (int64_t i = 0; i < episodes; ++i) {
    agents::EpisodeSpec spec;
    spec.env_seed =
        envs::SplitSeed(envs::Split::kTest,
                        static_cast<uint64_t>(i % std::max<int64_t>(cfg.trainer.eval_episodes, 1)));
    spec.stream = static_cast<uint64_t>(i);
    specs.push_back(spec);
  }
  agents::Budget scratch;
  auto eps = agents::RunScriptedEpisodes(
      ctx, specs, envs::Split::kTest,
      [](const envs::State&, const agents::StepData& step, Rng& rng) {
        return static_cast<int>(rng.UniformInt(step.menu.size()));
      },
      scratch);
  double success = 0;
  for (const auto& e : eps) success += e.success;
  return success / static_cast<double>(eps.size());
}

}  // namespace

std::vector<ArmSummary> Summarise(const std::vector<ArmSeedResult>& runs,
                                  const std::vector<ArmSpec>& arms) {
  std::vector<ArmSummary> out;
  for (const auto& arm : arms) {
    ArmSummary s;
    s.arm = arm.name;
    s.algorithm = arm.algorithm;
    std::vector<double> succ;
    double steps_sum = 0, snr = 0;
    int snr_n = 0;
    int64_t episodes = 0;
    for (const auto& r : runs) {
      if (r.arm != arm.name) continue;
      s.plane = r.plane;
      ++s.seeds;
      succ.push_back(r.final_success);
      episodes = r.eval_episodes;
      s.return_mean += r.final_return;
      s.env_steps += r.env_steps;
      s.flops += r.flops;
      s.tokens_processed += r.tokens_processed;
      s.generated_tokens += r.generated_tokens;
      s.wall += r.wall;
      s.invalid_rate += r.invalid_rate;
      if (r.steps_to_threshold >= 0) steps_sum += r.steps_to_threshold, ++s.reached;
      if (r.grad_snr >= 0) snr += r.grad_snr, ++snr_n;
    }
    if (s.seeds == 0) continue;
    const double n = s.seeds;
    s.success = EstimateSuccess(succ, episodes);
    s.return_mean /= n, s.env_steps /= n, s.flops /= n, s.tokens_processed /= n;
    s.generated_tokens /= n, s.wall /= n, s.invalid_rate /= n;
    if (s.reached) s.steps_to_threshold = steps_sum / s.reached;
    if (snr_n) s.grad_snr = snr / snr_n;
    out.push_back(s);
  }
  return out;
}

std::string Verdict(const std::vector<ArmSummary>& arms, const std::string& env, double chance) {
  if (arms.empty()) return "no results";
  const ArmSummary* best = &arms[0];
  for (const auto& a : arms) {
    bool better = a.success.mean > best->success.mean + 1e-12 ||
                  (std::abs(a.success.mean - best->success.mean) <= 1e-12 && a.reached > 0 &&
                   (best->reached == 0 || a.steps_to_threshold < best->steps_to_threshold));
    if (better) best = &a;
  }
  std::string v = fmt::format(
      "On {}{}, the best final test success is {} ({} plane): {:.3f} ± {:.3f} (se) over {} "
      "seed(s).",
      env, chance >= 0 ? fmt::format(" (chance {:.3f})", chance) : "", best->arm, best->plane,
      best->success.mean, best->success.se, best->seeds);
  const ArmSummary* runner = nullptr;
  for (const auto& a : arms)
    if (&a != best && (!runner || a.success.mean > runner->success.mean)) runner = &a;
  if (!runner) return v;
  v += fmt::format(" Runner-up: {} ({} plane) at {:.3f} ± {:.3f}.", runner->arm, runner->plane,
                   runner->success.mean, runner->success.se);
  GapEstimate g = CompareSuccess(best->success, runner->success);
  if (!g.comparable)
    return v +
           " With a single seed per arm no claim about the gap can be made (the seed-to-seed "
           "spread is unknown); rerun with more seeds.";
  v += fmt::format(
      " Gap {:+.3f}, 95% CI [{:+.3f}, {:+.3f}] (Welch, df {:.1f}, test-episode noise included): ",
      g.gap, g.lo, g.hi, g.df);
  if (g.tie) return v + "a tie — this budget does not separate them.";
  return v + fmt::format("{} is ahead.", best->arm);
}

std::string Overshoot(const CompareConfig& cc, double used, BudgetKind kind) {
  if (cc.budget != kind || cc.budget_value <= 0) return "";
  return fmt::format(" ({:+.1f}%)", 100.0 * (used / cc.budget_value - 1));
}

std::string FormatSummaryTable(const std::vector<ArmSummary>& arms, const CompareConfig& cfg,
                               bool with_wall) {
  // The arm column fits the longest name (UTF-8 counted in bytes: names are ASCII in practice).
  size_t w = 16;
  for (const auto& a : arms) w = std::max(w, a.arm.size());
  std::string out = fmt::format(
      "{:<{}} {:<8} {:>15} {:>7} {:>12} {:>15} {:>15} {:>9} {:>9} {:>7}{} {:>8}\n", "arm", w,
      "plane", cfg.success_metric == SuccessMetric::kSampled ? "test (sampled)" : "test (greedy)", "return",
      fmt::format("steps→{:g}", cfg.success_threshold), "env steps", "FLOPs", "tokens", "gen tok",
      "invalid", with_wall ? fmt::format(" {:>7}", "wall s") : "", "grad SNR");
  for (const auto& a : arms) {
    std::string steps =
        a.reached ? fmt::format("{:.0f} ({}/{})", a.steps_to_threshold, a.reached, a.seeds) : "—";
    out += fmt::format(
        "{:<{}} {:<8} {:>7.3f} ± {:<5.3f} {:>7.3f} {:>12} {:>15} {:>15} {:>9.3g} {:>9.0f} "
        "{:>7.3f}{} {:>8}\n",
        a.arm, w, a.plane, a.success.mean, a.success.se, a.return_mean, steps,
        fmt::format("{:.0f}{}", a.env_steps, Overshoot(cfg, a.env_steps, BudgetKind::kEnvSteps)),
        fmt::format("{:.3g}{}", a.flops, Overshoot(cfg, a.flops, BudgetKind::kFlops)), a.tokens_processed,
        a.generated_tokens, a.invalid_rate, with_wall ? fmt::format(" {:>7.1f}", a.wall) : "",
        a.grad_snr < 0 ? "—" : fmt::format("{:.3g}", a.grad_snr));
  }
  return out;
}

namespace {

// The compare directory: `out_dir`, else runs/<name>-compare-<time>, chosen by
// rank 0 (which refuses one that holds a run) and created on every rank.
std::string CompareDirectory(Comm& comm, const std::string& out_dir, const std::string& run_name) {
  std::string dir =
      out_dir.empty()
          ? (fs::path("runs") / fmt::format("{}-compare-{}", run_name, Timestamp())).string()
          : out_dir;
  if (comm.rank() == 0) RefuseExistingRun(dir, RunKind::kCompare);
  dir = comm.Broadcast(dir, 0, "compare directory");
  fs::create_directories(dir);
  return dir;
}

// Rank 0's warm start, run in the compare directory with the first seed:
// behaviour cloning (sft), a saved fresh init (none), or a checkpoint the
// config names (loaded once to fail early on a bad path). Returns its path.
std::string LeadWarmStart(const std::string& config_path, const std::vector<std::string>& sets,
                          const CompareConfig& cc, const std::string& run_dir, bool quiet) {
  if (cc.warm_start != "sft" && cc.warm_start != "none") {
    policy::LoadCheckpoint(cc.warm_start);  // fail early on a bad path
    return cc.warm_start;
  }
  std::string warm_start;
  Config c = BaseConfig(config_path, sets);
  c.ApplyOverride(fmt::format("run.seed={}", cc.seeds.front()));
  auto exp = ExperimentConfig::FromConfig(std::move(c));
  Run s(*exp, {.out_dir = run_dir,
               .kind = cc.warm_start == "sft" ? RunKind::kSft : RunKind::kInit,
               .arm = "warm_start",
               .config_file = "config-warm_start.toml",
               .quiet = quiet,
               .job = false});
  if (cc.warm_start == "sft") {
    if (!quiet)
      spdlog::info("warm start: behaviour cloning ({} oracle episodes)", exp->sft.episodes);
    auto r = RunSft(s, quiet);
    warm_start = r.checkpoint;
    if (!quiet)
      spdlog::info("warm start: test success {:.2f} (decision) / {:.2f} (token), checkpoint {}",
                   r.decision_greedy.success, r.token_greedy.success, r.checkpoint);
  } else {
    warm_start = (fs::path(run_dir) / "checkpoints" / "init").string();
    policy::SaveCheckpoint(warm_start, s.model, s.tokenizer,
                           {{"kind", "init"}, {"config_toml", exp->raw.ResolvedToml()}});
  }
  s.End("completed");
  return warm_start;
}

// The shared warm start on every rank: rank 0 makes it, the others wait for
// its path as long as it takes (it may take longer than run.dist_timeout_s),
// and stop if rank 0 dies.
std::string SharedWarmStart(Comm& comm, const std::string& config_path,
                            const std::vector<std::string>& sets, const CompareConfig& cc,
                            const std::string& run_dir, bool quiet) {
  const bool lead = comm.rank() == 0;
  std::string warm_start;
  if (lead) warm_start = LeadWarmStart(config_path, sets, cc, run_dir, quiet);
  if (comm.distributed()) {
    if (lead)
      comm.Post("warm_start", warm_start);
    else
      warm_start = comm.AwaitPost("warm_start", 0);
  }
  return warm_start;
}

// One arm x seed's experiment: the base config from the shared start with the
// matched budget, then the arm's own overrides (an error names the arm).
std::unique_ptr<ExperimentConfig> ArmExperiment(const std::string& config_path,
                                                const std::vector<std::string>& sets,
                                                const CompareConfig& cc, const ArmSpec& arm,
                                                uint64_t seed, const std::string& warm_start) {
  Config c = BaseConfig(config_path, sets);
  c.ApplyOverrides({fmt::format("trainer.algorithm={}", arm.algorithm),
                    fmt::format("run.seed={}", seed), fmt::format("policy.init={}", warm_start),
                    fmt::format("trainer.budget={}", NameOf(cc.budget)),
                    fmt::format("trainer.budget_value={}", cc.budget_value),
                    fmt::format("trainer.iterations={}", cc.max_iterations)});
  if (cc.success_metric == SuccessMetric::kSampled) c.ApplyOverride("trainer.eval_sampled=true");
  c.ApplyOverride("trainer.eval_at_start=true");  // the curves start at the warm start
  c.ApplyOverrides(arm.sets);
  try {
    auto e = ExperimentConfig::FromConfig(std::move(c));
    // One iteration plays episodes_per_iteration episodes of at least one
    // decision each: a smaller env-step budget is overshot by the first one.
    const auto per_iteration = e->trainer.episodes_per_iteration;
    if (cc.budget == BudgetKind::kEnvSteps && cc.budget_value < static_cast<double>(per_iteration))
      throw ConfigError(
          fmt::format(
              "compare.budget_value = {:g} env steps is less than one iteration of this arm "
              "({} episodes of at least one step each): every arm would overshoot it",
              cc.budget_value, per_iteration),
          fmt::format("raise compare.budget_value to at least {} (a few iterations' worth), or "
                      "lower trainer.episodes_per_iteration",
                      per_iteration));
    return e;
  } catch (const ConfigError& e) {
    throw ConfigError(fmt::format("compare arm '{}' ({}): {}", arm.name, arm.algorithm, e.what()),
                      e.hint());
  }
}

// Records how `arm` measures the gradient SNR in `snr_settings` and throws
// unless every arm recorded so far measures it the same way.
void RequireSameSnrSettings(std::map<std::string, std::pair<int64_t, int64_t>>& snr_settings,
                            const ArmSpec& arm, const ExperimentConfig& exp) {
  snr_settings[arm.name] = {exp.trainer.grad_snr_every, exp.trainer.grad_snr_episodes};
  if (snr_settings[arm.name] != snr_settings.begin()->second)
    throw ConfigError(
        fmt::format("compare: arm '{}' measures the gradient SNR with grad_snr_every = {}, "
                    "grad_snr_episodes = {}, arm '{}' with {}, {}",
                    arm.name, exp.trainer.grad_snr_every, exp.trainer.grad_snr_episodes,
                    snr_settings.begin()->first, snr_settings.begin()->second.first,
                    snr_settings.begin()->second.second),
        "the SNR is comparable only when measured the same way: set them in [trainer], not "
        "in an arm's set");
}

// Trains one arm x seed until the matched budget, as a 'compare' run in the
// compare directory; returns its run id.
int64_t TrainArmSeed(const ExperimentConfig& exp, Trainer& trainer, const CompareConfig& cc,
                     const ArmSpec& arm, uint64_t seed, const std::string& run_dir, bool quiet) {
  Run s(exp, {.out_dir = run_dir,
              .kind = RunKind::kCompare,
              .arm = arm.name,
              .config_file = fmt::format("config-{}-seed{}.toml", arm.name, seed),
              .quiet = true,
              .checkpoints = fmt::format("checkpoints/{}-seed{}", arm.name, seed)});
  if (!quiet)
    spdlog::info("arm {} ({} plane), seed {}: training until {} = {:g}", arm.name,
                 policy::PlaneName(trainer.plane()), seed, NameOf(cc.budget), cc.budget_value);
  Train(s, trainer,
        {.resume = false, .quiet = quiet, .label = fmt::format("{} s{}", arm.name, seed)});
  s.End("completed");
  return s.run_id;
}

// report.html (curves, config diffs against the first arm) and summary.txt in
// the compare directory; `t0` is when the compare started.
void WriteReport(CompareResult& result, const ExperimentConfig& base_exp,
                 const std::string& env_name, const std::string& config_path,
                 const std::vector<std::string>& sets,
                 const std::map<std::string, std::string>& resolved_by_arm, double t0) {
  const CompareConfig& cc = result.config;
  ReportInputs report;
  report.env_name = env_name;
  report.config_path = config_path;
  report.sets = sets;
  report.show_afterstates = base_exp.prompt.show_afterstates;
  report.label_order = std::string(NameOf(base_exp.prompt.label_order));
  report.memory_enabled = base_exp.memory.enabled;
  report.eval_episodes = base_exp.trainer.eval_episodes;
  const std::string& first = resolved_by_arm.at(cc.arms.front().name);
  for (const auto& arm : cc.arms)
    report.arm_diffs.push_back({arm.name, ConfigDiff(first, resolved_by_arm.at(arm.name))});
  if (cc.plots)
    report.plots = RenderPlots(fs::path(result.run_dir) / "plots", result.runs, cc.arms,
                               cc.success_metric, result.chance);
  report.total_seconds = MonotonicSeconds() - t0;
  std::string html = RenderReportHtml(result, report);
  result.report = (fs::path(result.run_dir) / "report.html").string();
  WriteWholeFile(result.report, html, "comparison report");
  WriteWholeFile((fs::path(result.run_dir) / "summary.txt").string(),
                 result.table + "\n" + result.verdict + "\n", "comparison summary");
}

}  // namespace

CompareResult RunCompare(const std::string& config_path, const std::vector<std::string>& sets,
                         const std::string& out_dir, bool quiet) {
  CompareResult result;
  Config base = BaseConfig(config_path, sets);
  result.config.Load(base.Root().Section("compare"));
  const CompareConfig& cc = result.config;
  auto base_exp =
      ExperimentConfig::FromConfig(BaseConfig(config_path, sets));  // validates every section
  const std::string env_name = envs::MakeEnv(base_exp->env_section)->Info().name;
  // Every arm's config is checked before anything is written or trained: an
  // error in the last arm must not surface after the first arms' minutes.
  for (const auto& arm : cc.arms)
    ArmExperiment(config_path, sets, cc, arm, cc.seeds.front(), "warm_start");

  // A data-parallel compare (--nproc N): every arm x seed trains on all ranks;
  // rank 0 alone trains the warm start, collects the results and writes the report.
  Comm& comm = ProcessComm();
  const bool lead = comm.rank() == 0;
  result.run_dir = CompareDirectory(comm, out_dir, base_exp->run.name);
  const std::string db = (fs::path(result.run_dir) / memory::kDatabaseFileName).string();
  // Held to the end: a second compare (or train) on this directory is refused
  // before anything here is written, and the arms' stores join it.
  std::optional<memory::WriterLock> lock;
  if (lead) lock.emplace(db);
  comm.Barrier("compare lock");
  if (lead)
    WriteWholeFile((fs::path(result.run_dir) / "compare.toml").string(), base.DocumentToml(),
                   "comparison config");
  double t0 = MonotonicSeconds();

  result.warm_start = SharedWarmStart(comm, config_path, sets, cc, result.run_dir, quiet);
  if (lead) result.chance = ChanceLevel(*base_exp, cc.chance_episodes);

  // ---- every arm x seed from the same start, same budget --------------------------------
  std::map<std::string, std::string> resolved_by_arm;
  std::map<std::string, std::pair<int64_t, int64_t>> snr_settings;  // measured the same way for all
  // Overall: one line after every arm x seed (each takes minutes).
  Progress overall("compare: arm x seed runs", static_cast<int64_t>(cc.arms.size() * cc.seeds.size()),
                   !quiet, /*every_s=*/0);
  for (const auto& arm : cc.arms) {
    for (uint64_t seed : cc.seeds) {
      auto exp = ArmExperiment(config_path, sets, cc, arm, seed, result.warm_start);
      RequireSameSnrSettings(snr_settings, arm, *exp);
      auto trainer = TrainerRegistry::Global().Make(arm.algorithm);
      const int64_t run_id = TrainArmSeed(*exp, *trainer, cc, arm, seed, result.run_dir, quiet);
      resolved_by_arm.emplace(arm.name, exp->raw.ResolvedToml());
      if (!lead) continue;
      auto r = Collect(db, run_id, arm, policy::PlaneName(trainer->plane()), seed,
                       cc.success_threshold, cc.success_metric == SuccessMetric::kSampled);
      result.runs.push_back(r);
      if (!quiet)
        spdlog::info("arm {} seed {}: test success {:.3f} after {:.0f} env steps, {:.1f}s",
                     arm.name, seed, r.final_success, r.env_steps, r.wall);
      overall.Update(static_cast<int64_t>(result.runs.size()), fmt::format("(last: {} seed {})", arm.name, seed));
    }
  }
  if (!lead) return result;  // rank 0 reports
  result.arms = Summarise(result.runs, cc.arms);
  result.table = FormatSummaryTable(result.arms, cc);
  result.verdict = Verdict(result.arms, env_name, result.chance);
  WriteReport(result, *base_exp, env_name, config_path, sets, resolved_by_arm, t0);
  return result;
}

}  // namespace rlid::trainers

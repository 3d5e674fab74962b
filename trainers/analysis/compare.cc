#include "trainers/analysis/compare.h"

#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "memory/store.h"
#include "policy/checkpoint.h"
#include "trainers/algorithms/experiment.h"
#include "trainers/analysis/report.h"
#include "trainers/algorithms/sft.h"
#include "trainers/algorithms/trainer.h"

namespace rlid::trainers {
namespace fs = std::filesystem;

void CompareConfig::Load(ConfigNode n) {
  std::vector<std::string> names;
  n.Get("arms", names, "arms by algorithm name (each arm = one registered trainer)");
  std::vector<int64_t> seed_list(seeds.begin(), seeds.end());
  n.Get("seeds", seed_list, "RL seeds; every arm runs every seed", IntRange::NonNegative());
  n.GetEnum("budget", budget, {"env_steps", "wall_clock", "flops"}, "the matched budget");
  n.Get("budget_value", budget_value, "budget per arm and seed (env steps, seconds, or FLOPs)",
        Range::Positive());
  n.Get("max_iterations", max_iterations, "safety cap on iterations (the budget should stop first)",
        IntRange::Positive());
  n.Get("success_threshold", success_threshold, "success level for 'env steps to reach'",
        Range::Unit());
  n.GetEnum(
      "success_metric", success_metric, {"greedy", "sampled"},
      "test evaluation reported: greedy (argmax) or sampled policy (needs trainer.eval_sampled)");
  n.Get("warm_start", warm_start,
        "sft (behaviour cloning once) | none (shared fresh init) | checkpoint dir");
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

double AsDouble(const memory::Value& v) {
  if (auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  if (auto* d = std::get_if<double>(&v)) return *d;
  return std::nan("");
}

// Reads a run's metrics back from the store: {iteration -> {key -> value}}.
std::map<int64_t, std::map<std::string, double>> ReadMetrics(const std::string& db,
                                                             int64_t run_id) {
  auto store = memory::Store::Open(db, memory::Store::Mode::kReadOnly);
  auto q = store->Query(fmt::format(
      "SELECT iteration, key, value FROM metrics WHERE run_id = {} ORDER BY iteration", run_id));
  std::map<int64_t, std::map<std::string, double>> out;
  for (const auto& row : q.rows)
    out[static_cast<int64_t>(AsDouble(row[0]))][std::get<std::string>(row[1])] = AsDouble(row[2]);
  return out;
}

ArmSeedResult Collect(const std::string& db, int64_t run_id, const ArmSpec& arm,
                      const std::string& plane, uint64_t seed, double threshold, bool sampled) {
  ArmSeedResult r;
  r.arm = arm.name;
  r.algorithm = arm.algorithm;
  r.plane = plane;
  r.seed = seed;
  r.run_id = run_id;
  auto metrics = ReadMetrics(db, run_id);
  double var_sum = 0, var_all_sum = 0;
  int var_n = 0, var_all_n = 0;
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
      r.flops = get("budget/train_flops") + get("budget/rollout_flops");
      r.generated_tokens = get("budget/generated_tokens");
      r.forward_passes = get("budget/forward_passes");
      r.prompt_tokens = get("budget/prompt_tokens");
      r.samples_generated = get("budget/samples_generated");
      r.samples_used = get("budget/samples_used");
    }
    if (!std::isnan(get("rollout/invalid_rate")))
      invalid_sum += get("rollout/invalid_rate"), ++invalid_n;
    if (!std::isnan(get("grad/var_sampled"))) var_sum += get("grad/var_sampled"), ++var_n;
    if (!std::isnan(get("grad/var_all_action")))
      var_all_sum += get("grad/var_all_action"), ++var_all_n;
    if (!std::isnan(get("eval/success"))) {
      CurvePoint p;
      p.iteration = it;
      p.env_steps = get("budget/env_steps");
      p.wall = get("budget/wall_seconds");
      p.flops = get("budget/train_flops") + get("budget/rollout_flops");
      double greedy = get("eval/success");
      double samp = std::isnan(get("eval/success_sampled")) ? greedy : get("eval/success_sampled");
      p.success = sampled ? samp : greedy;
      p.success_sampled = samp;
      p.ret = sampled && !std::isnan(get("eval/return_sampled")) ? get("eval/return_sampled")
                                                                 : get("eval/return");
      r.curve.push_back(p);
      if (r.steps_to_threshold < 0 && p.success >= threshold) r.steps_to_threshold = p.env_steps;
    }
  }
  if (!r.curve.empty()) {
    r.final_success = r.curve.back().success;
    r.final_success_sampled = r.curve.back().success_sampled;
    r.final_return = r.curve.back().ret;
  }
  r.invalid_rate = invalid_n ? invalid_sum / invalid_n : 0;
  if (var_n) r.grad_var = var_sum / var_n;
  if (var_all_n) r.grad_var_all_action = var_all_sum / var_all_n;
  return r;
}

std::vector<ArmSummary> Summarise(const std::vector<ArmSeedResult>& runs,
                                  const std::vector<ArmSpec>& arms) {
  std::vector<ArmSummary> out;
  for (const auto& arm : arms) {
    ArmSummary s;
    s.arm = arm.name;
    s.algorithm = arm.algorithm;
    std::vector<double> succ;
    double steps_sum = 0, gv = 0, gva = 0;
    int gv_n = 0, gva_n = 0;
    for (const auto& r : runs) {
      if (r.arm != arm.name) continue;
      s.plane = r.plane;
      ++s.seeds;
      succ.push_back(r.final_success);
      s.return_mean += r.final_return;
      s.generated_tokens += r.generated_tokens;
      s.forward_passes += r.forward_passes;
      s.invalid_rate += r.invalid_rate;
      s.wall += r.wall;
      s.env_steps += r.env_steps;
      s.flops += r.flops;
      if (r.steps_to_threshold >= 0) steps_sum += r.steps_to_threshold, ++s.reached;
      if (r.grad_var >= 0) gv += r.grad_var, ++gv_n;
      if (r.grad_var_all_action >= 0) gva += r.grad_var_all_action, ++gva_n;
    }
    if (s.seeds == 0) continue;
    double n = s.seeds;
    for (double v : succ) s.success_mean += v / n;
    for (double v : succ) s.success_std += (v - s.success_mean) * (v - s.success_mean);
    s.success_std = succ.size() > 1 ? std::sqrt(s.success_std / (n - 1)) : 0.0;
    s.return_mean /= n, s.generated_tokens /= n, s.forward_passes /= n, s.invalid_rate /= n;
    s.wall /= n, s.env_steps /= n, s.flops /= n;
    if (s.reached) s.steps_to_threshold = steps_sum / s.reached;
    if (gv_n) s.grad_var = gv / gv_n;
    if (gva_n) s.grad_var_all_action = gva / gva_n;
    out.push_back(s);
  }
  return out;
}

std::string Verdict(const std::vector<ArmSummary>& arms, const std::string& env) {
  if (arms.empty()) return "no results";
  const ArmSummary* best = &arms[0];
  for (const auto& a : arms) {
    bool better = a.success_mean > best->success_mean + 1e-12 ||
                  (std::abs(a.success_mean - best->success_mean) <= 1e-12 && a.reached > 0 &&
                   (best->reached == 0 || a.steps_to_threshold < best->steps_to_threshold));
    if (better) best = &a;
  }
  std::string v = fmt::format(
      "On {}, the best final test success is {} ({} plane): {:.3f} ± {:.3f} over {} seed(s).", env,
      best->arm, best->plane, best->success_mean, best->success_std, best->seeds);
  const ArmSummary* runner = nullptr;
  for (const auto& a : arms)
    if (&a != best && (!runner || a.success_mean > runner->success_mean)) runner = &a;
  if (best->plane == "token") v += " A token-plane arm won on this env.";
  if (runner) {
    double spread = best->success_std + runner->success_std;
    double gap = best->success_mean - runner->success_mean;
    v += fmt::format(" Runner-up: {} ({} plane) at {:.3f}", runner->arm, runner->plane,
                     runner->success_mean);
    v += gap <= spread
             ? "; the gap is within the seed spread, so this budget does not separate them."
             : "; the gap exceeds the seed spread.";
  }
  return v;
}

}  // namespace

std::string FormatSummaryTable(const std::vector<ArmSummary>& arms, const CompareConfig& cfg) {
  std::string out = fmt::format(
      "{:<20} {:<8} {:>13} {:>8} {:>10} {:>10} {:>9} {:>8} {:>8} {:>10} {:>10}\n", "arm", "plane",
      cfg.success_metric == "sampled" ? "test (sampled)" : "test success", "return",
      fmt::format("steps→{:g}", cfg.success_threshold), "gen tok", "fwd", "invalid", "wall s",
      "budget", "grad var");
  for (const auto& a : arms) {
    std::string budget = cfg.budget == "env_steps"    ? fmt::format("{:.0f}", a.env_steps)
                         : cfg.budget == "wall_clock" ? fmt::format("{:.0f}s", a.wall)
                                                      : fmt::format("{:.2g}", a.flops);
    std::string steps =
        a.reached ? fmt::format("{:.0f} ({}/{})", a.steps_to_threshold, a.reached, a.seeds) : "—";
    out += fmt::format(
        "{:<20} {:<8} {:>6.3f} ± {:<4.2f} {:>8.3f} {:>10} {:>10.0f} {:>9.0f} {:>8.3f} {:>8.1f} "
        "{:>10} {:>10}\n",
        a.arm, a.plane, a.success_mean, a.success_std, a.return_mean, steps, a.generated_tokens,
        a.forward_passes, a.invalid_rate, a.wall, budget,
        a.grad_var < 0 ? "—" : fmt::format("{:.3g}", a.grad_var));
  }
  return out;
}

CompareResult RunCompare(const std::string& config_path, const std::vector<std::string>& sets,
                         const std::string& out_dir, bool quiet) {
  CompareResult result;
  Config base = BaseConfig(config_path, sets);
  result.config.Load(base.Root().Section("compare"));
  const CompareConfig& cc = result.config;
  auto base_exp =
      ExperimentConfig::FromConfig(BaseConfig(config_path, sets));  // validates every section
  const std::string env_name = envs::MakeEnv(base_exp->env_section)->Info().name;

  result.run_dir =
      out_dir.empty()
          ? (fs::path("runs") / fmt::format("{}-compare-{}", base_exp->run.name, Timestamp()))
                .string()
          : out_dir;
  fs::create_directories(result.run_dir);
  const std::string db = (fs::path(result.run_dir) / memory::kDatabaseFileName).string();
  std::ofstream(fs::path(result.run_dir) / "compare.toml") << base.DocumentToml();
  double t0 =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();

  // ---- one shared warm start -------------------------------------------------------
  if (cc.warm_start == "sft" || cc.warm_start == "none") {
    Config c = BaseConfig(config_path, sets);
    c.ApplyOverride(fmt::format("run.seed={}", cc.seeds.front()));
    auto exp = ExperimentConfig::FromConfig(std::move(c));
    Session s(*exp, {.out_dir = result.run_dir,
                     .kind = cc.warm_start == "sft" ? "sft" : "init",
                     .arm = "warm_start",
                     .config_file = "config-warm_start.toml",
                     .quiet = quiet});
    if (cc.warm_start == "sft") {
      if (!quiet)
        spdlog::info("warm start: behaviour cloning ({} oracle episodes)", exp->sft.episodes);
      auto r = RunSft(s, quiet);
      result.warm_start = r.checkpoint;
      if (!quiet)
        spdlog::info("warm start: test success {:.2f} (decision) / {:.2f} (token), checkpoint {}",
                     r.decision_greedy.success, r.token_greedy.success, r.checkpoint);
    } else {
      result.warm_start = (fs::path(result.run_dir) / "checkpoints" / "init").string();
      policy::SaveCheckpoint(result.warm_start, s.model, s.tokenizer, {{"kind", "init"}});
    }
    s.End("completed");
  } else {
    result.warm_start = cc.warm_start;
    policy::LoadCheckpoint(cc.warm_start);  // fail early on a bad path
  }

  // ---- every arm x seed from the same start, same budget --------------------------------
  std::map<std::string, std::string> resolved_by_arm;
  for (const auto& arm : cc.arms) {
    for (uint64_t seed : cc.seeds) {
      Config c = BaseConfig(config_path, sets);
      c.ApplyOverrides({fmt::format("trainer.algorithm={}", arm.algorithm),
                        fmt::format("run.seed={}", seed),
                        fmt::format("policy.init={}", result.warm_start),
                        fmt::format("trainer.budget={}", cc.budget),
                        fmt::format("trainer.budget_value={}", cc.budget_value),
                        fmt::format("trainer.iterations={}", cc.max_iterations)});
      if (cc.success_metric == "sampled") c.ApplyOverride("trainer.eval_sampled=true");
      c.ApplyOverrides(arm.sets);
      auto exp = ExperimentConfig::FromConfig(std::move(c));
      auto trainer = TrainerRegistry::Global().Make(arm.algorithm);
      int64_t run_id = 0;
      {
        Session s(*exp, {.out_dir = result.run_dir,
                         .kind = "compare",
                         .arm = arm.name,
                         .config_file = fmt::format("config-{}-seed{}.toml", arm.name, seed),
                         .quiet = true,
                         .checkpoints = fmt::format("checkpoints/{}-seed{}", arm.name, seed)});
        if (!quiet)
          spdlog::info("arm {} ({} plane), seed {}: training until {} = {:g}", arm.name,
                       policy::PlaneName(trainer->plane()), seed, cc.budget, cc.budget_value);
        Train(s, *trainer,
              {.resume = false, .quiet = quiet, .label = fmt::format("{} s{}", arm.name, seed)});
        s.End("completed");
        run_id = s.run_id;
        resolved_by_arm.emplace(arm.name, exp->raw.ResolvedToml());
      }
      auto r = Collect(db, run_id, arm, policy::PlaneName(trainer->plane()), seed,
                       cc.success_threshold, cc.success_metric == "sampled");
      result.runs.push_back(r);
      if (!quiet)
        spdlog::info("arm {} seed {}: test success {:.3f} after {:.0f} env steps, {:.1f}s",
                     arm.name, seed, r.final_success, r.env_steps, r.wall);
    }
  }
  result.arms = Summarise(result.runs, cc.arms);
  result.table = FormatSummaryTable(result.arms, cc);
  result.verdict = Verdict(result.arms, env_name);

  // ---- curves and report ----------------------------------------------------------------
  ReportInputs report;
  report.env_name = env_name;
  report.config_path = config_path;
  report.sets = sets;
  report.show_afterstates = base_exp->prompt.show_afterstates;
  report.label_order = base_exp->prompt.label_order;
  report.memory_enabled = base_exp->memory.enabled;
  report.eval_episodes = base_exp->trainer.eval_episodes;
  const std::string& first = resolved_by_arm.at(cc.arms.front().name);
  for (const auto& arm : cc.arms)
    report.arm_diffs.push_back({arm.name, ConfigDiff(first, resolved_by_arm.at(arm.name))});
  if (cc.plots)
    report.plots =
        RenderPlots(fs::path(result.run_dir) / "plots", result.runs, cc.arms, cc.success_metric);
  report.total_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count() -
      t0;
  std::string html = RenderReportHtml(result, report);
  result.report = (fs::path(result.run_dir) / "report.html").string();
  std::ofstream(result.report) << html;
  std::ofstream(fs::path(result.run_dir) / "summary.txt") << result.table << "\n"
                                                          << result.verdict << "\n";
  return result;
}

}  // namespace rlid::trainers

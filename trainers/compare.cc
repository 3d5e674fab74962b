#include "trainers/compare.h"

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
#include "trainers/experiment.h"
#include "trainers/sft.h"
#include "trainers/trainer.h"

namespace rlid::trainers {
namespace fs = std::filesystem;

void CompareConfig::Load(ConfigNode n) {
  std::vector<std::string> names;
  n.Get("arms", names, "arms by algorithm name (each arm = one registered trainer)");
  std::vector<int64_t> seed_list(seeds.begin(), seeds.end());
  n.Get("seeds", seed_list, "RL seeds; every arm runs every seed");
  n.GetEnum("budget", budget, {"env_steps", "wall_clock", "flops"}, "the matched budget");
  n.Get("budget_value", budget_value, "budget per arm and seed (env steps, seconds, or FLOPs)");
  n.Get("max_iterations", max_iterations, "safety cap on iterations (the budget should stop first)");
  n.Get("success_threshold", success_threshold, "success level for 'env steps to reach'");
  n.GetEnum("success_metric", success_metric, {"greedy", "sampled"},
            "test evaluation reported: greedy (argmax) or sampled policy (needs trainer.eval_sampled)");
  n.Get("warm_start", warm_start, "sft (behaviour cloning once) | none (shared fresh init) | checkpoint dir");
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
  for (auto s : seed_list) {
    if (s < 0) throw ConfigError(fmt::format("{}: seeds must be >= 0", n.Where("seeds")));
    seeds.push_back(static_cast<uint64_t>(s));
  }
  if (arms.empty())
    throw ConfigError(fmt::format("{}: [compare] has no arms", n.Where()),
                      "add arms = [\"ppo_decision\", \"grpo\"] or [[compare.arm]] tables");
  if (seeds.empty()) throw ConfigError(fmt::format("{}: [compare] needs at least one seed", n.Where("seeds")));
  std::set<std::string> seen;
  for (const auto& a : arms) {
    TrainerRegistry::Global().Get(a.algorithm);  // unknown algorithm -> error listing the known ones
    if (!seen.insert(a.name).second) throw ConfigError(fmt::format("compare: arm '{}' appears twice", a.name));
  }
  if (!(budget_value > 0)) throw ConfigError(fmt::format("{}: budget_value must be > 0", n.Where("budget_value")));

}

namespace {

std::string Timestamp() {
  auto t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y%m%d-%H%M%S", std::localtime(&t));
  return buf;
}

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
std::map<int64_t, std::map<std::string, double>> ReadMetrics(const std::string& db, int64_t run_id) {
  auto store = memory::Store::Open(db, memory::Store::Mode::kReadOnly);
  auto q = store->Query(fmt::format("SELECT iteration, key, value FROM metrics WHERE run_id = {} ORDER BY iteration",
                                    run_id));
  std::map<int64_t, std::map<std::string, double>> out;
  for (const auto& row : q.rows)
    out[static_cast<int64_t>(AsDouble(row[0]))][std::get<std::string>(row[1])] = AsDouble(row[2]);
  return out;
}

ArmSeedResult Collect(const std::string& db, int64_t run_id, const ArmSpec& arm, const std::string& plane,
                      uint64_t seed, double threshold, bool sampled) {
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
    if (!std::isnan(get("rollout/invalid_rate"))) invalid_sum += get("rollout/invalid_rate"), ++invalid_n;
    if (!std::isnan(get("grad/var_sampled"))) var_sum += get("grad/var_sampled"), ++var_n;
    if (!std::isnan(get("grad/var_all_action"))) var_all_sum += get("grad/var_all_action"), ++var_all_n;
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
      p.ret = sampled && !std::isnan(get("eval/return_sampled")) ? get("eval/return_sampled") : get("eval/return");
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

std::vector<ArmSummary> Summarise(const std::vector<ArmSeedResult>& runs, const std::vector<ArmSpec>& arms) {
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
  std::string v = fmt::format("On {}, the best final test success is {} ({} plane): {:.3f} ± {:.3f} over {} seed(s).",
                              env, best->arm, best->plane, best->success_mean, best->success_std, best->seeds);
  const ArmSummary* runner = nullptr;
  for (const auto& a : arms)
    if (&a != best && (!runner || a.success_mean > runner->success_mean)) runner = &a;
  if (best->plane == "token") v += " A token-plane arm won on this env.";
  if (runner) {
    double spread = best->success_std + runner->success_std;
    double gap = best->success_mean - runner->success_mean;
    v += fmt::format(" Runner-up: {} ({} plane) at {:.3f}", runner->arm, runner->plane, runner->success_mean);
    v += gap <= spread ? "; the gap is within the seed spread, so this budget does not separate them."
                       : "; the gap exceeds the seed spread.";
  }
  return v;
}

// Lines of `b` that differ from `a` (resolved TOML), for listing arm differences.
std::vector<std::string> ConfigDiff(const std::string& a, const std::string& b) {
  auto lines = [](const std::string& text) {
    std::map<std::string, std::string> out;
    std::string section, line;
    std::istringstream in(text);
    while (std::getline(in, line)) {
      if (line.empty() || line[0] == '#') continue;
      if (line[0] == '[') {
        section = line.substr(1, line.find(']') - 1);
        continue;
      }
      auto eq = line.find(" = ");
      if (eq == std::string::npos) continue;
      std::string value = line.substr(eq + 3);
      auto hash = value.find("  # ");
      if (hash != std::string::npos) value = value.substr(0, hash);
      while (!value.empty() && value.back() == ' ') value.pop_back();
      out[(section.empty() ? "" : section + ".") + line.substr(0, eq)] = value;
    }
    return out;
  };
  auto la = lines(a), lb = lines(b);
  std::vector<std::string> diff;
  for (const auto& [k, v] : lb) {
    if (k == "run.seed" || k == "trainer.algorithm" || k == "policy.init") continue;
    auto it = la.find(k);
    if (it == la.end() || it->second != v) diff.push_back(k + " = " + v);
  }
  return diff;
}

std::string Html(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<') o += "&lt;";
    else if (c == '>') o += "&gt;";
    else if (c == '&') o += "&amp;";
    else if (c == '"') o += "&quot;";
    else o += c;
  }
  return o;
}

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Writes per-arm curve data and renders SVG + PNG with gnuplot. Returns the
// SVG paths (empty when gnuplot is missing or failed).
std::vector<fs::path> RenderPlots(const fs::path& dir, const std::vector<ArmSeedResult>& runs,
                                  const std::vector<ArmSpec>& arms, const std::string& metric) {
  fs::create_directories(dir);
  // Per arm: the k-th evaluation averaged over seeds (x = mean env steps / seconds).
  for (const auto& arm : arms) {
    std::vector<const ArmSeedResult*> rs;
    for (const auto& r : runs)
      if (r.arm == arm.name) rs.push_back(&r);
    size_t points = 0;
    for (const auto* r : rs) points = std::max(points, r->curve.size());
    std::ofstream f(dir / (arm.name + ".dat"));
    f << "# env_steps success_mean success_min success_max wall_seconds (k-th evaluation over seeds)\n";
    for (size_t k = 0; k < points; ++k) {
      double steps = 0, wall = 0, sum = 0, lo = 1e9, hi = -1e9;
      int n = 0;
      for (const auto* r : rs) {
        if (k >= r->curve.size()) continue;
        const auto& p = r->curve[k];
        steps += p.env_steps, wall += p.wall, sum += p.success;
        lo = std::min(lo, p.success), hi = std::max(hi, p.success);
        ++n;
      }
      if (n) f << fmt::format("{} {} {} {} {}\n", steps / n, sum / n, lo, hi, wall / n);
    }
  }
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    spdlog::warn("gnuplot not found: learning curves not rendered (scripts/setup.sh installs gnuplot-nox)");
    return {};
  }
  std::vector<fs::path> svgs;
  struct Plot {
    std::string name, xlabel;
    int xcol;
  };
  for (const Plot& p : {Plot{"success_vs_env_steps", "env steps", 1}, Plot{"success_vs_wall_clock", "wall-clock seconds", 5}}) {
    std::string script;
    for (const char* term : {"svg size 760,420 dynamic font 'sans,11' background '#ffffff'",
                             "pngcairo size 760,420 font 'sans,10'"}) {
      bool svg = std::string(term).rfind("svg", 0) == 0;
      script += fmt::format("set terminal {} noenhanced\nset output '{}'\n", term, (dir / (p.name + (svg ? ".svg" : ".png"))).string());
      script += fmt::format("set xlabel '{}'\nset ylabel 'test success ({})'\nset yrange [-0.02:1.05]\n"
                            "set key bottom right\nset grid\nset style fill transparent solid 0.15 noborder\n",
                            p.xlabel, metric);
      script += "plot ";
      for (size_t i = 0; i < arms.size(); ++i) {
        std::string dat = (dir / (arms[i].name + ".dat")).string();
        script += fmt::format("{}'{}' using {}:3:4 with filledcurves lc {} notitle, '{}' using {}:2 with linespoints lw 2 pt 7 ps 0.6 lc {} title '{}'",
                              i ? ", " : "", dat, p.xcol, i + 1, dat, p.xcol, i + 1, arms[i].name);
      }
      script += "\nunset output\n";
    }
    fs::path gp = dir / (p.name + ".gp");
    std::ofstream(gp) << script;
    std::string cmd = fmt::format("gnuplot '{}' 2>'{}'", gp.string(), (dir / (p.name + ".log")).string());
    if (std::system(cmd.c_str()) != 0) {
      spdlog::warn("gnuplot failed for {} (see {})", p.name, (dir / (p.name + ".log")).string());
      continue;
    }
    svgs.push_back(dir / (p.name + ".svg"));
  }
  return svgs;
}

}  // namespace

std::string FormatSummaryTable(const std::vector<ArmSummary>& arms, const CompareConfig& cfg) {
  std::string out = fmt::format("{:<20} {:<8} {:>13} {:>8} {:>10} {:>10} {:>9} {:>8} {:>8} {:>10} {:>10}\n", "arm",
                                "plane", cfg.success_metric == "sampled" ? "test (sampled)" : "test success", "return", fmt::format("steps→{:g}", cfg.success_threshold),
                                "gen tok", "fwd", "invalid", "wall s", "budget", "grad var");
  for (const auto& a : arms) {
    std::string budget = cfg.budget == "env_steps" ? fmt::format("{:.0f}", a.env_steps)
                         : cfg.budget == "wall_clock" ? fmt::format("{:.0f}s", a.wall)
                                                      : fmt::format("{:.2g}", a.flops);
    std::string steps = a.reached ? fmt::format("{:.0f} ({}/{})", a.steps_to_threshold, a.reached, a.seeds) : "—";
    out += fmt::format("{:<20} {:<8} {:>6.3f} ± {:<4.2f} {:>8.3f} {:>10} {:>10.0f} {:>9.0f} {:>8.3f} {:>8.1f} {:>10} {:>10}\n",
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
  auto base_exp = ExperimentConfig::FromConfig(BaseConfig(config_path, sets));  // validates every section
  const std::string env_name = envs::MakeEnv(base_exp->env_section)->Info().name;

  result.run_dir = out_dir.empty() ? (fs::path("runs") / fmt::format("{}-compare-{}", base_exp->run.name, Timestamp())).string()
                                   : out_dir;
  fs::create_directories(result.run_dir);
  const std::string db = (fs::path(result.run_dir) / memory::kDatabaseFileName).string();
  std::ofstream(fs::path(result.run_dir) / "compare.toml") << base.DocumentToml();
  double t0 = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();

  // ---- one shared warm start -------------------------------------------------------
  if (cc.warm_start == "sft" || cc.warm_start == "none") {
    Config c = BaseConfig(config_path, sets);
    c.ApplyOverride(fmt::format("run.seed={}", cc.seeds.front()));
    auto exp = ExperimentConfig::FromConfig(std::move(c));
    Session s(*exp, {.out_dir = result.run_dir, .kind = cc.warm_start == "sft" ? "sft" : "init", .arm = "warm_start",
                     .config_file = "config-warm_start.toml", .quiet = quiet});
    if (cc.warm_start == "sft") {
      if (!quiet) spdlog::info("warm start: behaviour cloning ({} oracle episodes)", exp->sft.episodes);
      auto r = RunSft(s, quiet);
      result.warm_start = r.checkpoint;
      if (!quiet)
        spdlog::info("warm start: test success {:.2f} (decision) / {:.2f} (token), checkpoint {}", r.decision_greedy.success,
                     r.token_greedy.success, r.checkpoint);
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
      c.ApplyOverrides({fmt::format("trainer.algorithm={}", arm.algorithm), fmt::format("run.seed={}", seed),
                        fmt::format("policy.init={}", result.warm_start), fmt::format("trainer.budget={}", cc.budget),
                        fmt::format("trainer.budget_value={}", cc.budget_value),
                        fmt::format("trainer.iterations={}", cc.max_iterations)});
      if (cc.success_metric == "sampled") c.ApplyOverride("trainer.eval_sampled=true");
      c.ApplyOverrides(arm.sets);
      auto exp = ExperimentConfig::FromConfig(std::move(c));
      auto trainer = TrainerRegistry::Global().Make(arm.algorithm);
      int64_t run_id = 0;
      {
        Session s(*exp, {.out_dir = result.run_dir, .kind = "compare", .arm = arm.name,
                         .config_file = fmt::format("config-{}-seed{}.toml", arm.name, seed), .quiet = true});
        if (!quiet) spdlog::info("arm {} ({} plane), seed {}: training until {} = {:g}", arm.name,
                                 policy::PlaneName(trainer->plane()), seed, cc.budget, cc.budget_value);
        Train(s, *trainer, {.resume = false, .quiet = quiet, .label = fmt::format("{} s{}", arm.name, seed)});
        s.End("completed");
        run_id = s.run_id;
        resolved_by_arm.emplace(arm.name, exp->raw.ResolvedToml());
      }
      auto r = Collect(db, run_id, arm, policy::PlaneName(trainer->plane()), seed, cc.success_threshold,
                       cc.success_metric == "sampled");
      result.runs.push_back(r);
      if (!quiet)
        spdlog::info("arm {} seed {}: test success {:.3f} after {:.0f} env steps, {:.1f}s", arm.name, seed,
                     r.final_success, r.env_steps, r.wall);
    }
  }
  result.arms = Summarise(result.runs, cc.arms);
  result.table = FormatSummaryTable(result.arms, cc);
  result.verdict = Verdict(result.arms, env_name);

  // ---- curves and report ----------------------------------------------------------------
  std::vector<fs::path> svgs;
  if (cc.plots) svgs = RenderPlots(fs::path(result.run_dir) / "plots", result.runs, cc.arms, cc.success_metric);
  double total = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count() - t0;
  const std::string& first = resolved_by_arm.at(cc.arms.front().name);
  std::string html = "<!doctype html><html><head><meta charset='utf-8'><title>rlid compare — " + Html(env_name) +
                     "</title><style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
                     "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #bbb;padding:4px 8px;text-align:right}"
                     "th{background:#eee}td:first-child,td:nth-child(2){text-align:left}code,pre{background:#f6f6f6}"
                     ".verdict{font-size:15px;background:#f3f8ee;padding:10px;border-left:4px solid #6a4}</style></head><body>";
  html += "<h1>Decision plane vs token plane on " + Html(env_name) + "</h1>";
  html += "<p class='verdict' id='verdict'>" + Html(result.verdict) + "</p>";
  html += "<h2>Setup</h2><ul>";
  html += fmt::format("<li><b>Budget</b>: {} = {:g} per arm and seed (each arm stops at the first iteration that reaches it; "
                      "the used budget is in the table).</li>", cc.budget, cc.budget_value);
  std::vector<std::string> seed_text;
  for (auto s : cc.seeds) seed_text.push_back(std::to_string(s));
  html += "<li><b>Seeds</b>: " + Join(seed_text, ", ") + " (every arm ran every seed; test success is evaluated on the same " +
          std::to_string(base_exp->trainer.eval_episodes) + " test-split seeds).</li>";
  html += "<li><b>Shared interface</b>: every arm started from the same warm-start checkpoint <code>" + Html(result.warm_start) +
          "</code> and used the same env, the same prompt renderer (identical prompt text in both planes, afterstates " +
          std::string(base_exp->prompt.show_afterstates ? "shown" : "hidden") + ", labels " + base_exp->prompt.label_order +
          "), the same memory settings (memory " + (base_exp->memory.enabled ? "on" : "off") +
          ") and the same evaluation seeds.</li>";
  html += "<li><b>Differences between arms</b> (resolved configs, relative to " + Html(cc.arms.front().name) + "):<ul>";
  for (const auto& arm : cc.arms) {
    auto diff = ConfigDiff(first, resolved_by_arm.at(arm.name));
    html += "<li><b>" + Html(arm.name) + "</b> (" + Html(arm.algorithm) + "): " +
            (diff.empty() ? std::string("no other differences") : Html(Join(diff, "; "))) + "</li>";
  }
  html += "</ul></li>";
  html += fmt::format("<li><b>Wall-clock</b> of the whole comparison: {:.0f} s.</li></ul>", total);
  html += "<h2>Results</h2><table id='summary'><tr><th>arm</th><th>plane</th><th>test success, " + cc.success_metric +
          " policy (mean ± sd)</th><th>return</th>"
          "<th>env steps to " + fmt::format("{:g}", cc.success_threshold) + "</th><th>generated tokens</th><th>forward passes</th>"
          "<th>invalid rate</th><th>wall s</th><th>env steps used</th><th>grad variance</th></tr>";
  for (const auto& a : result.arms)
    html += fmt::format("<tr><td>{}</td><td>{}</td><td>{:.3f} ± {:.3f}</td><td>{:+.3f}</td><td>{}</td><td>{:.0f}</td><td>{:.0f}</td>"
                        "<td>{:.3f}</td><td>{:.1f}</td><td>{:.0f}</td><td>{}</td></tr>",
                        Html(a.arm), a.plane, a.success_mean, a.success_std, a.return_mean,
                        a.reached ? fmt::format("{:.0f} ({}/{} seeds)", a.steps_to_threshold, a.reached, a.seeds) : "not reached",
                        a.generated_tokens, a.forward_passes, a.invalid_rate, a.wall, a.env_steps,
                        a.grad_var < 0 ? "—" : fmt::format("{:.3g}", a.grad_var));
  html += "</table><p>Per-seed runs are rows of the <code>runs</code> table in <code>rlid.db</code>; "
          "every step, menu, prompt and memory read is queryable with <code>rlid sql " + Html(result.run_dir) + "</code>.</p>";
  html += "<h2>Learning curves</h2>";
  if (svgs.empty()) html += "<p>(plots not rendered: gnuplot unavailable)</p>";
  for (const auto& svg : svgs) {
    std::string content = ReadFile(svg);
    auto pos = content.find("<svg");
    html += "<figure class='plot'>" + (pos == std::string::npos ? content : content.substr(pos)) +
            "<figcaption>" + Html(svg.stem().string()) + ": mean over seeds, band = min..max</figcaption></figure>";
  }
  html += "<h2>Reproduce</h2><pre>rlid compare " + Html(config_path) + (sets.empty() ? "" : " --set " + Html(Join(sets, " --set "))) +
          "</pre><p>Generated by rlid " + Html(VersionString()) + ".</p></body></html>\n";
  result.report = (fs::path(result.run_dir) / "report.html").string();
  std::ofstream(result.report) << html;
  std::ofstream(fs::path(result.run_dir) / "summary.txt") << result.table << "\n" << result.verdict << "\n";
  return result;
}

}  // namespace rlid::trainers

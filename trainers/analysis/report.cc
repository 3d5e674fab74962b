// The comparison's report: learning curves rendered by gnuplot (SVG + PNG)
// and a self-contained report.html that states the budget, the seeds, what
// the arms shared and where they differed, the table, the verdict and the plots.
#include "trainers/analysis/report.h"

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <map>
#include <sstream>

#include "core/error.h"
#include "core/log.h"
#include "core/strings.h"
#include "core/subprocess.h"

namespace rlid::trainers {
namespace fs = std::filesystem;

namespace {

std::string Html(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '<')
      o += "&lt;";
    else if (c == '>')
      o += "&gt;";
    else if (c == '&')
      o += "&amp;";
    else if (c == '"')
      o += "&quot;";
    else
      o += c;
  }
  return o;
}

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs `gnuplot script` (no shell); its stderr (the last lines) goes to `log`.
// True when it exited with code 0 within kGnuplotTimeoutS.
bool RunGnuplot(const std::string& gnuplot, const fs::path& script, const fs::path& log) {
  constexpr double kGnuplotTimeoutS = 300;
  bool ok = false;
  std::vector<std::string> stderr_lines;
  try {
    ChildProcess child(ChildOptions{{gnuplot, script.string()}, "", "gnuplot"});
    ok = child.WaitForExit(kGnuplotTimeoutS) && child.ExitCode() == 0;
    if (!ok) stderr_lines.push_back("gnuplot " + child.ExitDescription());
    child.Kill();
    const auto last = child.LastStderrLines(50);
    stderr_lines.insert(stderr_lines.begin(), last.begin(), last.end());
  } catch (const IoError& e) {
    stderr_lines.push_back(e.what());
  }
  std::ofstream out(log);
  for (const auto& line : stderr_lines) out << line << "\n";
  return ok;
}

}  // namespace

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

// Writes per-arm curve data and renders SVG + PNG with gnuplot. Returns the
// SVG paths (empty when gnuplot is missing or failed).
std::vector<fs::path> RenderPlots(const fs::path& dir, const std::vector<ArmSeedResult>& runs,
                                  const std::vector<ArmSpec>& arms, SuccessMetric metric,
                                  double chance) {
  fs::create_directories(dir);
  // Per arm: the k-th evaluation averaged over seeds (x = mean env steps / seconds).
  for (const auto& arm : arms) {
    std::vector<const ArmSeedResult*> rs;
    for (const auto& r : runs)
      if (r.arm == arm.name) rs.push_back(&r);
    size_t points = 0;
    for (const auto* r : rs) points = std::max(points, r->curve.size());
    std::ofstream f(dir / (arm.name + ".dat"));
    f << "# env_steps success_mean success_min success_max wall_seconds flops (k-th evaluation "
         "over seeds; the first is the warm start)\n";
    for (size_t k = 0; k < points; ++k) {
      double steps = 0, wall = 0, flops = 0, sum = 0, lo = 1e9, hi = -1e9;
      int n = 0;
      for (const auto* r : rs) {
        if (k >= r->curve.size()) continue;
        const auto& p = r->curve[k];
        steps += p.env_steps, wall += p.wall, flops += p.flops, sum += p.success;
        lo = std::min(lo, p.success), hi = std::max(hi, p.success);
        ++n;
      }
      if (n)
        f << fmt::format("{} {} {} {} {} {}\n", steps / n, sum / n, lo, hi, wall / n, flops / n);
    }
  }
  const std::string gnuplot = FindProgram("gnuplot");
  if (gnuplot.empty()) {
    spdlog::warn(
        "gnuplot not found: learning curves not rendered (scripts/setup.sh installs gnuplot-nox)");
    return {};
  }
  std::vector<fs::path> svgs;
  struct Plot {
    std::string name, xlabel;
    int xcol;
  };
  for (const Plot& p : {Plot{"success_vs_env_steps", "env steps", 1},
                        Plot{"success_vs_flops", "training FLOPs (rollout + update)", 6},
                        Plot{"success_vs_wall_clock", "training wall-clock seconds", 5}}) {
    std::string script;
    for (const char* term : {"svg size 760,420 dynamic font 'sans,11' background '#ffffff'",
                             "pngcairo size 760,420 font 'sans,10'"}) {
      bool svg = std::string(term).rfind("svg", 0) == 0;
      script += fmt::format("set terminal {} noenhanced\nset output '{}'\n", term,
                            (dir / (p.name + (svg ? ".svg" : ".png"))).string());
      script += fmt::format(
          "set xlabel '{}'\nset ylabel 'test success ({})'\nset yrange [-0.02:1.05]\n"
          "set key outside below horizontal\nset grid\nset style fill transparent solid 0.15 noborder\n",
          p.xlabel, NameOf(metric));
      script += "plot ";
      for (size_t i = 0; i < arms.size(); ++i) {
        std::string dat = (dir / (arms[i].name + ".dat")).string();
        script += fmt::format(
            "{}'{}' using {}:3:4 with filledcurves lc {} notitle, '{}' using {}:2 with linespoints "
            "lw 2 pt 7 ps 0.6 lc {} title '{}'",
            i ? ", " : "", dat, p.xcol, i + 1, dat, p.xcol, i + 1, arms[i].name);
      }
      if (chance >= 0)
        script += fmt::format(", {} with lines dt 2 lw 1 lc rgb '#777777' title 'chance ({:.3f})'",
                              chance, chance);
      script += "\nunset output\n";
    }
    fs::path gp = dir / (p.name + ".gp");
    std::ofstream(gp) << script;
    const fs::path log = dir / (p.name + ".log");
    if (!RunGnuplot(gnuplot, gp, log)) {
      spdlog::warn("gnuplot failed for {} (see {})", p.name, log.string());
      continue;
    }
    svgs.push_back(dir / (p.name + ".svg"));
  }
  return svgs;
}

namespace {

// The page head, its title and the verdict paragraph.
std::string Head(const std::string& title, const std::string& verdict) {
  return "<!doctype html><html><head><meta charset='utf-8'><title>" + Html(title) +
         "</title><style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
         "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #bbb;padding:4px "
         "8px;text-align:right}"
         "th{background:#eee}td:first-child,td:nth-child(2){text-align:left}code,pre{background:#"
         "f6f6f6}"
         ".verdict{font-size:15px;background:#f3f8ee;padding:10px;border-left:4px solid "
         "#6a4}</style></head><body><h1>" +
         Html(title) + "</h1><p class='verdict' id='verdict'>" + Html(verdict) + "</p>";
}

// The summary table (one row per arm), what its columns mean, the chance
// level, and the gap between every pair of arms.
std::string ResultsSection(const CompareResult& result) {
  const CompareConfig& cc = result.config;
  std::string html;
  html += "<h2>Results</h2><table id='summary'><tr><th>arm</th><th>plane</th><th>test success, " +
          std::string(NameOf(cc.success_metric)) +
          " policy (mean ± se)</th><th>return</th>"
          "<th>env steps to " +
          fmt::format("{:g}", cc.success_threshold) +
          "</th><th>env steps</th><th>FLOPs (rollout + update)</th><th>tokens processed</th>"
          "<th>generated tokens</th><th>invalid rate</th><th>wall s</th><th>grad SNR</th></tr>";
  for (const auto& a : result.arms)
    html += fmt::format(
        "<tr><td>{}</td><td>{}</td><td>{:.3f} ± {:.3f}</td><td>{:+.3f}</td><td>{}</td>"
        "<td>{:.0f}{}</td><td>{:.3g}{}</td><td>{:.3g}</td><td>{:.0f}</td><td>{:.3f}</td>"
        "<td>{:.1f}</td><td>{}</td></tr>",
        Html(a.arm), a.plane, a.success.mean, a.success.se, a.return_mean,
        a.reached ? fmt::format("{:.0f} ({}/{} seeds)", a.steps_to_threshold, a.reached, a.seeds)
                  : "not reached",
        a.env_steps, Overshoot(cc, a.env_steps, BudgetKind::kEnvSteps), a.flops, Overshoot(cc, a.flops, BudgetKind::kFlops),
        a.tokens_processed, a.generated_tokens, a.invalid_rate, a.wall,
        a.grad_snr < 0 ? "—" : fmt::format("{:.3g}", a.grad_snr));
  html += "</table>";
  html +=
      "<p>Columns, mean over seeds: <b>test success</b> on the same test seeds for every arm, ± its "
      "standard error (the seed spread, floored by the binomial noise of the test episodes); "
      "<b>env steps</b>, every decision attempt, valid or invalid (the overshoot past the budget "
      "in brackets); <b>FLOPs</b>, every forward and backward of rollouts and updates (2 x matmul "
      "weights x tokens + attention + vocabulary rows; a backward counts 2 x its forward), "
      "evaluation excluded; <b>tokens processed</b>, tokens fed to the model by those forwards; "
      "<b>generated tokens</b>, tokens the rollout engine sampled (0 in the decision plane, which "
      "reads the menu in one pass); <b>grad SNR</b>, ||mean g||² / tr Cov(g) of the per-episode "
      "gradient of each arm's own policy loss, measured on the same number of episodes in both "
      "planes (pure noise gives about 1/episodes).</p>";
  if (result.chance >= 0)
    html += fmt::format(
        "<p>Chance level: a uniformly random menu choice succeeds on {:.3f} of the test "
        "episodes.</p>",
        result.chance);
  // Every pair of arms: the gap and its 95% Welch interval.
  if (result.arms.size() > 1) {
    html += "<h3>Gaps between arms</h3><table id='gaps'><tr><th>arm</th><th>vs</th><th>gap</th>"
            "<th>95% CI</th><th>verdict</th></tr>";
    for (size_t i = 0; i < result.arms.size(); ++i)
      for (size_t j = i + 1; j < result.arms.size(); ++j) {
        const auto& a = result.arms[i];
        const auto& b = result.arms[j];
        auto g = CompareSuccess(a.success, b.success);
        std::string verdict = !g.comparable ? "no claim (single seed)"
                              : g.tie       ? "tie"
                                            : (g.gap > 0 ? a.arm : b.arm) + " ahead";
        html += fmt::format(
            "<tr><td>{}</td><td>{}</td><td>{:+.3f}</td><td>{}</td><td>{}</td></tr>", Html(a.arm),
            Html(b.arm), g.gap,
            g.comparable ? fmt::format("[{:+.3f}, {:+.3f}] (df {:.1f})", g.lo, g.hi, g.df) : "—",
            Html(verdict));
      }
    html += "</table>";
  }
  return html;
}

// The learning-curve figures.
std::string CurvesSection(const std::vector<fs::path>& plots) {
  std::string html;
  html += "<h2>Learning curves</h2>";
  if (plots.empty()) html += "<p>(plots not rendered: gnuplot unavailable)</p>";
  for (const auto& svg : plots) {
    std::string content = ReadFile(svg);
    auto pos = content.find("<svg");
    html += "<figure class='plot'>" + (pos == std::string::npos ? content : content.substr(pos)) +
            "<figcaption>" + Html(svg.stem().string()) +
            ": mean over seeds, band = min..max; the first point is the starting weights at 0 "
            "env steps (when evaluated: trainer.eval_at_start)</figcaption></figure>";
  }
  return html;
}

}  // namespace

std::string RenderReportHtml(const CompareResult& result, const ReportInputs& in) {
  const CompareConfig& cc = result.config;
  std::string html = Head("Decision plane vs token plane on " + in.env_name, result.verdict);
  html += "<h2>Setup</h2><ul>";
  html += fmt::format(
      "<li><b>Budget</b>: {} = {:g} per arm and seed (each arm stops at the first iteration that "
      "reaches it; what it used, and the overshoot, are in the table).</li>",
      NameOf(cc.budget), cc.budget_value);
  std::vector<std::string> seed_text;
  for (auto s : cc.seeds) seed_text.push_back(std::to_string(s));
  html += "<li><b>Seeds</b>: " + Join(seed_text, ", ") +
          " (every arm ran every seed; test success is evaluated on the same " +
          std::to_string(in.eval_episodes) + " test-split seeds).</li>";
  html +=
      "<li><b>Shared interface</b>: every arm started from the same warm-start checkpoint <code>" +
      Html(result.warm_start) +
      "</code> and used the same env, the same prompt renderer (identical prompt text in both "
      "planes, afterstates " +
      std::string(in.show_afterstates ? "shown" : "hidden") + ", labels " + in.label_order +
      "), the same memory settings (memory " + (in.memory_enabled ? "on" : "off") +
      ") and the same evaluation seeds.</li>";
  html += "<li><b>Differences between arms</b> (resolved configs, relative to " +
          Html(cc.arms.front().name) + "):<ul>";
  for (size_t i = 0; i < cc.arms.size(); ++i) {
    const auto& diff = in.arm_diffs[i].second;
    html += "<li><b>" + Html(cc.arms[i].name) + "</b> (" + Html(cc.arms[i].algorithm) +
            "): " + (diff.empty() ? std::string("no other differences") : Html(Join(diff, "; "))) +
            "</li>";
  }
  html += "</ul></li>";
  html += fmt::format("<li><b>Wall-clock</b> of the whole comparison: {:.0f} s.</li></ul>",
                      in.total_seconds);
  html += ResultsSection(result);
  html +=
      "<p>Per-seed runs are rows of the <code>runs</code> table in <code>rlid.db</code>; "
      "every step, menu, prompt and memory read is queryable with <code>rlid sql " +
      Html(result.run_dir) + "</code>.</p>";
  html += CurvesSection(in.plots);
  html += "<h2>Reproduce</h2><pre>rlid compare " + Html(in.config_path) +
          (in.sets.empty() ? "" : " --set " + Html(Join(in.sets, " --set "))) +
          "</pre><p>Generated by rlid " + Html(VersionString()) + ".</p></body></html>\n";
  return html;
}

std::string RenderRunReportHtml(const CompareResult& result, const std::vector<fs::path>& plots,
                                const std::vector<std::string>& runs) {
  std::string html = Head("rlid runs in " + result.run_dir, result.verdict);
  html += "<h2>Runs</h2><ul>";
  for (const auto& r : runs) html += "<li>" + Html(r) + "</li>";
  html += "</ul>";
  html += ResultsSection(result);
  html += "<p>Every step, menu, prompt and memory read is queryable with <code>rlid sql " +
          Html(result.run_dir) + "</code>; the metrics as CSV: <code>rlid sql " +
          Html(result.run_dir) +
          " --csv \"SELECT run_id, iteration, key, value FROM metrics ORDER BY run_id, key, "
          "iteration\"</code>.</p>";
  html += CurvesSection(plots);
  html += "<h2>Reproduce</h2><pre>rlid report " + Html(result.run_dir) +
          "</pre><p>Generated by rlid " + Html(VersionString()) + ".</p></body></html>\n";
  return html;
}

}  // namespace rlid::trainers

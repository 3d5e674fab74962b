// `rlid env list|show|play|graph|check|serve`: inspect, play and enumerate
// environments, run the conformance suite on any env (external ones too), and
// serve a built-in env over the external-env protocol.
#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/command.h"
#include "cli/json_output.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/subprocess.h"
#include "envs/api/conformance.h"
#include "envs/api/env.h"
#include "envs/external/env_server.h"
#include "envs/external/external.h"
#include "envs/api/state_graph.h"

namespace rlid::cli {
namespace {

using envs::Menu;

std::string FormatMenu(const Menu& menu, bool details) {
  std::string out;
  for (const auto& it : menu.items) {
    out += fmt::format("  {}) {}", it.label, it.command);
    if (details) {
      if (it.realisations.size() > 1) {
        std::vector<std::string> other(it.realisations.begin() + 1, it.realisations.end());
        out += fmt::format("   [also: {}]", fmt::join(other, " | "));
      }
      if (envs::HasAfterstate(it)) out += fmt::format("\n       -> {}", it.afterstate);
      if (it.same_afterstate_as >= 0)
        out += fmt::format("  (same afterstate as {})", menu.items[it.same_afterstate_as].label);
    }
    out += "\n";
  }
  return out;
}

nlohmann::json MenuJson(const Menu& menu) {
  nlohmann::json items = nlohmann::json::array();
  for (const auto& it : menu.items)
    items.push_back({{"action", it.action},
                     {"label", it.label},
                     {"command", it.command},
                     {"realisations", it.realisations},
                     {"afterstate", it.afterstate},
                     {"afterstate_hash", fmt::format("{:016x}", it.afterstate_hash)},
                     {"same_afterstate_as", it.same_afterstate_as}});
  return items;
}

class EnvCommand : public Command {
 public:
  void Setup(CLI::App& app) override {
    app.require_subcommand(1);
    app.add_subcommand("list", "name and summary of every registered environment")->callback([] {
      size_t width = 0;
      for (const auto& [name, e] : envs::EnvRegistry::Global().entries())
        width = std::max(width, name.size());
      for (const auto& [name, e] : envs::EnvRegistry::Global().entries())
        std::cout << fmt::format("{:<{}} {}\n", name, width, e.summary);
    });

    auto* show =
        app.add_subcommand("show", "observation, menu (labels, realisations, afterstates)");
    show_.Add(*show);
    show->add_flag("--json", json_, "print JSON");
    show->add_flag("--shuffle-labels", shuffle_, "permute the menu with the seeded label stream");
    show->callback([this] { Show(); });

    auto* play = app.add_subcommand("play", "play in the terminal: type a label or free text");
    play_.Add(*play);
    play->add_flag("--shuffle-labels", shuffle_, "permute labels every step");
    play->callback([this] { Play(); });

    auto* graph = app.add_subcommand("graph", "state-graph size, optimal return, DOT export");
    graph_.Add(*graph);
    graph->add_option("--max-states", max_states_, "stop enumerating after this many states")
        ->capture_default_str();
    graph->add_option("--dot", dot_, "write the graph in GraphViz DOT format to this file");
    graph->callback([this] { Graph(); });

    auto* check = app.add_subcommand(
        "check",
        "run the conformance suite on an env and print what failed (exit 1 if anything did)");
    check_.Add(*check, /*with_seed=*/false);
    check->add_option("--command", command_,
                      "an external env's command line, e.g. \"python3 my_env.py\" (sets env.name = "
                      "external and env.command)");
    check->add_option(
        "--param", params_,
        "an env parameter key=value (env.params.key for an external env or a --config "
        "one, env.key with --env, e.g. --env openspiel --param game=catch)");
    check->add_option("--seeds", conformance_.seeds, "instances each check plays")
        ->capture_default_str()
        ->check(CLI::Range(1, 100000));
    check
        ->add_option("--graph-seeds", conformance_.graph_seeds,
                     "instances whose state graph is enumerated")
        ->capture_default_str()
        ->check(CLI::Range(0, 100000));
    check
        ->add_option("--graph-states", conformance_.max_graph_states,
                     "enumerate at most this many states per instance")
        ->capture_default_str()
        ->check(CLI::Range(1.0, 1e9));
    check
        ->add_option("--graph-seconds", conformance_.max_graph_seconds,
                     "enumerate for at most this many seconds per instance")
        ->capture_default_str()
        ->check(CLI::Range(0.1, 1e6));
    check->add_flag("--quick", quick_,
                    "a first look in about a minute: 3 instances per check, one state graph, 20 "
                    "split pairs, no 1 MB garbage inputs");
    check->add_option(
        "--only", only_checks_,
        "run only these checks (repeatable): " + Join(envs::ConformanceChecks(), ", "));
    check->add_flag("--json", json_, "print the results as JSON");
    check->callback([this] { Check(); });

    auto* serve = app.add_subcommand(
        "serve",
        "serve an env over the external-env protocol on stdin/stdout (docs/external_env.md)");
    serve_.Add(*serve, /*with_seed=*/false);
    serve->add_option("--delay-ms", delay_ms_, "sleep this long in every step (a slow env)")
        ->capture_default_str()
        ->check(CLI::Range(0.0, 1e6));
    serve->callback([this] {
      auto env = serve_.Make();
      envs::ServeEnv(*env, std::cin, std::cout, {.step_delay_ms = delay_ms_});
    });
  }

 private:
  void Show() {
    auto env = show_.Make();
    auto state = env->NewState(show_.seed);
    Menu menu = state->CompileMenu();
    if (shuffle_) {
      Rng rng = Rng::Stream(show_.seed, "labels", 0);
      envs::ShuffleMenu(menu, rng);
    }
    const auto info = env->Info();
    if (json_) {
      nlohmann::json j = {{"env", info.name},
                          {"seed", show_.seed},
                          {"split", envs::SplitName(envs::SplitOf(show_.seed))},
                          {"instructions", env->Instructions()},
                          {"observation", state->Observation()},
                          {"state_hash", fmt::format("{:016x}", state->Hash())},
                          {"menu", MenuJson(menu)}};
      std::cout << DumpJson(j, 2) << "\n";
      return;
    }
    std::cout << fmt::format("{} — seed {} ({} split), step limit {}\n\n", info.name, show_.seed,
                             envs::SplitName(envs::SplitOf(show_.seed)), info.step_limit);
    std::cout << env->Instructions() << "\n\n"
              << state->Observation() << "\n\nMenu:\n"
              << FormatMenu(menu, true);
  }

  void Play() {
    auto env = play_.Make();
    auto state = env->NewState(play_.seed);
    std::cout << env->Instructions() << "\n";
    double ret = 0;
    bool success = false;
    Rng rng = Rng::Stream(play_.seed, "labels", 0);
    while (!state->IsTerminal()) {
      Menu menu = state->CompileMenu();
      if (shuffle_) envs::ShuffleMenu(menu, rng);
      std::cout << "\n"
                << state->Observation() << "\n"
                << FormatMenu(menu, true) << "> " << std::flush;
      std::string line;
      if (!std::getline(std::cin, line)) {
        std::cout << "\n(end of input)\n";
        break;
      }
      if (line == "quit" || line == "exit") break;
      auto res = menu.Compile(line);
      if (!res.valid()) {
        std::cout << "invalid: " << res.reason << "\n";
        continue;
      }
      auto out = state->Apply(res.action);
      ret += out.reward;
      success = success || out.success;
      std::cout << fmt::format("-> {} (reward {:+g})\n", menu.items[res.item].command, out.reward);
      if (out.truncated) std::cout << "step limit reached\n";
    }
    std::cout << fmt::format("\n{}\nreturn {:.3f}, success {}, steps {}\n", state->Observation(),
                             ret, success ? "yes" : "no", state->StepCount());
  }

  void Graph() {
    auto env = graph_.Make();
    if (!env->Info().deterministic)
      throw ConfigError(
          fmt::format("{} is not deterministic; its state graph is not exact", env->Info().name));
    auto state = env->NewState(graph_.seed);
    auto sg = envs::EnumerateStates(*state, max_states_, /*with_text=*/!dot_.empty());
    auto values = envs::OptimalValues(sg);
    size_t successes = 0;
    for (size_t v = 0; v < sg.num_states(); ++v) successes += sg.graph[v].success;
    std::cout << fmt::format("states {}{}\nedges {}\nsuccess states {}\noptimal return {:.4f}\n",
                             sg.num_states(), sg.complete ? "" : " (cut at --max-states)",
                             sg.num_edges(), successes, values[sg.root]);
    if (auto* oracle = dynamic_cast<const envs::OracleState*>(state.get()))
      std::cout << fmt::format("oracle return {:.4f}\n", oracle->OptimalReturn());
    if (!dot_.empty()) {
      std::ofstream out(dot_);
      if (!out) throw IoError(fmt::format("cannot write '{}'", dot_));
      envs::WriteDot(sg, out);
      std::cout << "wrote " << dot_ << "\n";
    }
  }

  // --command and --param as overrides of the checked env's section.
  void AddCheckOverrides() {
    if (!command_.empty()) {
      const auto argv = SplitCommandLine(command_);
      if (argv.empty())
        throw ConfigError("--command is empty", "e.g. --command \"python3 my_env.py\"");
      check_.env = "external";
      check_.sets.push_back("env.command=" + nlohmann::json(argv).dump());
    }
    for (const auto& p : params_) {
      const auto eq = p.find('=');
      if (eq == std::string::npos || eq == 0)
        throw ConfigError(fmt::format("--param '{}' is not key=value", p), "e.g. --param rooms=4");
      const bool external = check_.env.empty() || check_.env == "external";
      check_.sets.push_back((external ? "env.params." : "env.") + p);
    }
  }

  // One check's line, its failures (continuation lines indented under each)
  // and each fix once.
  static void PrintCheck(const envs::ConformanceResult& r) {
    std::string extra = r.note;
    if (r.covered > 0 && extra.empty()) extra = fmt::format("{} checked", r.covered);
    std::cout << fmt::format("  {:<8} {:<12} {:>7.2f} s  {}{}\n", envs::StatusName(r.status),
                             r.check, r.seconds, r.description,
                             extra.empty() ? "" : " [" + extra + "]");
    auto lines = [](const std::string& text, const std::string& first) {
      std::string out, line;
      std::istringstream in(text);
      for (bool head = true; std::getline(in, line); head = false) {
        const size_t lead = line.find_first_not_of(' ');
        if (lead == std::string::npos) continue;
        // An error's hint indents its lines by 2 (under "hint: "), its quotes by 4.
        out += head ? first + line.substr(lead)
                    : std::string(13, ' ') + line.substr(std::min<size_t>(lead, 2));
        out += "\n";
      }
      return out;
    };
    for (const auto& f : r.failures) std::cout << lines(f, "           - ");
    if (r.failure_count > static_cast<int64_t>(r.failures.size()))
      std::cout << fmt::format("           ({} more failures)\n",
                               r.failure_count - static_cast<int64_t>(r.failures.size()));
    for (const auto& f : r.fixes) std::cout << lines(f, "           to fix: ");
    std::cout << std::flush;
  }

  static nlohmann::json CheckJson(const envs::ConformanceResult& r) {
    return {{"check", r.check},
            {"status", r.status == envs::ConformanceResult::Status::kFailed
                           ? "failed"
                           : envs::StatusName(r.status)},
            {"failures", r.failures},
            {"failure_count", r.failure_count},
            {"fixes", r.fixes},
            {"error", r.error},
            {"note", r.note},
            {"covered", r.covered},
            {"seconds", r.seconds}};
  }

  void Check() {
    AddCheckOverrides();
    if (quick_) {
      conformance_.seeds = std::min(conformance_.seeds, 3);
      conformance_.graph_seeds = std::min(conformance_.graph_seeds, 1);
      conformance_.split_pairs = std::min(conformance_.split_pairs, 20);
      conformance_.huge_inputs = false;
    }
    auto env = check_.Make();
    const auto info = env->Info();
    const auto metadata =
        info.metadata.empty() ? nlohmann::json() : nlohmann::json::parse(info.metadata);
    if (!json_) {
      std::cout << fmt::format(
          "conformance of {}: {} instances per check, {} state graph(s) (at most {} states or "
          "{:g} s each), {} train/test pairs{}\n",
          info.name, conformance_.seeds, conformance_.graph_seeds, conformance_.max_graph_states,
          conformance_.max_graph_seconds, conformance_.split_pairs,
          quick_ ? " (--quick)" : "; --quick for a first look");
      if (!metadata.is_null()) std::cout << "  metadata " << metadata.dump() << "\n";
    }
    auto print = [&](const envs::ConformanceResult& r) {
      if (!json_) PrintCheck(r);
    };
    std::vector<envs::ConformanceResult> results;
    if (only_checks_.empty()) {
      results = envs::RunConformance(*env, conformance_, print);
    } else {
      for (const auto& c : only_checks_) {
        results.push_back(envs::RunConformanceCheck(*env, c, conformance_));
        print(results.back());
      }
    }
    int failed = 0, passed = 0, skipped = 0, not_run = 0;
    for (const auto& r : results) {
      failed += r.status == envs::ConformanceResult::Status::kFailed;
      passed += r.status == envs::ConformanceResult::Status::kPassed;
      skipped += r.status == envs::ConformanceResult::Status::kSkipped;
      not_run +=
          r.status == envs::ConformanceResult::Status::kSkipped && r.note.starts_with("not run:");
    }
    if (json_) {
      nlohmann::json j = {{"env", info.name},
                          {"seeds", conformance_.seeds},
                          {"metadata", metadata},
                          {"checks", nlohmann::json::array()}};
      for (const auto& r : results) j["checks"].push_back(CheckJson(r));
      std::cout << DumpJson(j, 2) << "\n";
    } else {
      std::cout << fmt::format("{}: {} passed, {} skipped, {} failed\n", info.name, passed, skipped,
                               failed);
    }
    if (failed > 0)
      throw Error(fmt::format("{} of {} conformance checks failed for env '{}'{}", failed,
                              results.size(), info.name,
                              not_run > 0 ? fmt::format(" ({} more not run: the env cannot play "
                                                        "an episode)",
                                                        not_run)
                                          : ""),
                  not_run > 0 ? "fix the error above first, then check again"
                              : "each failure above names the seed and step and how to fix it; "
                                "docs/external_env.md lists what each check expects");
  }

  EnvOptions show_, play_, graph_, check_, serve_;
  envs::ConformanceOptions conformance_;
  std::string command_;
  std::vector<std::string> params_, only_checks_;
  double delay_ms_ = 0;
  bool json_ = false, shuffle_ = false, quick_ = false;
  size_t max_states_ = 100000;
  std::string dot_;
};

const Registrar<CommandRegistry> kRegister("env", "list, show, play and enumerate environments",
                                           [] { return std::make_unique<EnvCommand>(); });

}  // namespace
}  // namespace rlid::cli

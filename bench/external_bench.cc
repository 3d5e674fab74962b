// `rlid bench external`: what the external-env protocol costs and what its
// workers buy, as ratios measured in one run.
//   1. Protocol overhead per step: seeded random play (menu with afterstates,
//      then a step) on a built-in env in this process vs the same env served by
//      `rlid env serve` over pipes; the difference per step is the protocol's
//      cost (JSON both ways, two pipe hops, the client's checks). The Python
//      example env's time per step is printed for context.
//   2. Overlap: decision-plane rollouts of a tiny model on a deliberately slow
//      served env (--delay-ms per step) with 1 worker vs --workers workers; with
//      more than one, half the episodes step while the other half is read out.
// With --adapter (repeatable) it measures the field's adapters instead: for
// each, the start (process, imports, hello) and seeded random play through
// rlid (menu as the adapter sends it, then a step) in decisions per second.
#include <fmt/format.h>
#include <unistd.h>

#include <filesystem>
#include <iostream>

#include "agents/rollout.h"
#include "bench/bench.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/rng.h"
#include "core/strings.h"
#include "envs/api/env.h"
#include "policy/model/runtime.h"

namespace rlid::bench {
namespace {

std::string SelfExe() {
  std::error_code ec;
  auto p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw IoError("cannot find this program's path (/proc/self/exe)", ec.message());
  return p.string();
}

std::string CommandParam(const std::vector<std::string>& argv) {
  return "command=" + nlohmann::json(argv).dump();
}

// Seconds for `steps` decisions of seeded random play: the menu (afterstates
// included) at every state, then a step.
double RandomPlay(const envs::Env& env, int64_t steps) {
  Rng rng(7);
  const double t0 = MonotonicSeconds();
  int64_t done = 0;
  for (uint64_t seed = 0; done < steps; ++seed) {
    auto s = env.NewState(seed);
    while (!s->IsTerminal() && done < steps) {
      const envs::Menu m = s->CompileMenu();
      s->Apply(m.items[rng.UniformInt(m.size())].action);
      ++done;
    }
  }
  return MonotonicSeconds() - t0;
}

class ExternalBench : public Benchmark {
 public:
  void AddOptions(CLI::App& app) override {
    app.add_option("--env", env_, "built-in env served over the protocol")->capture_default_str();
    app.add_option("--steps", steps_, "random-play steps timed per side (overhead)")
        ->capture_default_str();
    app.add_option("--python", python_, "also time this Python env (\"\" to skip)")
        ->capture_default_str();
    app.add_option("--delay-ms", delay_ms_, "env step latency of the overlap measurement")
        ->capture_default_str();
    app.add_option("--workers", workers_, "worker processes compared with 1")->capture_default_str();
    app.add_option("--episodes", episodes_, "episodes per rollout (overlap)")->capture_default_str();
    app.add_option("--num-envs", num_envs_, "episodes in lockstep (overlap)")->capture_default_str();
    app.add_option("--adapter", adapters_,
                   "time this field adapter instead, e.g. openspiel or \"openspiel:game=catch,"
                   "opening=0\" (repeatable)");
    app.add_option("--adapter-steps", adapter_steps_, "random-play decisions timed per adapter")
        ->capture_default_str();
  }

  // --adapter NAME[:k=v,k=v]: start time and random-play decisions per second.
  nlohmann::json RunAdapters() {
    nlohmann::json rows = nlohmann::json::array();
    std::cout << fmt::format(
        "field adapters, seeded random play through rlid ({} decisions each):\n", adapter_steps_);
    for (const std::string& spec : adapters_) {
      const size_t colon = spec.find(':');
      const std::string name = spec.substr(0, colon);
      std::vector<std::string> params;
      if (colon != std::string::npos) params = Split(spec.substr(colon + 1), ',');
      const double t0 = MonotonicSeconds();
      auto env = envs::MakeEnv(name, params);
      const double start_s = MonotonicSeconds() - t0;
      const double play_s = RandomPlay(*env, adapter_steps_);
      const double per_s = adapter_steps_ / play_s;
      rows.push_back({{"adapter", spec},
                      {"start_s", start_s},
                      {"decisions", adapter_steps_},
                      {"play_s", play_s},
                      {"decisions_per_s", per_s}});
      std::cout << fmt::format("  {:<40} start {:6.2f} s, {:8.1f} decisions/s ({:.1f} ms each)\n",
                               spec, start_s, per_s, 1e3 * play_s / adapter_steps_);
    }
    return {{"adapters", rows}};
  }

  nlohmann::json Run() override {
    if (!adapters_.empty()) {
      if (adapter_steps_ < 1) throw ConfigError("rlid bench external: --adapter-steps >= 1");
      return RunAdapters();
    }
    if (steps_ < 1 || workers_ < 2 || episodes_ < 1 || num_envs_ < 2 || delay_ms_ < 0)
      throw ConfigError("rlid bench external: --steps, --episodes >= 1; --workers, --num-envs >= 2; "
                        "--delay-ms >= 0");
    threads_ = cli::GlobalThreads().value_or(0);  // rlid --threads N
    policy::SetNumThreads(threads_);
    const std::string self = SelfExe();
    nlohmann::json out = {{"env", env_}};
    const bool with_python = !python_.empty() && std::filesystem::exists(python_);
    Progress progress("bench external: measurements", with_python ? 5 : 4, true, 0);
    int64_t stage = 0;

    // ---- 1. protocol overhead ------------------------------------------------------
    auto local = envs::MakeEnv(env_);
    auto served = envs::MakeEnv("external", {CommandParam({self, "env", "serve", "--env", env_})});
    RandomPlay(*local, steps_ / 10 + 1);  // warm-up
    RandomPlay(*served, steps_ / 10 + 1);
    const double t_local = RandomPlay(*local, steps_);
    progress.Update(++stage, "in-process env");
    const double t_served = RandomPlay(*served, steps_);
    progress.Update(++stage, "served env");
    const double local_us = 1e6 * t_local / steps_, served_us = 1e6 * t_served / steps_;
    const double overhead_us = served_us - local_us;
    out["overhead"] = {{"steps", steps_},
                       {"in_process_us_per_step", local_us},
                       {"served_us_per_step", served_us},
                       {"protocol_overhead_us_per_step", overhead_us},
                       {"served_over_in_process", served_us / local_us},
                       {"target_us", 200.0},
                       {"meets_target", overhead_us <= 200.0}};
    std::cout << fmt::format(
        "protocol overhead ({}, {} random-play steps, menu with afterstates each step):\n"
        "  in process {:.1f} us/step, served over pipes {:.1f} us/step: overhead {:.1f} us/step "
        "(target <= 200), ratio {:.2f}x\n",
        env_, steps_, local_us, served_us, overhead_us, served_us / local_us);
    if (!with_python && !python_.empty())
      std::cout << fmt::format("  (Python env skipped: {} not found; run from the repository root)\n",
                               python_);
    if (with_python) {
      auto py = envs::MakeEnv("external", {CommandParam({"python3", python_})});
      RandomPlay(*py, steps_ / 10 + 1);
      const double py_us = 1e6 * RandomPlay(*py, steps_) / steps_;
      out["python"] = {{"command", python_}, {"us_per_step", py_us}};
      std::cout << fmt::format("  Python env {}: {:.1f} us/step (its own work included)\n",
                               std::filesystem::path(python_).filename().string(), py_us);
      progress.Update(++stage, "python env");
    }

    // ---- 2. overlap of env steps and model forwards -----------------------------------
    auto tok = SmallEnvTokenizer(*local);
    policy::PromptRenderer renderer(policy::PromptConfig{}, tok);
    policy::ModelConfig mc;
    mc.ApplyPreset("tiny");
    mc.vocab_size = tok.VocabSize();
    policy::TransformerLM model(mc);
    model->InitWeights(1);
    std::vector<agents::EpisodeSpec> specs;
    for (int64_t i = 0; i < episodes_; ++i)
      specs.push_back({envs::SplitSeed(envs::Split::kTrain, static_cast<uint64_t>(i)),
                       static_cast<uint64_t>(i), -1});
    auto rollout = [&](int workers) {
      auto env = envs::MakeEnv(
          "external", {CommandParam({self, "env", "serve", "--env", env_, "--delay-ms",
                                     fmt::format("{}", delay_ms_)}),
                       fmt::format("workers={}", workers)});
      agents::AgentContext ctx;
      ctx.env = env.get();
      ctx.model = model;
      ctx.renderer = &renderer;
      ctx.seed = 1;
      ctx.num_envs = static_cast<int>(num_envs_);
      agents::StageTimes times;
      ctx.times = &times;
      agents::Budget budget;
      const double t0 = MonotonicSeconds();
      auto eps = agents::RunDecisionEpisodes(ctx, specs, envs::Split::kTrain, false, budget);
      const double wall = MonotonicSeconds() - t0;
      return nlohmann::json{{"workers", workers},
                            {"episodes", eps.size()},
                            {"env_steps", budget.env_steps},
                            {"wall_s", wall},
                            {"steps_per_s", budget.env_steps / wall},
                            {"readout_s", times.readout},
                            {"env_s", times.env}};
    };
    const auto one = rollout(1);
    progress.Update(++stage, "1 worker");
    const auto many = rollout(static_cast<int>(workers_));
    progress.Update(++stage, fmt::format("{} workers", workers_));
    const double speedup = many["steps_per_s"].get<double>() / one["steps_per_s"].get<double>();
    out["overlap"] = {{"delay_ms", delay_ms_},
                      {"num_envs", num_envs_},
                      {"one_worker", one},
                      {"many_workers", many},
                      {"throughput_ratio", speedup}};
    std::cout << fmt::format(
        "rollout throughput, {} with {:g} ms per step, {} episodes, {} in lockstep, tiny model:\n",
        env_, delay_ms_, episodes_, num_envs_);
    for (const auto* r : {&one, &many})
      std::cout << fmt::format(
          "  {} worker(s): {:.1f} env steps/s ({} steps in {:.2f} s; readout {:.2f} s, env "
          "stage {:.2f} s)\n",
          (*r)["workers"].get<int>(), (*r)["steps_per_s"].get<double>(),
          (*r)["env_steps"].get<int64_t>(), (*r)["wall_s"].get<double>(),
          (*r)["readout_s"].get<double>(), (*r)["env_s"].get<double>());
    std::cout << fmt::format("  {} workers / 1 worker: {:.2f}x\n", workers_, speedup);
    return out;
  }

 private:
  std::string env_ = "maze";
  int64_t steps_ = 3000;
  std::string python_ = "envs/external/python/examples/courier.py";
  double delay_ms_ = 20;
  int64_t workers_ = 4, episodes_ = 64, num_envs_ = 16;
  std::vector<std::string> adapters_;
  int64_t adapter_steps_ = 300;
  int threads_ = 0;
};

const Registrar<BenchRegistry> kRegister(
    "external", "external-env protocol: overhead per step vs in-process, and worker overlap",
    [] { return std::make_unique<ExternalBench>(); });

}  // namespace
}  // namespace rlid::bench

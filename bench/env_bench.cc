// `rlid bench env`: menu compilations per second (afterstates included) per
// env, single thread, on a fixed set of states reached by seeded random play.
// Training must never wait on environments; compare with readouts/s.
#include <fmt/format.h>

#include <iostream>

#include "bench/bench.h"
#include "core/progress.h"
#include "core/rng.h"
#include "envs/api/env.h"

namespace rlid::bench {
namespace {

class EnvBench : public Benchmark {
 public:
  void AddOptions(CLI::App& app) override {
    app.add_option("--seconds", seconds_, "time per env")->capture_default_str();
    app.add_option("--env", only_, "only this env");
  }
  nlohmann::json Run() override {
    nlohmann::json out;
    std::cout << fmt::format("{:<10} {:>14} {:>14} {:>10}\n", "env", "menus/s", "steps/s", "menu size");
    const auto names = envs::BuiltInEnvNames();
    Progress progress("bench env: environments", only_.empty() ? static_cast<int64_t>(names.size()) : 1);
    int64_t done = 0;
    for (const auto& name : names) {
      if (!only_.empty() && name != only_) continue;
      progress.Update(done++, fmt::format("(next: {})", name));
      auto env = envs::MakeEnv(name);
      // A pool of reachable non-terminal states.
      std::vector<std::unique_ptr<envs::State>> pool;
      Rng rng(1);
      for (uint64_t seed = 0; pool.size() < 64 && seed < 1000; ++seed) {
        auto s = env->NewState(seed);
        while (!s->IsTerminal() && pool.size() < 64) {
          pool.push_back(s->Clone());
          auto legal = s->LegalActions();
          s->Apply(legal[rng.UniformInt(legal.size())]);
        }
      }
      size_t menus = 0, items = 0;
      double t0 = MonotonicSeconds(), t1 = t0;
      while (t1 - t0 < seconds_) {
        for (const auto& s : pool) items += s->CompileMenu().size();
        menus += pool.size();
        t1 = MonotonicSeconds();
      }
      double menus_per_s = menus / (t1 - t0);
      // Full episodes of random play (NewState + Apply), menus excluded.
      size_t steps = 0;
      double s0 = MonotonicSeconds(), s1 = s0;
      for (uint64_t seed = 0; s1 - s0 < seconds_; ++seed) {
        auto s = env->NewState(seed);
        while (!s->IsTerminal()) {
          auto legal = s->LegalActions();
          s->Apply(legal[rng.UniformInt(legal.size())]);
          ++steps;
        }
        s1 = MonotonicSeconds();
      }
      double steps_per_s = steps / (s1 - s0);
      double avg = static_cast<double>(items) / std::max<size_t>(menus, 1);
      std::cout << fmt::format("{:<10} {:>14.0f} {:>14.0f} {:>10.1f}\n", name, menus_per_s, steps_per_s, avg);
      out["envs"][name] = {{"menus_per_s", menus_per_s}, {"steps_per_s", steps_per_s}, {"avg_menu_size", avg}};
    }
    return out;
  }

 private:
  double seconds_ = 1.0;
  std::string only_;
};

const Registrar<BenchRegistry> kRegister("env", "menu compilations/s (afterstates included) per env",
                                         [] { return std::make_unique<EnvBench>(); });

}  // namespace
}  // namespace rlid::bench

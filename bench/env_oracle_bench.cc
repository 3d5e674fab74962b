// `rlid bench env_oracle`: cost of one oracle query (OptimalActions() +
// OptimalReturn()) per env, on states reached by oracle play (what SFT data
// generation sees) and by random play (dead ends included), next to the cost
// of compiling the same state's menu, measured in the same run.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>

#include "bench/bench.h"
#include "core/rng.h"
#include "envs/env.h"

namespace rlid::bench {
namespace {

class EnvOracleBench : public Benchmark {
 public:
  void AddOptions(CLI::App& app) override {
    app.add_option("--env", only_, "only this env");
    app.add_option("--episodes", episodes_, "episodes (seeds 0..N-1) per play mode")
        ->capture_default_str();
  }

  nlohmann::json Run() override {
    nlohmann::json out;
    std::cout << fmt::format("{:<10} {:<7} {:>7} {:>12} {:>12} {:>10} {:>14}\n", "env", "play",
                             "states", "oracle us", "max us", "menu us", "oracle/menu");
    for (const auto& name : envs::EnvRegistry::Global().Names()) {
      if (!only_.empty() && name != only_) continue;
      auto env = envs::MakeEnv(name);
      if (!dynamic_cast<envs::OracleState*>(env->NewState(0).get())) continue;
      for (const char* play : {"oracle", "random"}) {
        // Clones are taken before the walker queries its oracle, so no pooled
        // state carries a memoised answer.
        std::vector<std::unique_ptr<envs::State>> pool;
        Rng rng(1);
        for (uint64_t seed = 0; seed < episodes_; ++seed) {
          auto s = env->NewState(seed);
          while (!s->IsTerminal()) {
            pool.push_back(s->Clone());
            auto legal = s->LegalActions();
            envs::ActionId a = legal[rng.UniformInt(legal.size())];
            if (std::string(play) == "oracle") {
              auto best = dynamic_cast<envs::OracleState&>(*s).OptimalActions();
              if (!best.empty()) a = best[0];
            }
            s->Apply(a);
          }
        }
        double total = 0, worst = 0, checksum = 0;
        for (const auto& st : pool) {
          auto& oracle = dynamic_cast<envs::OracleState&>(*st);
          double t0 = Now();
          checksum += static_cast<double>(oracle.OptimalActions().size()) + oracle.OptimalReturn();
          double dt = Now() - t0;
          total += dt;
          worst = std::max(worst, dt);
        }
        double m0 = Now();
        size_t items = 0;
        for (const auto& st : pool) items += st->CompileMenu().size();
        double menu_s = (Now() - m0) / std::max<size_t>(pool.size(), 1);
        double oracle_s = total / std::max<size_t>(pool.size(), 1);
        std::cout << fmt::format("{:<10} {:<7} {:>7} {:>12.1f} {:>12.1f} {:>10.1f} {:>14.2f}\n",
                                 name, play, pool.size(), 1e6 * oracle_s, 1e6 * worst, 1e6 * menu_s,
                                 oracle_s / menu_s);
        out["envs"][name][play] = {{"states", pool.size()},
                                   {"oracle_us", 1e6 * oracle_s},
                                   {"oracle_max_us", 1e6 * worst},
                                   {"menu_us", 1e6 * menu_s},
                                   {"oracle_per_menu", oracle_s / menu_s},
                                   {"checksum", checksum + static_cast<double>(items)}};
      }
    }
    return out;
  }

 private:
  uint64_t episodes_ = 200;
  std::string only_;
};

const Registrar<BenchRegistry> kRegister(
    "env_oracle", "oracle query cost (OptimalActions+OptimalReturn) vs menu cost per env",
    [] { return std::make_unique<EnvOracleBench>(); });

}  // namespace
}  // namespace rlid::bench

// `rlid bench env_oracle`: cost of one oracle query (OptimalActions() +
// OptimalReturn()) per env, on states reached by oracle play (what SFT data
// generation sees) and by random play (dead ends included), next to the cost
// of compiling the same state's menu, measured in the same run.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>

#include "bench/bench.h"
#include "core/progress.h"
#include "core/rng.h"
#include "envs/api/env.h"

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
    std::cout << fmt::format("{:<10} {:<7} {:>7} {:>14} {:>14} {:>12} {:>12}\n", "env", "play",
                             "states", "oracle med us", "oracle p99 us", "menu med us",
                             "oracle/menu");
    const auto names = envs::BuiltInEnvNames();
    Progress progress("bench env_oracle: environments", only_.empty() ? static_cast<int64_t>(names.size()) : 1);
    int64_t done = 0;
    for (const auto& name : names) {
      if (!only_.empty() && name != only_) continue;
      progress.Update(done++, fmt::format("(next: {})", name));
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
        // Each query and each menu is timed alone; medians resist preemption
        // on shared machines, p99 shows the expensive states (dead ends).
        std::vector<double> oracle_t, menu_t;
        double checksum = 0;
        for (const auto& st : pool) {
          auto& oracle = dynamic_cast<envs::OracleState&>(*st);
          double t0 = MonotonicSeconds();
          checksum += static_cast<double>(oracle.OptimalActions().size()) + oracle.OptimalReturn();
          oracle_t.push_back(MonotonicSeconds() - t0);
        }
        for (const auto& st : pool) {
          double t0 = MonotonicSeconds();
          checksum += static_cast<double>(st->CompileMenu().size());
          menu_t.push_back(MonotonicSeconds() - t0);
        }
        auto quantile = [](std::vector<double> v, double q) {
          std::sort(v.begin(), v.end());
          return v.empty() ? 0.0 : v[static_cast<size_t>(q * (v.size() - 1))];
        };
        double median = quantile(oracle_t, 0.5), p99 = quantile(oracle_t, 0.99);
        double menu_median = quantile(menu_t, 0.5);
        std::cout << fmt::format("{:<10} {:<7} {:>7} {:>14.1f} {:>14.1f} {:>12.1f} {:>12.2f}\n",
                                 name, play, pool.size(), 1e6 * median, 1e6 * p99,
                                 1e6 * menu_median, median / menu_median);
        out["envs"][name][play] = {{"states", pool.size()},
                                   {"oracle_median_us", 1e6 * median},
                                   {"oracle_p99_us", 1e6 * p99},
                                   {"menu_median_us", 1e6 * menu_median},
                                   {"oracle_per_menu", median / menu_median},
                                   {"checksum", checksum}};
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

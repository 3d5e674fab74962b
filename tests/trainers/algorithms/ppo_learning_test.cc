// Learning tests of decision PPO on CPU within a fixed budget, with fixed
// seeds: from scratch on the contextual bandit, P(best arm) > 0.9; from a
// short SFT warm start that solves clearly fewer than 90% of the 3x3 test
// mazes, >= 90% greedy test success. Each test prints the numbers it reached.
#include <gtest/gtest.h>

#include <chrono>
#include <iostream>

#include "tests/agents/fixtures.h"
#include "tests/trainers/algorithms/warm_start.h"
#include "tests/trainers/algorithms/warm_start_configs.h"
#include "trainers/runtime/trainer.h"

namespace rlid::trainers {
namespace {

using rlid::testing::Experiment;
using rlid::testing::TempDir;

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// Bandit from a random model. Budget: 20 iterations x 64 episodes (1280
// decisions) on one thread; lr 3e-4 with the exact-menu-KL early stop (at
// lr 1e-3 without it P(best arm) stalls near 0.7). Seeds 1, 2, 3 reached
// 0.954, 0.96, 0.98 (build/rlid train with this config, --set run.seed=N). P(best arm) = mean over
// the 64 test states of p(best arm | s) from the label readout (EvalResult::p_optimal).
constexpr const char* kBanditPpoToml = R"(
[run]
name = "bandit_ppo_test"
seed = 1
threads = 1

[env]
name = "bandit"
arms = 4

[policy]
preset = "tiny"

[trainer]
algorithm = "ppo_decision"
iterations = 20
episodes_per_iteration = 64
num_envs = 64
epochs = 4
minibatch_size = 32
lr = 3e-4
target_kl = 0.02
ent_coef = 0.0
eval_every = 0
eval_episodes = 64
eval_sampled = false
checkpoint_every = 0
)";

TEST(PpoLearning, BanditPBestArmAboveNinetyPercent) {
  const auto t0 = std::chrono::steady_clock::now();
  auto cfg = Experiment(kBanditPpoToml);
  TempDir dir("ppo_bandit");
  auto trainer = TrainerRegistry::Global().Make("ppo_decision");
  trainers::Run s(*cfg, {.out_dir = dir.str(), .quiet = true});
  auto r = Train(s, *trainer, {.quiet = true});
  s.End("completed");
  std::cout << "  bandit: P(best arm) " << r.final_greedy.p_optimal << ", greedy success "
            << r.final_greedy.success << " after " << r.iterations << " iterations in "
            << Seconds(t0) << " s\n";
  EXPECT_GT(r.final_greedy.p_optimal, 0.9);
}

// Maze 3x3 from the shared short SFT warm start (64 demonstrations, 10%
// random actions, 3 epochs). Budget: 8 iterations x 32 episodes on one
// thread, 2 epochs each. Success counts only within the step limit, so the
// objective is the finite-horizon return: a cut is terminal
// (bootstrap_truncated = false). Measured: greedy test success 0.688 -> 0.922.
// With the default V(s_T) bootstrap the same run reached 0.797 after 8 and
// 0.844 after 16 iterations: a looping state then costs only discounting, and
// the greedy policy (the metric) keeps some loops the sampled one escapes.
// The greedy success of this tiny model also depends on its warm start: from
// a start that loops more (a 12-step-limit SFT) PPO plateaued at 0.86-0.89 in
// 16 iterations.
constexpr const char* kMazePpoToml = R"(
[run]
name = "maze3_ppo_test"
seed = 1
threads = 1

[env]
name = "maze"
size = 3

[policy]
preset = "tiny"

[trainer]
algorithm = "ppo_decision"
iterations = 8
episodes_per_iteration = 32
num_envs = 32
epochs = 2
minibatch_size = 64
lr = 3e-4
target_kl = 0.02
eval_every = 0
eval_episodes = 64
eval_sampled = false
checkpoint_every = 0

bootstrap_truncated = false

[trainer.advantage]
gamma = 0.95
)";

TEST(PpoLearning, Maze3FromAShortWarmStartReachesNinetyPercent) {
  const std::string ckpt = rlid::testing::WarmStart("maze3_sft", rlid::testing::kMaze3SftToml);
  const auto t0 = std::chrono::steady_clock::now();
  auto cfg = Experiment(kMazePpoToml, {"policy.init=" + ckpt});
  TempDir dir("ppo_maze3");
  auto trainer = TrainerRegistry::Global().Make("ppo_decision");
  trainers::Run s(*cfg, {.out_dir = dir.str(), .quiet = true});
  auto start = Evaluate(s.Agent(policy::Plane::kDecision, -1), policy::Plane::kDecision,
                        cfg->trainer.eval_episodes, /*greedy=*/true, s.budget, nullptr);
  auto r = Train(s, *trainer, {.quiet = true});
  s.End("completed");
  std::cout << "  maze3: warm start " << start.success << " -> " << r.final_greedy.success
            << " greedy test success (p_optimal " << start.p_optimal << " -> "
            << r.final_greedy.p_optimal << ") after " << r.iterations << " iterations in "
            << Seconds(t0) << " s\n";
  EXPECT_LT(start.success, 0.8) << "the warm start is too strong for a learning test";
  EXPECT_GE(r.final_greedy.success, 0.9);
}

}  // namespace
}  // namespace rlid::trainers

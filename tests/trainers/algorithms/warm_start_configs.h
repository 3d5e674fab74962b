// The SFT warm starts shared by the learning tests of both planes (decision
// PPO and the token-plane GRPO family): the same env, model preset and
// behaviour-cloning settings, cached by WarmStart(name, toml) under
// build/test_cache. The demonstrations are deliberately weak (few episodes and
// epochs, random actions) so the start is imperfect and RL has room to improve
// it. Trainer tests add their algorithm and budget as --set style overrides.
#pragma once

namespace rlid::testing {

// Contextual bandit, 4 arms: WarmStart("bandit_sft", kBanditSftToml). Measured
// (64 test episodes): greedy success 0.72 in both planes; sampled 0.47
// (decision) and 0.17 (token, temperature 1; invalid rate 0.55).
inline constexpr const char* kBanditSftToml = R"(
[run]
name = "bandit_sft"
seed = 1
threads = 1

[env]
name = "bandit"
arms = 4

[policy]
preset = "tiny"

[sft]
episodes = 256
random_action_frac = 0.3
epochs = 2
batch_size = 16
lr = 1e-3

[trainer]
eval_every = 0
eval_episodes = 64
checkpoint_every = 0
)";

// Maze of size 3 (the env's default step limit of 27):
// WarmStart("maze3_sft", kMaze3SftToml). Token-plane demonstrations answer
// with the label (as the decision plane reads it): with the command realisation
// the token plane kept naming walls (invalid rate ~0.5), and the shared
// model's decision readout was weaker too (greedy 0.45 instead of 0.69).
// Measured (64 test episodes): decision greedy success 0.688; token plane
// with a 12-step limit (the token learning tests): sampled success 0.457 on
// 256 test episodes, invalid rate 0.28 (temperature 1).
inline constexpr const char* kMaze3SftToml = R"(
[run]
name = "maze3_sft"
seed = 1
threads = 1

[env]
name = "maze"
size = 3

[policy]
preset = "tiny"

[sft]
episodes = 64
random_action_frac = 0.1
epochs = 3
batch_size = 8
lr = 1e-3
answer = "label"

[trainer]
eval_every = 0
eval_episodes = 64
checkpoint_every = 0
)";

}  // namespace rlid::testing

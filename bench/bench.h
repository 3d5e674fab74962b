// Benchmarks run from the CLI (`rlid bench NAME`). Machines are noisy, so each
// benchmark reports ratios measured in the same run (e.g. single-pass vs naive
// readout) beside the absolute numbers, and prints one JSON object so results
// can be archived. Benchmarks register like everything else.
#pragma once

#include <CLI/CLI.hpp>
#include <algorithm>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/command.h"
#include "core/clock.h"
#include "core/registry.h"
#include "envs/api/env.h"
#include "policy/reading/prompt.h"
#include "policy/reading/readout.h"
#include "policy/tokenizer/tokenizer.h"

namespace rlid::bench {

class Benchmark {
 public:
  static constexpr const char* kRegistryKind = "benchmark";
  virtual ~Benchmark() = default;
  // Adds benchmark-specific options to its subcommand.
  virtual void AddOptions(CLI::App& app) {}
  // Runs and returns the results (printed as JSON by the CLI, and as a table
  // when the benchmark prints one itself).
  virtual nlohmann::json Run() = 0;
};
using BenchRegistry = Registry<Benchmark>;

// Seconds of the fastest of `repeats` calls of `fn` after one warm-up call;
// `after_each()` runs after every timed call (a progress bar, say).
template <class Fn, class After = void (*)()>
double Fastest(int repeats, Fn&& fn, After&& after_each = [] {}) {
  fn();
  double best = 1e30;
  for (int r = 0; r < repeats; ++r) {
    const double s = MonotonicSeconds();
    fn();
    best = std::min(best, MonotonicSeconds() - s);
    after_each();
  }
  return best;
}

// Mean seconds per call of `fn`, repeated until `seconds` have passed (>= 2
// calls after one warm-up call): for calls too short to time one by one.
template <class Fn>
double TimePerCall(double seconds, Fn&& fn) {
  fn();
  int calls = 0;
  double t0 = MonotonicSeconds(), t1 = t0;
  while (calls < 2 || t1 - t0 < seconds) {
    fn();
    ++calls;
    t1 = MonotonicSeconds();
  }
  return (t1 - t0) / calls;
}

// Peak resident set size of this process so far (getrusage's ru_maxrss), in bytes.
double PeakRssBytes();

// A small tokenizer (512 ids) trained on 100 random-play episodes of `env`:
// its ids lie far below a pretrained model's vocabulary, so env prompts can be
// fed to a model of any size.
policy::Tokenizer SmallEnvTokenizer(const envs::Env& env);

// What the benchmarks feed a model: the first n states (seeds 0..n-1) of
// `env` rendered by `renderer`, as menu readouts (all realisations, the
// tokenizer's end token) and as token-plane prompts.
struct MenuPrompts {
  std::vector<policy::ReadoutRequest> readouts;
  std::vector<std::vector<policy::TokenId>> token_prompts;
  int64_t readout_prompt_tokens = 0;  // summed over the readouts
};
MenuPrompts RenderMenuPrompts(const envs::Env& env, const policy::PromptRenderer& renderer, int64_t n);

// Writes a random BF16 checkpoint shaped exactly like Qwen3-0.6B (HF names and
// config.json; `layers` decoder layers, 28 in the real model) plus a bandit
// SmallEnvTokenizer to `dir`, one tensor at a time from a seeded stream.
void GenerateQwen3ShapedCheckpoint(const std::filesystem::path& dir, int64_t layers);

}  // namespace rlid::bench

// Shared test fixtures for the memory store: scratch directories and
// deterministic episode records whose content is a pure function of their id
// (so a reader can check that a stored episode is complete, e.g. after a crash).
#pragma once

#include <fmt/format.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

#include "memory/records.h"

namespace rlid::memory::testing {

// A fresh empty directory under the system temp dir, removed at process exit
// (set RLID_KEEP_SCRATCH=1 to keep it for inspection).
inline std::string ScratchDir(const std::string& name) {
  struct Cleanup {
    std::mutex mu;
    std::vector<std::filesystem::path> dirs;
    ~Cleanup() {
      if (std::getenv("RLID_KEEP_SCRATCH")) return;
      std::error_code ec;
      for (const auto& d : dirs) std::filesystem::remove_all(d, ec);
    }
  };
  static Cleanup cleanup;
  static std::atomic<int> counter{0};
  const auto dir = std::filesystem::temp_directory_path() /
                   fmt::format("rlid_{}_{}_{}", name, ::getpid(), counter++);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::lock_guard lk(cleanup.mu);
  cleanup.dirs.push_back(dir);
  return dir.string();
}

// Steps of the canonical episode with this id.
inline int CanonicalLength(int64_t id) { return 1 + static_cast<int>(id % 7); }
inline constexpr int kCanonicalMenu = 3;

// Episode `id` of `run_id`: CanonicalLength(id) steps with kCanonicalMenu menu
// items each; prompts repeat across episodes (ids mod 5) to exercise dedupe.
// If item_id > 0 the episode creates memory item `item_id` at t = 0; if
// read_item > 0 its last step reads that item.
inline EpisodeRecord CanonicalEpisode(int64_t id, int64_t run_id, int64_t item_id = 0,
                                      int64_t read_item = 0, const std::string& split = "train") {
  EpisodeRecord e;
  e.id = id;
  e.run_id = run_id;
  e.env = "bandit";
  e.seed = static_cast<uint64_t>(2 * id + (split == "test"));
  e.split = split;
  e.policy_version = id / 10;
  e.iteration = id / 10;
  e.length = CanonicalLength(id);
  e.success = id % 2 == 0;
  e.ret = e.success ? 1.0 : 0.0;
  for (int t = 0; t < e.length; ++t) {
    StepRecord s;
    s.t = t;
    s.observation = fmt::format("episode {} step {}: you see {} doors", id, t, t + 2);
    s.prompt = fmt::format("Instructions ...\nObservation {} {}\nAction:", id % 5, t);
    s.prompt_tokens = 10 + t;
    s.action = t % kCanonicalMenu;
    s.label = std::string(1, static_cast<char>('A' + s.action));
    s.command = fmt::format("open door {}", s.action);
    s.logp_rollout = -0.5 - 0.1 * t;
    s.reward = t + 1 == e.length ? e.ret : 0.0;
    for (int k = 0; k < kCanonicalMenu; ++k) {
      MenuItemRecord m;
      m.position = k;
      m.action = k;
      m.label = std::string(1, static_cast<char>('A' + k));
      m.command = fmt::format("open door {}", k);
      m.afterstate = fmt::format("door {} is open", k);
      m.probability = k == 0 ? 0.5 : 0.25;
      m.realisations = {{m.label, m.probability * 0.8}, {m.command, m.probability * 0.2}};
      s.menu.push_back(m);
    }
    if (read_item > 0 && t + 1 == e.length) s.reads.push_back({read_item, 0, 1.5});
    e.steps.push_back(std::move(s));
  }
  if (item_id > 0) {
    MemoryItem it;
    it.id = item_id;
    it.content = fmt::format("fact from episode {}", id);
    it.source = {run_id, id, 0};
    it.split = split;
    it.policy_version = e.policy_version;
    e.new_items.push_back(it);
  }
  return e;
}

}  // namespace rlid::memory::testing

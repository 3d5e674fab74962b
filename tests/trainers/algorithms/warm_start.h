// A behaviour-cloning warm start shared by the learning tests. ctest runs each
// test in its own process (two at a time), so the checkpoint is cached on disk
// under the build directory and created once under an flock.
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "tests/agents/fixtures.h"
#include "tests/build_id.h"
#include "trainers/runtime/run.h"
#include "trainers/algorithms/sft.h"
#include "tests/test_paths.h"

namespace rlid::testing {

inline std::filesystem::path TestCacheDir() {
#ifdef RLID_BINARY_DIR
  std::filesystem::path root = RLID_BINARY_DIR;
#else
  std::filesystem::path root = std::filesystem::temp_directory_path();
#endif
  auto dir = root / "test_cache";
  std::filesystem::create_directories(dir);
  return dir;
}

// Runs `rlid sft` on `toml` (+ overrides) into test_cache/<name> unless a
// finished checkpoint made by this test binary (BuildId()) from the same toml
// and overrides is already there (an edited config or a rebuilt binary
// rebuilds it); returns the checkpoint directory.
inline std::string WarmStart(const std::string& name, const std::string& toml,
                             const std::vector<std::string>& sets = {}) {
  auto dir = TestCacheDir() / name;
  auto ckpt = dir / "checkpoints" / "sft";
  int fd = ::open((TestCacheDir() / (name + ".lock")).c_str(), O_CREAT | O_RDWR, 0644);
  ::flock(fd, LOCK_EX);
  std::string key = "build " + BuildId() + "\n" + toml;
  for (const auto& kv : sets) key += "\n--set " + kv;
  std::string cached;
  {
    std::ifstream in(dir / "cache_key");
    cached.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (!std::filesystem::exists(ckpt / "rlid.json") || cached != key) {
    std::filesystem::remove_all(dir);
    auto cfg = Experiment(toml, sets);
    trainers::Run s(*cfg,
                        {.out_dir = dir.string(), .kind = trainers::RunKind::kSft, .arm = "sft", .quiet = true});
    trainers::RunSft(s, /*quiet=*/true);
    s.End("completed");
    std::ofstream(dir / "cache_key") << key;
  }
  ::flock(fd, LOCK_UN);
  ::close(fd);
  return ckpt.string();
}

}  // namespace rlid::testing

// Checkpoints: atomic round trip of weights + config + tokenizer + format
// version; a newer format version, mismatched shapes, missing tensors and
// missing files each fail with a clear error.
#include "policy/model/checkpoint.h"

#include <gtest/gtest.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <nlohmann/json.hpp>
#include <vector>

#include "core/error.h"
#include "policy/model/safetensors.h"
#include "policy/tokenizer/tokenizer.h"
#include "tests/agents/fixtures.h"

namespace rlid::policy {
namespace {
namespace fs = std::filesystem;

TEST(Checkpoint, RoundTripKeepsWeightsConfigAndTokenizer) {
  auto env = envs::MakeEnv("bandit");
  auto tok = testing::EnvTokenizer(*env);
  auto model = testing::TinyModel(tok, 21);
  testing::TempDir dir("ckpt");
  auto path = (dir.path() / "c1").string();
  SaveCheckpoint(path, model, tok, {{"iteration", 7}}, [](const std::string& tmp) {
    std::ofstream(tmp + "/extra.txt") << "state";
  });
  for (const char* f : {"model.safetensors", "config.json", "tokenizer.json", "rlid.json", "extra.txt"})
    EXPECT_TRUE(fs::exists(fs::path(path) / f)) << f;
  // No temporary directories are left behind.
  for (const auto& e : fs::directory_iterator(dir.path()))
    EXPECT_EQ(e.path().filename().string().find(".tmp"), std::string::npos) << e.path();
  auto loaded = LoadCheckpoint(path);
  EXPECT_EQ(loaded.meta["extra"]["iteration"], 7);
  EXPECT_EQ(loaded.meta["format_version"], kCheckpointFormatVersion);
  EXPECT_EQ(loaded.tokenizer.Fingerprint(), tok.Fingerprint());
  auto a = model->named_parameters(), b = loaded.model->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (const auto& p : a) EXPECT_TRUE(torch::equal(p.value(), b[p.key()])) << p.key();
  // Saving over an existing checkpoint replaces it atomically.
  model->InitWeights(22);
  SaveCheckpoint(path, model, tok);
  auto again = LoadCheckpoint(path);
  EXPECT_TRUE(torch::equal(again.model->named_parameters()["model.norm.weight"],
                           model->named_parameters()["model.norm.weight"]));
  EXPECT_FALSE(fs::exists(fs::path(path) / "extra.txt"));
}

// A checkpoint directory a crash left unpublished ("iter_N.tmp-PID") is never
// loaded, and is removed once its writer is gone.
TEST(Checkpoint, UnfinishedCheckpointsAreRefusedAndRemoved) {
  auto env = envs::MakeEnv("bandit");
  auto tok = testing::EnvTokenizer(*env);
  auto model = testing::TinyModel(tok, 21);
  testing::TempDir dir("ckpt_orphan");
  SaveCheckpoint((dir.path() / "iter_000001").string(), model, tok);
  const pid_t dead = fork();  // a process that has exited: its pid names no writer
  if (dead == 0) _exit(0);
  waitpid(dead, nullptr, 0);
  const fs::path orphan = dir.path() / fmt::format("iter_000002.tmp-{}", dead);
  const fs::path live = dir.path() / fmt::format("iter_000003.tmp-{}", getpid());
  const fs::path old = dir.path() / fmt::format("iter_000001.old-{}", dead);
  for (const auto& d : {orphan, live, old}) {
    fs::copy(dir.path() / "iter_000001", d, fs::copy_options::recursive);
    fs::remove(d / "rlid.json");  // rlid.json is written last
    EXPECT_THROW(LoadCheckpoint(d.string()), IoError) << d;
    EXPECT_THROW(LoadCheckpoint(d.string() + "/"), IoError) << d;
  }
  EXPECT_TRUE(IsUnpublishedCheckpointName("iter_000002.tmp-17"));
  EXPECT_FALSE(IsUnpublishedCheckpointName("iter_000002"));
  EXPECT_FALSE(IsUnpublishedCheckpointName("model.tmp-dir"));
  EXPECT_EQ(RemoveOrphanCheckpoints(dir.str()), 2);
  EXPECT_FALSE(fs::exists(orphan));
  EXPECT_FALSE(fs::exists(old));
  EXPECT_TRUE(fs::exists(live));  // its writer (this process) still runs
  EXPECT_TRUE(fs::exists(dir.path() / "iter_000001" / "rlid.json"));
  EXPECT_NO_THROW(LoadCheckpoint((dir.path() / "iter_000001").string()));
}

// Every file a checkpoint load reads whole is a regular file: a FIFO in its place blocked
// the load forever and /dev/zero grew memory without end. Now each is an IoError naming the
// file, raised without opening it for a blocking read.
TEST(Checkpoint, NonRegularFilesAreRefusedWithoutBlocking) {
  auto env = envs::MakeEnv("bandit");
  auto tok = testing::EnvTokenizer(*env);
  auto model = testing::TinyModel(tok);
  testing::TempDir dir("ckpt_fifo");
  const fs::path ckpt = dir.path() / "c";
  SaveCheckpoint(ckpt.string(), model, tok);
  const fs::path adapter = dir.path() / "adapter";
  fs::create_directories(adapter);
  auto error_of = [](const std::function<void()>& load) -> std::string {
    try {
      load();
    } catch (const IoError& e) {
      return e.what();
    }
    return "loaded";
  };
  struct Case {
    fs::path file;
    std::function<void()> load;
  };
  const std::vector<Case> cases = {
      {ckpt / "config.json", [&] { LoadCheckpoint(ckpt.string()); }},
      {ckpt / "tokenizer.json", [&] { LoadCheckpoint(ckpt.string()); }},
      {adapter / "adapter_config.json", [&] { LoadCheckpoint(adapter.string()); }},
      {dir.path() / "tokenizer.json", [&] { Tokenizer::FromPath((dir.path() / "tokenizer.json").string()); }},
  };
  for (const Case& c : cases) {
    const fs::path saved = c.file.string() + ".saved";
    if (fs::exists(c.file)) fs::rename(c.file, saved);
    ASSERT_EQ(::mkfifo(c.file.c_str(), 0644), 0) << c.file;
    std::string error = error_of(c.load);
    EXPECT_NE(error.find("'" + c.file.string() + "' is not a regular file: it is a FIFO"),
              std::string::npos)
        << error;
    fs::remove(c.file);
    fs::create_symlink("/dev/zero", c.file);
    error = error_of(c.load);
    EXPECT_NE(error.find("'" + c.file.string() + "' is not a regular file: it is a device"),
              std::string::npos)
        << error;
    fs::remove(c.file);
    if (fs::exists(saved)) fs::rename(saved, c.file);
  }
  EXPECT_EQ(error_of([&] { LoadCheckpoint(ckpt.string()); }), "loaded");
}

TEST(Checkpoint, BadCheckpointsFailClearly) {
  auto env = envs::MakeEnv("bandit");
  auto tok = testing::EnvTokenizer(*env);
  auto model = testing::TinyModel(tok);
  testing::TempDir dir("ckpt_bad");
  auto path = (dir.path() / "c").string();
  SaveCheckpoint(path, model, tok);

  EXPECT_THROW(LoadCheckpoint((dir.path() / "missing").string()), IoError);

  // A newer format version.
  auto meta_path = fs::path(path) / "rlid.json";
  nlohmann::json meta = nlohmann::json::parse(std::ifstream(meta_path));
  meta["format_version"] = kCheckpointFormatVersion + 1;
  std::ofstream(meta_path) << meta.dump();
  try {
    LoadCheckpoint(path);
    FAIL() << "a newer format version must be refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("newer"), std::string::npos) << e.what();
  }
  meta["format_version"] = kCheckpointFormatVersion;
  std::ofstream(meta_path) << meta.dump();
  EXPECT_NO_THROW(LoadCheckpoint(path));

  // Shapes that disagree with config.json.
  auto cfg_path = fs::path(path) / "config.json";
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(cfg_path));
  cfg["intermediate_size"] = cfg["intermediate_size"].get<int>() + 8;
  std::ofstream(cfg_path) << cfg.dump();
  try {
    LoadCheckpoint(path);
    FAIL() << "mismatched shapes must be refused";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("shape"), std::string::npos) << e.what();
  }
  cfg["intermediate_size"] = cfg["intermediate_size"].get<int>() - 8;
  std::ofstream(cfg_path) << cfg.dump();

  // No attention heads: a ConfigError naming the checkpoint and the key, not a
  // division by zero (head_dim absent = hidden_size / num_attention_heads).
  nlohmann::json no_heads = cfg;
  no_heads.erase("head_dim");
  no_heads["num_attention_heads"] = 0;
  std::ofstream(cfg_path) << no_heads.dump();
  try {
    LoadCheckpoint(path);
    FAIL() << "num_attention_heads = 0 must be refused";
  } catch (const ConfigError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("checkpoint '" + path + "'"), std::string::npos) << what;
    EXPECT_NE(what.find("config.json: num_attention_heads = 0 must be >= 1"), std::string::npos) << what;
  }
  std::ofstream(cfg_path) << cfg.dump();
  EXPECT_NO_THROW(LoadCheckpoint(path));

  // A missing tensor.
  auto tensors = LoadSafetensors((fs::path(path) / "model.safetensors").string());
  tensors.erase("model.layers.0.mlp.up_proj.weight");
  SaveSafetensors((fs::path(path) / "model.safetensors").string(), tensors);
  EXPECT_THROW(LoadCheckpoint(path), ConfigError);

  // A corrupt weights file.
  std::ofstream(fs::path(path) / "model.safetensors") << "not a safetensors file";
  EXPECT_THROW(LoadCheckpoint(path), IoError);
}

}  // namespace
}  // namespace rlid::policy

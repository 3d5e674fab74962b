// What rlid loads is data: --resume checks a checkpoint's counters against
// the store before anything is deleted and continues under the run's own
// config; a checkpoint's recorded env program does not run unless the user
// says so; a swapped tokenizer, a malformed rlid.json or non-finite weights
// are refused at load; bad paths for reports and missing files are clear
// errors with rlid's exit codes; an iteration whose every episode an env
// failure dropped skips its update.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "memory/store.h"
#include "policy/model/safetensors.h"
#include "tests/agents/fixtures.h"
#include "tests/cli/run_cli.h"
#include "tests/test_paths.h"

namespace rlid::cli {
namespace {

namespace fs = std::filesystem;
using testing::CliOutput;
using testing::RunRlid;
using testing::RunRlidProcess;
using testing::TempDir;

std::string Read(const fs::path& p) {
  std::ifstream in(p);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void Write(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::trunc) << text;
}

// A small bandit run: `iterations` of 8 episodes, a checkpoint after each.
std::string BanditToml(int iterations = 3, const std::string& env = "name = \"bandit\"\narms = 4") {
  return "[run]\nname = \"trust\"\nseed = 2\nthreads = 1\n\n[env]\n" + env +
         "\n\n[tokenizer]\nvocab_size = 320\ncorpus_episodes = 30\n\n[policy]\npreset = \"tiny\"\n"
         "num_layers = 1\n\n[trainer]\nalgorithm = \"ppo_decision\"\niterations = " +
         std::to_string(iterations) +
         "\nepisodes_per_iteration = 8\nnum_envs = 8\nepochs = 1\nminibatch_size = 8\n"
         "eval_every = 0\neval_episodes = 4\ncheckpoint_every = 1\n";
}

// (episodes, steps, metrics) rows of a run directory.
std::tuple<int64_t, int64_t, int64_t> Rows(const fs::path& run) {
  auto s = memory::Store::Open((run / memory::kDatabaseFileName).string(),
                               memory::Store::Mode::kReadOnly);
  return {s->db().QueryInt("SELECT COUNT(*) FROM episodes"),
          s->db().QueryInt("SELECT COUNT(*) FROM steps"),
          s->db().QueryInt("SELECT COUNT(*) FROM metrics")};
}

CliOutput Rlid(const std::string& args) {
  std::vector<std::string> v;
  std::istringstream in(args);
  for (std::string a; in >> a;) v.push_back(a);
  return RunRlid(v);
}

TEST(Resume, ACheckpointThatDoesNotMatchTheStoreChangesNothing) {
  TempDir dir("resume_guard");
  const fs::path config = dir.path() / "bandit.toml", run = dir.path() / "run";
  Write(config, BanditToml());
  ASSERT_EQ(Rlid("train " + config.string() + " --out " + run.string()).code, 0);
  const auto before = Rows(run);
  const fs::path meta_path = fs::canonical(run / "checkpoints" / "latest") / "rlid.json";
  const std::string original = Read(meta_path);
  const std::vector<std::pair<std::string, nlohmann::json>> edits = {
      {"iteration", -5},      {"iteration", int64_t{1} << 62},
      {"iteration", "2"},     {"last_episode_id", -100},
      {"last_episode_id", 0}, {"last_episode_id", 3},
      {"run_id", 99},         {"last_item_id", -1},
      {"budget", 7}};
  for (const auto& [key, value] : edits) {
    SCOPED_TRACE(key + " = " + value.dump());
    nlohmann::json meta = nlohmann::json::parse(original);
    meta["extra"][key] = value;
    Write(meta_path, meta.dump(2));
    const CliOutput r = Rlid("train " + config.string() + " --out " + run.string() + " --resume");
    EXPECT_EQ(r.code, 3) << r.err;
    EXPECT_NE(r.err.find("--resume"), std::string::npos) << r.err;
    EXPECT_EQ(Rows(run), before) << "a refused resume deleted rows";
  }
  // The run's own tokenizer swapped for another: refused too.
  Write(meta_path, original);
  nlohmann::json meta = nlohmann::json::parse(original);
  meta["tokenizer_fingerprint"] = "0123456789abcdef";
  Write(meta_path, meta.dump(2));
  const CliOutput swapped =
      Rlid("train " + config.string() + " --out " + run.string() + " --resume");
  EXPECT_EQ(swapped.code, 3) << swapped.err;
  EXPECT_NE(swapped.err.find("another tokenizer"), std::string::npos) << swapped.err;
  Write(meta_path, original);
  EXPECT_EQ(Rows(run), before);
  // The untouched checkpoint resumes (a finished run: nothing left to do).
  const CliOutput ok = Rlid("train " + config.string() + " --out " + run.string() + " --resume");
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(Rows(run), before);
}

TEST(Resume, ContinuesUnderTheRunsOwnConfig) {
  TempDir dir("resume_config");
  const fs::path config = dir.path() / "bandit.toml", run = dir.path() / "run";
  Write(config, BanditToml(6));
  const std::string train = "train " + config.string() + " --out " + run.string();
  ASSERT_EQ(Rlid(train + " --set trainer.iterations=2 --set trainer.eval_episodes=3").code, 0);
  const std::string resolved = Read(run / "config.toml");
  // The TOML says 6 iterations and 4 eval episodes; the run was 2 and 3, and stays so.
  CliOutput again = Rlid(train + " --resume");
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_NE(again.err.find("differs from the run's config"), std::string::npos) << again.err;
  EXPECT_NE(again.out.find("finished 2 iterations"), std::string::npos) << again.out;
  EXPECT_NE(Read(run / "config.toml").find("eval_episodes = 3"), std::string::npos);
  // A deliberate change of how long it runs: logged, and done.
  CliOutput longer = Rlid(train + " --resume --set trainer.iterations=3");
  ASSERT_EQ(longer.code, 0) << longer.err;
  EXPECT_NE(longer.err.find("trainer.iterations = 3 (was 2)"), std::string::npos) << longer.err;
  EXPECT_NE(longer.out.find("finished 3 iterations"), std::string::npos) << longer.out;
  // A change that would make the run another run: refused, nothing written.
  const auto rows = Rows(run);
  CliOutput changed = Rlid(train + " --resume --set trainer.lr=0.5");
  EXPECT_EQ(changed.code, 2) << changed.err;
  EXPECT_NE(changed.err.find("continues exactly as it was configured"), std::string::npos)
      << changed.err;
  EXPECT_EQ(Rows(run), rows);
}

// A checkpoint whose rlid.json says which env to evaluate under names a
// program: rlid eval refuses to run it unless the user trusts the checkpoint.
TEST(EvalCheckpoint, TheRecordedEnvsProgramRunsOnlyWhenTrusted) {
  TempDir dir("eval_trust");
  const fs::path config = dir.path() / "bandit.toml", run = dir.path() / "run";
  Write(config, BanditToml(1));
  ASSERT_EQ(Rlid("train " + config.string() + " --out " + run.string()).code, 0);
  const fs::path ckpt = fs::canonical(run / "checkpoints" / "latest");
  nlohmann::json meta = nlohmann::json::parse(Read(ckpt / "rlid.json"));
  const fs::path marker = dir.path() / "PWNED";
  std::string toml = meta["extra"]["config_toml"];
  const auto env_at = toml.find("[env]");
  ASSERT_NE(env_at, std::string::npos);
  const auto next = toml.find("\n[", env_at + 1);
  toml = toml.substr(0, env_at) + "[env]\nname = 'external'\ncommand = ['sh', '-c', 'touch " +
         marker.string() + "']\n" + (next == std::string::npos ? "" : toml.substr(next));
  meta["extra"]["config_toml"] = toml;
  Write(ckpt / "rlid.json", meta.dump(2));
  const std::string eval =
      "eval --checkpoint " + ckpt.string() + " --episodes 2 --out " + (dir.path() / "ev").string();
  const CliOutput refused = Rlid(eval);
  EXPECT_EQ(refused.code, 2) << refused.err;
  EXPECT_NE(refused.err.find("env.command"), std::string::npos) << refused.err;
  EXPECT_NE(refused.err.find("--trust-checkpoint"), std::string::npos) << refused.err;
  EXPECT_FALSE(fs::exists(marker)) << "the checkpoint's command ran";
  // The user's own env instead of the recorded one: evaluates.
  const CliOutput own = Rlid(eval + " --env bandit");
  EXPECT_EQ(own.code, 0) << own.err;
  // Trusted: the command runs (it is no env, so the evaluation then fails).
  const CliOutput trusted = Rlid(eval + "2 --trust-checkpoint");
  EXPECT_NE(trusted.code, 0);
  EXPECT_TRUE(fs::exists(marker)) << trusted.err;
}

// configs/*_lora.toml name every target rlid knows (Qwen3.5's linear-attention
// projections too); a Qwen3-style model has seven of them. Its checkpoint
// evaluates: what was adapted is compared, not the list as written.
TEST(EvalCheckpoint, ALoraRunWithTheShippedTargetsEvaluates) {
  TempDir dir("eval_lora");
  const fs::path run = dir.path() / "run";
  const std::string config = (fs::path(RLID_SOURCE_DIR) / "configs/bandit_lora.toml").string();
  const CliOutput train = Rlid("train " + config + " --out " + run.string() +
                               " --set trainer.iterations=1 --set trainer.episodes_per_iteration=4"
                               " --set trainer.num_envs=4 --set trainer.minibatch_size=4"
                               " --set trainer.eval_episodes=2 --set policy.num_layers=1"
                               " --set tokenizer.corpus_episodes=20 --set run.threads=1");
  ASSERT_EQ(train.code, 0) << train.err;
  const CliOutput eval = Rlid("eval --checkpoint " + (run / "checkpoints" / "latest").string() +
                              " --episodes 2 --out " + (dir.path() / "ev").string());
  EXPECT_EQ(eval.code, 0) << eval.err;
}

TEST(LoadCheckpoint, ASwappedTokenizerMalformedMetaOrNonFiniteWeightsAreRefused) {
  TempDir dir("load_refusals");
  const fs::path config = dir.path() / "bandit.toml", run = dir.path() / "run",
                 other = dir.path() / "other";
  Write(config, BanditToml(1));
  ASSERT_EQ(Rlid("train " + config.string() + " --out " + run.string()).code, 0);
  Write(dir.path() / "maze.toml", BanditToml(1, "name = \"maze\"\nsize = 3"));
  ASSERT_EQ(Rlid("train " + (dir.path() / "maze.toml").string() + " --out " + other.string()).code,
            0);
  const fs::path ckpt = fs::canonical(run / "checkpoints" / "latest");
  const std::string eval = "eval --checkpoint " + ckpt.string() + " --episodes 2 --out ";
  int k = 0;
  auto expect_refused = [&](int code, const std::string& says) {
    const CliOutput r = Rlid(eval + (dir.path() / ("ev" + std::to_string(k++))).string());
    EXPECT_EQ(r.code, code) << r.err;
    EXPECT_NE(r.err.find(says), std::string::npos) << r.err;
  };
  const std::string tokenizer = Read(ckpt / "tokenizer.json"), meta = Read(ckpt / "rlid.json");
  Write(ckpt / "tokenizer.json",
        Read(fs::canonical(other / "checkpoints" / "latest") / "tokenizer.json"));
  expect_refused(2, "not the tokenizer the weights were saved with");
  Write(ckpt / "tokenizer.json", tokenizer);
  for (const auto& [text, says] : std::vector<std::pair<std::string, std::string>>{
           {"[1, 2]", "not a JSON object"},
           {R"({"format": "rlid-checkpoint", "format_version": "1"})", "format_version \"1\""},
           {R"({"format": "pytorch", "format_version": 1})", "format \"pytorch\""}}) {
    Write(ckpt / "rlid.json", text);
    expect_refused(3, says);
  }
  Write(ckpt / "rlid.json", meta);
  // A NaN in the stored weights: refused at load, naming the tensor.
  auto weights = policy::LoadSafetensors((ckpt / "model.safetensors").string());
  weights["model.norm.weight"][0] = std::nan("");
  policy::SaveSafetensors((ckpt / "model.safetensors").string(), weights, {{"format", "pt"}});
  expect_refused(5, "model.norm.weight");
}

TEST(CliErrors, ParseErrorsUseRlidsExitCodes) {
  EXPECT_EQ(Rlid("train /nonexistent/missing.toml").code, 3);
  EXPECT_EQ(Rlid("train").code, 2);
  const std::string config = (fs::path(RLID_SOURCE_DIR) / "configs/bandit_ppo.toml").string();
  EXPECT_EQ(Rlid("train --no-such-flag " + config).code, 2);
  EXPECT_EQ(Rlid("--help").code, 0);
}

TEST(Report, OutputPathsAreCheckedBeforeAnythingIsWritten) {
  TempDir dir("report_paths");
  const fs::path config = dir.path() / "bandit.toml", run = dir.path() / "run";
  Write(config, BanditToml(1));
  ASSERT_EQ(Rlid("train " + config.string() + " --out " + run.string()).code, 0);
  // A FIFO: refused at once (a child process, so a hang cannot stall the suite).
  const fs::path fifo = dir.path() / "fifo.html";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  const CliOutput f =
      RunRlidProcess("report " + run.string() + " --out " + fifo.string(), {}, "timeout 60");
  EXPECT_EQ(f.code, 3) << f.out;
  EXPECT_NE(f.out.find("not a regular file"), std::string::npos) << f.out;
  // A device: refused, and no <name>_plots directory appears beside it.
  const CliOutput full = Rlid("report " + run.string() + " --out /dev/full");
  EXPECT_EQ(full.code, 3) << full.err;
  EXPECT_FALSE(fs::exists("/dev/full_plots"));
  // A directory that does not exist is not made.
  const fs::path missing = dir.path() / "nope" / "x.html";
  EXPECT_EQ(Rlid("report " + run.string() + " --out " + missing.string()).code, 3);
  EXPECT_FALSE(fs::exists(missing.parent_path()));
  // The default output is replaced, never followed when it is a symlink.
  const fs::path target = dir.path() / "precious.txt";
  Write(target, "keep me");
  fs::create_symlink(target, run / "run_report.html");
  ASSERT_EQ(Rlid("report " + run.string()).code, 0);
  EXPECT_EQ(Read(target), "keep me");
  EXPECT_TRUE(fs::is_regular_file(fs::symlink_status(run / "run_report.html")));
}

// An env that fails every episode, each failure dropped: every iteration skips
// its update and says so; after trainer.max_empty_iterations in a row the run
// stops with an env error, keeping what it recorded. Both planes, GiGPO, async.
TEST(DroppedEpisodes, IterationsWithNothingToLearnSkipTheirUpdate) {
  TempDir dir("all_dropped");
  const std::string server = std::string(RLID_BINARY_DIR) + "/env_server";
  const std::string env =
      "name = \"external\"\ncommand = [\"" + server +
      "\", \"bandit\", \"arms=4\", \"--crash-after\", \"0\", \"--count-resets\"]\n"
      "on_error = \"drop_episode\"";
  // The tokenizer of a healthy bandit run: the broken env cannot play the corpus.
  const fs::path healthy = dir.path() / "healthy.toml", tok_run = dir.path() / "tok";
  Write(healthy, BanditToml(1));
  ASSERT_EQ(Rlid("train " + healthy.string() + " --out " + tok_run.string()).code, 0);
  const fs::path config = dir.path() / "broken.toml";
  Write(config, BanditToml(6, env));
  const std::string tokenizer = " --set tokenizer.path=" + (tok_run / "tokenizer.json").string();
  int k = 0;
  for (const std::string sets :
       {"", " --set trainer.advantage.estimator=gigpo --set trainer.group_size=4",
        " --set trainer.max_staleness=1",
        " --set trainer.algorithm=grpo --set trainer.group_size=4"}) {
    SCOPED_TRACE(sets);
    const fs::path run = dir.path() / ("run" + std::to_string(k++));
    const CliOutput r =
        Rlid("train " + config.string() + " --out " + run.string() + tokenizer + sets);
    EXPECT_EQ(r.code, 6) << r.err;
    EXPECT_NE(r.err.find("3 iterations in a row had no episode to learn from"), std::string::npos)
        << r.err;
    auto s = memory::Store::Open((run / memory::kDatabaseFileName).string(),
                                 memory::Store::Mode::kReadOnly);
    EXPECT_EQ(s->db().QueryInt("SELECT COUNT(*) FROM metrics WHERE key = 'charts/update_skipped'"),
              3);
    EXPECT_EQ(s->db().QueryText("SELECT status FROM runs"), "failed");
  }
}

// runs/latest follows the newest run, but not to a run that failed.
TEST(RunsLatest, AFailedRunGivesTheLinkBack) {
  TempDir dir("latest_failed");
  Write(dir.path() / "ok.toml", BanditToml(1));
  const std::string server = std::string(RLID_BINARY_DIR) + "/env_server";
  Write(dir.path() / "broken.toml",
        BanditToml(2, "name = \"external\"\ncommand = [\"" + server +
                          "\", \"bandit\", \"arms=4\", \"--crash-after\", \"3\"]"));
  const CliOutput ok = RunRlidProcess("train ok.toml", dir.path());
  ASSERT_EQ(ok.code, 0) << ok.out;
  const fs::path good = fs::read_symlink(dir.path() / "runs" / "latest");
  const CliOutput broken = RunRlidProcess(
      "train broken.toml --set tokenizer.path=runs/latest/tokenizer.json", dir.path());
  EXPECT_EQ(broken.code, 6) << broken.out;
  EXPECT_EQ(fs::read_symlink(dir.path() / "runs" / "latest"), good);
}

}  // namespace
}  // namespace rlid::cli

// Traps a new user walks into from the command line: a second run started in a
// run's directory, a failed start leaving a half-made run behind, an
// evaluation on other env parameters than the checkpoint trained on, and a
// global flag that a subcommand's default overrode.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "memory/query.h"
#include "memory/store.h"
#include "tests/cli/run_cli.h"
#include "tests/test_paths.h"

namespace rlid {
namespace {

namespace fs = std::filesystem;
using testing::RunRlidProcess;

struct TempDir {
  explicit TempDir(const std::string& name)
      : path(fs::temp_directory_path() / ("rlid_new_user_" + name + "_" + std::to_string(::getpid()))) {
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  fs::path path;
};

std::string Read(const fs::path& f) {
  std::ifstream in(f);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// A 3-armed bandit (the default has 4 arms): what the checkpoint trained on.
void WriteConfig(const fs::path& file) {
  std::ofstream(file) << R"(
[run]
name = "trap"
seed = 3
threads = 1
[env]
name = "bandit"
arms = 3
[tokenizer]
vocab_size = 384
corpus_episodes = 40
[policy]
preset = "tiny"
num_layers = 1
[trainer]
iterations = 1
episodes_per_iteration = 8
num_envs = 8
epochs = 1
minibatch_size = 8
eval_episodes = 4
eval_sampled = false
checkpoint_every = 1
)";
}

std::string QueryOne(const fs::path& run, const std::string& sql) {
  auto store = memory::Store::Open((run / memory::kDatabaseFileName).string(),
                                   memory::Store::Mode::kReadOnly);
  const auto r = store->Query(sql);
  if (r.rows.empty()) return "";
  const auto& v = r.rows[0][0];
  if (const auto* s = std::get_if<std::string>(&v)) return *s;
  if (const auto* i = std::get_if<int64_t>(&v)) return std::to_string(*i);
  return "";
}

// `train --out RUN` without --resume would overwrite RUN's config.toml and move
// its checkpoints/latest: refused (exit 2), and RUN is left as it was.
TEST(NewUser, TrainIntoAnExistingRunIsRefused) {
  TempDir dir("existing");
  const fs::path config = dir.path / "c.toml", run = dir.path / "run";
  WriteConfig(config);
  auto first = RunRlidProcess("train " + config.string() + " --out " + run.string());
  ASSERT_EQ(first.code, 0) << first.out;
  const std::string config_before = Read(run / "config.toml");
  const fs::path latest_before = fs::read_symlink(run / "checkpoints" / "latest");
  auto second = RunRlidProcess("train " + config.string() + " --out " + run.string() +
                               " --set run.seed=9");
  EXPECT_EQ(second.code, 2) << second.out;
  EXPECT_NE(second.out.find("already holds a run"), std::string::npos) << second.out;
  EXPECT_NE(second.out.find("--resume"), std::string::npos) << second.out;
  EXPECT_NE(second.out.find("new --out"), std::string::npos) << second.out;
  EXPECT_EQ(Read(run / "config.toml"), config_before);
  EXPECT_EQ(fs::read_symlink(run / "checkpoints" / "latest"), latest_before);
  EXPECT_EQ(QueryOne(run, "SELECT COUNT(*) FROM runs"), "1");
  // sft has no --resume: its hint only names a new --out.
  auto sft = RunRlidProcess("sft " + config.string() + " --out " + run.string());
  EXPECT_EQ(sft.code, 2) << sft.out;
  EXPECT_EQ(sft.out.find("--resume"), std::string::npos) << sft.out;
  // An empty directory holds no run: it is used.
  fs::create_directories(dir.path / "empty");
  auto into_empty = RunRlidProcess("train " + config.string() + " --out " + (dir.path / "empty").string());
  EXPECT_EQ(into_empty.code, 0) << into_empty.out;
}

// A start that fails on its config (here policy.init) creates no run
// directory and leaves runs/latest where it was.
TEST(NewUser, AFailedStartCreatesNothing) {
  TempDir dir("failed_start");
  const fs::path config = dir.path / "c.toml";
  WriteConfig(config);
  auto ok = RunRlidProcess("train " + config.string(), dir.path);
  ASSERT_EQ(ok.code, 0) << ok.out;
  const fs::path latest = fs::read_symlink(dir.path / "runs" / "latest");
  const auto count = [&] {
    return std::distance(fs::directory_iterator(dir.path / "runs"), fs::directory_iterator{});
  };
  const auto before = count();
  auto bad = RunRlidProcess("train " + config.string() + " --set policy.init=/nonexistent", dir.path);
  EXPECT_NE(bad.code, 0) << bad.out;
  EXPECT_EQ(count(), before) << bad.out;
  EXPECT_EQ(fs::read_symlink(dir.path / "runs" / "latest"), latest);
  auto bad_out = RunRlidProcess("train " + config.string() + " --set policy.init=/nonexistent --out " +
                                (dir.path / "new").string());
  EXPECT_NE(bad_out.code, 0) << bad_out.out;
  EXPECT_FALSE(fs::exists(dir.path / "new")) << bad_out.out;
}

// `rlid eval --checkpoint C --env bandit` evaluates on the env parameters C was
// trained with (3 arms, not the default 4); the stored row says so; another
// env or a --set is an explicit, logged departure.
TEST(NewUser, EvalUsesTheCheckpointsOwnEnvConfig) {
  TempDir dir("eval_env");
  const fs::path config = dir.path / "c.toml", run = dir.path / "run";
  WriteConfig(config);
  auto train = RunRlidProcess("train " + config.string() + " --out " + run.string());
  ASSERT_EQ(train.code, 0) << train.out;
  const std::string ckpt = (run / "checkpoints" / "latest").string();
  auto eval = RunRlidProcess("eval --checkpoint " + ckpt + " --env bandit --episodes 4");
  ASSERT_EQ(eval.code, 0) << eval.out;
  EXPECT_NE(eval.out.find("arms = 3"), std::string::npos) << eval.out;
  const std::string stored = QueryOne(run, "SELECT config_toml FROM runs WHERE kind = 'eval'");
  EXPECT_NE(stored.find("arms = 3"), std::string::npos) << stored;
  EXPECT_EQ(QueryOne(run, "SELECT name FROM runs WHERE kind = 'eval'"), "trap");
  // The menus the evaluation played had 3 items.
  EXPECT_EQ(QueryOne(run, "SELECT MAX(n) FROM (SELECT COUNT(*) AS n FROM menu_items mi JOIN episodes e "
                          "ON e.id = mi.episode_id JOIN runs r ON r.id = e.run_id WHERE r.kind = 'eval' "
                          "GROUP BY mi.episode_id, mi.t)"),
            "3");
  // An explicit override is logged and stored.
  auto four = RunRlidProcess("eval --checkpoint " + ckpt + " --set env.arms=4 --episodes 4");
  ASSERT_EQ(four.code, 0) << four.out;
  EXPECT_NE(four.out.find("--set env.arms=4 overrides the training config"), std::string::npos)
      << four.out;
  EXPECT_NE(QueryOne(run, "SELECT config_toml FROM runs WHERE kind = 'eval' ORDER BY id DESC")
                .find("arms = 4"),
            std::string::npos);
  // Another env runs with its own defaults, and says so.
  auto maze = RunRlidProcess("eval --checkpoint " + ckpt + " --env maze --set env.size=2 --episodes 2");
  EXPECT_NE(maze.out.find("the checkpoint was trained on bandit"), std::string::npos) << maze.out;
}

// A model directory with no training config: the env's defaults, with a
// warning, and the run is named after the env (not "run").
TEST(NewUser, EvalOfAModelWithoutATrainingConfigNamesItsRun) {
  TempDir dir("eval_model");
  const fs::path config = dir.path / "c.toml", run = dir.path / "run";
  WriteConfig(config);
  auto train = RunRlidProcess("train " + config.string() + " --out " + run.string());
  ASSERT_EQ(train.code, 0) << train.out;
  // A copy of the checkpoint's weights and tokenizer, without its run or record of one.
  const fs::path model = dir.path / "model";
  fs::copy(fs::canonical(run / "checkpoints" / "latest"), model, fs::copy_options::recursive);
  nlohmann::json meta = nlohmann::json::parse(Read(model / "rlid.json"));
  meta["extra"].erase("config_toml");
  std::ofstream(model / "rlid.json") << meta.dump(2);
  auto eval = RunRlidProcess("eval --checkpoint " + model.string() + " --env bandit --episodes 4 --out " +
                             (dir.path / "ev").string());
  ASSERT_EQ(eval.code, 0) << eval.out;
  EXPECT_NE(eval.out.find("records no training config"), std::string::npos) << eval.out;
  EXPECT_EQ(QueryOne(dir.path / "ev", "SELECT name FROM runs"), "eval-bandit");
}

// policy readout/sample take --dtype and --set of any section; a bad key is a
// config error raised before any weights load (a missing checkpoint would
// otherwise be the first complaint).
TEST(NewUser, PolicyCommandsTakeDtypeAndConfigKeysBeforeLoading) {
  TempDir dir("policy_cmds");
  const fs::path config = dir.path / "c.toml", run = dir.path / "run";
  WriteConfig(config);
  ASSERT_EQ(RunRlidProcess("train " + config.string() + " --out " + run.string()).code, 0);
  const std::string ckpt = (run / "checkpoints" / "latest").string();
  for (const std::string cmd : {"policy readout", "policy sample -n 2"}) {
    SCOPED_TRACE(cmd);
    auto bf16 = RunRlidProcess(cmd + " --checkpoint " + ckpt + " --env bandit --dtype bfloat16 --json");
    EXPECT_EQ(bf16.code, 0) << bf16.out;
    auto set = RunRlidProcess(cmd + " --checkpoint " + ckpt +
                              " --env bandit --set policy.dtype=bfloat16 --set prompt.show_afterstates=false"
                              " --set arms=3 --json");
    EXPECT_EQ(set.code, 0) << set.out;
    auto bad = RunRlidProcess(cmd + " --checkpoint /nonexistent --env bandit --set prompt.no_such_key=1");
    EXPECT_EQ(bad.code, 2) << bad.out;
    EXPECT_NE(bad.out.find("no_such_key"), std::string::npos) << bad.out;
  }
  // The readout's menu follows the env override (3 arms).
  auto three = RunRlidProcess("policy readout --checkpoint " + ckpt + " --env bandit --set arms=3 --json");
  ASSERT_EQ(three.code, 0) << three.out;
  const auto json = nlohmann::json::parse(three.out.substr(three.out.find("{\n")));
  EXPECT_EQ(json["menu"].size(), 3u);
}

// Only checkpoints/latest keeps optimizer.pt (resume reads it there alone);
// run.optimizer_state = "all" keeps it everywhere.
TEST(NewUser, OptimizerStateStaysInTheLatestCheckpointOnly) {
  TempDir dir("optimizer_state");
  const fs::path config = dir.path / "c.toml";
  WriteConfig(config);
  for (const std::string mode : {"latest", "all"}) {
    const fs::path run = dir.path / mode;
    auto r = RunRlidProcess("train " + config.string() + " --out " + run.string() +
                            " --set trainer.iterations=3 --set run.optimizer_state=" + mode);
    ASSERT_EQ(r.code, 0) << r.out;
    EXPECT_TRUE(fs::exists(run / "checkpoints" / "iter_000002" / "optimizer.pt"));
    EXPECT_EQ(fs::exists(run / "checkpoints" / "iter_000000" / "optimizer.pt"), mode == "all");
    EXPECT_EQ(fs::exists(run / "checkpoints" / "iter_000001" / "optimizer.pt"), mode == "all");
    EXPECT_TRUE(fs::exists(run / "checkpoints" / "iter_000000" / "model.safetensors"));
  }
  // The run still resumes from latest.
  auto resumed = RunRlidProcess("train " + config.string() + " --out " + (dir.path / "latest").string() +
                                " --resume --set trainer.iterations=4");
  EXPECT_EQ(resumed.code, 0) << resumed.out;
}

// `rlid report RUN` renders a train run's curves and summary with compare's
// renderer; the legend sits below the plot, off the curves.
TEST(NewUser, ReportRendersASingleRunsCurves) {
  TempDir dir("report");
  const fs::path config = dir.path / "c.toml", run = dir.path / "run";
  WriteConfig(config);
  ASSERT_EQ(RunRlidProcess("train " + config.string() + " --out " + run.string() +
                           " --set trainer.iterations=2 --set trainer.eval_every=1 --set trainer.eval_sampled=true")
                .code,
            0);
  auto r = RunRlidProcess("report " + run.string());
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("trap (run 1)"), std::string::npos) << r.out;
  const std::string html = Read(run / "run_report.html");
  EXPECT_NE(html.find("id='summary'"), std::string::npos);
  EXPECT_NE(html.find("run 1: train trap (ppo_decision, decision plane, seed 3), completed"), std::string::npos)
      << html;
  const fs::path gp = run / "run_report_plots" / "success_vs_env_steps.gp";
  if (fs::exists(gp)) {
    EXPECT_NE(Read(gp).find("set key outside below"), std::string::npos);
  }
  auto none = RunRlidProcess("report " + dir.path.string());
  EXPECT_EQ(none.code, 3) << none.out;
  EXPECT_NE(none.out.find("has no rlid.db"), std::string::npos) << none.out;
}

// `rlid --threads 1 bench ...` and `rlid bench ... --threads 1` mean the same.
TEST(NewUser, ThreadsIsOneFlagEverywhere) {
  for (const std::string args : {"--threads 1 bench flops --batch 1 --seq 8 --seconds 0.01",
                                 "bench flops --batch 1 --seq 8 --seconds 0.01 --threads 1"}) {
    auto r = RunRlidProcess(args);
    ASSERT_EQ(r.code, 0) << args << "\n" << r.out;
    EXPECT_NE(r.out.find("\"intra_op_threads\": 1"), std::string::npos) << args << "\n" << r.out;
  }
}

// `rlid bench async` times the synchronous loop and each staleness in one run
// and reports each arm's speed-up against the synchronous one.
TEST(NewUser, BenchAsyncReportsTheSpeedUpOfEachStaleness) {
  auto r = RunRlidProcess(
      "bench async --algorithm grpo --staleness 1 --iterations 1 --episodes 8 --threads 1 "
      "--set sampler.max_new_tokens=4 --set trainer.group_size=4 --set trainer.epochs=1");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("max_staleness 0:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("max_staleness 1:"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("speed-up 1.00x"), std::string::npos) << "the synchronous arm is the unit\n"
                                                             << r.out;
  auto bad = RunRlidProcess("bench async --staleness 0 --iterations 1");
  EXPECT_NE(bad.code, 0) << bad.out;
  EXPECT_NE(bad.out.find("--staleness takes values >= 1"), std::string::npos) << bad.out;
}

}  // namespace
}  // namespace rlid

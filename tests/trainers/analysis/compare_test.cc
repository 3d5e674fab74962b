// A tiny `rlid compare` (seconds): the table has its columns, every arm ran
// every seed from one shared warm start, each run stopped within one
// iteration of the matched budget, and report.html renders in headless
// Chromium with its table and plots (screenshot kept as a test artefact).
#include "trainers/analysis/compare.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include "memory/store.h"
#include "policy/model/runtime.h"
#include "tests/agents/fixtures.h"
#include "tests/build_id.h"
#include "tests/cli/run_cli.h"
#include "tests/trainers/algorithms/warm_start.h"

namespace rlid::trainers {
namespace {
namespace fs = std::filesystem;

constexpr double kBudget = 24;

const char* kToml = R"(
[run]
name = "tiny_compare"
seed = 1
[env]
name = "bandit"
[tokenizer]
vocab_size = 512
corpus_episodes = 60
[sft]
episodes = 32
epochs = 1
[trainer]
episodes_per_iteration = 8
num_envs = 8
epochs = 1
minibatch_size = 16
eval_every = 1
eval_episodes = 8
eval_sampled = false
grad_snr_every = 2
grad_snr_episodes = 4
[compare]
arms = ["ppo_decision", "grpo"]
seeds = [1, 2]
budget = "env_steps"
budget_value = 24
)";

// Runs the compare once per test binary and config (cached like the warm starts).
std::string CompareDir() {
  auto dir = testing::TestCacheDir() / "tiny_compare";
  int fd = ::open((testing::TestCacheDir() / "tiny_compare.lock").c_str(), O_CREAT | O_RDWR, 0644);
  ::flock(fd, LOCK_EX);
  const std::string key = "build " + testing::BuildId() + "\n" + kToml;
  std::string cached;
  {
    std::ifstream in(dir / "cache_key");
    cached.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  if (!fs::exists(dir / "report.html") || cached != key) {
    fs::remove_all(dir);
    fs::create_directories(testing::TestCacheDir());
    auto cfg = testing::TestCacheDir() / "tiny_compare.toml";
    std::ofstream(cfg) << kToml;
    policy::SetNumThreads(1);
    auto r = RunCompare(cfg.string(), {}, dir.string(), /*quiet=*/true);
    std::ofstream(dir / "table_without_wall.txt")
        << FormatSummaryTable(r.arms, r.config, /*with_wall=*/false) + r.verdict;
    std::ofstream(dir / "cache_key") << key;
  }
  ::flock(fd, LOCK_UN);
  ::close(fd);
  return dir.string();
}

double Num(const memory::Value& v) {
  if (auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  return std::get<double>(v);
}

TEST(Compare, SharedStartSeedsAndMatchedBudget) {
  auto dir = CompareDir();
  auto store = memory::Store::Open(dir + "/rlid.db", memory::Store::Mode::kReadOnly);
  auto runs = store->Query(
      "SELECT id, arm, seed, config_toml FROM runs WHERE kind = 'compare' ORDER BY id");
  ASSERT_EQ(runs.rows.size(), 4u);  // 2 arms x 2 seeds
  std::map<std::string, std::set<int64_t>> seeds;
  std::set<std::string> inits;
  for (const auto& row : runs.rows) {
    std::string arm = std::get<std::string>(row[1]);
    seeds[arm].insert(std::get<int64_t>(row[2]));
    std::string toml = std::get<std::string>(row[3]);
    auto at = toml.find("init = ");
    ASSERT_NE(at, std::string::npos);
    inits.insert(toml.substr(at, toml.find('\n', at) - at));
    // Budget matched within one iteration: crossed at the last iteration only.
    int64_t id = std::get<int64_t>(row[0]);
    auto q =
        store->Query(fmt::format("SELECT iteration, value FROM metrics WHERE run_id = {} AND key = "
                                 "'budget/env_steps' ORDER BY iteration",
                                 id));
    ASSERT_GE(q.rows.size(), 2u);
    double last = Num(q.rows.back()[1]), before = Num(q.rows[q.rows.size() - 2][1]);
    EXPECT_GE(last, kBudget) << arm;
    EXPECT_LT(before, kBudget) << arm << ": the run went on after reaching the budget";
  }
  // Every arm x seed keeps its own checkpoints (no iter_N collisions).
  for (const char* arm : {"ppo_decision", "grpo"})
    for (int seed : {1, 2})
      EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(dir) / "checkpoints" /
                                          fmt::format("{}-seed{}", arm, seed) / "latest" /
                                          "model.safetensors"))
          << arm << " seed " << seed;
  EXPECT_EQ(seeds["ppo_decision"], (std::set<int64_t>{1, 2}));
  EXPECT_EQ(seeds["grpo"], (std::set<int64_t>{1, 2}));
  EXPECT_EQ(inits.size(), 1u) << "arms did not share one warm start";
  // The warm start is the SFT run of the same directory.
  auto sft = store->Query("SELECT count(*) FROM runs WHERE kind = 'sft'");
  EXPECT_EQ(std::get<int64_t>(sft.rows[0][0]), 1);
  // Evaluation used the same test seeds for every arm.
  auto eval = store->Query(
      "SELECT count(DISTINCT r.arm), count(DISTINCT e.seed) FROM episodes e JOIN runs r ON r.id = "
      "e.run_id "
      "WHERE e.split = 'test' AND r.kind = 'compare'");
  EXPECT_EQ(std::get<int64_t>(eval.rows[0][0]), 2);
  EXPECT_EQ(std::get<int64_t>(eval.rows[0][1]), 8);
  // Every metric is logged once per (run, iteration) in both planes.
  auto dup = store->Query(
      "SELECT group_concat(key) FROM (SELECT key, count(*) AS n FROM metrics GROUP BY run_id, "
      "iteration, key "
      "HAVING n > 1)");
  EXPECT_TRUE(std::holds_alternative<std::monostate>(dup.rows[0][0]))
      << "metrics logged twice: " << std::get<std::string>(dup.rows[0][0]);
}

// An arm whose config is wrong stops the compare before anything is written:
// here the second arm sets a key its algorithm does not read.
TEST(Compare, ABadArmIsRefusedBeforeAnyArmTrains) {
  auto dir = testing::TestCacheDir() / "bad_arm_compare";
  fs::remove_all(dir);
  fs::create_directories(testing::TestCacheDir());
  auto cfg = testing::TestCacheDir() / "bad_arm_compare.toml";
  std::string toml = kToml;
  toml.replace(toml.find("arms = "), toml.find('\n', toml.find("arms = ")) - toml.find("arms = "),
               "");
  std::ofstream(cfg) << toml << R"(
[[compare.arm]]
name = "a"
algorithm = "ppo_decision"
[[compare.arm]]
name = "b"
algorithm = "grpo"
set = ["trainer.bootstrap_truncated=false"]
)";
  try {
    RunCompare(cfg.string(), {}, dir.string(), /*quiet=*/true);
    ADD_FAILURE() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("compare arm 'b' (grpo)"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(fs::exists(dir));
}

TEST(Compare, TableHasItsColumns) {
  auto dir = CompareDir();
  std::ifstream in(dir + "/summary.txt");
  std::stringstream ss;
  ss << in.rdbuf();
  std::string table = ss.str();
  for (const char* col : {"arm", "plane", "test (greedy)", "return", "steps→0.8", "env steps",
                          "FLOPs", "tokens", "gen tok", "invalid", "wall s", "grad SNR"})
    EXPECT_NE(table.find(col), std::string::npos) << col << "\n" << table;
  EXPECT_NE(table.find("ppo_decision"), std::string::npos);
  EXPECT_NE(table.find("grpo"), std::string::npos);
  EXPECT_NE(table.find("decision"), std::string::npos);
  EXPECT_NE(table.find("token"), std::string::npos);
  EXPECT_NE(table.find("best final test success"), std::string::npos);  // the verdict line
  EXPECT_NE(table.find("(chance "), std::string::npos) << table;
  // Two seeds per arm: the verdict states the interval of the gap.
  EXPECT_NE(table.find("95% CI"), std::string::npos) << table;
  EXPECT_NE(table.find("(+"), std::string::npos) << "the env-step overshoot is shown\n" << table;
}

// The table's FLOPs are every run's final budget/flops (rollout + update),
// and each run's curve starts at the warm start: an evaluation at iteration
// -1 with an empty budget.
TEST(Compare, FlopsAreTheRunsBudgetAndCurvesStartAtTheWarmStart) {
  auto dir = CompareDir();
  auto store = memory::Store::Open(dir + "/rlid.db", memory::Store::Mode::kReadOnly);
  auto q = store->Query(
      "SELECT r.arm, m.value, (SELECT value FROM metrics WHERE run_id = r.id AND key = "
      "'budget/rollout_flops' ORDER BY iteration DESC LIMIT 1), (SELECT value FROM metrics WHERE "
      "run_id = r.id AND key = 'budget/update_flops' ORDER BY iteration DESC LIMIT 1) FROM runs r "
      "JOIN metrics m ON m.run_id = r.id WHERE r.kind = 'compare' AND m.key = 'budget/flops' AND "
      "m.iteration = (SELECT max(iteration) FROM metrics WHERE run_id = r.id) ORDER BY r.id");
  ASSERT_EQ(q.rows.size(), 4u);
  std::map<std::string, double> mean;
  for (const auto& row : q.rows) {
    EXPECT_GT(Num(row[2]), 0);
    EXPECT_GT(Num(row[3]), 0);
    EXPECT_DOUBLE_EQ(Num(row[1]), Num(row[2]) + Num(row[3]));
    mean[std::get<std::string>(row[0])] += Num(row[1]) / 2;
  }
  std::ifstream in(dir + "/summary.txt");
  std::string line, table;
  while (std::getline(in, line)) table += line + "\n";
  for (const auto& [arm, flops] : mean)
    EXPECT_NE(table.find(fmt::format("{:.3g}", flops)), std::string::npos) << arm << "\n" << table;
  auto start = store->Query(
      "SELECT count(*), sum(m.value), (SELECT sum(value) FROM metrics m2 WHERE m2.iteration = -1 "
      "AND m2.key = 'budget/env_steps') FROM metrics m JOIN runs r ON r.id = m.run_id WHERE "
      "r.kind = 'compare' AND m.iteration = -1 AND m.key = 'eval/success'");
  EXPECT_EQ(Num(start.rows[0][0]), 4);  // every arm x seed
  EXPECT_EQ(Num(start.rows[0][2]), 0);  // at 0 env steps
}

// Two runs of one compare config on one machine, in two processes (the cached
// run may come from another test process), give the same table: every random
// stream derives from the config's seeds; only wall-clock differs.
TEST(Compare, RerunningTheSameConfigGivesAnIdenticalTable) {
  const auto cached = fs::path(CompareDir()) / "table_without_wall.txt";
  std::ifstream in(cached);
  const std::string first((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(first.empty()) << cached;
  policy::SetNumThreads(1);
  auto cfg = testing::TestCacheDir() / "tiny_compare_rerun.toml";
  std::ofstream(cfg) << kToml;
  auto dir = testing::TestCacheDir() / "tiny_compare_rerun";
  fs::remove_all(dir);
  auto r = RunCompare(cfg.string(), {}, dir.string(), /*quiet=*/true);
  EXPECT_EQ(FormatSummaryTable(r.arms, r.config, /*with_wall=*/false) + r.verdict, first);
}

// `rlid report` on a comparison's directory shows what `rlid compare` showed:
// the same table (metric, threshold, budget) and verdict (chance level included).
TEST(Compare, ReportOfTheDirectoryShowsCompareOwnTable) {
  const fs::path dir = CompareDir();
  std::ifstream in(dir / "summary.txt");
  const std::string summary((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_FALSE(summary.empty());
  testing::TempDir out("report_of_compare");
  const auto r =
      testing::RunRlid({"report", dir.string(), "--out", (out.path() / "r.html").string()});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out.substr(0, summary.size()), summary) << r.out;
}

TEST(Compare, ReportRendersInHeadlessChromium) {
  auto dir = CompareDir();
  std::string chromium = fs::exists("/usr/bin/chromium") ? "/usr/bin/chromium" : "";
  ASSERT_FALSE(chromium.empty())
      << "headless Chromium is needed: scripts/setup.sh --browser installs it";
  auto artefacts = testing::TestCacheDir() / "artefacts";
  fs::create_directories(artefacts);
  auto profile = testing::TestCacheDir() / "chromium_profile";
  std::string flags =
      "--headless --no-sandbox --disable-gpu --disable-dev-shm-usage --no-first-run "
      "--disable-background-networking --disable-component-update --disable-sync "
      "--user-data-dir=" +
      profile.string();
  std::string url = "file://" + fs::absolute(dir + "/report.html").string();
  auto dom_file = artefacts / "report_dom.html";
  std::string cmd =
      chromium + " " + flags + " --dump-dom '" + url + "' >'" + dom_file.string() + "' 2>/dev/null";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  std::ifstream in(dom_file);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string dom = ss.str();
  EXPECT_NE(dom.find("id=\"summary\""), std::string::npos) << "the summary table is missing";
  EXPECT_NE(dom.find("id=\"verdict\""), std::string::npos);
  size_t svgs = 0;
  for (size_t p = dom.find("<svg"); p != std::string::npos; p = dom.find("<svg", p + 1)) ++svgs;
  EXPECT_GE(svgs, 3u) << "the learning-curve plots (env steps, FLOPs, wall-clock) should be inline SVG";
  EXPECT_NE(dom.find("id=\"gaps\""), std::string::npos) << "the pairwise gaps table is missing";
  EXPECT_NE(dom.find("Chance level"), std::string::npos);
  EXPECT_NE(dom.find("Seeds"), std::string::npos);
  EXPECT_NE(dom.find("Budget"), std::string::npos);
  EXPECT_NE(dom.find("same warm-start checkpoint"), std::string::npos);
  auto png = artefacts / "report.png";
  fs::remove(png);
  cmd = chromium + " " + flags + " --window-size=1200,1800 --screenshot='" + png.string() + "' '" +
        url + "' >/dev/null 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  ASSERT_TRUE(fs::exists(png));
  EXPECT_GT(fs::file_size(png), 20000u) << "the screenshot looks empty";
  std::cout << "report screenshot: " << png.string() << "\n";
}

}  // namespace
}  // namespace rlid::trainers

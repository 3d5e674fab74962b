// `rlid env check`: the conformance suite from the command line, on built-in
// and external envs; a broken env exits 1 and says which check failed and why.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>

#include "tests/agents/fixtures.h"
#include "tests/cli/run_cli.h"
#include "tests/test_paths.h"

namespace rlid::cli {
namespace {

using testing::RunRlid;

const std::string kSource = RLID_SOURCE_DIR;

TEST(EnvCheck, PythonExamplePasses) {
  const auto o = RunRlid({"env", "check", "--command",
                          "python3 " + kSource + "/envs/external/python/examples/courier.py",
                          "--seeds", "4", "--param", "rooms=5"});
  EXPECT_EQ(o.code, 0) << o.out << o.err;
  EXPECT_NE(o.out.find("courier: 9 passed, 0 skipped, 0 failed"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("passed   oracle"), std::string::npos) << o.out;
}

TEST(EnvCheck, BrokenEnvExitsOneAndSaysWhy) {
  const auto o = RunRlid(
      {"env", "check", "--command", "python3 " + kSource + "/tests/data/external/hostile.py dup_actions",
       "--seeds", "2"});
  EXPECT_EQ(o.code, 1) << o.out << o.err;
  EXPECT_NE(o.out.find("FAILED   determinism"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("duplicate action 0"), std::string::npos) << o.out;
  EXPECT_NE(o.err.find("conformance checks failed for env 'hostile'"), std::string::npos) << o.err;
}

const std::string kHostile = kSource + "/tests/data/external/hostile.py";

// How often `part` occurs in `text`.
size_t Count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(EnvCheck, AShortAfterstateWithoutItsHashSaysWhatToSend) {
  const auto o = RunRlid(
      {"env", "check", "--command", "python3 " + kHostile + " short_afterstate", "--seeds", "2"});
  EXPECT_EQ(o.code, 1) << o.out << o.err;
  EXPECT_NE(o.out.find("FAILED   menu"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("the afterstate of 'go left', 'went left'"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("is not the state that action leads to, 'end'"), std::string::npos) << o.out;
  // The fix, once, naming what to send.
  EXPECT_EQ(Count(o.out, "to fix:"), 1u) << o.out;
  EXPECT_NE(o.out.find("also send 'afterstate_hash': the 'state_hash' of the state the action "
                       "leads to"),
            std::string::npos)
      << o.out;
}

TEST(EnvCheck, MessagesShowNoSourcePathsOrInternalChecks) {
  for (const char* mode : {"dup_actions", "shared_realisation", "short_afterstate",
                           "crash_on_reset", "error_on_reset", "no_menu"}) {
    const auto o =
        RunRlid({"env", "check", "--command", "python3 " + kHostile + " " + mode, "--seeds", "2"});
    EXPECT_EQ(o.code, 1) << mode << ": " << o.out << o.err;
    const std::string all = o.out + o.err;
    EXPECT_EQ(all.find(".cc:"), std::string::npos) << mode << ": " << all;
    EXPECT_EQ(all.find("check failed"), std::string::npos) << mode << ": " << all;
    EXPECT_EQ(all.find("internal"), std::string::npos) << mode << ": " << all;
    EXPECT_NE(o.out.find("to fix: "), std::string::npos) << mode << ": " << o.out;
  }
  const auto dup = RunRlid(
      {"env", "check", "--command", "python3 " + kHostile + " dup_actions", "--seeds", "2"});
  EXPECT_NE(dup.out.find("duplicate action 0: menu items 0 and 1 both have it; give each item its "
                         "own action id"),
            std::string::npos)
      << dup.out;
}

// A process that crashes at every reset, or refuses every reset, is one
// error, not one per check.
TEST(EnvCheck, AnEnvThatCannotPlayAnEpisodeIsReportedOnce) {
  for (const auto& [mode, words] : std::vector<std::pair<std::string, std::string>>{
           {"crash_on_reset", "crashing at reset"}, {"error_on_reset", "cannot make seed"}}) {
    const auto o =
        RunRlid({"env", "check", "--command", "python3 " + kHostile + " " + mode, "--seeds", "2"});
    EXPECT_EQ(o.code, 1) << mode << ": " << o.out << o.err;
    EXPECT_EQ(Count(o.out, words), 1u) << mode << ": " << o.out;
    EXPECT_EQ(Count(o.out, "stopped by an error"), 1u) << mode << ": " << o.out;
    EXPECT_EQ(Count(o.out, "not run: the env cannot play an episode; see determinism"), 7u)
        << mode << ": " << o.out;
    EXPECT_NE(o.out.find("hostile: 1 passed, 7 skipped, 1 failed"), std::string::npos) << o.out;
    EXPECT_NE(o.err.find("1 of 9 conformance checks failed for env 'hostile' (7 more not run"),
              std::string::npos)
        << o.err;
  }
  // An error on some steps only (action 1): the env plays, the checks run,
  // and a check stopped by the error another check showed refers to it.
  const auto o = RunRlid(
      {"env", "check", "--command", "python3 " + kHostile + " error_on_right", "--seeds", "4"});
  EXPECT_EQ(o.code, 1) << o.out << o.err;
  EXPECT_EQ(Count(o.out, "cannot go right"), 1u) << o.out;
  EXPECT_NE(o.out.find("stopped by the same error as the determinism check (above)"),
            std::string::npos)
      << o.out;
  EXPECT_EQ(Count(o.out, "not run"), 0u) << o.out;
}

// An env whose helper process left the process group (setsid) and keeps
// writing to the env's stderr used to hang `rlid env check` at its end for
// as long as that process lived. (`timeout` bounds the test if it regresses.)
TEST(EnvCheck, EndsWhenAProcessTheEnvStartedKeepsItsStderrOpen) {
  const rlid::testing::TempDir dir("setsid_env");
  const std::string pidfile = dir.str() + "/grandchild.pid";
  const auto o = testing::RunRlidProcess(
      fmt::format("env check --command \"python3 {}/tests/data/external/grandchild.py "
                  "setsid_stderr {} serve\" --seeds 2 --only determinism",
                  kSource, pidfile),
      {}, "timeout -s KILL 30");
  pid_t grandchild = -1;
  std::ifstream(pidfile) >> grandchild;
  if (grandchild > 0) ::kill(grandchild, SIGKILL);
  EXPECT_EQ(o.code, 0) << o.out;
  EXPECT_NE(o.out.find("grandchild: 1 passed, 0 skipped, 0 failed"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("stopped reading its stderr"), std::string::npos) << o.out;
}

// A user following docs/external_env.md ("Installing the helper"): the
// example copied out of the checkout, the helper installed with pip (offline,
// into a folder of its own instead of an environment) and `rlid env check`
// run there with that folder on PYTHONPATH.
TEST(EnvCheck, TheExampleChecksOutsideTheCheckoutWithTheHelperInstalled) {
  if (std::system("python3 -m pip --version > /dev/null 2>&1") != 0)
    GTEST_SKIP() << "python3 has no pip";
  const rlid::testing::TempDir dir("helper_outside");
  const auto env_dir = dir.path() / "my_env", site = dir.path() / "site";
  std::filesystem::create_directories(env_dir);
  std::filesystem::copy_file(kSource + "/envs/external/python/examples/courier.py",
                             env_dir / "courier.py");
  const std::string pip = fmt::format(
      "PYTHONDONTWRITEBYTECODE=1 python3 -m pip install --quiet --no-index --target '{}' "
      "'{}/envs/external/python' > '{}/pip.log' 2>&1",
      site.string(), kSource, dir.str());
  ASSERT_EQ(std::system(pip.c_str()), 0) << [&] {
    std::ifstream in(dir.path() / "pip.log");
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  // The copy finds no helper of the checkout's: without the installed one it cannot start.
  const std::string check = "env check --command 'python3 courier.py' --seeds 2";
  const auto without = testing::RunRlidProcess(check, env_dir);
  EXPECT_NE(without.code, 0) << without.out;
  EXPECT_NE(without.out.find("No module named 'rlid_env'"), std::string::npos) << without.out;
  const auto with = testing::RunRlidProcess(check, env_dir, "PYTHONPATH='" + site.string() + "'");
  EXPECT_EQ(with.code, 0) << with.out;
  EXPECT_NE(with.out.find("courier: 9 passed, 0 skipped, 0 failed"), std::string::npos) << with.out;
}

TEST(EnvCheck, BuiltInJsonAndBadFlags) {
  const auto o = RunRlid({"env", "check", "--env", "maze", "--only", "menu", "--json"});
  ASSERT_EQ(o.code, 0) << o.err;
  const auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["env"], "maze");
  ASSERT_EQ(j["checks"].size(), 1u);
  EXPECT_EQ(j["checks"][0]["status"], "passed");
  EXPECT_GT(j["checks"][0]["covered"].get<int>(), 0);

  EXPECT_EQ(RunRlid({"env", "check", "--env", "maze", "--only", "menus"}).code, 2);
  EXPECT_EQ(RunRlid({"env", "check", "--command", "python3 'unclosed"}).code, 2);
  const auto missing = RunRlid({"env", "check", "--command", "/nonexistent/env --x"});
  EXPECT_EQ(missing.code, 3) << missing.err;
  EXPECT_NE(missing.err.find("cannot start"), std::string::npos) << missing.err;
}

// The promise: a Python env trains in both planes with the same
// commands as a built-in one, from the shipped configs (shrunk to seconds).
// The suite says what it runs; --quick is a first look; a state graph stops at
// its bounds and the note says how far it got and why a graph may not end.
TEST(EnvCheck, BoundsAreStatedQuickModeAndTheGraphStopsAtItsBounds) {
  const auto quick = RunRlid({"env", "check", "--env", "maze", "--quick"});
  ASSERT_EQ(quick.code, 0) << quick.out << quick.err;
  EXPECT_NE(quick.out.find("3 instances per check, 1 state graph(s)"), std::string::npos)
      << quick.out;
  EXPECT_NE(quick.out.find("(--quick)"), std::string::npos) << quick.out;
  const auto cut =
      RunRlid({"env", "check", "--env", "maze", "--only", "graph", "--graph-states", "3"});
  EXPECT_EQ(cut.code, 0) << cut.out << cut.err;
  EXPECT_NE(cut.out.find("stopped at 3 states"), std::string::npos) << cut.out;
  EXPECT_NE(cut.out.find("Hash()"), std::string::npos) << cut.out;
}

// A stop signal ends `env check` at once, with a message for env check (not
// the training hint to resume a run).
TEST(EnvCheck, AStopSignalEndsTheCheckWithItsOwnMessage) {
  const auto r = testing::RunRlidProcess("env check --env maze --seeds 100000", {},
                                         "timeout --preserve-status -s TERM 3");
  EXPECT_EQ(r.code, 143) << r.out;
  EXPECT_NE(r.out.find("stopped by SIGTERM"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("rlid train"), std::string::npos) << r.out;
}

TEST(EnvCheck, PythonExampleTrainsInBothPlanesWithTheShippedConfigs) {
  const rlid::testing::TempDir dir("courier_cli");
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(kSource);  // the configs name the env by a relative path
  const std::vector<std::string> small = {"--threads", "1", "--set", "tokenizer.corpus_episodes=16",
                                          "--set", "trainer.iterations=1", "--set",
                                          "trainer.episodes_per_iteration=8", "--set",
                                          "trainer.num_envs=8", "--set", "trainer.eval_episodes=4"};
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.end(), small.begin(), small.end());
    return RunRlid(args);
  };
  const auto sft = with({"sft", "configs/courier_ppo.toml", "--out", dir.str() + "/sft", "--set",
                         "sft.episodes=8", "--set", "sft.epochs=1"});
  ASSERT_EQ(sft.code, 0) << sft.err;
  const std::string init = "policy.init=" + dir.str() + "/sft/checkpoints/sft";
  for (const char* plane : {"ppo", "grpo"}) {
    const std::string out = dir.str() + "/" + plane;
    const auto train = with({"train", fmt::format("configs/courier_{}.toml", plane), "--set", init,
                             "--out", out});
    ASSERT_EQ(train.code, 0) << plane << ": " << train.err;
    const auto q = RunRlid({"sql", out, "--csv",
                            "SELECT count(*) FROM episodes e JOIN runs r ON r.id = e.run_id "
                            "WHERE r.kind = 'train' AND e.split = 'train'"});
    ASSERT_EQ(q.code, 0) << q.err;
    EXPECT_NE(q.out.find("\n8\n"), std::string::npos) << plane << ": " << q.out;
    // The run records what the env said about itself, and each episode its plays.
    const auto meta =
        RunRlid({"sql", out, "--csv",
                 "SELECT json_extract(env_metadata, '$.name') || ' ' || "
                 "(SELECT min(attempts) FROM episodes) FROM runs WHERE kind = 'train'"});
    ASSERT_EQ(meta.code, 0) << meta.err;
    EXPECT_NE(meta.out.find("\ncourier 1\n"), std::string::npos) << plane << ": " << meta.out;
  }
  std::filesystem::current_path(cwd);
}

}  // namespace
}  // namespace rlid::cli

// The field's benchmark environments (envs/external/field_envs.h) from the command
// line: listed, conformance-checked on small instances, pinned to the
// versions of requirements.txt, and refused with the package and the fix when
// their Python package is missing.
#include "envs/external/field_envs.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <filesystem>
#include <cctype>
#include <fstream>
#include <iterator>
#include <string>

#include "tests/agents/fixtures.h"
#include "tests/cli/run_cli.h"
#include "tests/test_paths.h"

namespace rlid::cli {
namespace {

using testing::RunRlid;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

// "Open_Spiel" -> "open-spiel" (pip's normalised name).
std::string Normalise(std::string s) {
  for (char& c : s)
    c = c == '_' ? '-' : static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

TEST(FieldEnvs, ListedWithTheirPythonPackage) {
  const auto o = RunRlid({"env", "list"});
  ASSERT_EQ(o.code, 0) << o.err;
  for (const auto& a : envs::FieldAdapters())
    EXPECT_NE(o.out.find(a.name), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("(Python: open_spiel==2.0.2)"), std::string::npos) << o.out;
}

// Each adapter's packages, as its manifest names them, are what
// requirements.txt installs, and the adapter checks the manifest's pins.
TEST(FieldEnvs, PinsAgreeWithRequirementsAndTheAdapters) {
  const std::string reqs = Normalise(ReadFile(std::string(RLID_SOURCE_DIR) + "/requirements.txt"));
  ASSERT_EQ(envs::FieldAdapters().size(), 8u);
  for (const auto& a : envs::FieldAdapters()) {
    EXPECT_EQ(a.error, "") << a.name;
    const std::string script = ReadFile(a.script);
    ASSERT_FALSE(script.empty()) << a.script;
    EXPECT_NE(script.find("REQUIRES = pinned_packages(HERE)"), std::string::npos) << a.script;
    ASSERT_FALSE(a.packages.empty()) << a.name;
    for (const auto& pin : a.packages)
      EXPECT_NE(reqs.find("\n" + Normalise(pin) + "\n"), std::string::npos)
          << a.name << ": requirements.txt should pin " << pin;
  }
}

// An adapter is one folder: its manifest registers it, with its keys.
TEST(FieldEnvs, AnAdapterIsOneFolder) {
  testing::TempDir dir("adapters");
  const auto write = [&](const std::string& name, const std::string& manifest) {
    std::filesystem::create_directories(dir.path() / name);
    std::ofstream(dir.path() / name / "adapter.toml") << manifest;
    // Says what rlid sent it (the hello and its params) on stderr, then stops.
    std::ofstream(dir.path() / name / "adapter.py")
        << "import sys\nsys.stderr.write(sys.stdin.readline())\nsys.stderr.flush()\n"
           "raise SystemExit(1)\n";
  };
  write("mine", R"toml(summary = "my benchmark"
packages = ["mypackage==1.0"]
[[keys]]
name = "level"
kind = "int"
doc = "how hard (default 1)"
)toml");
  write("broken", "summary = 3\n");
  const std::string env = "RLID_ADAPTERS_DIR='" + dir.str() + "'";
  const auto list = testing::RunRlidProcess("env list", {}, env);
  ASSERT_EQ(list.code, 0) << list.out;
  EXPECT_NE(list.out.find("my benchmark (Python: mypackage==1.0)"), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("broken adapter manifest"), std::string::npos) << list.out;
  // It runs with the project's Python, and its own keys reach it in hello.
  const auto run = testing::RunRlidProcess("env show --env mine --set level=2", {}, env);
  EXPECT_EQ(run.code, 6) << run.out;
  EXPECT_NE(run.out.find("mine/adapter.py"), std::string::npos) << run.out;
  EXPECT_NE(run.out.find(R"("level":2)"), std::string::npos) << run.out;
  const auto broken = testing::RunRlidProcess("env show --env broken", {}, env);
  EXPECT_EQ(broken.code, 2) << broken.out;
  EXPECT_NE(broken.out.find("'summary' must be a string"), std::string::npos) << broken.out;

  const envs::FieldAdapter a = envs::ReadAdapterManifest((dir.path() / "mine").string());
  EXPECT_EQ(a.error, "");
  ASSERT_EQ(a.keys.size(), 1u);
  EXPECT_EQ(a.keys[0].kind, envs::AdapterKey::Kind::kInt);
}

struct GameCase {
  const char* game;
  const char* what;
};

// Two-player with a random opponent, one-player, chance + imperfect information.
TEST(FieldEnvs, OpenSpielGamesPassTheConformanceSuite) {
  for (const GameCase& g : {GameCase{"tic_tac_toe", "vs random"}, GameCase{"catch", "one player"},
                            GameCase{"kuhn_poker", "chance, hidden cards"}}) {
    const auto o = RunRlid({"env", "check", "--env", "openspiel", "--param",
                            std::string("game=") + g.game, "--seeds", "3", "--graph-seeds", "0"});
    EXPECT_EQ(o.code, 0) << g.game << " (" << g.what << ")\n" << o.out << o.err;
    EXPECT_NE(o.out.find("0 failed"), std::string::npos) << g.game << "\n" << o.out;
    // The adapter's metadata message: the engine's installed version.
    EXPECT_NE(o.out.find(R"("packages":{"open_spiel":"2.0.2"})"), std::string::npos) << o.out;
  }
}

// The commands docs/field_envs.md and the README show pass as written (catch
// has only five initial columns; the check notes the small pool).
TEST(FieldEnvs, TheDocumentedEnvCheckCommandsPass) {
  const auto catch_check =
      RunRlid({"env", "check", "--env", "openspiel", "--param", "game=catch", "--seeds", "8"});
  EXPECT_EQ(catch_check.code, 0) << catch_check.out << catch_check.err;
  EXPECT_NE(catch_check.out.find("0 failed"), std::string::npos) << catch_check.out;
  EXPECT_NE(catch_check.out.find("small pool of instances"), std::string::npos) << catch_check.out;
}

// Config mistakes in an adapter's keys are config errors naming the keys,
// before any Python process starts.
TEST(FieldEnvs, AdapterKeyMistakesAreConfigErrors) {
  const auto missing = RunRlid({"env", "show", "--env", "openenv"});
  EXPECT_EQ(missing.code, 2) << missing.out << missing.err;
  EXPECT_NE(missing.err.find("one of 'url', 'server'"), std::string::npos) << missing.err;
  EXPECT_EQ(missing.err.find("Traceback"), std::string::npos) << missing.err;
  const auto typo = RunRlid({"env", "show", "--env", "openspiel", "--set", "gmae=catch"});
  EXPECT_EQ(typo.code, 2) << typo.err;
  for (const char* key : {"game_params", "opponent", "opening", "player"})
    EXPECT_NE(typo.err.find(key), std::string::npos) << key << " not listed:\n" << typo.err;
  // A value the adapter refuses (step_limit = -1 used to become 1): a config error too.
  const auto range = RunRlid({"env", "show", "--env", "openspiel", "--set", "step_limit=-1"});
  EXPECT_EQ(range.code, 2) << range.err;
  EXPECT_NE(range.err.find("step_limit must be"), std::string::npos) << range.err;
}

// Arithmetic and a text task: the answer the task's verifier accepts among
// rejected distractors, and the oracle names it.
TEST(FieldEnvs, ReasoningGymTasksPassTheConformanceSuite) {
  for (const char* task : {"basic_arithmetic", "caesar_cipher"}) {
    const auto o = RunRlid({"env", "check", "--env", "reasoning_gym", "--param",
                            std::string("task=") + task, "--seeds", "4", "--graph-seeds", "2"});
    EXPECT_EQ(o.code, 0) << task << "\n" << o.out << o.err;
    EXPECT_NE(o.out.find("passed   oracle"), std::string::npos) << task << "\n" << o.out;
  }
}

// Every key docs/field_envs.md lists for openspiel is read (none is an unknown key).
TEST(FieldEnvs, OpenSpielReadsEveryDocumentedKey) {
  const auto o = RunRlid({"env",           "check",
                          "--env",         "openspiel",
                          "--param",       "game=catch",
                          "--param",       "opening=0",
                          "--param",       "player=0",
                          "--param",       "opponent=first",
                          "--param",       "step_limit=10",
                          "--param",       "success_return=1",
                          "--seeds",       "2",
                          "--graph-seeds", "0"});
  EXPECT_EQ(o.code, 0) << o.out << o.err;
}

// A puzzle with an exact oracle and state graph, a two-player board against a
// seeded random opponent, and a game of hidden cards.
TEST(FieldEnvs, TextArenaGamesPassTheConformanceSuite) {
  for (const GameCase& g :
       {GameCase{"TowerOfHanoi-v0", "oracle, exact afterstates"},
        GameCase{"TicTacToe-v0", "vs random"}, GameCase{"KuhnPoker-v0", "hidden cards"}}) {
    const auto o = RunRlid({"env", "check", "--env", "textarena", "--param",
                            std::string("game=") + g.game, "--seeds", "6", "--graph-seeds", "1"});
    EXPECT_EQ(o.code, 0) << g.game << " (" << g.what << ")\n" << o.out << o.err;
    EXPECT_NE(o.out.find("0 failed"), std::string::npos) << g.game << "\n" << o.out;
  }
}

// gsm_symbolic ships worked solutions: `rlid sft` with prompt.reasoning
// demonstrates each as the scratchpad line before the decision.
TEST(FieldEnvs, ReasoningGymWorkedSolutionsAreSftScratchpads) {
  const rlid::testing::TempDir dir("rg_reasoning");
  const auto o =
      RunRlid({"sft", std::string(RLID_SOURCE_DIR) + "/configs/reasoning_gym_arith_ppo.toml",
               "--out", dir.str(), "--threads", "1", "--set", "env.task=\"gsm_symbolic\"", "--set",
               "prompt.reasoning=true", "--set", "sft.episodes=4", "--set", "sft.epochs=1", "--set",
               "sft.random_action_frac=0", "--set", "tokenizer.corpus_episodes=8"});
  ASSERT_EQ(o.code, 0) << o.out << o.err;
  const auto q =
      RunRlid({"sql", dir.str(), "--csv",
               "SELECT count(*) FROM steps WHERE generated_text LIKE '%so the answer is%'"});
  ASSERT_EQ(q.code, 0) << q.err;
  EXPECT_NE(q.out.find("\n4\n"), std::string::npos) << q.out;
  // A task without worked solutions says so.
  const auto none =
      RunRlid({"sft", std::string(RLID_SOURCE_DIR) + "/configs/reasoning_gym_arith_ppo.toml",
               "--out", dir.str() + "/none", "--threads", "1", "--set", "prompt.reasoning=true",
               "--set", "sft.episodes=2", "--set", "tokenizer.corpus_episodes=4"});
  EXPECT_NE(none.code, 0);
  EXPECT_NE(none.err.find("ships no worked solution"), std::string::npos) << none.err;
}

// OpenEnv servers the adapter serves itself (tests/data/external/openenv_servers.py,
// built from openenv-core's classes): an Enum action narrowed by the observation's
// legal moves, an int action with one session allowed (episodes replayed), MCP
// tools with discrete arguments. Free-text actions are refused.
TEST(FieldEnvs, OpenEnvServersWithDiscreteActionsPassTheConformanceSuite) {
  const std::string servers =
      std::string(RLID_SOURCE_DIR) + "/tests/data/external/openenv_servers.py";
  for (const char* app : {"grid_app", "nim_app", "switch_app"}) {
    const auto o = RunRlid({"env", "check", "--env", "openenv", "--param",
                            "server=" + servers + ":" + app, "--seeds", "4", "--graph-seeds", "0"});
    EXPECT_EQ(o.code, 0) << app << "\n" << o.out << o.err;
    EXPECT_NE(o.out.find("0 failed"), std::string::npos) << app << "\n" << o.out;
  }
  for (const char* app : {"echo_app", "say_app"}) {  // a server the config should not name
    const auto o = RunRlid({"env", "check", "--env", "openenv", "--param",
                            "server=" + servers + ":" + app, "--seeds", "1"});
    EXPECT_EQ(o.code, 2) << app << "\n" << o.out << o.err;
    EXPECT_NE(o.err.find("free text"), std::string::npos) << app << "\n" << o.err;
  }
}

// GLAM's BabyAI-Text: its sentences, the six actions, exact afterstates (the
// menu check steps a copy of the level) and the BabyAI bot as oracle, on the
// level GLAM trains on and on GLAM's own PickupLocal.
TEST(FieldEnvs, BabyAITextLevelsPassTheConformanceSuite) {
  for (const GameCase& g : {GameCase{"GoToLocal", "6"}, GameCase{"PickupLocal", "3"}}) {
    const auto o =
        RunRlid({"env", "check", "--env", "babyai_text", "--param", std::string("level=") + g.game,
                 "--seeds", g.what, "--graph-seeds", "0"});
    EXPECT_EQ(o.code, 0) << g.game << "\n" << o.out << o.err;
    EXPECT_NE(o.out.find("0 failed"), std::string::npos) << g.game << "\n" << o.out;
    EXPECT_NE(o.out.find("passed   oracle"), std::string::npos) << g.game << "\n" << o.out;
  }
  const auto show = RunRlid({"env", "show", "--env", "babyai_text", "--json"});
  ASSERT_EQ(show.code, 0) << show.err;
  EXPECT_NE(show.out.find("Goal of the agent: go to the"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("You see a wall"), std::string::npos) << show.out;
  const auto bad = RunRlid(
      {"env", "check", "--env", "babyai_text", "--param", "level=NoSuchLevel", "--seeds", "1"});
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("unknown level 'NoSuchLevel'"), std::string::npos) << bad.err;
}

// TextWorld games generated here, into an empty cache, by TextWorld's own
// generator (no download): a random quest with its state graph enumerated, and
// the tw-simple challenge's house; jericho snapshots give exact afterstates.
TEST(FieldEnvs, TextWorldGamesAreGeneratedAndPassTheConformanceSuite) {
  const rlid::testing::TempDir cache("tw_cache");
  const auto custom = RunRlid({"env",           "check",
                               "--env",         "textworld",
                               "--param",       "family=custom",
                               "--param",       "world_size=2",
                               "--param",       "nb_objects=3",
                               "--param",       "quest_length=2",
                               "--param",       "games=3",
                               "--param",       "step_limit=8",
                               "--param",       "cache_dir=" + cache.str(),
                               "--seeds",       "4",
                               "--graph-seeds", "1"});
  EXPECT_EQ(custom.code, 0) << custom.out << custom.err;
  EXPECT_NE(custom.out.find("9 passed, 0 skipped, 0 failed"), std::string::npos) << custom.out;
  const auto simple = RunRlid({"env", "check", "--env", "textworld", "--param", "family=simple",
                               "--param", "games=2", "--param", "cache_dir=" + cache.str(),
                               "--seeds", "2", "--graph-seeds", "0"});
  EXPECT_EQ(simple.code, 0) << simple.out << simple.err;
  EXPECT_NE(simple.out.find("0 failed"), std::string::npos) << simple.out;
  const auto bad = RunRlid({"env", "check", "--env", "textworld", "--param", "family=simple",
                            "--param", "recipe=2", "--seeds", "1"});
  EXPECT_NE(bad.code, 0);
  EXPECT_NE(bad.err.find("do not apply to family 'simple'"), std::string::npos) << bad.err;
}

// ScienceWorld's JVM simulator on its default task (its gold path stays on
// the capped menus there), with a pool of JVMs and with one that every
// episode shares: no afterstates, as the simulator cannot copy a
// state; the menu says how many valid actions it left out; a task that needs
// electrical actions refuses a simplification that removes them; no Java is a
// clear error naming the fix.
TEST(FieldEnvs, ScienceWorldPassesTheConformanceSuiteWithoutAfterstates) {
  const auto o = RunRlid({"env", "check", "--env", "scienceworld", "--param",
                          "task=lifespan-longest-lived", "--seeds", "2", "--graph-seeds", "0"});
  EXPECT_EQ(o.code, 0) << o.out << o.err;
  EXPECT_NE(o.out.find("8 passed, 1 skipped, 0 failed"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("the menus carry no afterstates"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("\"scienceworld\":\"1.2.3\""), std::string::npos) << o.out;
  // One JVM for every episode: each switch reloads the variation and replays.
  const auto one = RunRlid({"env", "check", "--env", "scienceworld", "--param", "engines=1",
                            "--seeds", "1", "--graph-seeds", "0"});
  EXPECT_EQ(one.code, 0) << one.out << one.err;
  EXPECT_NE(one.out.find("0 failed"), std::string::npos) << one.out;
  const auto show = RunRlid({"env", "show", "--env", "scienceworld", "--json"});
  ASSERT_EQ(show.code, 0) << show.err;
  EXPECT_NE(show.out.find("valid actions)"), std::string::npos) << show.out;
  EXPECT_NE(show.out.find("Your task is to"), std::string::npos) << show.out;
  EXPECT_EQ(show.out.find("\"same_afterstate_as\": 0"), std::string::npos) << show.out;
  const auto text = RunRlid({"env", "show", "--env", "scienceworld"});
  ASSERT_EQ(text.code, 0) << text.err;
  EXPECT_NE(text.out.find("A) go to"), std::string::npos) << text.out;
  EXPECT_EQ(text.out.find("->"), std::string::npos) << text.out;  // no empty afterstate lines
  const auto electrical =
      RunRlid({"env", "check", "--env", "scienceworld", "--param", "task=power-component",
               "--param", "simplification=easy", "--seeds", "1"});
  EXPECT_NE(electrical.code, 0);
  EXPECT_NE(electrical.err.find("needs the electrical actions"), std::string::npos)
      << electrical.err;
  const char* path = std::getenv("PATH");
  const std::string saved_path = path ? path : "";
  const char* home = std::getenv("JAVA_HOME");
  const std::string saved_home = home ? home : "";
  ::setenv("PATH", "/nonexistent", 1);
  ::unsetenv("JAVA_HOME");
  const auto no_java = RunRlid({"env", "check", "--env", "scienceworld", "--seeds", "1"});
  ::setenv("PATH", saved_path.c_str(), 1);
  if (home) ::setenv("JAVA_HOME", saved_home.c_str(), 1);
  EXPECT_NE(no_java.code, 0);
  EXPECT_NE(no_java.err.find("no Java runtime found"), std::string::npos) << no_java.err;
  EXPECT_NE(no_java.err.find("default-jre-headless"), std::string::npos) << no_java.err;
}

TEST(FieldEnvs, AnUnknownGameNamesTheGames) {
  const auto o = RunRlid(
      {"env", "check", "--env", "openspiel", "--param", "game=no_such_game", "--seeds", "1"});
  EXPECT_NE(o.code, 0);
  EXPECT_NE(o.err.find("unknown game 'no_such_game'"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("tic_tac_toe"), std::string::npos) << o.err;
}

// An interpreter without the package (the system's python3): the error names
// the package, its pinned version and the fix, and nothing starts.
TEST(FieldEnvs, AMissingPackageNamesItAndTheFix) {
  ::setenv("RLID_ADAPTER_PYTHON", "/usr/bin/python3", 1);
  const auto o = RunRlid({"env", "check", "--env", "openspiel", "--seeds", "1"});
  ::unsetenv("RLID_ADAPTER_PYTHON");
  EXPECT_NE(o.code, 0);
  EXPECT_NE(o.err.find("open_spiel==2.0.2 is not installed"), std::string::npos) << o.err;
  EXPECT_NE(o.err.find("scripts/setup.sh"), std::string::npos) << o.err;
}

}  // namespace
}  // namespace rlid::cli

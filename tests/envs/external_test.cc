// The external-env protocol client (envs/external/external.cc): a built-in env served
// over pipes (tests/helpers/env_server) must play exactly like the built-in
// one; Python envs on the helper pass the conformance suite; every way a child
// process can misbehave (crash, hang, garbage, wrong types, bad menus, wrong
// protocol) ends as an EnvError or ConfigError that names the env, the message
// and its last output, quickly, never as a hang or a crash of rlid.
#include "envs/external/external.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "core/clock.h"
#include "core/error.h"
#include "core/rng.h"
#include "core/subprocess.h"
#include "envs/api/conformance.h"
#include "envs/api/env.h"
#include "tests/test_paths.h"

namespace rlid::envs {
namespace {

const std::string kServer = std::string(RLID_BINARY_DIR) + "/env_server";
const std::string kSource = RLID_SOURCE_DIR;
const std::string kCourier = kSource + "/envs/external/python/examples/courier.py";
const std::string kHostile = kSource + "/tests/data/external/hostile.py";
const std::string kLister = kSource + "/tests/data/external/lister.py";
const std::string kGrandchild = kSource + "/tests/data/external/grandchild.py";

std::string Command(const std::vector<std::string>& argv) {
  return "command=" + nlohmann::json(argv).dump();
}

std::unique_ptr<Env> External(const std::vector<std::string>& argv,
                              std::vector<std::string> params = {}) {
  params.insert(params.begin(), Command(argv));
  return MakeEnv("external", params);
}

// The error `f` throws, as text ("" when it throws nothing or another type).
template <class E, class F>
std::string ErrorOf(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return std::string(e.what()) + "\n" + e.hint();
  }
  return "";
}

struct Played {
  std::vector<std::string> obs, commands, afterstates;
  std::vector<std::vector<std::string>> realisations;
  std::vector<double> rewards;
  bool operator==(const Played&) const = default;
};

Played Play(const Env& env, uint64_t seed) {
  Played p;
  auto s = env.NewState(seed);
  Rng rng(seed + 3);
  while (!s->IsTerminal()) {
    p.obs.push_back(s->Observation());
    const Menu m = s->CompileMenu();
    for (const auto& it : m.items) {
      p.commands.push_back(it.label + ") " + it.command);
      p.afterstates.push_back(it.afterstate);
      p.realisations.push_back(it.realisations);
    }
    p.rewards.push_back(s->Apply(m.items[rng.UniformInt(m.size())].action).reward);
  }
  p.obs.push_back(s->Observation());
  return p;
}

TEST(External, ServedBuiltInPlaysExactlyLikeTheBuiltIn) {
  for (const char* name : {"bandit", "maze", "keys"}) {
    auto local = MakeEnv(name);
    auto remote = External({kServer, name});
    EXPECT_EQ(remote->Info().name, name);
    EXPECT_EQ(remote->Info().step_limit, local->Info().step_limit);
    EXPECT_EQ(remote->Instructions(), local->Instructions());
    for (uint64_t seed = 0; seed < 6; ++seed)
      EXPECT_EQ(Play(*local, seed), Play(*remote, seed)) << name << " seed " << seed;
  }
}

TEST(External, ServedMazePassesConformance) {
  auto env = External({kServer, "maze"});
  ConformanceOptions opt;
  opt.seeds = 6;
  opt.split_pairs = 60;
  for (const auto& r : RunConformance(*env, opt)) {
    std::string why;
    for (const auto& f : r.failures) why += "\n  " + f;
    EXPECT_EQ(r.status, ConformanceResult::Status::kPassed) << r.check << " " << r.note << why;
  }
}

TEST(External, PythonCourierPassesConformanceAndTakesParams) {
  auto env = External({"python3", kCourier});
  EXPECT_EQ(env->Info().name, "courier");
  EXPECT_EQ(env->Info().step_limit, 6);
  EXPECT_NE(dynamic_cast<OracleState*>(env->NewState(0).get()), nullptr);
  ConformanceOptions opt;
  opt.split_pairs = 100;
  for (const auto& r : RunConformance(*env, opt)) {
    std::string why;
    for (const auto& f : r.failures) why += "\n  " + f;
    EXPECT_EQ(r.status, ConformanceResult::Status::kPassed) << r.check << " " << r.note << why;
  }
  // [env.params] reach the env's constructor: 6 rooms, so 6 "go to" items at the door.
  auto six = External({"python3", kCourier}, {"params.rooms=6"});
  EXPECT_EQ(six->NewState(0)->CompileMenu().size(), 6u);
  EXPECT_EQ(env->NewState(0)->CompileMenu().size(), 4u);
}

TEST(External, WorkersGiveTheSameEpisodesAndOverlapSteps) {
  auto one = External({kServer, "maze"});
  auto three = External({kServer, "maze"}, {"workers=3"});
  EXPECT_EQ(three->Info().concurrency, 3);
  for (uint64_t seed = 0; seed < 4; ++seed) EXPECT_EQ(Play(*one, seed), Play(*three, seed));

  // Six states with a 100 ms step each, started together on 3 workers, finish
  // in about 2 x 100 ms, not 6 x 100 ms (and their outcomes come back in any order).
  auto slow = External({kServer, "bandit", "--delay-ms", "100"}, {"workers=3"});
  std::vector<std::unique_ptr<State>> states;
  for (uint64_t seed = 0; seed < 6; ++seed) states.push_back(slow->NewState(seed));
  const double t0 = MonotonicSeconds();
  for (auto& s : states) dynamic_cast<AsyncState&>(*s).StartApply(s->LegalActions()[0]);
  for (int i = 5; i >= 0; --i) {
    const StepOutcome o = dynamic_cast<AsyncState&>(*states[i]).FinishApply();
    EXPECT_TRUE(o.terminal);
    EXPECT_TRUE(states[i]->IsTerminal());
  }
  const double took = MonotonicSeconds() - t0;
  EXPECT_LT(took, 0.45) << "steps on 3 workers did not overlap";
  EXPECT_GE(took, 0.19);
}

TEST(External, CloneByReplayWhenTheEnvCannotClone) {
  auto env = External({"python3", kLister, "noclone"});
  auto s = env->NewState(4);
  s->Apply(s->CompileMenu().items[3].action);
  auto c = s->Clone();  // reset + replay of the one action
  EXPECT_EQ(c->Observation(), s->Observation());
  EXPECT_EQ(c->Hash(), s->Hash());
  EXPECT_EQ(c->StepCount(), 1);
  c->Apply(0);
  EXPECT_NE(c->Observation(), s->Observation());
  // Without clone (the env's or by replay) there are no afterstates to show.
  EXPECT_TRUE(s->CompileMenu().items[0].afterstate.empty());
  // afterstates = "clone" computes them by replay.
  auto replayed = External({"python3", kLister, "noclone"}, {"afterstates=\"clone\""});
  EXPECT_EQ(replayed->NewState(4)->CompileMenu().items[0].afterstate, "Said so far: 0");
}

TEST(External, TheHelperStepsNoCopiesWhenRlidShowsNoAfterstates) {
  // hello says whether rlid reads the env's afterstates; the helper steps copies only then.
  auto shown = External({"python3", kLister, "count"});
  auto s = shown->NewState(4);
  EXPECT_FALSE(s->CompileMenu().items[0].afterstate.empty());
  s->Apply(0);  // 5 copies stepped for the first menu, then the step
  EXPECT_EQ(s->Observation(), "Note: 3, 4, 0\nSaid so far: 0 (steps taken: 6)");
  auto hidden = External({"python3", kLister, "count"}, {"afterstates=\"none\""});
  auto t = hidden->NewState(4);
  EXPECT_TRUE(t->CompileMenu().items[0].afterstate.empty());
  t->Apply(0);
  EXPECT_EQ(t->Observation(), "Note: 3, 4, 0\nSaid so far: 0 (steps taken: 1)");
}

TEST(External, EnvCompilerAndOracleWithoutReturn) {
  auto env = External({"python3", kLister});
  auto s = env->NewState(1);  // todo: 2, 4, 1
  ASSERT_NE(dynamic_cast<TextCompiler*>(s.get()), nullptr);
  // The menu grammar first ("number 4" is a realisation), then the env's own.
  EXPECT_EQ(s->Compile("number 4").action, 4);
  const CompileResult own = s->Compile("I think num 2, really");
  EXPECT_TRUE(own.valid());
  EXPECT_EQ(own.action, 2);
  EXPECT_EQ(own.realisation, -1);
  const CompileResult bad = s->Compile("no idea");
  EXPECT_FALSE(bad.valid());
  EXPECT_NE(bad.reason.find("num N"), std::string::npos) << bad.reason;
  auto* oracle = dynamic_cast<OracleState*>(s.get());
  ASSERT_NE(oracle, nullptr);
  EXPECT_EQ(oracle->OptimalActions(), std::vector<ActionId>{2});
  EXPECT_DOUBLE_EQ(oracle->OptimalReturn(), 1.0);  // played out on a copy
}

TEST(External, MisbehavingEnvsFailClearly) {
  struct Case {
    std::string mode;
    std::string expect;  // in the EnvError's message or hint
  };
  const std::vector<Case> at_start = {
      {"bad_protocol", "protocol version mismatch: rlid speaks 1 to 2, the env replied 99"},
      {"no_step_limit", "no 'step_limit'"},
      {"exit_on_hello", "giving up at hello"},
  };
  for (const auto& c : at_start) {
    const std::string err = ErrorOf<EnvError>([&] { External({"python3", kHostile, c.mode}); });
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.mode << ": " << err;
  }
  const std::vector<Case> at_reset = {
      {"error_on_reset", "the env replied with an error [execution_error]: cannot make seed 5"},
      {"coded_error_on_reset", "[validation_error]: seed 5 is out of range"},
      {"wrong_type", "'observation' must be a string, found an integer"},
      {"no_menu", "has no 'menu'"},
      {"dup_actions", "duplicate action 0"},
      {"shared_realisation", "realisation 'left' names two actions"},
      {"multiline_command", "must be one line"},
  };
  for (const auto& c : at_reset) {
    auto env = External({"python3", kHostile, c.mode});
    const std::string err = ErrorOf<EnvError>([&] { env->NewState(5); });
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.mode << ": " << err;
    EXPECT_NE(err.find("env 'hostile'"), std::string::npos) << err;
  }
  const std::vector<Case> at_step = {
      {"nan_reward", "'reward' must be a number, found a string"},
      {"print_on_step",
       "not JSON: 'debugging output on stdout' (print your own messages to stderr"},
      {"wrong_id", "id 123456, which no pending request has"},
      {"v2_terminal", "not version 1's 'terminal'"},
  };
  for (const auto& c : at_step) {
    auto env = External({"python3", kHostile, c.mode});
    auto s = env->NewState(0);
    const std::string err = ErrorOf<EnvError>([&] { s->Apply(0); });
    EXPECT_NE(err.find(c.expect), std::string::npos) << c.mode << ": " << err;
  }
}

// Protocol 2 is asked for; version-1 envs still play: one that answers 1 to
// the offer, and an old helper that refuses any hello but {"protocol": 1}.
TEST(External, VersionOneEnvsStillPlay) {
  auto local = MakeEnv("maze");
  auto v1 = External({kServer, "maze", "--protocol", "1"});
  auto v2 = External({kServer, "maze"});
  for (uint64_t seed = 0; seed < 4; ++seed) {
    EXPECT_EQ(Play(*local, seed), Play(*v1, seed)) << seed;
    EXPECT_EQ(Play(*local, seed), Play(*v2, seed)) << seed;
  }
  auto strict = External({"python3", kHostile, "strict_v1"});
  auto s = strict->NewState(0);
  EXPECT_EQ(s->Apply(0).reward, 1.0);
  EXPECT_TRUE(s->IsTerminal());
  // Only version 2 says what it is.
  EXPECT_EQ(v1->Info().metadata, "");
  const auto meta = nlohmann::json::parse(v2->Info().metadata);
  EXPECT_EQ(meta.at("name"), "maze");
  EXPECT_TRUE(meta.at("packages").contains("rlid")) << meta.dump();
}

// "capacity" is asked again after a wait, within the request's timeout.
TEST(External, AnEnvAtCapacityIsAskedAgain) {
  auto local = MakeEnv("maze");
  auto busy = External({kServer, "maze", "--capacity-resets", "3"});
  EXPECT_EQ(Play(*local, 2), Play(*busy, 2));
  auto full = External({kServer, "maze", "--capacity-resets", "1000"}, {"timeout_s=0.5"});
  const double t0 = MonotonicSeconds();
  const std::string err = ErrorOf<EnvError>([&] { full->NewState(0); });
  EXPECT_LT(MonotonicSeconds() - t0, 3.0);
  EXPECT_NE(err.find("[capacity]: all sessions busy"), std::string::npos) << err;
  EXPECT_NE(err.find("raise [env] timeout_s"), std::string::npos) << err;
}

// The replies of a protocol server to raw request lines, in order.
std::vector<nlohmann::json> Exchange(const std::vector<std::string>& argv,
                                     const std::vector<std::string>& lines) {
  ChildProcess child(ChildOptions{argv, "", "exchange"});
  std::vector<nlohmann::json> out;
  for (const auto& l : lines) {
    std::string error, reply;
    EXPECT_TRUE(child.WriteLine(l, 10, &error)) << error;
    EXPECT_EQ(child.ReadLine(reply, 10), ChildProcess::Read::kLine) << l;
    out.push_back(nlohmann::json::parse(reply));
  }
  return out;
}

// Both servers of the protocol (the Python helper, rlid's own) give version 2's
// error codes, metadata and Gymnasium's terminated/truncated, and version 1's
// bare messages and "terminal" to a version-1 client.
TEST(External, ServersAnswerWithVersionTwoErrorCodes) {
  const std::vector<std::string> v2 = {
      R"(this is not json)",
      R"({"op": "reset", "id": 1, "seed": 0})",
      R"({"op": "hello", "id": 2, "protocol": 2, "protocols": [1, 2], "params": {}})",
      R"({"op": "teleport", "id": 3})",
      R"({"op": "step", "id": 4, "handle": 77, "action": 0})",
      R"({"op": "metadata", "id": 5})",
      R"({"op": "reset", "id": 6, "seed": 0})"};
  for (const auto& argv :
       {std::vector<std::string>{"python3", kCourier}, std::vector<std::string>{kServer, "maze"}}) {
    const auto r = Exchange(argv, v2);
    EXPECT_EQ(r[0]["error"]["code"], "invalid_json") << r[0];
    EXPECT_EQ(r[1]["error"]["code"], "validation_error") << r[1];
    EXPECT_EQ(r[2]["protocol"], 2) << r[2];
    EXPECT_EQ(r[3]["error"]["code"], "unknown_op") << r[3];
    EXPECT_EQ(r[4]["error"]["code"], "validation_error") << r[4];
    EXPECT_TRUE(r[5].contains("packages")) << r[5];
    EXPECT_EQ(r[6]["terminated"], false) << r[6];
    EXPECT_FALSE(r[6].contains("terminal")) << r[6];
    const auto old = Exchange(
        argv, {R"({"op": "hello", "id": 1, "protocol": 1})", R"({"op": "teleport", "id": 2})",
               R"({"op": "reset", "id": 3, "seed": 0})"});
    EXPECT_EQ(old[0]["protocol"], 1) << old[0];
    EXPECT_TRUE(old[1]["error"].is_string()) << old[1];
    EXPECT_EQ(old[2]["terminal"], false) << old[2];
  }
}

// The Python helper's metadata: the env's name, version and Python.
TEST(External, PythonHelperSaysWhatItIs) {
  auto env = External({"python3", kCourier});
  const auto meta = nlohmann::json::parse(env->Info().metadata);
  EXPECT_EQ(meta.at("name"), "courier");
  EXPECT_TRUE(meta.contains("python")) << meta.dump();
}

TEST(External, CrashHangAndGarbageAreEnvErrorsWithTheLastOutput) {
  {
    auto env = External({kServer, "maze", "--crash-after", "1"});
    auto s = env->NewState(0);
    s->Apply(s->LegalActions()[0]);
    const std::string err = ErrorOf<EnvError>([&] { s->Apply(s->LegalActions()[0]); });
    EXPECT_NE(err.find("exited with code 3"), std::string::npos) << err;
    EXPECT_NE(err.find("crashing as asked"), std::string::npos) << err;
    // The states of the dead worker are lost; a new state gets a fresh process.
    EXPECT_NE(ErrorOf<EnvError>([&] { s->Clone(); }).find("stopped earlier"), std::string::npos);
    EXPECT_FALSE(env->NewState(1)->Observation().empty());
  }
  {
    auto env = External({kServer, "maze", "--hang-after", "0"}, {"timeout_s=0.5"});
    auto s = env->NewState(0);
    const double t0 = MonotonicSeconds();
    const std::string err = ErrorOf<EnvError>([&] { s->Apply(s->LegalActions()[0]); });
    EXPECT_LT(MonotonicSeconds() - t0, 3.0);
    EXPECT_NE(err.find("no reply within 0.5 s"), std::string::npos) << err;
    EXPECT_NE(err.find("hanging as asked"), std::string::npos) << err;
  }
  {
    auto env = External({kServer, "maze", "--garbage-after", "0"});
    auto s = env->NewState(0);
    const std::string err = ErrorOf<EnvError>([&] { s->Apply(s->LegalActions()[0]); });
    EXPECT_NE(err.find("not JSON: 'this is not json'"), std::string::npos) << err;
  }
}

TEST(External, AScriptThatDoesNotStartSaysWhy) {
  const std::string err =
      ErrorOf<EnvError>([] { External({"python3", "/nonexistent/my_env.py"}); });
  EXPECT_NE(err.find("exited with code 2"), std::string::npos) << err;
  EXPECT_NE(err.find("can't open file"), std::string::npos) << err;  // python's own words
  EXPECT_NE(err.find("external env `python3 /nonexistent/my_env.py`"), std::string::npos) << err;
}

// `rlid env check` and `rlid train` used to hang at the end of such an env:
// its stderr never ended, and rlid waited for that.
TEST(External, AnEnvWhoseGrandchildKeepsStderrOpenStillEndsPromptly) {
  const std::string pidfile = (std::filesystem::temp_directory_path() /
                               fmt::format("rlid_external_{}_setsid.pid", ::getpid()))
                                  .string();
  std::filesystem::remove(pidfile);
  auto env = External({"python3", kGrandchild, "setsid_stderr", pidfile, "serve"});
  auto s = env->NewState(0);
  EXPECT_TRUE(s->Apply(1).terminal);
  s.reset();
  pid_t grandchild = -1;
  std::ifstream(pidfile) >> grandchild;  // written before the env answered hello
  ASSERT_GT(grandchild, 0);
  auto end = std::async(std::launch::async, [&] { env.reset(); });
  EXPECT_EQ(end.wait_for(std::chrono::seconds(6)), std::future_status::ready)
      << "the env's end waits for a stderr its setsid grandchild keeps open";
  ::kill(grandchild, SIGKILL);  // ends it (and releases a hung env)
  end.wait();
  std::filesystem::remove(pidfile);
}

TEST(External, ConfigErrors) {
  EXPECT_NE(ErrorOf<ConfigError>([] { MakeEnv("external"); }).find("needs 'command'"),
            std::string::npos);
  EXPECT_NE(ErrorOf<IoError>([] { External({"/nonexistent/rlid-env"}); }).find("cannot start"),
            std::string::npos);
  const std::string no_dir = ErrorOf<IoError>([] {
    External({kServer, "maze"}, {"cwd=\"/nonexistent/dir\""});
  });
  EXPECT_NE(no_dir.find("cannot enter directory '/nonexistent/dir': No such file or directory"),
            std::string::npos)
      << no_dir;
  EXPECT_NE(ErrorOf<ConfigError>([] { External({kServer, "maze"}, {"workerz=2"}); })
                .find("workerz"),
            std::string::npos);
  EXPECT_NE(ErrorOf<ConfigError>([] { External({kServer, "maze"}, {"workers=0"}); })
                .find("workers"),
            std::string::npos);
  EXPECT_NE(ErrorOf<ConfigError>([] { External({kServer, "maze"}, {"on_error=\"skip\""}); })
                .find("on_error"),
            std::string::npos);
  EXPECT_TRUE(External({kServer, "maze"}, {"on_error=\"drop_episode\""})->Info().drop_failed_episodes);
  EXPECT_FALSE(External({kServer, "maze"})->Info().drop_failed_episodes);
}

TEST(SplitCommandLine, QuotesAndEscapes) {
  EXPECT_EQ(SplitCommandLine("python3 my_env.py --size 3"),
            (std::vector<std::string>{"python3", "my_env.py", "--size", "3"}));
  EXPECT_EQ(SplitCommandLine(R"(a 'b c' "d \"e\"" f\ g)"),
            (std::vector<std::string>{"a", "b c", "d \"e\"", "f g"}));
  EXPECT_EQ(SplitCommandLine("  ''  x"), (std::vector<std::string>{"", "x"}));
  EXPECT_THROW(SplitCommandLine("a 'b"), ConfigError);
}

}  // namespace
}  // namespace rlid::envs

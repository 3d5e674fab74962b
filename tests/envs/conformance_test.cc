// Every registered environment passes every check of the conformance suite
// (envs/api/conformance.h: determinism, clone independence, menu contract and
// afterstates, compilation of every realisation, oracle optimality, exact graph
// values, split-disjoint seeds). Built-in envs must also have afterstates, an
// oracle, and state graphs small enough to check.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <map>
#include <set>
#include <tuple>

#include "envs/api/conformance.h"
#include "envs/api/env.h"

namespace rlid::envs {
namespace {

// Of the graph_seeds instances the graph check enumerates, how many must have a
// state graph small enough to be checked, per env; an env missing here must
// check them all. This is what keeps the check from passing without checking.
int MinGraphSeedsChecked(const std::string& env) {
  static const std::map<std::string, int> kMin = {{"arcgrid", 4},   {"bandit", 4}, {"craft", 4},
                                                  {"household", 4}, {"keys", 4},   {"maze", 4}};
  auto it = kMin.find(env);
  return it == kMin.end() ? ConformanceOptions{}.graph_seeds : it->second;
}

// (`external` needs a program: tests/envs/external_test.cc runs the suite on
// external envs.)
std::vector<std::string> BuiltInEnvs() { return BuiltInEnvNames(); }

class EnvConformance
    : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(EnvConformance, Passes) {
  const auto& [env_name, check] = GetParam();
  auto env = MakeEnv(env_name);
  ConformanceOptions opt;
  opt.require_afterstates = true;
  const ConformanceResult r = RunConformanceCheck(*env, check, opt);
  std::string failures;
  for (const auto& f : r.failures) failures += "\n  " + f;
  EXPECT_EQ(r.status, ConformanceResult::Status::kPassed)
      << env_name << " " << check << ": " << StatusName(r.status) << " (" << r.failure_count
      << " failures) " << r.note << failures;
  if (check == "info") {
    EXPECT_EQ(env->Info().name, env_name);
  } else if (check == "oracle") {
    EXPECT_EQ(r.covered, opt.seeds);
  } else if (check == "graph") {
    EXPECT_GE(r.covered, MinGraphSeedsChecked(env_name)) << r.note;
  } else if (check == "menu") {
    EXPECT_GT(r.covered, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(AllRegistered, EnvConformance,
                         ::testing::Combine(::testing::ValuesIn(BuiltInEnvs()),
                                            ::testing::ValuesIn(ConformanceChecks())),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_" + std::get<1>(info.param);
                         });

TEST(Conformance, SplitsNeverShareSeeds) {
  // The split mapping itself: train and test indices never name the same seed.
  std::set<uint64_t> train, test;
  for (uint64_t i = 0; i < 1000; ++i) {
    train.insert(SplitSeed(Split::kTrain, i));
    test.insert(SplitSeed(Split::kTest, i));
  }
  for (auto s : train) {
    EXPECT_EQ(test.count(s), 0u);
    EXPECT_EQ(SplitOf(s), Split::kTrain);
  }
  for (auto s : test) EXPECT_EQ(SplitOf(s), Split::kTest);
}

// The suite catches broken envs: a bandit whose menu lies about an afterstate,
// and one whose instances depend on a hidden counter instead of the seed.
class WrappedState : public State {
 public:
  WrappedState(std::unique_ptr<State> inner, int flaw) : inner_(std::move(inner)), flaw_(flaw) {}
  std::string Observation() const override {
    return flaw_ == 2 ? inner_->Observation() + fmt::format(" ({})", counter_) : inner_->Observation();
  }
  std::vector<ActionId> LegalActions() const override { return inner_->LegalActions(); }
  Menu CompileMenu() const override {
    Menu m = inner_->CompileMenu();
    if (flaw_ == 1 && !m.items.empty()) m.items[0].afterstate_hash ^= 1;
    return m;
  }
  StepOutcome Apply(ActionId a) override { return inner_->Apply(a); }
  bool IsTerminal() const override { return inner_->IsTerminal(); }
  CompileResult Compile(std::string_view t) const override { return inner_->Compile(t); }
  std::unique_ptr<State> Clone() const override {
    auto c = std::make_unique<WrappedState>(inner_->Clone(), flaw_);
    c->counter_ = counter_;
    return c;
  }
  uint64_t Hash() const override { return inner_->Hash(); }
  int StepCount() const override { return inner_->StepCount(); }
  int counter_ = 0;

 private:
  std::unique_ptr<State> inner_;
  int flaw_;
};

class FlawedEnv : public Env {
 public:
  explicit FlawedEnv(int flaw) : inner_(MakeEnv("bandit")), flaw_(flaw) {}
  EnvInfo Info() const override { return inner_->Info(); }
  std::string Instructions() const override { return inner_->Instructions(); }
  std::unique_ptr<State> NewState(uint64_t seed) const override {
    auto s = std::make_unique<WrappedState>(inner_->NewState(seed), flaw_);
    s->counter_ = ++made_;
    return s;
  }

 private:
  std::unique_ptr<Env> inner_;
  int flaw_;
  mutable int made_ = 0;
};

TEST(Conformance, CatchesALyingAfterstate) {
  FlawedEnv env(1);
  const auto r = RunConformanceCheck(env, "menu");
  ASSERT_EQ(r.status, ConformanceResult::Status::kFailed);
  EXPECT_NE(r.failures.at(0).find("is not the state that action leads to"), std::string::npos)
      << r.failures.at(0);
  ASSERT_EQ(r.fixes.size(), 1u);  // once, however many items failed
  EXPECT_NE(r.fixes[0].find("also send 'afterstate_hash'"), std::string::npos) << r.fixes[0];
  EXPECT_EQ(RunConformanceCheck(FlawedEnv(0), "menu").status, ConformanceResult::Status::kPassed);
}

TEST(Conformance, CatchesANonDeterministicEnv) {
  FlawedEnv env(2);
  const auto r = RunConformanceCheck(env, "determinism");
  ASSERT_EQ(r.status, ConformanceResult::Status::kFailed);
  EXPECT_NE(r.failures.at(0).find("different"), std::string::npos) << r.failures.at(0);
  EXPECT_EQ(RunConformanceCheck(FlawedEnv(0), "determinism").status,
            ConformanceResult::Status::kPassed);
}

TEST(Conformance, AuthorMessagesLeaveOutWhereAnInternalCheckFailed) {
  EXPECT_EQ(AuthorMessage("an invalid menu: check failed at ../envs/menu.cc:73: "
                          "actions.insert(it.action).second — duplicate action 0"),
            "an invalid menu: duplicate action 0");
  EXPECT_EQ(AuthorMessage("check failed at envs/api/menu.cc:67: a.size() <= 26 (30 vs 26)"),
            "an internal consistency check failed");
  EXPECT_EQ(AuthorMessage("reset (seed 0): no 'menu'"), "reset (seed 0): no 'menu'");
}

TEST(Conformance, UnknownCheckIsAConfigError) {
  auto env = MakeEnv("bandit");
  try {
    RunConformanceCheck(*env, "menus");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("did you mean 'menu'"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace rlid::envs

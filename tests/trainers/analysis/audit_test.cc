// The audit's checks hold on a random tiny model (and its numbers are sane).
#include "trainers/analysis/audit.h"

#include <gtest/gtest.h>

#include "policy/runtime.h"
#include "tests/agents/fixtures.h"

namespace rlid::trainers {
namespace {

TEST(Audit, ChecksPassOnARandomTinyModel) {
  policy::SetNumThreads(1);
  for (const char* env_name : {"bandit", "maze"}) {
    auto env =
        envs::MakeEnv(env_name, std::string(env_name) == "maze" ? std::vector<std::string>{"size=3"}
                                                                : std::vector<std::string>{});
    auto tok = testing::EnvTokenizer(*env);
    auto model = testing::TinyModel(tok, 17);
    policy::PromptRenderer renderer(policy::PromptConfig{}, tok);
    AuditOptions o;
    o.states = 3;
    o.mc_samples = 400;
    auto checks = RunAudit(model, renderer, *env, o);
    ASSERT_EQ(checks.size(), 5u);
    std::cout << FormatAudit(checks);
    for (const auto& c : checks) {
      EXPECT_TRUE(c.passed || c.informational) << env_name << ": " << c.title;
      EXPECT_FALSE(c.numbers.empty());
    }
    EXPECT_TRUE(checks[4].informational);  // label bias reports, it does not judge
  }
}

TEST(Audit, OnlyRunsTheNamedChecksAndRejectsUnknownOnes) {
  auto env = envs::MakeEnv("bandit");
  auto tok = testing::EnvTokenizer(*env);
  auto model = testing::TinyModel(tok);
  policy::PromptRenderer renderer(policy::PromptConfig{}, tok);
  AuditOptions o;
  o.states = 2;
  o.only = {"teaching"};
  auto checks = RunAudit(model, renderer, *env, o);
  ASSERT_EQ(checks.size(), 1u);
  EXPECT_EQ(checks[0].id, "teaching");
  o.only = {"teachng"};
  EXPECT_THROW(RunAudit(model, renderer, *env, o), ConfigError);
}

}  // namespace
}  // namespace rlid::trainers

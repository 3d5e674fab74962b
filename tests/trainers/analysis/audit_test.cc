// The audit's checks hold on a random tiny model, fail on a model with a NaN
// weight, and fail when the two independently computed sides disagree.
#include "trainers/analysis/audit.h"

#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <limits>

#include "policy/model/checkpoint.h"
#include "policy/model/runtime.h"
#include "tests/agents/fixtures.h"

namespace rlid::trainers {
namespace {

const AuditCheck* Find(const std::vector<AuditCheck>& checks, const std::string& id) {
  for (const auto& c : checks)
    if (c.id == id) return &c;
  return nullptr;
}

std::string Number(const AuditCheck& c, const std::string& key_prefix) {
  for (const auto& [k, v] : c.numbers)
    if (k.rfind(key_prefix, 0) == 0) return v;
  return "";
}

struct Setup {
  std::unique_ptr<envs::Env> env;
  policy::Tokenizer tok;
  policy::TransformerLM model{nullptr};
  std::unique_ptr<policy::PromptRenderer> renderer;
};

Setup Make(const std::string& env_name, const std::vector<std::string>& params = {},
           uint64_t seed = 17) {
  Setup s;
  s.env = envs::MakeEnv(env_name, params);
  s.tok = testing::EnvTokenizer(*s.env);
  s.model = testing::TinyModel(s.tok, seed);
  s.renderer = std::make_unique<policy::PromptRenderer>(policy::PromptConfig{}, s.tok);
  return s;
}

// A copy of `model` (with requires_grad) whose weights differ by a few percent.
policy::TransformerLM Perturbed(policy::TransformerLM& model, double scale) {
  auto copy = policy::CloneModel(model);
  torch::NoGradGuard ng;
  auto gen = at::make_generator<at::CPUGeneratorImpl>(5);
  for (auto& p : copy->parameters()) {
    p.add_(torch::randn(p.sizes(), gen, p.options()) * scale * (p.abs().mean().item<double>()));
    p.set_requires_grad(true);
  }
  return copy;
}

void ExpectAllPass(const std::vector<AuditCheck>& checks, const std::string& what) {
  ASSERT_EQ(checks.size(), 6u) << what;
  for (const auto& c : checks) {
    EXPECT_TRUE(c.passed || c.informational) << what << ": " << c.title << "\n" << c.note;
    EXPECT_FALSE(c.skipped) << what << ": " << c.id;
    EXPECT_FALSE(c.numbers.empty()) << what << ": " << c.id;
  }
  EXPECT_EQ(CountFailed(checks), 0) << what;
  EXPECT_EQ(checks[0].id, "finite");
  EXPECT_TRUE(checks[5].informational);  // label bias reports, it does not judge
}

TEST(Audit, ChecksPassOnARandomTinyModel) {
  policy::SetNumThreads(1);
  for (const char* env_name : {"bandit", "maze"}) {
    auto s = Make(env_name, std::string(env_name) == "maze" ? std::vector<std::string>{"size=3"}
                                                            : std::vector<std::string>{});
    AuditOptions o;
    o.states = 3;
    o.mc_samples = 400;
    auto checks = RunAudit(s.model, *s.renderer, *s.env, o);
    std::cout << FormatAudit(checks);
    ExpectAllPass(checks, env_name);
    // The Rao-Blackwell check compared states (none of these have one action).
    EXPECT_EQ(Number(*Find(checks, "rao_blackwell"), "states excluded"), "0") << env_name;
  }
}

// keys reaches one-action states; the exact means are 0 there and used to make
// the relative error 0/0 (FAIL for audit seeds 0 and 1). They are excluded now.
TEST(Audit, OneActionStatesAreExcludedNotFailed) {
  policy::SetNumThreads(1);
  auto s = Make("keys");
  int64_t excluded = 0;
  for (uint64_t seed : {0, 1}) {
    AuditOptions o;
    o.states = 3;
    o.mc_samples = 400;
    o.seed = seed;
    auto checks = RunAudit(s.model, *s.renderer, *s.env, o);
    std::cout << FormatAudit(checks);
    ExpectAllPass(checks, fmt::format("keys, seed {}", seed));
    excluded += std::stoll(Number(*Find(checks, "rao_blackwell"), "states excluded"));
  }
  EXPECT_GT(excluded, 0) << "keys no longer reaches a one-action state; the test lost its point";
}

TEST(Audit, ANanWeightFailsTheAuditAndIsNamed) {
  policy::SetNumThreads(1);
  auto s = Make("bandit");
  {
    torch::NoGradGuard ng;
    s.model->model->layer_list[1]->mlp->up_proj->weight[3][7] =
        std::numeric_limits<float>::quiet_NaN();
  }
  AuditOptions o;
  o.states = 2;
  auto checks = RunAudit(s.model, *s.renderer, *s.env, o);
  std::cout << FormatAudit(checks);
  ASSERT_EQ(checks[0].id, "finite");
  EXPECT_FALSE(checks[0].passed);
  EXPECT_NE(checks[0].note.find("model.layers.1.mlp.up_proj.weight: 1 NaN"), std::string::npos)
      << checks[0].note;
  EXPECT_EQ(CountFailed(checks), 1);
  ASSERT_EQ(checks.size(), 6u);
  for (size_t i = 1; i < checks.size(); ++i) EXPECT_TRUE(checks[i].skipped) << checks[i].id;
}

// The two sides are computed independently: scoring the separate side with a
// perturbed model makes them disagree, and both comparisons catch it.
TEST(Audit, ADisagreeingIndependentSideIsCaught) {
  policy::SetNumThreads(1);
  auto s = Make("bandit");
  AuditOptions o;
  o.states = 2;
  o.mc_samples = 400;
  o.only = {"marginalisation", "rao_blackwell"};
  o.reference_model = Perturbed(s.model, 0.05);
  auto checks = RunAudit(s.model, *s.renderer, *s.env, o);
  std::cout << FormatAudit(checks);
  ASSERT_EQ(checks.size(), 3u);
  EXPECT_TRUE(checks[0].passed);  // the audited model itself is finite
  for (const char* id : {"marginalisation", "rao_blackwell"}) {
    const AuditCheck* c = Find(checks, id);
    ASSERT_NE(c, nullptr);
    EXPECT_FALSE(c->passed) << id;
    EXPECT_FALSE(c->informational) << id;
  }
  EXPECT_EQ(CountFailed(checks), 2);
  // The same model on both sides passes (the hook itself changes nothing).
  o.reference_model = Perturbed(s.model, 0.0);
  checks = RunAudit(s.model, *s.renderer, *s.env, o);
  EXPECT_EQ(CountFailed(checks), 0) << FormatAudit(checks);
}

// With reasoning prompts the audit runs given the model's own greedy
// scratchpad: the marginalisation identity holds given z, log π(z|s) read in
// the readout pass equals separate scoring, and a perturbed independent side
// is caught there too.
TEST(Audit, MarginalisationHoldsGivenAScratchpad) {
  policy::SetNumThreads(1);
  auto s = Make("arith", {"digits=2", "choices=2"});
  policy::PromptConfig pc;
  pc.reasoning = true;
  pc.max_think_tokens = 6;
  s.renderer = std::make_unique<policy::PromptRenderer>(pc, s.tok);
  AuditOptions o;
  o.states = 3;
  o.only = {"marginalisation"};
  auto checks = RunAudit(s.model, *s.renderer, *s.env, o);
  std::cout << FormatAudit(checks);
  const AuditCheck* c = Find(checks, "marginalisation");
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->passed) << c->note;
  EXPECT_NE(c->note.find("Given a scratchpad z"), std::string::npos) << c->note;
  o.reference_model = Perturbed(s.model, 0.05);
  checks = RunAudit(s.model, *s.renderer, *s.env, o);
  EXPECT_FALSE(Find(checks, "marginalisation")->passed);
}

// A NaN on the independent side reaches the comparisons (the audited weights
// are finite): each check fails and names the non-finite number.
TEST(Audit, NonFiniteComparedNumbersFailTheCheck) {
  policy::SetNumThreads(1);
  auto s = Make("bandit");
  AuditOptions o;
  o.states = 2;
  o.mc_samples = 50;
  o.only = {"marginalisation", "rao_blackwell"};
  o.reference_model = Perturbed(s.model, 0.0);
  {
    torch::NoGradGuard ng;
    o.reference_model->model->norm->weight[0] = std::numeric_limits<float>::infinity();
  }
  auto checks = RunAudit(s.model, *s.renderer, *s.env, o);
  std::cout << FormatAudit(checks);
  for (const char* id : {"marginalisation", "rao_blackwell"}) {
    const AuditCheck* c = Find(checks, id);
    ASSERT_NE(c, nullptr);
    EXPECT_FALSE(c->passed) << id;
    EXPECT_NE(c->note.find("non-finite"), std::string::npos) << c->note;
    EXPECT_NE(c->note.find("separate log pi"), std::string::npos) << c->note;
  }
}

// The float64 gradient check converts the model in place and back: the weights
// are bitwise unchanged afterwards, no .grad is left and requires_grad is kept.
TEST(Audit, LeavesTheModelBitwiseUnchanged) {
  policy::SetNumThreads(1);
  auto s = Make("bandit");
  s.model->model->norm->weight.set_requires_grad(false);
  std::vector<torch::Tensor> before;
  for (auto& p : s.model->parameters()) before.push_back(p.detach().clone());
  AuditOptions o;
  o.states = 2;
  o.mc_samples = 50;
  o.only = {"rao_blackwell", "ppo_gradient"};
  auto checks = RunAudit(s.model, *s.renderer, *s.env, o);
  EXPECT_EQ(CountFailed(checks), 0) << FormatAudit(checks);
  auto params = s.model->parameters();
  ASSERT_EQ(params.size(), before.size());
  for (size_t i = 0; i < params.size(); ++i) {
    EXPECT_EQ(params[i].scalar_type(), torch::kFloat32);
    EXPECT_TRUE(torch::equal(params[i], before[i])) << i;
    EXPECT_FALSE(params[i].grad().defined()) << i;
  }
  EXPECT_FALSE(s.model->model->norm->weight.requires_grad());
  EXPECT_TRUE(s.model->model->embed_tokens->weight.requires_grad());
}

TEST(Audit, OnlyRunsTheNamedChecksAndRejectsUnknownOnes) {
  auto s = Make("bandit", {}, 3);
  AuditOptions o;
  o.states = 2;
  o.only = {"teaching"};
  auto checks = RunAudit(s.model, *s.renderer, *s.env, o);
  ASSERT_EQ(checks.size(), 2u);
  EXPECT_EQ(checks[0].id, "finite");  // the precondition always runs
  EXPECT_EQ(checks[1].id, "teaching");
  o.only = {"teachng"};
  EXPECT_THROW(RunAudit(s.model, *s.renderer, *s.env, o), ConfigError);
}

}  // namespace
}  // namespace rlid::trainers

// Rollouts on external envs: a built-in env served over the protocol plays
// the same episodes as the built-in one (1 worker, and greedily with 3 workers,
// whose slots take turns); an env process that crashes drops only its episodes
// under on_error = "drop_episode" and stops the rollout with an EnvError
// otherwise; a token-plane answer the menu grammar rejects goes to the env's
// own compiler and comes back as an item of the menu as shown.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "agents/rollout.h"
#include "core/error.h"
#include "core/rng.h"
#include "tests/agents/fixtures.h"
#include "tests/test_paths.h"

namespace rlid::agents {
namespace {

const std::string kServer = std::string(RLID_BINARY_DIR) + "/env_server";

std::unique_ptr<envs::Env> Served(std::vector<std::string> argv, std::vector<std::string> params = {}) {
  argv.insert(argv.begin(), kServer);
  params.insert(params.begin(), "command=" + nlohmann::json(argv).dump());
  return envs::MakeEnv("external", params);
}

std::vector<EpisodeSpec> Specs(int n) {
  std::vector<EpisodeSpec> s;
  for (int i = 0; i < n; ++i) s.push_back({envs::SplitSeed(envs::Split::kTrain, i), static_cast<uint64_t>(i), i});
  return s;
}

struct Rig {
  std::unique_ptr<envs::Env> local = envs::MakeEnv("maze", {"size=3"});
  policy::Tokenizer tok = testing::EnvTokenizer(*local);
  policy::TransformerLM model = testing::TinyModel(tok);
  policy::PromptRenderer renderer{policy::PromptConfig{}, tok};
  AgentContext Ctx(const envs::Env& env) {
    AgentContext c;
    c.env = &env;
    c.model = model;
    c.renderer = &renderer;
    c.seed = 5;
    c.num_envs = 6;
    return c;
  }
};

void ExpectSameEpisodes(const std::vector<EpisodeData>& a, const std::vector<EpisodeData>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t e = 0; e < a.size(); ++e) {
    ASSERT_EQ(a[e].steps.size(), b[e].steps.size()) << "episode " << e;
    EXPECT_EQ(a[e].ret, b[e].ret);
    for (size_t t = 0; t < a[e].steps.size(); ++t) {
      EXPECT_EQ(a[e].steps[t].prompt.text, b[e].steps[t].prompt.text);
      EXPECT_EQ(a[e].steps[t].action, b[e].steps[t].action);
      EXPECT_EQ(a[e].steps[t].realisation, b[e].steps[t].realisation);
    }
  }
}

TEST(ExternalRollout, ServedEnvPlaysLikeTheBuiltIn) {
  Rig rig;
  auto served = Served({"maze", "size=3"});
  Budget b1, b2;
  auto ctx_local = rig.Ctx(*rig.local), ctx_served = rig.Ctx(*served);
  ExpectSameEpisodes(RunDecisionEpisodes(ctx_local, Specs(10), envs::Split::kTrain, false, b1),
                     RunDecisionEpisodes(ctx_served, Specs(10), envs::Split::kTrain, false, b2));
  EXPECT_EQ(b1.env_steps, b2.env_steps);
  EXPECT_EQ(b1.rollout.forwards, b2.rollout.forwards);

  // Three workers: two groups of slots take turns (more, smaller forwards);
  // greedy play does not depend on how the batch was split.
  auto three = Served({"maze", "size=3"}, {"workers=3"});
  Budget g1, g3;
  auto ctx3 = rig.Ctx(*three);
  ExpectSameEpisodes(RunDecisionEpisodes(ctx_local, Specs(10), envs::Split::kTest, true, g1),
                     RunDecisionEpisodes(ctx3, Specs(10), envs::Split::kTest, true, g3));
  EXPECT_GT(g3.rollout.forwards, g1.rollout.forwards);
}

TEST(ExternalRollout, CrashedEnvDropsOnlyItsEpisodes) {
  Rig rig;
  testing::TempDir dir("external_crash");
  // The server process dies at its 7th step request, once; the 6 episodes it
  // was playing are dropped and a fresh process plays the other 4.
  auto env = Served({"maze", "size=3", "--crash-after", "6", "--once", dir.str() + "/crashed"},
                    {"on_error=\"drop_episode\""});
  auto ctx = rig.Ctx(*env);
  Budget b;
  auto eps = RunDecisionEpisodes(ctx, Specs(10), envs::Split::kTrain, false, b);
  EXPECT_GE(b.episodes_dropped, 1);
  EXPECT_LE(b.episodes_dropped, 6);
  EXPECT_EQ(static_cast<int64_t>(eps.size()) + b.episodes_dropped, 10);
  EXPECT_EQ(b.episodes, static_cast<int64_t>(eps.size()));
  for (const auto& e : eps) EXPECT_TRUE(e.steps.back().terminal);
  // The survivors are whole episodes of their own specs (the dropped ones left
  // no trace in them): same start as the uninterrupted rollout's.
  Budget clean;
  auto ctx_local = rig.Ctx(*rig.local);
  auto all = RunDecisionEpisodes(ctx_local, Specs(10), envs::Split::kTrain, false, clean);
  for (const auto& e : eps) {
    const auto& same = all.at(e.spec.stream);
    EXPECT_EQ(same.spec.env_seed, e.spec.env_seed);
    EXPECT_EQ(same.steps.at(0).prompt.text, e.steps.at(0).prompt.text);
  }

  auto stop = Served({"maze", "size=3", "--crash-after", "6"});
  auto ctx_stop = rig.Ctx(*stop);
  Budget b2;
  EXPECT_THROW(RunDecisionEpisodes(ctx_stop, Specs(10), envs::Split::kTrain, false, b2), EnvError);
}

// [env] retries: the episodes a crash broke are played again from reset with
// their own seeds and streams, so the rollout is the one an unbroken env gives;
// each says how many plays it took. Retries spent under on_error = "stop": the
// env error ends the rollout.
TEST(ExternalRollout, RetriedEpisodesAreTheEpisodesAnUnbrokenEnvPlays) {
  Rig rig;
  testing::TempDir dir("external_retry");
  auto env = Served({"maze", "size=3", "--crash-after", "6", "--once", dir.str() + "/crashed"},
                    {"retries=1", "retry_backoff_s=0"});
  auto ctx = rig.Ctx(*env);
  Budget b;
  auto eps = RunDecisionEpisodes(ctx, Specs(10), envs::Split::kTest, /*greedy=*/true, b);
  Budget clean;
  auto ctx_local = rig.Ctx(*rig.local);
  ExpectSameEpisodes(RunDecisionEpisodes(ctx_local, Specs(10), envs::Split::kTest, true, clean),
                     eps);
  EXPECT_EQ(b.episodes, 10);
  EXPECT_EQ(b.episodes_dropped, 0);
  EXPECT_GE(b.episodes_retried, 1);
  EXPECT_LE(b.episodes_retried, 6);
  int retried = 0;
  for (const auto& e : eps) retried += e.attempts - 1;
  EXPECT_EQ(retried, b.episodes_retried);
  // Every retry's decisions were spent: more env steps than the clean run's.
  EXPECT_GT(b.env_steps, clean.env_steps);

  auto always =
      Served({"maze", "size=3", "--crash-after", "6"}, {"retries=1", "retry_backoff_s=0"});
  auto ctx_always = rig.Ctx(*always);
  Budget b2;
  EXPECT_THROW(RunDecisionEpisodes(ctx_always, Specs(10), envs::Split::kTest, true, b2), EnvError);
}

TEST(ExternalRollout, AnswersTheGrammarRejectsGoToTheEnvsCompiler) {
  auto env = envs::MakeEnv(
      "external", {"command=" + nlohmann::json({"python3", std::string(RLID_SOURCE_DIR) +
                                                               "/tests/data/external/lister.py"})
                                     .dump()});
  auto state = env->NewState(1);
  envs::Menu shown = state->CompileMenu();
  Rng rng(3);
  envs::ShuffleMenu(shown, rng);
  // A label of the shown (permuted) menu: the grammar, never the env.
  const auto by_label = CompileAnswer(*state, shown, shown.items[2].label);
  EXPECT_EQ(by_label.action, shown.items[2].action);
  EXPECT_EQ(by_label.item, 2);
  // "num 3" is not a menu realisation; the env's compiler maps it to action 3,
  // which is reported at its position in the shown menu.
  const auto own = CompileAnswer(*state, shown, "I pick num 3");
  ASSERT_TRUE(own.valid()) << own.reason;
  EXPECT_EQ(own.action, 3);
  EXPECT_EQ(shown.items[own.item].action, 3);
  const auto neither = CompileAnswer(*state, shown, "pass");
  EXPECT_FALSE(neither.valid());
  EXPECT_NE(neither.reason.find("the env's own compiler: name a number"), std::string::npos)
      << neither.reason;
}

}  // namespace
}  // namespace rlid::agents

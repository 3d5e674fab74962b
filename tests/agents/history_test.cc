// Multi-turn prompts (prompt.history_steps): the plain prompt shows the last
// N observations and actions oldest first; rollouts of both planes fill them
// from the episode so far, and the store records how many each prompt showed.
#include <gtest/gtest.h>

#include "agents/rollout.h"
#include "memory/store.h"
#include "memory/writer.h"
#include "tests/agents/fixtures.h"

namespace rlid::agents {
namespace {

TEST(History, PlainPromptsShowTheLastStepsOldestFirst) {
  auto env = envs::MakeEnv("maze", {"size=3"});
  auto st = env->NewState(4);
  const auto menu = st->CompileMenu();
  policy::PromptConfig pc;
  const std::vector<policy::HistoryTurn> history = {{"obs one", "go north"}, {"obs two", ""}, {"obs three", "go west"}};
  const std::string none = policy::RenderPromptText(pc, "rules", "now", {}, menu, policy::Plane::kDecision, history);
  EXPECT_EQ(none, policy::RenderPromptText(pc, "rules", "now", {}, menu, policy::Plane::kDecision));
  pc.history_steps = 2;
  const std::string two = policy::RenderPromptText(pc, "rules", "now", {}, menu, policy::Plane::kDecision, history);
  EXPECT_EQ(two.rfind("rules\nEarlier steps:\nobs two\n=> (no valid action)\nobs three\n=> go west\nNow:\nnow\n", 0), 0u)
      << two;
  pc.history_steps = 8;  // more than the episode has: all of it
  EXPECT_NE(policy::RenderPromptText(pc, "rules", "now", {}, menu, policy::Plane::kDecision, history)
                .find("obs one\n=> go north\nobs two"),
            std::string::npos);
}

TEST(History, RolloutsOfBothPlanesShowTheEpisodeSoFarAndRecordIt) {
  auto env = envs::MakeEnv("maze", {"size=3"});
  const auto tok = testing::EnvTokenizer(*env);
  policy::PromptConfig pc;
  pc.history_steps = 2;
  policy::PromptRenderer renderer(pc, tok);
  auto model = testing::TinyModel(tok);
  policy::SamplerOptions so;
  so.max_new_tokens = 6;
  policy::TextSampler sampler(model->config(), so, torch::kCPU);
  sampler.SyncWeights(model);
  testing::TempDir dir("history_store");
  auto store = memory::Store::Open((dir.path() / "rlid.db").string(), memory::Store::Mode::kReadWrite);
  memory::Writer writer(*store);
  memory::RunRecord run;
  run.name = "history";
  run.kind = "train";
  const int64_t run_id = writer.BeginRun(run);
  AgentContext ctx;
  ctx.env = env.get();
  ctx.model = model;
  ctx.renderer = &renderer;
  ctx.sampler = &sampler;
  ctx.seed = 5;
  ctx.num_envs = 4;
  ctx.run_id = run_id;
  ctx.episode_ids = &store->episode_ids();
  std::vector<EpisodeSpec> specs;
  for (uint64_t i = 0; i < 4; ++i) specs.push_back({envs::SplitSeed(envs::Split::kTrain, i), i, -1});
  Budget b;
  auto decision = RunDecisionEpisodes(ctx, specs, envs::Split::kTrain, false, b);
  auto token = RunTokenEpisodes(ctx, specs, envs::Split::kTrain, false, b);
  int checked = 0;
  for (const auto* eps : {&decision, &token}) {
    for (const auto& e : *eps) {
      for (size_t t = 0; t < e.steps.size(); ++t) {
        const auto& s = e.steps[t];
        ASSERT_EQ(s.history.size(), std::min<size_t>(t, 2));
        for (size_t k = 0; k < s.history.size(); ++k) {
          const auto& before = e.steps[t - s.history.size() + k];
          EXPECT_EQ(s.history[k].observation, before.observation);
          EXPECT_EQ(s.history[k].action, before.item >= 0 ? before.menu.items[before.item].command : "");
          EXPECT_NE(s.prompt.text.find(before.observation + "\n=> "), std::string::npos);
        }
        checked += t >= 2;
      }
      writer.Submit(ToRecord(e, ctx));
    }
  }
  EXPECT_GT(checked, 0) << "no episode was long enough to show two earlier steps";
  // The history is part of the prompt the model reads, so its tokens are
  // prompt tokens the budget counts (TrainLoop.BudgetCountersAgreeWithTheStore:
  // budget/prompt_tokens covers every step's prompt).
  policy::PromptConfig bare = pc;
  bare.history_steps = 0;
  const policy::PromptRenderer bare_renderer(bare, tok);
  for (const auto& e : decision)
    for (const auto& s : e.steps) {
      const auto without = bare_renderer.Render(env->Instructions(), s.observation, {}, s.menu,
                                                policy::Plane::kDecision);
      if (s.history.empty()) {
        EXPECT_EQ(s.prompt.tokens, without.tokens);
      } else {
        EXPECT_GT(s.prompt.tokens.size(), without.tokens.size());
      }
    }
  EXPECT_GT(b.prompt_tokens, 0);
  writer.Flush();
  auto q = store->Query("SELECT COUNT(*) FROM steps WHERE history_steps != MIN(t, 2)");
  EXPECT_EQ(std::get<int64_t>(q.rows[0][0]), 0);
  q = store->Query("SELECT COUNT(*) FROM steps WHERE history_steps = 2");
  EXPECT_GT(std::get<int64_t>(q.rows[0][0]), 0);
  writer.EndRun(run_id, "completed");
}

}  // namespace
}  // namespace rlid::agents

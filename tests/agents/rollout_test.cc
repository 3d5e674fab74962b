// Rollouts: batched decision episodes are deterministic by seed, count their
// budget, and produce store records; the token plane compiles free text, and
// every invalid answer is recorded with its reason.
#include "agents/rollout.h"

#include <gtest/gtest.h>

#include "core/error.h"
#include "memory/store.h"
#include "memory/writer.h"
#include "tests/agents/fixtures.h"

namespace rlid::agents {
namespace {

struct Rig {
  std::unique_ptr<envs::Env> env;
  policy::Tokenizer tok;
  policy::TransformerLM model{nullptr};
  std::unique_ptr<policy::PromptRenderer> renderer;
  explicit Rig(const std::string& env_name, std::vector<std::string> params = {},
               policy::PromptConfig prompt = {}) {
    env = envs::MakeEnv(env_name, params);
    tok = testing::EnvTokenizer(*env);
    model = testing::TinyModel(tok);
    renderer = std::make_unique<policy::PromptRenderer>(prompt, tok);
  }
  AgentContext Ctx() {
    AgentContext c;
    c.env = env.get();
    c.model = model;
    c.renderer = renderer.get();
    c.seed = 11;
    c.num_envs = 5;
    return c;
  }
};

std::vector<EpisodeSpec> Specs(int n, uint64_t base = 0) {
  std::vector<EpisodeSpec> s;
  for (int i = 0; i < n; ++i) s.push_back({envs::SplitSeed(envs::Split::kTrain, base + i), base + i, i / 2});
  return s;
}

TEST(Rollout, DecisionEpisodesAreDeterministicAndCounted) {
  Rig rig("maze", {"size=3"});
  auto ctx = rig.Ctx();
  Budget b1, b2;
  auto a = RunDecisionEpisodes(ctx, Specs(8), envs::Split::kTrain, false, b1);
  auto b = RunDecisionEpisodes(ctx, Specs(8), envs::Split::kTrain, false, b2);
  ASSERT_EQ(a.size(), 8u);
  int64_t steps = 0;
  for (size_t e = 0; e < a.size(); ++e) {
    ASSERT_EQ(a[e].steps.size(), b[e].steps.size());
    for (size_t t = 0; t < a[e].steps.size(); ++t) {
      EXPECT_EQ(a[e].steps[t].action, b[e].steps[t].action);
      EXPECT_EQ(a[e].steps[t].prompt.text, b[e].steps[t].prompt.text);
      // p(a|s) over the menu sums to one.
      double total = 0;
      for (float lp : a[e].steps[t].decision.log_p) total += std::exp(lp);
      EXPECT_NEAR(total, 1.0, 1e-4);
    }
    EXPECT_EQ(a[e].spec.env_seed, Specs(8)[e].env_seed);
    steps += static_cast<int64_t>(a[e].steps.size());
  }
  EXPECT_EQ(b1.env_steps, steps);
  EXPECT_EQ(b1.samples_generated, steps);
  EXPECT_EQ(b1.episodes, 8);
  EXPECT_GT(b1.rollout.forwards, 0);
  EXPECT_LT(b1.rollout.forwards, steps);  // lockstep batching: one forward serves several episodes
  EXPECT_GT(b1.rollout.flops, 0);
  EXPECT_EQ(b1.rollout.backwards, 0);
  EXPECT_GT(b1.prompt_tokens, 0);
  EXPECT_EQ(b1.env_steps, b2.env_steps);
}

TEST(Rollout, GreedyPicksTheArgmax) {
  Rig rig("bandit");
  auto ctx = rig.Ctx();
  Budget b;
  auto eps = RunDecisionEpisodes(ctx, Specs(6), envs::Split::kTest, true, b);
  for (const auto& e : eps)
    for (const auto& s : e.steps)
      EXPECT_EQ(s.item, std::max_element(s.decision.log_p.begin(), s.decision.log_p.end()) -
                            s.decision.log_p.begin());
}

TEST(Rollout, RecordsReachTheStore) {
  Rig rig("keys");
  testing::TempDir dir("rollout_store");
  auto store = memory::Store::Open((dir.path() / "rlid.db").string(), memory::Store::Mode::kReadWrite);
  memory::Writer writer(*store);
  memory::RunRecord run;
  run.name = "t";
  run.kind = "train";
  int64_t run_id = writer.BeginRun(run);
  memory::MemoryConfig mc;
  mc.enabled = true;
  mc.scope = memory::MemoryScope::kEpisode;
  memory::MemoryBank bank(mc, run_id, &store->item_ids());
  auto ctx = rig.Ctx();
  ctx.bank = &bank;
  ctx.run_id = run_id;
  ctx.episode_ids = &store->episode_ids();
  Budget b;
  auto eps = RunDecisionEpisodes(ctx, Specs(4), envs::Split::kTrain, false, b);
  for (const auto& e : eps) writer.Submit(ToRecord(e, ctx));
  writer.EndRun(run_id, "completed");
  auto q = store->Query("SELECT count(*) FROM episodes");
  EXPECT_EQ(std::get<int64_t>(q.rows[0][0]), 4);
  q = store->Query("SELECT count(*) FROM steps");
  EXPECT_EQ(std::get<int64_t>(q.rows[0][0]), b.env_steps);
  // Menu probabilities of every step sum to one.
  q = store->Query("SELECT max(abs(s - 1.0)) FROM (SELECT sum(probability) s FROM menu_items GROUP BY episode_id, t)");
  EXPECT_LT(std::get<double>(q.rows[0][0]), 1e-4);
  // keys emits facts; with memory on they are written and read back into prompts.
  q = store->Query("SELECT count(*) FROM memory_items");
  EXPECT_GT(std::get<int64_t>(q.rows[0][0]), 0);
  q = store->Query("SELECT count(*) FROM memory_reads");
  EXPECT_GT(std::get<int64_t>(q.rows[0][0]), 0);
  EXPECT_TRUE(store->CheckIntegrity());
}

TEST(Rollout, TokenPlaneRecordsEveryInvalidAnswerWithItsReason) {
  Rig rig("maze", {"size=3"});
  policy::SamplerOptions so;
  so.max_new_tokens = 6;
  so.temperature = 1.5;  // a random model: mostly garbage answers
  policy::TextSampler sampler(rig.model->config(), so, torch::kCPU);
  sampler.SyncWeights(rig.model);
  auto ctx = rig.Ctx();
  ctx.sampler = &sampler;
  ctx.invalid.rule = agents::InvalidRule::kPenaltyNoop;
  Budget b;
  auto eps = RunTokenEpisodes(ctx, Specs(6), envs::Split::kTrain, false, b);
  int64_t invalid = 0, decisions = 0;
  for (const auto& e : eps) {
    for (const auto& s : e.steps) {
      ++decisions;
      EXPECT_FALSE(s.text.response.empty());
      EXPECT_EQ(s.text.response.size(), s.text.rollout_logp.size());
      if (s.invalid) {
        ++invalid;
        EXPECT_FALSE(s.invalid_reason.empty());
        EXPECT_EQ(s.action, envs::kNoAction);
        EXPECT_DOUBLE_EQ(s.reward, ctx.invalid.penalty);
      } else {
        EXPECT_GE(s.menu.IndexOfAction(s.action), 0);
      }
    }
    EXPECT_LE(static_cast<int>(e.steps.size()), rig.env->Info().step_limit);
  }
  EXPECT_GT(invalid, 0);
  EXPECT_EQ(b.invalid_steps, invalid);
  EXPECT_EQ(b.env_steps, decisions);  // an invalid answer used an interaction too
  EXPECT_GT(b.generated_tokens, 0);
}

// Think-then-decide: every decision first samples a scratchpad z (at most
// max_think_tokens, ended by its line), reads the menu after z ++ answer
// prefix, and records log π(z|s) from that readout pass — the same number a
// plain teacher-forced scoring gives. The budget counts z's tokens, and greedy
// evaluation is deterministic.
TEST(Rollout, DecisionPlaneThinksThenReadsTheMenu) {
  policy::PromptConfig pc;
  pc.reasoning = true;
  pc.max_think_tokens = 5;
  Rig rig("arith", {"digits=2", "choices=2"}, pc);
  policy::SamplerOptions so;
  so.max_new_tokens = 2;  // the scratchpad limit is max_think_tokens, not this
  policy::TextSampler sampler(rig.model->config(), so, torch::kCPU);
  sampler.SyncWeights(rig.model);
  auto ctx = rig.Ctx();
  ctx.sampler = &sampler;
  Budget b;
  auto eps = RunDecisionEpisodes(ctx, Specs(6), envs::Split::kTrain, false, b);
  ASSERT_EQ(eps.size(), 6u);
  int64_t z_tokens = 0, long_thoughts = 0;
  const auto prefix = rig.renderer->EncodeCached(pc.answer_prefix);
  for (const auto& e : eps) {
    ASSERT_EQ(e.steps.size(), 1u);
    const auto& st = e.steps[0];
    EXPECT_NE(st.prompt.text.find("Reasoning:"), std::string::npos);
    ASSERT_FALSE(st.text.response.empty());
    EXPECT_LE(st.text.response.size(), 5u);
    long_thoughts += st.text.response.size() > 2;
    EXPECT_EQ(st.text.response.size(), st.text.rollout_logp.size());
    z_tokens += static_cast<int64_t>(st.text.response.size());
    // The readout suffix is the answer prefix, after a newline unless z ended its line.
    ASSERT_GE(st.decision.readout_suffix.size(), prefix.size());
    EXPECT_TRUE(std::equal(prefix.rbegin(), prefix.rend(), st.decision.readout_suffix.rbegin()));
    // log π(z|s) from the readout pass = plain teacher-forced scoring.
    torch::NoGradGuard ng;
    const double plain =
        policy::NaiveRealisationLogProbs(rig.model, st.prompt.tokens, st.text.response)
            .sum()
            .item<double>();
    EXPECT_NEAR(st.decision.think_logp, plain, 1e-3 * std::max(1.0, std::abs(plain)));
    EXPECT_LT(st.decision.think_logp, 0.0);
    double total = 0;
    for (float lp : st.decision.log_p) total += std::exp(lp);
    EXPECT_NEAR(total, 1.0, 1e-4);
    // The store keeps the scratchpad as the step's generated text, and the joint log-prob.
    auto rec = ToRecord(e, ctx);
    EXPECT_EQ(rec.steps[0].generated_text, st.text.response_text);
    EXPECT_NEAR(rec.steps[0].logp_rollout, st.decision.log_p[st.item] + st.decision.think_logp,
                1e-5);
  }
  EXPECT_GT(long_thoughts, 0);  // the sampler's own max_new_tokens did not cap z
  EXPECT_EQ(b.generated_tokens, z_tokens);
  EXPECT_EQ(sampler.options().max_new_tokens, 2);  // restored after the rollout

  // Greedy: deterministic scratchpads and choices.
  Budget g1, g2;
  auto a = RunDecisionEpisodes(ctx, Specs(4), envs::Split::kTest, true, g1);
  auto c = RunDecisionEpisodes(ctx, Specs(4), envs::Split::kTest, true, g2);
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].steps[0].text.response, c[i].steps[0].text.response);
    EXPECT_EQ(a[i].steps[0].item, c[i].steps[0].item);
  }
  EXPECT_EQ(sampler.options().temperature, 1.0);

  ctx.sampler = nullptr;  // a reasoning decision plane needs its sampler
  Budget none;
  EXPECT_THROW(RunDecisionEpisodes(ctx, Specs(1), envs::Split::kTrain, false, none), ConfigError);
}

// The warm start's demonstrations with reasoning prompts: each step carries
// the env's worked reasoning as its scratchpad, the token-plane target is
// " <reasoning>\nAction: <label>" (which the answer grammar compiles back to
// the demonstrated item), and the decision plane reads after the same tokens.
// An env without worked reasoning is refused with a hint.
TEST(Rollout, ScriptedDemonstrationsCarryTheWorkedReasoning) {
  policy::PromptConfig pc;
  pc.reasoning = true;
  Rig rig("arith", {"digits=3"}, pc);
  auto ctx = rig.Ctx();
  Budget b;
  Chooser first_optimal = [](const envs::State& state, const StepData& step, Rng&) {
    auto best = dynamic_cast<const envs::OracleState&>(state).OptimalActions();
    return step.menu.IndexOfAction(best.at(0));
  };
  auto eps = RunScriptedEpisodes(ctx, Specs(5), envs::Split::kTrain, first_optimal, b);
  ASSERT_EQ(eps.size(), 5u);
  const auto& tok = rig.renderer->tokenizer();
  for (const auto& e : eps) {
    const auto& st = e.steps.at(0);
    const auto& item = st.menu.items[st.item];
    // "... ; so 8 1 1": the worked reasoning ends with the answer the item names.
    ASSERT_NE(st.text.response_text.find(" so "), std::string::npos) << st.text.response_text;
    EXPECT_EQ(item.command,
              "answer " + st.text.response_text.substr(st.text.response_text.rfind(" so ") + 4));
    EXPECT_EQ(st.text.response, rig.renderer->ThoughtTokens(st.text.response_text));
    EXPECT_EQ(st.decision.readout_suffix, rig.renderer->EncodeCached(pc.answer_prefix));
    auto answer = rig.renderer->AnswerTokens(item, false, st.text.response_text);
    EXPECT_EQ(answer.back(), tok.eos_id());
    const std::string text = tok.Decode(answer, /*skip_special=*/true);
    EXPECT_EQ(text, " " + st.text.response_text + "\nAction: " + item.label);
    EXPECT_EQ(st.menu.Compile(text).item, st.item) << text;
    auto req = ReadoutRequestFor(*rig.renderer, st, ctx.readout, false);
    EXPECT_EQ(req.scored_begin, static_cast<int64_t>(st.prompt.tokens.size()));
    EXPECT_EQ(req.scored_end - req.scored_begin, static_cast<int64_t>(st.text.response.size()));
  }
  Rig maze("maze", {"size=3"}, pc);
  auto mctx = maze.Ctx();
  Chooser any = [](const envs::State&, const StepData&, Rng&) { return 0; };
  EXPECT_THROW(RunScriptedEpisodes(mctx, Specs(1), envs::Split::kTrain, any, b), ConfigError);
}

TEST(Rollout, InvalidRuleEndStopsTheEpisode) {
  Rig rig("maze", {"size=3"});
  policy::SamplerOptions so;
  so.max_new_tokens = 4;
  so.temperature = 2.0;
  policy::TextSampler sampler(rig.model->config(), so, torch::kCPU);
  sampler.SyncWeights(rig.model);
  auto ctx = rig.Ctx();
  ctx.sampler = &sampler;
  ctx.invalid.rule = agents::InvalidRule::kEnd;
  Budget b;
  for (const auto& e : RunTokenEpisodes(ctx, Specs(6), envs::Split::kTrain, false, b)) {
    for (size_t t = 0; t < e.steps.size(); ++t)
      if (e.steps[t].invalid) {
        EXPECT_EQ(t + 1, e.steps.size()) << "an invalid answer must end the episode";
      }
  }
}

TEST(Rollout, CompileFuzzNeverCrashes) {
  // Random generations (uniform random token ids) compiled against real menus.
  Rig rig("keys");
  auto s = rig.env->NewState(4);
  auto menu = s->CompileMenu();
  Rng rng(9);
  int invalid = 0;
  for (int i = 0; i < 2000; ++i) {
    std::vector<policy::TokenId> ids(rng.UniformInt(12));
    for (auto& id : ids) id = static_cast<policy::TokenId>(rng.UniformInt(rig.tok.VocabSize()));
    std::string text = rig.tok.Decode(ids);
    auto res = menu.Compile(text);
    if (!res.valid()) {
      ++invalid;
      EXPECT_FALSE(res.reason.empty());
    } else {
      EXPECT_GE(menu.IndexOfAction(res.action), 0);
    }
  }
  EXPECT_GT(invalid, 1000);
}

}  // namespace
}  // namespace rlid::agents

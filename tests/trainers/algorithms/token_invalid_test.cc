// Invalid answers in the token plane. The compile step is fuzzed on the real
// menus of every registered environment (random token strings, random bytes,
// mangled labels and commands): it never throws, a valid result names a menu
// item, and an invalid one says why. Then each invalid rule (penalty_retry,
// penalty_noop, end) is played with a random policy, and every invalid step
// reaches the store with its reason.
#include <gtest/gtest.h>

#include <algorithm>

#include "agents/rollout.h"
#include "memory/store.h"
#include "memory/writer.h"
#include "tests/agents/fixtures.h"

namespace rlid::testing {
namespace {

// Mangled variants of menu text: what a half-trained policy writes.
std::string Mangle(const envs::Menu& menu, Rng& rng, const policy::Tokenizer& tok) {
  const auto& item = menu.items[rng.UniformInt(menu.size())];
  const auto& other = menu.items[rng.UniformInt(menu.size())];
  switch (rng.UniformInt(9)) {
    case 0: {  // random token ids
      std::vector<policy::TokenId> ids(rng.UniformInt(12));
      for (auto& id : ids) id = static_cast<policy::TokenId>(rng.UniformInt(tok.VocabSize()));
      return tok.Decode(ids);
    }
    case 1: {  // random bytes, invalid UTF-8 and control characters included
      std::string s(rng.UniformInt(24), '\0');
      for (auto& c : s) c = static_cast<char>(rng.UniformInt(256));
      return s;
    }
    case 2:
      return item.label + " " + other.label;
    case 3:
      return "Action: " + item.command + " and " + other.command;
    case 4:
      return item.command.substr(0, rng.UniformInt(item.command.size() + 1));
    case 5: {
      std::string s = item.command;
      if (!s.empty()) s[rng.UniformInt(s.size())] = static_cast<char>('a' + rng.UniformInt(26));
      return s;
    }
    case 6:
      return std::string(rng.UniformInt(3000), item.label.empty() ? 'x' : item.label[0]);
    case 7:
      return "\n\n" + item.label + ")\n" + other.command;
    default:
      return item.label + ") " + item.command + ".";
  }
}

TEST(TokenInvalid, CompileFuzzOnEveryEnvironment) {
  for (const std::string& name : envs::BuiltInEnvNames()) {
    SCOPED_TRACE(name);
    auto env = envs::MakeEnv(name);
    auto tok = EnvTokenizer(*env, 300);
    Rng rng = Rng::Stream(5, "fuzz_" + name);
    int valid = 0, invalid = 0;
    for (uint64_t seed = 0; seed < 3; ++seed) {
      auto state = env->NewState(envs::SplitSeed(envs::Split::kTrain, seed));
      for (int step = 0; step < 6 && !state->IsTerminal(); ++step) {
        auto menu = state->CompileMenu();
        for (int k = 0; k < 120; ++k) {
          const std::string text = Mangle(menu, rng, tok);
          envs::CompileResult res;
          ASSERT_NO_THROW(res = menu.Compile(text)) << "text: " << text;
          if (res.valid()) {
            ++valid;
            ASSERT_GE(res.item, 0);
            ASSERT_LT(res.item, static_cast<int>(menu.size()));
            EXPECT_EQ(menu.items[res.item].action, res.action);
            EXPECT_TRUE(res.reason.empty());
          } else {
            ++invalid;
            EXPECT_EQ(res.item, -1);
            EXPECT_FALSE(res.reason.empty()) << "text: " << text;
          }
          // The state's own compile agrees with its menu's.
          EXPECT_EQ(state->Compile(text).action, res.action) << "text: " << text;
        }
        auto legal = state->LegalActions();
        state->Apply(legal[rng.UniformInt(legal.size())]);
      }
    }
    EXPECT_GT(valid, 0);
    EXPECT_GT(invalid, 0);
  }
}

// A random tiny policy on maze size 3, sampling hot enough that most answers
// are invalid; episodes recorded into a fresh store.
struct RandomPolicyRig {
  std::unique_ptr<envs::Env> env = envs::MakeEnv("maze", {"size=3"});
  policy::Tokenizer tok = EnvTokenizer(*env);
  policy::TransformerLM model = TinyModel(tok);
  policy::PromptRenderer renderer{policy::PromptConfig{}, tok};
  std::unique_ptr<policy::TextSampler> sampler;
  TempDir dir{"token_invalid"};
  std::unique_ptr<memory::Store> store;
  std::unique_ptr<memory::Writer> writer;
  int64_t run_id = 0;

  RandomPolicyRig() {
    policy::SamplerOptions so;
    so.max_new_tokens = 5;
    so.temperature = 1.3;
    sampler = std::make_unique<policy::TextSampler>(model->config(), so, torch::kCPU);
    sampler->SyncWeights(model);
    store = memory::Store::Open((dir.path() / "rlid.db").string(), memory::Store::Mode::kReadWrite);
    writer = std::make_unique<memory::Writer>(*store);
    memory::RunRecord run;
    run.name = "invalid";
    run.kind = "train";
    run_id = writer->BeginRun(run);
  }
  std::vector<agents::EpisodeData> Play(const std::string& rule, int max_retries, int episodes) {
    agents::AgentContext ctx;
    ctx.env = env.get();
    ctx.model = model;
    ctx.renderer = &renderer;
    ctx.sampler = sampler.get();
    ctx.seed = 17;
    ctx.num_envs = episodes;
    ctx.run_id = run_id;
    ctx.episode_ids = &store->episode_ids();
    ctx.invalid.rule = RequireMode<agents::InvalidRule>("rule", rule);
    ctx.invalid.penalty = -0.25;
    ctx.invalid.max_retries = max_retries;
    std::vector<agents::EpisodeSpec> specs;
    for (int i = 0; i < episodes; ++i)
      specs.push_back({envs::SplitSeed(envs::Split::kTrain, static_cast<uint64_t>(i)),
                       static_cast<uint64_t>(i), 0});
    agents::Budget b;
    auto eps = agents::RunTokenEpisodes(ctx, specs, envs::Split::kTrain, false, b);
    int64_t invalid = 0;
    for (const auto& e : eps) {
      writer->Submit(agents::ToRecord(e, ctx));
      invalid += e.invalid_steps;
    }
    writer->Flush();
    EXPECT_EQ(b.invalid_steps, invalid);
    return eps;
  }
};

// Length of the run of invalid answers that ends at step t (inclusive).
int InvalidRunEndingAt(const agents::EpisodeData& e, size_t t) {
  int n = 0;
  for (size_t k = t + 1; k-- > 0 && e.steps[k].invalid;) ++n;
  return n;
}

TEST(TokenInvalid, EachRuleDoesWhatItSays) {
  RandomPolicyRig rig;
  const int step_limit = rig.env->Info().step_limit;
  int64_t total_invalid = 0;

  // penalty_retry: at most max_retries + 1 invalid answers in a row; the one past the retries ends
  // the episode.
  int ended_by_retries = 0;
  for (const auto& e : rig.Play("penalty_retry", 1, 8)) {
    double ret = 0;
    for (size_t t = 0; t < e.steps.size(); ++t) {
      const auto& st = e.steps[t];
      ret += st.reward;
      EXPECT_LE(InvalidRunEndingAt(e, t), 2);
      if (st.invalid) {
        EXPECT_EQ(st.reward, -0.25);
        EXPECT_FALSE(st.invalid_reason.empty());
        EXPECT_EQ(st.action, envs::kNoAction);
        ++total_invalid;
      }
    }
    EXPECT_DOUBLE_EQ(e.ret, ret);
    if (e.steps.back().invalid && InvalidRunEndingAt(e, e.steps.size() - 1) == 2) {
      EXPECT_TRUE(e.steps.back().terminal);
      ++ended_by_retries;
    }
    EXPECT_LE(static_cast<int>(e.steps.size()), step_limit);
  }
  EXPECT_GT(ended_by_retries, 0);

  // penalty_noop: an invalid answer leaves the state as it was; only the turn limit or the goal
  // ends an episode.
  for (const auto& e : rig.Play("penalty_noop", 0, 4)) {
    for (size_t t = 0; t + 1 < e.steps.size(); ++t) {
      if (e.steps[t].invalid) {
        EXPECT_EQ(e.steps[t + 1].observation, e.steps[t].observation);
        EXPECT_FALSE(e.steps[t].terminal);
      }
    }
    total_invalid += e.invalid_steps;
    EXPECT_TRUE(e.success || (e.truncated && static_cast<int>(e.steps.size()) == step_limit))
        << "steps " << e.steps.size();
  }

  // end: the first invalid answer is the last step.
  int ended = 0;
  for (const auto& e : rig.Play("end", 0, 8)) {
    for (size_t t = 0; t + 1 < e.steps.size(); ++t) EXPECT_FALSE(e.steps[t].invalid);
    if (e.steps.back().invalid) ++ended;
    total_invalid += e.invalid_steps;
  }
  EXPECT_GT(ended, 0);

  // Every invalid step is in the store with its reason, action -1 and no label.
  auto q = rig.store->Query(
      "SELECT count(*), sum(invalid_reason <> ''), sum(action = -1), sum(label = ''), "
      "sum(generated_text IS NOT NULL) "
      "FROM steps WHERE invalid = 1");
  ASSERT_EQ(q.rows.size(), 1u);
  for (const auto& v : q.rows[0]) EXPECT_EQ(std::get<int64_t>(v), total_invalid);
  EXPECT_GT(total_invalid, 10);
  q = rig.store->Query(
      "SELECT count(*) FROM steps WHERE invalid = 0 AND (action < 0 OR invalid_reason <> '')");
  EXPECT_EQ(std::get<int64_t>(q.rows[0][0]), 0);
  EXPECT_TRUE(rig.store->CheckIntegrity());
}

}  // namespace
}  // namespace rlid::testing

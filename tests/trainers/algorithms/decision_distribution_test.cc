// The distribution decision PPO samples from is the one in its ratio, KL and
// entropy — with readout normalisation "other" too, where the off-menu mass is
// an outcome of its own — and an episode the step limit cuts is bootstrapped
// with V(s_T) (unless the observation shows the steps left).
#include <gtest/gtest.h>

#include <cmath>

#include "agents/rollout.h"
#include "policy/reading/readout.h"
#include "tests/agents/fixtures.h"
#include "trainers/algorithms/ppo_decision.h"
#include "trainers/losses/decision_losses.h"

namespace rlid::trainers {
namespace {

struct Rig {
  std::unique_ptr<envs::Env> env;
  policy::Tokenizer tok;
  policy::TransformerLM model{nullptr};
  std::unique_ptr<policy::PromptRenderer> renderer;
  explicit Rig(const std::string& env_name, std::vector<std::string> params = {}) {
    env = envs::MakeEnv(env_name, params);
    tok = testing::EnvTokenizer(*env);
    model = testing::TinyModel(tok, 5);
    renderer = std::make_unique<policy::PromptRenderer>(policy::PromptConfig{}, tok);
  }
  agents::AgentContext Ctx(policy::Normalisation normalisation = policy::Normalisation::kMenu) {
    agents::AgentContext c;
    c.env = env.get();
    c.model = model;
    c.renderer = renderer.get();
    c.readout.normalisation = normalisation;
    c.seed = 11;
    c.num_envs = 16;
    return c;
  }
};

std::vector<agents::EpisodeSpec> Specs(int n) {
  std::vector<agents::EpisodeSpec> s;
  for (int i = 0; i < n; ++i)
    s.push_back({envs::SplitSeed(envs::Split::kTrain, i), static_cast<uint64_t>(i), i});
  return s;
}

// The readout request of a bandit state, labels only: every realisation is one token.
policy::ReadoutRequest LabelRequest(Rig& rig, envs::Menu* menu_out = nullptr) {
  auto state = rig.env->NewState(0);
  auto menu = state->CompileMenu();
  auto prompt = rig.renderer->Render(rig.env->Instructions(), state->Observation(), {}, menu,
                                     policy::Plane::kDecision);
  policy::ReadoutRequest r;
  r.prompt = prompt.tokens;
  r.realisations = rig.renderer->Realisations(menu, /*all=*/false);
  r.end_token = rig.tok.eos_id();
  if (menu_out) *menu_out = menu;
  return r;
}

// Shifts by `delta` the root logit of every token that is neither in the
// prompt nor a label (their embeddings are not read): with single-token
// realisations only the off-menu mass moves, every label's probability scaling by
// the same factor.
void MoveOffMenuMass(policy::TransformerLM& model, const policy::ReadoutRequest& r, double delta) {
  torch::NoGradGuard ng;
  const int64_t P = static_cast<int64_t>(r.prompt.size());
  auto ids = torch::tensor(std::vector<int64_t>(r.prompt.begin(), r.prompt.end())).view({1, P});
  auto pos = torch::arange(P).view({1, P});
  auto mask = policy::TransformerLMImpl::CausalMask(torch::full({1}, P, torch::kInt64), P);
  auto h = model->forward(ids, pos, mask).hidden[0][P - 1];  // [D]
  std::set<int64_t> used(r.prompt.begin(), r.prompt.end());
  for (const auto& item : r.realisations) used.insert(item[0][0]);
  auto w = model->lm_head ? model->lm_head->weight : model->model->embed_tokens->weight;
  for (int64_t j = 0; j < w.size(0); ++j)
    if (!used.count(j)) w[j].add_(delta * h / h.pow(2).sum());
}

TEST(DecisionDistribution, MenuRowsSumToOneAndOtherAddsTheOffMenuOutcome) {
  Rig rig("bandit");
  auto r = LabelRequest(rig);
  torch::NoGradGuard ng;
  auto menu = policy::DecisionDistribution(policy::Readout(rig.model, {r}, {policy::Normalisation::kMenu, false}));
  auto other = policy::DecisionDistribution(policy::Readout(rig.model, {r}, {policy::Normalisation::kOther, false}));
  const int64_t K = static_cast<int64_t>(r.realisations.size());
  ASSERT_EQ(menu.log_p.size(1), K);
  ASSERT_EQ(other.log_p.size(1), K + 1);
  EXPECT_NEAR(menu.log_p.exp().sum().item<double>(), 1.0, 1e-5);
  EXPECT_NEAR(other.log_p.exp().sum().item<double>(), 1.0, 1e-5);
  EXPECT_TRUE(other.mask.all().item<bool>());
}

// The bug: with "other", actions were sampled from the renormalised menu but
// the ratio/KL used the unnormalised marginals (a spurious Z_old/Z_new, and a
// "KL" that went negative). Now one distribution serves all of them.
TEST(DecisionDistribution, AnUpdateThatMovesOnlyOffMenuMass) {
  Rig rig("bandit");
  auto r = LabelRequest(rig);
  torch::NoGradGuard ng;
  auto read = [&](policy::Normalisation norm) {
    return policy::DecisionDistribution(policy::Readout(rig.model, {r}, {norm, false}));
  };
  auto old_menu = read(policy::Normalisation::kMenu), old_other = read(policy::Normalisation::kOther);
  MoveOffMenuMass(rig.model, r, -6.0);
  auto new_menu = read(policy::Normalisation::kMenu), new_other = read(policy::Normalisation::kOther);
  const int64_t K = old_menu.log_p.size(1);
  const double po = std::exp(old_other.log_p[0][K].item<double>());
  const double pn = std::exp(new_other.log_p[0][K].item<double>());
  ASSERT_LT(pn, po - 0.05) << "the update should move off-menu mass";
  // Menu normalisation: the menu distribution did not change at all.
  EXPECT_LT((new_menu.log_p - old_menu.log_p).abs().max().item<double>(), 1e-5);
  EXPECT_NEAR(MenuKl(old_menu.log_p.to(torch::kFloat64), new_menu.log_p.to(torch::kFloat64),
                     old_menu.mask)
                  .item<double>(),
              0.0, 1e-6);
  // Off-menu outcome: every menu item's ratio is (1 - pn) / (1 - po), the
  // ratio the sampler's distribution really changed by; the KL is the
  // Bernoulli KL of menu vs off-menu, and never negative.
  for (int64_t k = 0; k < K; ++k)
    EXPECT_NEAR(std::exp((new_other.log_p[0][k] - old_other.log_p[0][k]).item<double>()),
                (1 - pn) / (1 - po), 1e-4);
  const double kl = MenuKl(old_other.log_p.to(torch::kFloat64),
                           new_other.log_p.to(torch::kFloat64), old_other.mask)
                        .item<double>();
  const double bernoulli = po * std::log(po / pn) + (1 - po) * std::log((1 - po) / (1 - pn));
  EXPECT_NEAR(kl, bernoulli, 1e-4);
  EXPECT_GT(kl, 0);
  // The entropy is the K + 1 outcomes' entropy.
  const double h = MenuEntropy(new_other.log_p.to(torch::kFloat64), new_other.mask).item<double>();
  double expect = 0;
  for (int64_t k = 0; k <= K; ++k) {
    const double p = std::exp(new_other.log_p[0][k].item<double>());
    expect -= p * std::log(p);
  }
  EXPECT_NEAR(h, expect, 1e-5);
}

// Rollouts with "other" draw the off-menu outcome as often as its mass says,
// play it as an invalid answer, and decision PPO's batch keeps its log p.
TEST(DecisionDistribution, RolloutsSampleTheOffMenuOutcomeAndTrainOnIt) {
  Rig rig("bandit");
  auto ctx = rig.Ctx(policy::Normalisation::kOther);
  ctx.invalid.rule = agents::InvalidRule::kEnd;
  agents::Budget b;
  auto eps = agents::RunDecisionEpisodes(ctx, Specs(400), envs::Split::kTrain, false, b);
  double expected = 0, drawn = 0;
  for (const auto& e : eps)
    for (const auto& st : e.steps) {
      expected += std::exp(st.decision.log_p_other);
      if (st.invalid) {
        drawn += 1;
        EXPECT_EQ(st.item, -1);
        EXPECT_NE(st.invalid_reason.find("off-menu"), std::string::npos);
      }
    }
  const double n = 400, p = expected / n;
  ASSERT_GT(p, 0.05) << "a random model should put real mass off the menu";
  EXPECT_NEAR(drawn / n, p, 4 * std::sqrt(p * (1 - p) / n));
  EXPECT_EQ(b.env_steps, 400);  // every attempt is an env step
  EXPECT_EQ(b.invalid_steps, static_cast<int64_t>(drawn));
  TrainerConfig cfg;
  auto batch = FlattenDecisions(eps, ctx.readout, cfg, /*use_ref=*/false, 0);
  for (int64_t i = 0; i < batch.size(); ++i) {
    const auto* st = batch.dec[i].step;
    const int64_t K = static_cast<int64_t>(st->decision.log_p.size());
    EXPECT_EQ(batch.outcome[i].item<int64_t>(), st->invalid ? K : st->item);
    EXPECT_FLOAT_EQ(batch.old_logp[i].item<double>(),
                    st->invalid ? st->decision.log_p_other : st->decision.log_p[st->item]);
  }
}

// Maze with a step limit of 2: most episodes are cut. The cut state's value is
// read in the next lockstep readout and the return continues from it.
TEST(Truncation, CutEpisodesBootstrapFromTheValueOfTheLastState) {
  Rig rig("maze", {"size=4", "step_limit=2"});
  auto ctx = rig.Ctx();
  ctx.bootstrap_truncated = true;
  agents::Budget b;
  auto eps = agents::RunDecisionEpisodes(ctx, Specs(16), envs::Split::kTrain, false, b);
  int cut = 0;
  for (const auto& e : eps) {
    if (e.truncated) {
      ++cut;
      EXPECT_TRUE(std::isfinite(e.bootstrap_value));
    } else {
      EXPECT_TRUE(std::isnan(e.bootstrap_value));
    }
  }
  ASSERT_GT(cut, 8);
  TrainerConfig cfg;
  cfg.advantage.estimator = "gae";
  cfg.advantage.gamma = 0.9;
  cfg.advantage.lambda = 1.0;
  auto batch = FlattenDecisions(eps, ctx.readout, cfg, false, 0);
  auto [adv, ret] = DecisionAdvantages(cfg, eps, batch);
  // With lambda = 1 the value target of an episode's last decision is r_T + gamma V(s_T).
  for (int64_t i = 0; i < batch.size(); ++i) {
    if (!batch.ends[i].item<bool>()) continue;
    const auto& e = eps[batch.dec[i].episode];
    const double boot = e.truncated ? e.bootstrap_value : 0.0;
    EXPECT_NEAR(ret[i].item<double>(), batch.dec[i].step->reward + 0.9 * boot, 1e-9);
  }
  // The same episodes with the steps left in the observation: the cut is part
  // of the state, so it is terminal for the critic (no extra readout).
  ctx.show_steps_left = true;
  agents::Budget b2;
  auto shown = agents::RunDecisionEpisodes(ctx, Specs(16), envs::Split::kTrain, false, b2);
  for (const auto& e : shown) {
    EXPECT_TRUE(std::isnan(e.bootstrap_value));
    EXPECT_NE(e.steps[0].observation.find("Steps left: 2."), std::string::npos);
  }
}

// Decision-plane GiGPO on maze episodes in groups of 4 (one seed per group):
// with step_weight 0 it is grpo on the episode returns; the step term of each
// decision is its discounted return-to-go minus the mean over the decisions of
// its group taken in the same state (equal state_hash), computed here directly.
TEST(StepGroups, DecisionGigpoComparesReturnsOfDecisionsInOneState) {
  Rig rig("maze", {"size=4", "step_limit=6"});
  auto ctx = rig.Ctx();
  std::vector<agents::EpisodeSpec> specs;
  for (int i = 0; i < 8; ++i)
    specs.push_back({envs::SplitSeed(envs::Split::kTrain, i / 4), static_cast<uint64_t>(i), i / 4});
  agents::Budget budget;
  auto eps = agents::RunDecisionEpisodes(ctx, specs, envs::Split::kTrain, false, budget);
  TrainerConfig cfg;
  cfg.advantage.estimator = "gigpo";
  cfg.advantage.std_norm = false;
  cfg.advantage.gamma = 0.9;
  cfg.advantage.step_weight = 0.0;
  const auto batch = FlattenDecisions(eps, ctx.readout, cfg, false, 0);
  const auto episode_only = DecisionAdvantages(cfg, eps, batch).first;
  TrainerConfig grpo = cfg;
  grpo.advantage.estimator = "grpo";
  EXPECT_LT((episode_only - DecisionAdvantages(grpo, eps, batch).first).abs().max().item<double>(),
            1e-12);
  cfg.advantage.step_weight = 1.0;
  const auto both = DecisionAdvantages(cfg, eps, batch).first;
  const int64_t N = batch.size();
  std::vector<double> to_go(N);
  for (int64_t i = N - 1; i >= 0; --i) {
    const bool last = i == N - 1 || batch.dec[i + 1].episode != batch.dec[i].episode;
    to_go[i] = batch.reward[i].item<double>() + (last ? 0.0 : cfg.advantage.gamma * to_go[i + 1]);
  }
  int shared = 0;
  for (int64_t i = 0; i < N; ++i) {
    double sum = 0;
    int n = 0;
    for (int64_t j = 0; j < N; ++j)
      if (eps[batch.dec[j].episode].spec.group == eps[batch.dec[i].episode].spec.group &&
          batch.dec[j].step->state_hash == batch.dec[i].step->state_hash)
        sum += to_go[j], ++n;
    shared += n > 1;
    const double step_term = n > 1 ? to_go[i] - sum / n : 0.0;
    EXPECT_NEAR(both[i].item<double>() - episode_only[i].item<double>(), step_term, 1e-12) << i;
  }
  EXPECT_GE(shared, 8);  // at least every episode's first decision, in its seed's start state
}

}  // namespace
}  // namespace rlid::trainers

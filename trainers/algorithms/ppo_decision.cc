// Decision-level PPO (CleanRL ppo.py, one decision = one "token"):
//   rollout with the single-pass label readout -> advantages (GAE with the
//   value head, or grpo/rloo over episodes that share an env seed) -> epochs x
//   minibatches of the clipped surrogate on p(a|s) ratios + value loss + menu
//   entropy bonus + exact menu KL to a frozen reference -> AdamW step.
// The all-action option replaces the sampled-action surrogate with the
// Rao-Blackwellised sum over the menu, sum_a grad p(a|s) A(s,a), where A comes
// from the afterstate critic (the value head read on every afterstate branch
// in the same forward pass).
#include <fmt/format.h>

#include <cmath>
#include <memory>

#include "core/error.h"
#include "core/rng.h"
#include "trainers/losses/advantages.h"
#include "trainers/losses/decision_losses.h"
#include "trainers/losses/losses.h"
#include "trainers/losses/tensor_checks.h"
#include "trainers/algorithms/trainer.h"

namespace rlid::trainers {
namespace {

// One decision of the rollout batch, flattened.
struct Decision {
  const agents::StepData* step;
  int episode;
};

// [B, K] float64 matrix of a per-menu-item field (log p, afterstate values,
// reference log p) of the minibatch's decisions, `pad` beyond each menu.
torch::Tensor MenuMatrix(const std::vector<Decision>& dec, const std::vector<int64_t>& idx,
                         int64_t K, std::vector<float> agents::StepData::*field, double pad) {
  std::vector<const std::vector<float>*> rows;
  for (int64_t i : idx) rows.push_back(&(dec[i].step->*field));
  return PadRows(rows, K, pad);
}

class PpoDecisionTrainer final : public Trainer {
 public:
  policy::Plane plane() const override { return policy::Plane::kDecision; }

  void Setup(Session& s) override {
    std::vector<std::string> names;
    std::vector<torch::Tensor> params;
    for (auto& p : s.model->named_parameters()) {
      names.push_back(p.key());
      params.push_back(p.value());
    }
    opt_ =
        std::make_unique<Optimizer>(params, s.cfg.trainer.optim, s.cfg.trainer.iterations, names);
  }
  void SaveState(const std::string& dir) const override { opt_->Save(dir + "/optimizer.pt"); }
  void LoadState(const std::string& dir) override { opt_->Load(dir + "/optimizer.pt"); }

  Metrics Iterate(Session& s, int64_t it) override {
    const TrainerConfig& t = s.cfg.trainer;
    const bool all_action = t.estimator == "all_action";
    const bool use_ref = t.kl.coef > 0 && s.ref_model;

    // ---- 1. rollout ------------------------------------------------------------
    agents::AgentContext ctx = s.AgentCtx(it);
    auto episodes =
        agents::RunDecisionEpisodes(ctx, TrainSpecs(t, s.cfg.run.seed, it), envs::Split::kTrain,
                                    /*greedy=*/false, s.budget);
    s.Record(episodes, ctx);
    Metrics metrics = RolloutMetrics(episodes);

    std::vector<Decision> dec;
    for (size_t e = 0; e < episodes.size(); ++e)
      for (const auto& st : episodes[e].steps) dec.push_back({&st, static_cast<int>(e)});
    const int64_t N = static_cast<int64_t>(dec.size());
    auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
    std::vector<double> old_logp_v(N), old_value_v(N), reward_v(N);
    std::vector<int64_t> items_v(N);
    std::vector<int64_t> ends_v(N), episode_v(N);
    for (int64_t i = 0; i < N; ++i) {
      const auto* st = dec[i].step;
      old_logp_v[i] = st->log_p[st->item];
      old_value_v[i] = st->value;
      double r = st->reward;
      if (use_ref && t.kl.placement == "reward") {
        double kl = 0;  // exact menu KL of the rollout policy to the reference
        for (size_t k = 0; k < st->log_p.size(); ++k)
          kl += std::exp(st->log_p[k]) * (st->log_p[k] - st->ref_log_p[k]);
        r -= t.kl.coef * kl;
      }
      reward_v[i] = r;
      items_v[i] = st->item;
      ends_v[i] = i + 1 == N || dec[i + 1].episode != dec[i].episode;
      episode_v[i] = dec[i].episode;
    }
    torch::Tensor old_logp = torch::tensor(old_logp_v, f64),
                  old_value = torch::tensor(old_value_v, f64);
    torch::Tensor reward = torch::tensor(reward_v, f64),
                  items = torch::tensor(items_v, torch::kInt64);
    torch::Tensor ends = torch::tensor(ends_v, torch::kInt64).to(torch::kBool);
    CheckFinite(reward, "reward", it);

    // ---- 2. advantages -----------------------------------------------------------
    torch::Tensor adv, ret;
    if (t.advantage.estimator == "gae") {
      DecisionGaeInputs in{reward, old_value, ends, torch::Tensor()};
      auto r = GaeAdvantages(in, t.advantage.gamma, t.advantage.lambda);
      adv = r.advantages, ret = r.returns;
    } else if (t.advantage.estimator == "grpo" || t.advantage.estimator == "rloo") {
      // Episode-level: the episode's return, centred within its env-seed group,
      // broadcast to every decision of the episode.
      const int64_t E = static_cast<int64_t>(episodes.size());
      std::vector<double> returns;
      std::vector<int64_t> groups;
      for (int64_t e = 0; e < E; ++e) {
        returns.push_back(episodes[e].ret);
        groups.push_back(episodes[e].spec.group);
      }
      torch::Tensor scores = torch::tensor(returns, f64);
      torch::Tensor ep_adv =
          t.advantage.estimator == "grpo"
              ? GroupNormalizedScores(scores, groups, t.advantage.std_norm, t.advantage.std_eps)
              : LeaveOneOutScores(scores, groups);
      adv = ep_adv.to(torch::kFloat64).index_select(0, torch::tensor(episode_v, torch::kInt64));
      // The value head still learns the discounted return-to-go.
      ret = GaeAdvantages({reward, torch::zeros({N}, f64), ends, torch::Tensor()},
                          t.advantage.gamma, 1.0)
                .returns;
    } else {
      throw ConfigError(
          fmt::format("ppo_decision supports advantage estimators gae, grpo, rloo; got '{}'",
                      t.advantage.estimator),
          "set trainer.advantage.estimator");
    }
    CheckFinite(adv, "advantages", it);
    CheckFinite(ret, "value targets", it);

    // ---- 3. epochs x minibatches -------------------------------------------------
    const auto ropts = agents::ReadoutOptionsFor(s.cfg.readout, all_action);
    Rng shuffle = Rng::Stream(s.cfg.run.seed, "minibatches", it);
    double sum_pg = 0, sum_v = 0, sum_ent = 0, sum_kl = 0, sum_clip = 0, sum_akl = 0, sum_gn = 0,
           sum_after = 0;
    double sum_menu_kl = 0;
    int64_t updates = 0;
    s.model->train();
    int64_t epochs_run = 0;
    for (int64_t epoch = 0; epoch < t.epochs; ++epoch) {
      auto perm = shuffle.Permutation(static_cast<int>(N));
      double epoch_kl = 0;
      int64_t epoch_updates = 0;
      for (int64_t b0 = 0; b0 < N; b0 += t.minibatch_size) {
        int64_t b1 = std::min(N, b0 + t.minibatch_size);
        std::vector<int64_t> idx(perm.begin() + b0, perm.begin() + b1);
        auto ix = torch::tensor(idx, torch::kInt64);
        std::vector<policy::ReadoutRequest> reqs;
        for (int64_t i : idx)
          reqs.push_back(
              agents::ReadoutRequestFor(*s.renderer, *dec[i].step, s.cfg.readout, all_action));
        auto rb = policy::Readout(s.model, reqs, ropts);
        s.budget.train_flops +=
            3.0 * static_cast<double>(rb.tokens_processed) *
            s.model->config().ForwardFlopsPerToken(static_cast<int64_t>(reqs[0].prompt.size()));
        auto dev = rb.log_p.device();
        const int64_t K = rb.log_p.size(1);
        auto mask = rb.item_mask;
        auto mb_items = items.index_select(0, ix).to(dev);
        auto logp = rb.log_p.gather(1, mb_items.unsqueeze(1)).squeeze(1).to(torch::kFloat64);
        auto mb_adv = adv.index_select(0, ix).to(dev);
        if (t.normalize_advantages && t.advantage.estimator == "gae" && mb_adv.numel() > 1)
          mb_adv = (mb_adv - mb_adv.mean()) / (mb_adv.std() + 1e-8);

        // Exact KL(old || new) over the menu: the early-stop signal of target_kl
        // (the decision plane can afford it exactly; approx_kl is its
        // single-sample estimate, logged for comparison with CleanRL).
        double menu_kl = 0;
        {
          torch::NoGradGuard ng;
          auto old_items = MenuMatrix(dec, idx, K, &agents::StepData::log_p, -INFINITY);
          menu_kl =
              MenuKl(old_items.to(dev), rb.log_p.to(torch::kFloat64), mask).mean().item<double>();
        }
        sum_menu_kl += menu_kl;
        epoch_kl += menu_kl;
        ++epoch_updates;

        torch::Tensor pg;
        if (!all_action) {
          auto res = DecisionPpoLoss(t.loss, logp, old_logp.index_select(0, ix).to(dev), mb_adv);
          pg = res.loss;
          sum_clip += res.metrics.count("clip_frac") ? res.metrics["clip_frac"] : 0.0;
          sum_akl += res.metrics.count("approx_kl") ? res.metrics["approx_kl"] : 0.0;
        } else {
          // q_hat(s, a): afterstate critic values recorded at rollout (detached).
          auto q = MenuMatrix(dec, idx, K, &agents::StepData::afterstate_values, 0.0);
          pg = -AllActionSurrogate(rb.log_p.to(torch::kFloat64), mask, q.to(dev)).mean();
          // The afterstate critic learns the return of the action taken.
          auto after =
              rb.afterstate_value.gather(1, mb_items.unsqueeze(1)).squeeze(1).to(torch::kFloat64);
          auto after_loss = 0.5 * (after - ret.index_select(0, ix).to(dev)).pow(2).mean();
          sum_after += after_loss.item<double>();
          pg = pg + t.vf_coef * after_loss;
        }
        auto v = ValueLoss(rb.value.to(torch::kFloat64), old_value.index_select(0, ix).to(dev),
                           ret.index_select(0, ix).to(dev), t.vf_clip);
        auto ent = MenuEntropy(rb.log_p.to(torch::kFloat64), mask).mean();
        torch::Tensor loss = pg + t.vf_coef * v - t.ent_coef * ent;
        if (use_ref && t.kl.placement == "loss") {
          auto ref = MenuMatrix(dec, idx, K, &agents::StepData::ref_log_p, -INFINITY);
          auto kl = MenuKl(rb.log_p.to(torch::kFloat64), ref.to(dev), mask).mean();
          loss = loss + t.kl.coef * kl;
          sum_kl += kl.item<double>();
        }
        CheckFinite(loss, "loss", it);
        opt_->ZeroGrad();
        loss.backward();
        sum_gn += opt_->Step(it, it);
        sum_pg += pg.item<double>();
        sum_v += v.item<double>();
        sum_ent += ent.item<double>();
        ++updates;
      }
      ++epochs_run;
      if (t.target_kl > 0 && epoch_updates > 0 && epoch_kl / epoch_updates > t.target_kl) break;
    }
    s.budget.samples_used += N;
    if (s.sampler) s.sampler->SyncWeights(s.model);

    double u = std::max<int64_t>(updates, 1);
    metrics.push_back({"losses/policy", sum_pg / u});
    metrics.push_back({"losses/value", sum_v / u});
    metrics.push_back({"losses/entropy", sum_ent / u});
    if (!all_action) metrics.push_back({"losses/clipfrac", sum_clip / u});
    if (!all_action) metrics.push_back({"losses/approx_kl", sum_akl / u});
    metrics.push_back({"losses/menu_kl_old", sum_menu_kl / u});
    if (use_ref) metrics.push_back({"losses/kl_ref", sum_kl / u});
    if (all_action) metrics.push_back({"losses/afterstate_value", sum_after / u});
    metrics.push_back({"losses/grad_norm", sum_gn / u});
    metrics.push_back({"charts/lr", opt_->current_lr()});
    metrics.push_back({"charts/decisions", static_cast<double>(N)});
    metrics.push_back({"charts/epochs", static_cast<double>(epochs_run)});
    if (t.grad_variance_every > 0 && it % t.grad_variance_every == 0)
      for (const auto& kv : MeasureGradientVariance(s, dec, adv, all_action)) metrics.push_back(kv);
    return metrics;
  }

 private:
  // Per-sample gradient variance of the policy-gradient estimators on the same
  // states. With the afterstate critic both estimators use the same A(s,a):
  // sampled g_i = A(s_i,a_i) grad log p(a_i|s_i); all-action g_i = sum_a A grad p.
  Metrics MeasureGradientVariance(Session& s, const std::vector<Decision>& dec,
                                  const torch::Tensor& adv, bool all_action) {
    const auto& t = s.cfg.trainer;
    const int64_t total = static_cast<int64_t>(dec.size());
    const int64_t n = std::min<int64_t>(t.grad_variance_samples, total);
    if (n < 2) return {};
    const auto ropts = agents::ReadoutOptionsFor(s.cfg.readout, all_action);
    std::vector<std::function<torch::Tensor()>> sampled, marginal;
    for (int64_t j = 0; j < n; ++j) {
      const int64_t i = j * total / n;  // spread over the batch, not one episode's first steps
      const agents::StepData* st = dec[i].step;
      auto req = agents::ReadoutRequestFor(*s.renderer, *st, s.cfg.readout, all_action);
      double a_gae = adv[i].item<double>();
      sampled.push_back([&, req, st, a_gae] {
        auto rb = policy::Readout(s.model, {req}, ropts);
        double a = a_gae;
        if (all_action) {
          double base = 0;
          for (size_t k = 0; k < st->afterstate_values.size(); ++k)
            base += std::exp(st->log_p[k]) * st->afterstate_values[k];
          a = st->afterstate_values[st->item] - base;
        }
        return -a * rb.log_p[0][st->item];
      });
      if (all_action)
        marginal.push_back([&, req, st] {
          auto rb = policy::Readout(s.model, {req}, ropts);
          auto q = torch::tensor(std::vector<double>(st->afterstate_values.begin(),
                                                     st->afterstate_values.end()),
                                 torch::kFloat64)
                       .unsqueeze(0)
                       .to(rb.log_p.device());
          return -AllActionSurrogate(rb.log_p.to(torch::kFloat64), rb.item_mask, q).sum();
        });
    }
    Metrics m = {{"grad/var_sampled", GradientVariance(s.model, sampled)}};
    if (all_action) m.push_back({"grad/var_all_action", GradientVariance(s.model, marginal)});
    return m;
  }

  std::unique_ptr<Optimizer> opt_;
};

const Registrar<TrainerPresetRegistry> kPreset("ppo_decision", "decision PPO defaults", [] {
  return std::make_unique<TrainerPreset>(TrainerPreset{[](TrainerConfig& t) {
    t.advantage.estimator = "gae";
    t.group_size = 1;
  }});
});
const Registrar<TrainerRegistry> kRegister(
    "ppo_decision", "decision-level PPO on p(a|s) from the single-pass label readout",
    [] { return std::make_unique<PpoDecisionTrainer>(); });

}  // namespace
}  // namespace rlid::trainers

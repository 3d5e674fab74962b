// Decision-level PPO (CleanRL ppo.py, one decision = one "token"):
//   rollout with the single-pass label readout -> advantages (GAE with the
//   value head, bootstrapped with V(s_T) where the step limit cut an episode,
//   or grpo/rloo over episodes that share an env seed) -> epochs x minibatches
//   of the clipped surrogate on the decision distribution's ratios + value
//   loss + entropy bonus + exact KL to a frozen reference -> AdamW step.
// The decision distribution is policy::DecisionDistribution: the K menu items,
// plus the off-menu outcome with readout normalisation "other" — the one that
// samples is the one in the ratio, the KL and the entropy.
// The all-action option replaces the sampled-action surrogate with the
// Rao-Blackwellised sum over the menu, sum_a grad p(a|s) A(s,a), where A comes
// from the afterstate critic (the value head read on every afterstate branch
// in the same forward pass).
#include "trainers/algorithms/ppo_decision.h"

#include <fmt/format.h>

#include <cmath>
#include <memory>

#include "core/error.h"
#include "core/interrupt.h"
#include "core/rng.h"
#include "trainers/algorithms/trainer.h"
#include "trainers/losses/advantages.h"
#include "trainers/losses/decision_losses.h"
#include "trainers/losses/losses.h"
#include "trainers/losses/tensor_checks.h"

namespace rlid::trainers {

DecisionBatch FlattenDecisions(const std::vector<agents::EpisodeData>& episodes,
                               const agents::ReadoutConfig& readout, const TrainerConfig& t,
                               bool use_ref, int64_t it) {
  DecisionBatch b;
  for (size_t e = 0; e < episodes.size(); ++e)
    for (const auto& st : episodes[e].steps) b.dec.push_back({&st, static_cast<int>(e)});
  const int64_t N = b.size();
  std::vector<double> old_logp(N), old_value(N), reward(N), end_values(N, 0.0);
  std::vector<int64_t> outcome(N), ends(N);
  for (int64_t i = 0; i < N; ++i) {
    const auto* st = b.dec[i].step;
    b.old_dist.push_back(agents::DecisionLogP(*st, readout));
    outcome[i] = agents::DecisionOutcome(*st);
    // The joint log π(z|s) + log p(a|s,z) with a scratchpad (think_logp = 0 without).
    old_logp[i] = b.old_dist.back()[outcome[i]] + st->think_logp;
    old_value[i] = st->value;
    double r = st->reward;
    if (use_ref) {
      b.ref_dist.push_back(st->ref_log_p);
      if (t.kl.placement == "reward") {
        double kl = 0;  // exact KL of the rollout policy's decision distribution to the reference
        const auto& p = b.old_dist.back();
        for (size_t k = 0; k < p.size(); ++k)
          if (std::isfinite(p[k])) kl += std::exp(p[k]) * (p[k] - st->ref_log_p[k]);
        r -= t.kl.coef * kl;
      }
    }
    reward[i] = r;
    ends[i] = i + 1 == N || b.dec[i + 1].episode != b.dec[i].episode;
    // A cut episode continues from V(s_T); a terminal one from 0.
    const auto& ep = episodes[b.dec[i].episode];
    if (ends[i] && ep.truncated && std::isfinite(ep.bootstrap_value))
      end_values[i] = ep.bootstrap_value;
  }
  auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  b.outcome = torch::tensor(outcome, torch::kInt64);
  b.old_logp = torch::tensor(old_logp, f64);
  b.old_value = torch::tensor(old_value, f64);
  b.reward = torch::tensor(reward, f64);
  b.ends = torch::tensor(ends, torch::kInt64).to(torch::kBool);
  b.end_values = torch::tensor(end_values, f64);
  CheckFinite(b.reward, "reward", it);
  return b;
}

std::pair<torch::Tensor, torch::Tensor> DecisionAdvantages(
    const TrainerConfig& t, const std::vector<agents::EpisodeData>& episodes,
    const DecisionBatch& b) {
  const int64_t N = b.size();
  auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  if (t.advantage.estimator == "gae") {
    auto r = GaeAdvantages({b.reward, b.old_value, b.ends, b.end_values}, t.advantage.gamma,
                           t.advantage.lambda);
    return {r.advantages, r.returns};
  }
  if (t.advantage.estimator != "grpo" && t.advantage.estimator != "rloo")
    throw ConfigError(
        fmt::format("ppo_decision supports advantage estimators gae, grpo, rloo; got '{}'",
                    t.advantage.estimator),
        "set trainer.advantage.estimator");
  // Episode-level: the episode's return, centred within its env-seed group,
  // broadcast to every decision of the episode.
  std::vector<double> returns;
  std::vector<int64_t> groups, episode_of(N);
  for (const auto& e : episodes) {
    returns.push_back(e.ret);
    groups.push_back(e.spec.group);
  }
  for (int64_t i = 0; i < N; ++i) episode_of[i] = b.dec[i].episode;
  torch::Tensor scores = torch::tensor(returns, f64);
  torch::Tensor ep_adv =
      t.advantage.estimator == "grpo"
          ? GroupNormalizedScores(scores, groups, t.advantage.std_norm, t.advantage.std_eps)
          : LeaveOneOutScores(scores, groups);
  auto adv = ep_adv.to(torch::kFloat64).index_select(0, torch::tensor(episode_of, torch::kInt64));
  // The value head still learns the discounted return-to-go (bootstrapped at cuts).
  auto ret = GaeAdvantages({b.reward, torch::zeros({N}, f64), b.ends, b.end_values},
                           t.advantage.gamma, 1.0)
                 .returns;
  return {adv, ret};
}

namespace {

using Batch = DecisionBatch;
using Decision = DecisionBatch::Decision;

// [B, K'] float64 rows of per-decision vectors for the minibatch `idx`.
torch::Tensor Rows(const std::vector<std::vector<float>>& rows, const std::vector<int64_t>& idx,
                   int64_t width, double pad) {
  std::vector<const std::vector<float>*> picked;
  for (int64_t i : idx) picked.push_back(&rows[i]);
  return PadRows(picked, width, pad);
}

// log p, value, entropy of the minibatch's decisions under the current weights.
struct Forward {
  torch::Tensor dist, mask, logp, value, afterstate_value;
  policy::ForwardCost cost;
};

Forward ReadDecisions(const agents::AgentContext& agent, const std::vector<Decision>& dec,
                      const std::vector<int64_t>& idx, const torch::Tensor& outcomes,
                      bool all_action) {
  std::vector<policy::ReadoutRequest> reqs;
  for (int64_t i : idx)
    reqs.push_back(
        agents::ReadoutRequestFor(*agent.renderer, *dec[i].step, agent.readout, all_action));
  auto model = agent.model;
  auto rb = policy::Readout(model, reqs, agents::ReadoutOptionsFor(agent.readout, all_action));
  auto dd = policy::DecisionDistribution(rb);
  Forward f;
  f.dist = dd.log_p.to(torch::kFloat64);
  f.mask = dd.mask;
  // log p(a|s), or log π(z|s) + log p(a|s,z) for a step that thought first.
  f.logp = f.dist.gather(1, outcomes.to(f.dist.device()).unsqueeze(1)).squeeze(1) +
           rb.span_logp.to(torch::kFloat64);
  f.value = rb.value.to(torch::kFloat64);
  if (all_action) f.afterstate_value = rb.afterstate_value.to(torch::kFloat64);
  f.cost = rb.cost;
  return f;
}

class PpoDecisionTrainer final : public Trainer {
 public:
  policy::Plane plane() const override { return policy::Plane::kDecision; }

  void Setup(const TrainerConfig& cfg, policy::TransformerLM model) override {
    auto trainable = TrainableParameters(model);
    opt_ = std::make_unique<Optimizer>(trainable.tensors, cfg.optim, cfg.iterations, trainable.names);
  }
  void SaveState(const std::string& dir) const override { opt_->Save(dir + "/optimizer.pt"); }
  void LoadState(const std::string& dir) override { opt_->Load(dir + "/optimizer.pt"); }

  Metrics Iterate(IterationContext& c) override {
    const TrainerConfig& t = c.cfg;
    const int64_t it = c.iteration;
    const bool all_action = t.estimator == "all_action";
    const bool use_ref = t.kl.coef > 0 && c.agent.ref_model;
    policy::TransformerLM model = c.agent.model;

    // ---- 1. rollout: this rank's share of the train seeds ---------------------------
    c.agent.bootstrap_truncated = t.bootstrap_truncated;
    auto episodes = agents::RunDecisionEpisodes(c.agent, RankSpecs(TrainSpecs(t, c.seed, it), c.comm),
                                                envs::Split::kTrain, /*greedy=*/false, c.budget);
    c.recorder.Episodes(episodes, c.agent);
    Metrics metrics = RolloutMetrics(episodes, &c.comm);
    Batch batch = FlattenDecisions(episodes, c.agent.readout, t, use_ref, it);
    const int64_t N = batch.size();
    // The job's decisions, rank after rank (one process's order): this rank's
    // are [offset, offset + N) of N_all.
    int64_t offset = 0, N_all = 0;
    {
      const auto counts = c.comm.Gather(std::vector<int64_t>{N}, "decision counts");
      for (int r = 0; r < c.comm.size(); ++r) {
        if (r < c.comm.rank()) offset += counts[r][0];
        N_all += counts[r][0];
      }
    }

    // ---- 2. advantages (per episode or per group: no other rank needed) ----------
    auto [adv, ret] = DecisionAdvantages(t, episodes, batch);
    CheckFinite(adv, "advantages", it);
    CheckFinite(ret, "value targets", it);

    // ---- 3. gradient signal-to-noise at the rollout weights (rank 0's episodes) ----
    if (t.grad_snr_every > 0 && it % t.grad_snr_every == 0 && c.comm.rank() == 0)
      for (const auto& kv : Snr(c, episodes, batch, adv, all_action)) metrics.push_back(kv);

    // ---- 4. epochs x minibatches of the job's decisions ------------------------------
    // Every rank draws the same permutation of the N_all decisions, computes the
    // terms of the minibatch's decisions it holds, each divided by the
    // minibatch's global size M, and the gradients are summed over ranks: one
    // process's update on the same batch.
    const std::vector<torch::Tensor> params = TrainableParameters(model).tensors;
    Rng shuffle = Rng::Stream(c.seed, "minibatches", it);
    double sum_pg = 0, sum_v = 0, sum_ent = 0, sum_kl = 0, sum_clip = 0, sum_akl = 0, sum_gn = 0,
           sum_after = 0, sum_menu_kl = 0;
    int64_t updates = 0, epochs_run = 0;
    model->train();
    for (int64_t epoch = 0; epoch < t.epochs; ++epoch) {
      auto perm = shuffle.Permutation(static_cast<int>(N_all));
      double epoch_kl = 0;
      int64_t epoch_updates = 0;
      for (int64_t b0 = 0; b0 < N_all; b0 += t.minibatch_size) {
        ThrowIfInterrupted();  // between optimiser steps (a checkpoint holds whole iterations)
        const int64_t b1 = std::min(N_all, b0 + t.minibatch_size);
        const double M = static_cast<double>(b1 - b0);
        std::vector<int64_t> idx;  // this rank's decisions of the minibatch (local indices)
        for (int64_t k = b0; k < b1; ++k)
          if (perm[k] >= offset && perm[k] < offset + N) idx.push_back(perm[k] - offset);
        auto ix = torch::tensor(idx, torch::kInt64);
        // Whitening (GAE, normalize_advantages) uses the whole minibatch's mean and std.
        double adv_mean = 0, adv_std = 1;
        const bool whiten = t.normalize_advantages && t.advantage.estimator == "gae" && M > 1;
        if (whiten) {
          auto a = adv.index_select(0, ix);
          auto st = c.comm.Sum({a.sum().item<double>(), a.pow(2).sum().item<double>()},
                               "advantage statistics");
          adv_mean = st[0] / M;
          adv_std = std::sqrt(std::max(0.0, (st[1] - M * adv_mean * adv_mean) / (M - 1)));
        }
        // This rank's terms: [menu_kl, pg, value, entropy, kl_ref, clip, approx_kl, afterstate, loss]
        std::vector<double> terms(9, 0.0);
        opt_->ZeroGrad();
        if (!idx.empty()) {
          auto fw =
              ReadDecisions(c.agent, batch.dec, idx, batch.outcome.index_select(0, ix), all_action);
          const auto dev = fw.dist.device();
          const int64_t K = fw.dist.size(1);
          auto pick = [&](const torch::Tensor& x) { return x.index_select(0, ix).to(dev); };
          auto mb_adv = pick(adv);
          if (whiten) mb_adv = (mb_adv - adv_mean) / (adv_std + 1e-8);
          const double share = static_cast<double>(idx.size()) / M;

          // Exact KL(old || new) of the decision distribution: the early-stop
          // signal of target_kl (approx_kl is its single-sample estimate, logged
          // for comparison with CleanRL).
          {
            torch::NoGradGuard ng;
            auto old = Rows(batch.old_dist, idx, K, -INFINITY).to(dev);
            terms[0] = MenuKl(old, fw.dist, fw.mask).sum().item<double>() / M;
          }
          torch::Tensor pg;
          if (!all_action) {
            auto res = DecisionPpoLoss(t.loss, fw.logp, pick(batch.old_logp), mb_adv, {M, M});
            pg = res.loss;
            terms[5] = (res.metrics.count("clip_frac") ? res.metrics["clip_frac"] : 0.0) * share;
            terms[6] = (res.metrics.count("approx_kl") ? res.metrics["approx_kl"] : 0.0) * share;
          } else {
            // q_hat(s, a): afterstate critic values recorded at rollout (detached).
            std::vector<std::vector<float>> q;
            for (int64_t i : idx) q.push_back(batch.dec[i].step->afterstate_values);
            std::vector<int64_t> all(idx.size());
            for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
            // (all_action needs normalisation "menu": the outcomes are the K items.)
            pg = -AllActionSurrogate(fw.dist, fw.mask, Rows(q, all, K, 0.0).to(dev)).sum() / M;
            // The afterstate critic learns the return of the action taken.
            auto taken = pick(batch.outcome);
            auto after = fw.afterstate_value.gather(1, taken.unsqueeze(1)).squeeze(1);
            auto after_loss = 0.5 * (after - pick(ret)).pow(2).sum() / M;
            terms[7] = after_loss.item<double>();
            pg = pg + t.vf_coef * after_loss;
          }
          auto v = ValueLoss(fw.value, pick(batch.old_value), pick(ret), t.vf_clip, M);
          auto ent = MenuEntropy(fw.dist, fw.mask).sum() / M;
          torch::Tensor loss = pg + t.vf_coef * v - t.ent_coef * ent;
          if (use_ref && t.kl.placement == "loss") {
            auto ref = Rows(batch.ref_dist, idx, K, -INFINITY).to(dev);
            auto kl = MenuKl(fw.dist, ref, fw.mask).sum() / M;
            loss = loss + t.kl.coef * kl;
            terms[4] = kl.item<double>();
          }
          loss.backward();
          c.budget.update.AddForwardBackward(model->config(), fw.cost);
          terms[1] = pg.item<double>();
          terms[2] = v.item<double>();
          terms[3] = ent.item<double>();
          terms[8] = loss.item<double>();
        }
        c.comm.AllReduceGradients(params);
        terms = c.comm.Sum(terms, "loss terms");
        if (!std::isfinite(terms[8]))
          throw NumericError(fmt::format("non-finite loss at iteration {}", it),
                             "weights were not updated; lower the learning rate, check rewards, "
                             "or resume from the last checkpoint");
        sum_gn += opt_->Step(it, it);
        sum_menu_kl += terms[0];
        epoch_kl += terms[0];
        sum_pg += terms[1];
        sum_v += terms[2];
        sum_ent += terms[3];
        sum_kl += terms[4];
        sum_clip += terms[5];
        sum_akl += terms[6];
        sum_after += terms[7];
        ++epoch_updates;
        ++updates;
      }
      ++epochs_run;
      if (t.target_kl > 0 && epoch_updates > 0 && epoch_kl / epoch_updates > t.target_kl) break;
    }
    c.budget.samples_used += N;
    if (c.agent.sampler) c.agent.sampler->SyncWeights(model);  // the scratchpads' next rollout

    // ---- 5. metrics --------------------------------------------------------------
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
    metrics.push_back({"charts/decisions", static_cast<double>(N_all)});
    metrics.push_back({"charts/epochs", static_cast<double>(epochs_run)});
    double cut = 0;
    for (const auto& e : episodes) cut += e.truncated;
    const auto cut_of = c.comm.Sum({cut, static_cast<double>(episodes.size())}, "truncations");
    metrics.push_back({"charts/truncated_frac", cut_of[0] / std::max(cut_of[1], 1.0)});
    return metrics;
  }

 private:
  // SNR of the per-episode gradient of this arm's policy loss at the rollout
  // weights (ratio 1): episode i's term is the loss restricted to its
  // decisions with the batch's decision count as the denominator.
  Metrics Snr(IterationContext& c, const std::vector<agents::EpisodeData>& episodes, const Batch& b,
              const torch::Tensor& adv, bool all_action) {
    const int64_t n = std::min<int64_t>(c.cfg.grad_snr_episodes, episodes.size());
    if (n < 2) return {};
    std::vector<std::vector<int64_t>> of(episodes.size());
    for (int64_t i = 0; i < b.size(); ++i) of[b.dec[i].episode].push_back(i);
    const double total = static_cast<double>(b.size());
    policy::TransformerLM model = c.agent.model;
    model->train();
    auto g = MeasureGradientSnr(
        model, n,
        [&](int64_t e) -> std::pair<torch::Tensor, policy::ForwardCost> {
          const auto& idx = of[e];
          auto ix = torch::tensor(idx, torch::kInt64);
          auto fw = ReadDecisions(c.agent, b.dec, idx, b.outcome.index_select(0, ix), all_action);
          const auto dev = fw.dist.device();
          torch::Tensor loss;
          if (!all_action) {
            loss = DecisionPpoLoss(c.cfg.loss, fw.logp, b.old_logp.index_select(0, ix).to(dev),
                                   adv.index_select(0, ix).to(dev), {total, total})
                       .loss;
          } else {
            std::vector<std::vector<float>> q;
            for (int64_t i : idx) q.push_back(b.dec[i].step->afterstate_values);
            std::vector<int64_t> all(idx.size());
            for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
            loss = -AllActionSurrogate(fw.dist, fw.mask, Rows(q, all, fw.dist.size(1), 0.0).to(dev))
                        .sum() /
                   total;
          }
          return {loss, fw.cost};
        },
        c.budget.diagnostic);
    return SnrMetrics(g);
  }

  std::unique_ptr<Optimizer> opt_;
};

const Registrar<TrainerPresetRegistry> kPreset("ppo_decision", "decision PPO defaults", [] {
  return std::make_unique<TrainerPreset>(TrainerPreset{[](TrainerConfig& t) {
                                                         t.advantage.estimator = "gae";
                                                         t.group_size = 1;
                                                       },
                                                       policy::Plane::kDecision});
});
const Registrar<TrainerRegistry> kRegister(
    "ppo_decision", "decision-level PPO on p(a|s) from the single-pass label readout",
    [] { return std::make_unique<PpoDecisionTrainer>(); });

}  // namespace
}  // namespace rlid::trainers

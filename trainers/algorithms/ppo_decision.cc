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
#include <map>
#include <memory>
#include <tuple>

#include "core/error.h"
#include "core/rng.h"
#include "trainers/losses/advantages.h"
#include "trainers/losses/decision_losses.h"
#include "trainers/losses/losses.h"
#include "trainers/losses/tensor_checks.h"
#include "trainers/runtime/epochs.h"
#include "trainers/runtime/rank_metrics.h"
#include "trainers/runtime/trainer.h"

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
    old_logp[i] = b.old_dist.back()[outcome[i]] + st->decision.think_logp;
    old_value[i] = st->decision.value;
    double r = st->reward;
    if (use_ref) {
      b.ref_dist.push_back(st->decision.ref_log_p);
      if (t.kl.placement == KlPlacement::kReward) {
        double kl = 0;  // exact KL of the rollout policy's decision distribution to the reference
        const auto& p = b.old_dist.back();
        for (size_t k = 0; k < p.size(); ++k)
          if (std::isfinite(p[k])) kl += std::exp(p[k]) * (p[k] - st->decision.ref_log_p[k]);
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

namespace {

// The batch's decisions as one row per episode: [E, T] rewards, values and
// mask, and each episode's bootstrap value [E] (its decisions are contiguous).
AdvantageInputs PerStepInputs(const std::vector<agents::EpisodeData>& episodes,
                              const DecisionBatch& b) {
  const int64_t N = b.size(), E = static_cast<int64_t>(episodes.size());
  std::vector<int64_t> row(N), col(N), length(E, 0);
  for (int64_t i = 0; i < N; ++i) {
    row[i] = b.dec[i].episode;
    col[i] = length[row[i]]++;
  }
  int64_t T = 1;
  for (int64_t n : length) T = std::max(T, n);
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  const torch::Tensor rows = torch::tensor(row);
  const auto at = std::vector<torch::indexing::TensorIndex>{rows, torch::tensor(col)};
  AdvantageInputs in;
  in.token_rewards = torch::zeros({E, T}, f64).index_put_(at, b.reward);
  in.values = torch::zeros({E, T}, f64).index_put_(at, b.old_value);
  in.response_mask = torch::zeros({E, T}, torch::kBool).index_put_(at, torch::ones({N}, torch::kBool));
  in.end_values = torch::zeros({E}, f64).index_put_({rows.masked_select(b.ends)},
                                                    b.end_values.masked_select(b.ends));
  return in;
}

}  // namespace

std::pair<torch::Tensor, torch::Tensor> DecisionAdvantages(
    const TrainerConfig& t, const std::vector<agents::EpisodeData>& episodes,
    const DecisionBatch& b, std::vector<std::pair<std::string, double>>* step_groups) {
  const int64_t N = b.size();
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  std::vector<int64_t> episode_of(N);
  for (int64_t i = 0; i < N; ++i) episode_of[i] = b.dec[i].episode;
  const auto ep_index = torch::tensor(episode_of, torch::kInt64);
  const auto estimator = AdvantageRegistry::Global().Make(t.advantage.estimator);
  if (estimator->uses_values()) {
    // Per decision (gae): its returns are the value target.
    AdvantageInputs in = PerStepInputs(episodes, b);
    AdvantageResult r = ComputeAdvantages(t.advantage, in);
    const auto mask = in.response_mask;
    return {r.advantages.masked_select(mask), r.returns.masked_select(mask)};
  }
  AdvantageInputs in;
  torch::Tensor adv;
  if (estimator->needs_steps()) {
    // Per decision (gigpo): its reward, its episode's group, its episode and
    // its state, the anchor that groups decisions taken in one state.
    in.scores = b.reward;
    for (int64_t i = 0; i < N; ++i) {
      in.groups.push_back(episodes[episode_of[i]].spec.group);
      in.anchors.push_back(b.dec[i].step->state_hash);
    }
    in.episodes = episode_of;
    in.response_mask = torch::ones({N, 1}, torch::kBool);
    AdvantageResult result = ComputeAdvantages(t.advantage, in);
    adv = result.advantages.select(1, 0);
    if (step_groups) *step_groups = std::move(result.metrics);
  } else {
    // Per episode: the episode's return is the score of a one-step response in
    // its env-seed group; its advantage goes to every decision of the episode.
    std::vector<double> returns;
    for (const auto& e : episodes) {
      returns.push_back(e.ret);
      in.groups.push_back(e.spec.group);
    }
    in.scores = torch::tensor(returns, f64);
    in.response_mask = torch::ones({static_cast<int64_t>(returns.size()), 1}, torch::kBool);
    adv = ComputeAdvantages(t.advantage, in).advantages.select(1, 0).index_select(0, ep_index);
  }
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

// q_hat(s, a) [B, K]: the afterstate critic's values recorded at rollout for
// the decisions `idx` (detached; 0 past a menu's end).
torch::Tensor AfterstateValues(const Batch& b, const std::vector<int64_t>& idx, int64_t K) {
  std::vector<std::vector<float>> q;
  for (int64_t i : idx) q.push_back(b.dec[i].step->decision.afterstate_values);
  std::vector<int64_t> all(idx.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
  return Rows(q, all, K, 0.0);
}

// log p, value, entropy of the minibatch's decisions under the current weights.
struct Forward {
  torch::Tensor dist, mask, logp, value, afterstate_value;
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
  return f;
}

// pi_prox for a batch played with older weights: the learner's decision
// distributions before its update replace old_dist / old_logp, and the
// rollout's log p moves to behav_logp. One readout without gradient per
// minibatch-sized chunk, counted as update work. (The all-action estimator
// takes no ratio, so it never needs this.)
void ReadProx(IterationContext& c, Batch& b) {
  torch::NoGradGuard no_grad;
  c.agent.model->eval();
  agents::ComputeScope compute(c.budget.update, {c.agent.model});
  b.behav_logp = b.old_logp.clone();
  auto prox_logp = b.old_logp.accessor<double, 1>();
  for (int64_t b0 = 0; b0 < b.size(); b0 += c.cfg.minibatch_size) {
    std::vector<int64_t> idx;
    for (int64_t i = b0; i < std::min(b.size(), b0 + c.cfg.minibatch_size); ++i) idx.push_back(i);
    auto fw = ReadDecisions(c.agent, b.dec, idx,
                            b.outcome.index_select(0, torch::tensor(idx, torch::kInt64)),
                            /*all_action=*/false);
    auto dist = fw.dist.to(torch::kCPU).to(torch::kFloat32).contiguous();
    auto logp = fw.logp.to(torch::kCPU).contiguous();
    for (size_t j = 0; j < idx.size(); ++j) {
      auto& row = b.old_dist[idx[j]];
      const float* d = dist[static_cast<int64_t>(j)].data_ptr<float>();
      row.assign(d, d + row.size());
      prox_logp[idx[j]] = logp[static_cast<int64_t>(j)].item<double>();
    }
  }
}

// staleness/* of the whole batch (every rank's decisions), as the loss applies them.
Metrics StalenessMetrics(const StalenessConfig& cfg, const Batch& b, Comm& comm) {
  static const CombineRules rules = {{"staleness/capped_frac", Combine::kWeightedMean},
                                     {"staleness/kl", Combine::kWeightedMean},
                                     {"staleness/ratio_mean", Combine::kWeightedMean},
                                     {"staleness/weight_mean", Combine::kWeightedMean}};
  std::map<std::string, double> local;
  if (b.size() > 0)
    local = CorrectStaleness(cfg, b.old_logp.unsqueeze(1), b.behav_logp.unsqueeze(1),
                             torch::ones({b.size(), 1}, torch::kBool))
                .metrics;
  const auto job =
      CombineRanks(local, static_cast<double>(b.size()), rules, comm, "staleness metrics");
  return Metrics(job.begin(), job.end());
}

// Each term of one minibatch's loss: a sum over its decisions divided by the
// minibatch's global size M, so the ranks' terms add up to one process's.
struct LossTerms {
  double menu_kl = 0;     // exact KL(old || new) of the decision distribution
  double policy = 0;      // clipped surrogate, or the all-action surrogate
  double value = 0;       // value-head loss
  double entropy = 0;     // menu entropy
  double kl_ref = 0;      // KL to the reference policy (kl.placement = "loss")
  double clip_frac = 0;   // share of decisions whose ratio was clipped
  double approx_kl = 0;   // single-sample estimate of menu_kl (CleanRL's)
  double afterstate = 0;  // afterstate critic loss (all-action estimator)
  double loss = 0;        // what was differentiated

  std::vector<double> Pack() const {
    return {menu_kl, policy, value, entropy, kl_ref, clip_frac, approx_kl, afterstate, loss};
  }
  static LossTerms Unpack(const std::vector<double>& v) {
    return {v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], v[8]};
  }
  LossTerms& operator+=(const LossTerms& o) {
    const auto a = Pack(), b = o.Pack();
    std::vector<double> sum(a.size());
    for (size_t k = 0; k < a.size(); ++k) sum[k] = a[k] + b[k];
    return *this = Unpack(sum);
  }
};

// This rank's decisions within the job's, rank after rank (one process's
// order): [offset, offset + local) of total.
struct JobSlice {
  int64_t offset = 0, local = 0, total = 0;
};

JobSlice SliceOfJob(Comm& comm, int64_t local) {
  JobSlice s{0, local, 0};
  const auto counts = comm.Gather(std::vector<int64_t>{local}, "decision counts");
  for (int r = 0; r < comm.size(); ++r) {
    if (r < comm.rank()) s.offset += counts[r][0];
    s.total += counts[r][0];
  }
  return s;
}

// What the update trains towards: per-decision advantages and value targets.
struct Targets {
  torch::Tensor advantages, returns;  // [N] float64
  bool whiten = false;                // per minibatch (GAE with normalize_advantages)
};

// Sums over every optimiser step of one iteration's update.
struct UpdateTotals {
  LossTerms terms;
  double grad_norm = 0;
  int64_t updates = 0, epochs = 0;
};

// What Learn needs from Prepare: the job's flattened decisions and their targets.
struct Prepared {
  Batch batch;
  JobSlice slice;
  Targets targets;
};

class PpoDecisionTrainer final : public Trainer {
 public:
  policy::Plane plane() const override { return policy::Plane::kDecision; }

  void Setup(const TrainerConfig& cfg, policy::TransformerLM model) override {
    auto trainable = TrainableParameters(model);
    opt_ =
        std::make_unique<Optimizer>(trainable.tensors, cfg.optim, cfg.iterations, trainable.names);
  }
  void SaveState(const std::string& dir) const override { opt_->Save(dir + "/optimizer.pt"); }
  void LoadState(const std::string& dir) override { opt_->Load(dir + "/optimizer.pt"); }

  // Every rank plays its share of the train seeds with the label readout.
  RolloutAhead::Play Play(const IterationContext& c) override {
    const TrainerConfig* t = &c.cfg;
    const Comm* comm = &c.comm;
    const uint64_t seed = c.seed;
    return [t, comm, seed](agents::AgentContext& agent, agents::Budget& budget) {
      agent.bootstrap_truncated = t->decision.bootstrap_truncated;
      return agents::RunDecisionEpisodes(agent,
                                         RankSpecs(TrainSpecs(*t, seed, agent.iteration), *comm),
                                         envs::Split::kTrain, /*greedy=*/false, budget);
    };
  }

  // The decisions as flat tensors (pi_prox read by the learner when the batch
  // is stale and the correction decoupled), then advantages and value targets.
  Metrics Prepare(IterationContext& c, const PlayedBatch& played) override {
    const TrainerConfig& t = c.cfg;
    const bool use_ref = t.kl.coef > 0 && c.agent.ref_model;
    Metrics metrics;
    prepared_ = std::make_unique<Prepared>();
    Batch& batch = prepared_->batch;
    batch = FlattenDecisions(played.episodes, c.agent.readout, t, use_ref, c.iteration);
    prepared_->slice = SliceOfJob(c.comm, batch.size());
    if (played.version < c.iteration && t.loss.staleness.kind == StalenessKind::kDecoupled &&
        !t.decision.all_action()) {
      ReadProx(c, batch);
      for (const auto& kv : StalenessMetrics(t.loss.staleness, batch, c.comm))
        metrics.push_back(kv);
    }
    // Per episode or per group: no other rank needed.
    Targets& targets = prepared_->targets;
    Metrics step_groups;  // gigpo: whether step groups formed
    std::tie(targets.advantages, targets.returns) =
        DecisionAdvantages(t, played.episodes, batch, &step_groups);
    for (const auto& kv : step_groups) metrics.push_back(kv);
    CheckFinite(targets.advantages, "advantages", c.iteration);
    CheckFinite(targets.returns, "value targets", c.iteration);
    targets.whiten = t.decision.normalize_advantages &&
                     AdvantageRegistry::Global().Make(t.advantage.estimator)->uses_values();
    return metrics;
  }

  // Gradient SNR at the rollout weights (rank 0's episodes), then epochs x
  // minibatches of the job's decisions, then the update's metrics.
  Metrics Learn(IterationContext& c, const PlayedBatch& played) override {
    const TrainerConfig& t = c.cfg;
    const std::unique_ptr<Prepared> p = std::move(prepared_);
    const bool all_action = t.decision.all_action();
    Metrics metrics;
    if (t.grad_snr_every > 0 && c.iteration % t.grad_snr_every == 0 && c.comm.rank() == 0)
      for (const auto& kv : Snr(c, played.episodes, p->batch, p->targets.advantages, all_action))
        metrics.push_back(kv);
    const UpdateTotals totals = Update(c, p->batch, p->targets, p->slice);
    c.budget.samples_used += p->batch.size();

    const double u = std::max<int64_t>(totals.updates, 1);
    const LossTerms& sum = totals.terms;
    metrics.push_back({"losses/policy", sum.policy / u});
    metrics.push_back({"losses/value", sum.value / u});
    metrics.push_back({"losses/entropy", sum.entropy / u});
    if (!all_action) metrics.push_back({"losses/clipfrac", sum.clip_frac / u});
    if (!all_action) metrics.push_back({"losses/approx_kl", sum.approx_kl / u});
    metrics.push_back({"losses/menu_kl_old", sum.menu_kl / u});
    if (t.kl.coef > 0 && c.agent.ref_model) metrics.push_back({"losses/kl_ref", sum.kl_ref / u});
    if (all_action) metrics.push_back({"losses/afterstate_value", sum.afterstate / u});
    metrics.push_back({"losses/grad_norm", totals.grad_norm / u});
    metrics.push_back({"charts/lr", opt_->current_lr()});
    metrics.push_back({"charts/decisions", static_cast<double>(p->slice.total)});
    metrics.push_back({"charts/epochs", static_cast<double>(totals.epochs)});
    double cut = 0;
    for (const auto& e : played.episodes) cut += e.truncated;
    const auto cut_of =
        c.comm.Sum({cut, static_cast<double>(played.episodes.size())}, "truncations");
    metrics.push_back({"charts/truncated_frac", cut_of[0] / std::max(cut_of[1], 1.0)});
    return metrics;
  }

 private:
  // Every rank draws the same permutation of the job's decisions, computes the
  // terms of the minibatch's decisions it holds, and the gradients are summed
  // over ranks: one process's update on the same batch (RunEpochs: epochs,
  // target_kl on the menu KL).
  UpdateTotals Update(IterationContext& c, const Batch& batch, const Targets& targets,
                      const JobSlice& slice) {
    const TrainerConfig& t = c.cfg;
    const std::vector<torch::Tensor> params = TrainableParameters(c.agent.model).tensors;
    Rng shuffle = Rng::Stream(c.seed, "minibatches", c.iteration);
    UpdateTotals totals;
    c.agent.model->train();
    auto cut = [&] {
      const auto perm = shuffle.Permutation(static_cast<int>(slice.total));
      Minibatches out;
      for (int64_t b0 = 0; b0 < slice.total; b0 += t.minibatch_size)
        out.emplace_back(perm.begin() + b0, perm.begin() + std::min(slice.total, b0 + t.minibatch_size));
      return out;
    };
    auto step = [&](const std::vector<size_t>& minibatch) {
      std::vector<int64_t> idx;  // this rank's decisions of the minibatch (local indices)
      for (size_t k : minibatch) {
        const auto g = static_cast<int64_t>(k);
        if (g >= slice.offset && g < slice.offset + slice.local) idx.push_back(g - slice.offset);
      }
      opt_->ZeroGrad();
      const LossTerms local =
          MinibatchTerms(c, batch, targets, idx, static_cast<double>(minibatch.size()));
      c.comm.AllReduceGradients(params);
      const LossTerms terms = LossTerms::Unpack(c.comm.Sum(local.Pack(), "loss terms"));
      if (!std::isfinite(terms.loss))
        throw NumericError(fmt::format("non-finite loss at iteration {}", c.iteration),
                           "weights were not updated; lower the learning rate, check rewards, "
                           "or resume from the last checkpoint");
      totals.grad_norm += opt_->Step(c.iteration, c.iteration);
      totals.terms += terms;
      return terms.menu_kl;
    };
    const EpochCount count = RunEpochs(t.epochs, t.target_kl, cut, step);
    totals.updates = count.steps;
    totals.epochs = count.epochs;
    return totals;
  }

  // Backpropagates this rank's part of one minibatch of M decisions (local
  // indices `idx`, possibly none) and returns its terms, each divided by M.
  LossTerms MinibatchTerms(IterationContext& c, const Batch& batch, const Targets& targets,
                           const std::vector<int64_t>& idx, double M) {
    const TrainerConfig& t = c.cfg;
    const bool all_action = t.decision.all_action();
    auto ix = torch::tensor(idx, torch::kInt64);
    // Whitening uses the whole minibatch's mean and std (every rank calls Sum).
    double adv_mean = 0, adv_std = 1;
    const bool whiten = targets.whiten && M > 1;
    if (whiten) {
      auto a = targets.advantages.index_select(0, ix);
      auto st = c.comm.Sum({a.sum().item<double>(), a.pow(2).sum().item<double>()},
                           "advantage statistics");
      adv_mean = st[0] / M;
      adv_std = std::sqrt(std::max(0.0, (st[1] - M * adv_mean * adv_mean) / (M - 1)));
    }
    LossTerms terms;
    if (idx.empty()) return terms;
    agents::ComputeScope compute(c.budget.update, {c.agent.model},
                                 agents::ComputeScope::Pass::kForwardBackward);
    auto fw = ReadDecisions(c.agent, batch.dec, idx, batch.outcome.index_select(0, ix), all_action);
    const auto dev = fw.dist.device();
    const int64_t K = fw.dist.size(1);
    auto pick = [&](const torch::Tensor& x) { return x.index_select(0, ix).to(dev); };
    auto adv = pick(targets.advantages);
    if (whiten) adv = (adv - adv_mean) / (adv_std + 1e-8);
    const auto ret = pick(targets.returns);
    const double share = static_cast<double>(idx.size()) / M;
    {
      // The early-stop signal of target_kl (approx_kl is its single-sample estimate).
      torch::NoGradGuard ng;
      auto old = Rows(batch.old_dist, idx, K, -INFINITY).to(dev);
      terms.menu_kl = MenuKl(old, fw.dist, fw.mask).sum().item<double>() / M;
    }
    torch::Tensor pg;
    if (!all_action) {
      const torch::Tensor behav =
          batch.behav_logp.defined() ? pick(batch.behav_logp) : torch::Tensor();
      auto res = DecisionPpoLoss(t.loss, fw.logp, pick(batch.old_logp), adv, {M, M}, behav);
      pg = res.loss;
      terms.clip_frac = (res.metrics.count("clip_frac") ? res.metrics["clip_frac"] : 0.0) * share;
      terms.approx_kl = (res.metrics.count("approx_kl") ? res.metrics["approx_kl"] : 0.0) * share;
    } else {
      pg = -AllActionSurrogate(fw.dist, fw.mask, AfterstateValues(batch, idx, K).to(dev)).sum() / M;
      // The afterstate critic learns the return of the action taken.
      auto taken = pick(batch.outcome);
      auto after = fw.afterstate_value.gather(1, taken.unsqueeze(1)).squeeze(1);
      auto after_loss = 0.5 * (after - ret).pow(2).sum() / M;
      terms.afterstate = after_loss.item<double>();
      pg = pg + t.decision.vf_coef * after_loss;
    }
    auto v = ValueLoss(fw.value, pick(batch.old_value), ret, t.decision.vf_clip, M);
    auto ent = MenuEntropy(fw.dist, fw.mask).sum() / M;
    torch::Tensor loss = pg + t.decision.vf_coef * v - t.decision.ent_coef * ent;
    if (t.kl.coef > 0 && c.agent.ref_model && t.kl.placement == KlPlacement::kLoss) {
      auto ref = Rows(batch.ref_dist, idx, K, -INFINITY).to(dev);
      auto kl = MenuKl(fw.dist, ref, fw.mask).sum() / M;
      loss = loss + t.kl.coef * kl;
      terms.kl_ref = kl.item<double>();
    }
    loss.backward();
    terms.policy = pg.item<double>();
    terms.value = v.item<double>();
    terms.entropy = ent.item<double>();
    terms.loss = loss.item<double>();
    return terms;
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
        [&](int64_t e) {
          const auto& idx = of[e];
          auto ix = torch::tensor(idx, torch::kInt64);
          auto fw = ReadDecisions(c.agent, b.dec, idx, b.outcome.index_select(0, ix), all_action);
          const auto dev = fw.dist.device();
          torch::Tensor loss;
          if (!all_action) {
            const torch::Tensor behav =
                b.behav_logp.defined() ? b.behav_logp.index_select(0, ix).to(dev) : torch::Tensor();
            loss = DecisionPpoLoss(c.cfg.loss, fw.logp, b.old_logp.index_select(0, ix).to(dev),
                                   adv.index_select(0, ix).to(dev), {total, total}, behav)
                       .loss;
          } else {
            loss = -AllActionSurrogate(fw.dist, fw.mask,
                                       AfterstateValues(b, idx, fw.dist.size(1)).to(dev))
                        .sum() /
                   total;
          }
          return loss;
        },
        c.budget.diagnostic);
    return SnrMetrics(g);
  }

  std::unique_ptr<Optimizer> opt_;
  std::unique_ptr<Prepared> prepared_;  // from Prepare to Learn
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

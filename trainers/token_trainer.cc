#include "trainers/token_trainer.h"

#include <fmt/format.h>

#include <cmath>
#include <map>
#include <set>

#include "core/error.h"
#include "core/log.h"
#include "core/rng.h"
#include "policy/scoring.h"
#include "trainers/advantages.h"
#include "trainers/losses.h"

namespace rlid::trainers {

bool ZeroVarianceGroup(const std::vector<const agents::EpisodeData*>& group) {
  for (const auto* e : group)
    if (e->ret != group.front()->ret) return false;
  return true;
}

std::vector<TokenSample> TokenAdvantages(const TrainerConfig& cfg, int max_new_tokens,
                                         const std::vector<agents::EpisodeData>& episodes,
                                         const std::vector<std::vector<double>>& kl_per_step) {
  const auto& adv_cfg = cfg.advantage;
  if (adv_cfg.estimator != "grpo" && adv_cfg.estimator != "rloo" && adv_cfg.estimator != "reinforce_pp_baseline")
    throw ConfigError(fmt::format("token-plane trainers use group advantages; trainer.advantage.estimator = '{}'",
                                  adv_cfg.estimator),
                      "use grpo, rloo or reinforce_pp_baseline");
  // Per-step reward after shaping: DAPO overlong penalty, KL in the reward.
  auto shaped = [&](size_t e, size_t t) {
    const auto& st = episodes[e].steps[t];
    double r = st.reward;
    if (cfg.overlong_buffer > 0) {
      double len = static_cast<double>(st.response.size());
      double start = static_cast<double>(max_new_tokens - cfg.overlong_buffer);
      r += std::min(-(len - start) / static_cast<double>(cfg.overlong_buffer) * cfg.overlong_factor, 0.0);
    }
    if (!kl_per_step.empty()) r -= cfg.kl.coef * kl_per_step[e][t];
    return r;
  };
  std::vector<TokenSample> samples;
  std::vector<double> scores;
  std::vector<int64_t> groups;
  if (cfg.return_mode == "episode") {
    for (size_t e = 0; e < episodes.size(); ++e) {
      double s = 0;
      for (size_t t = 0; t < episodes[e].steps.size(); ++t) s += shaped(e, t);
      scores.push_back(s);
      groups.push_back(episodes[e].spec.group);
    }
  } else {  // discounted per-step returns, compared within the group
    for (size_t e = 0; e < episodes.size(); ++e) {
      const auto& steps = episodes[e].steps;
      std::vector<double> g(steps.size());
      double acc = 0;
      for (size_t t = steps.size(); t-- > 0;) g[t] = acc = shaped(e, t) + cfg.advantage.gamma * acc;
      for (size_t t = 0; t < steps.size(); ++t) {
        scores.push_back(g[t]);
        groups.push_back(episodes[e].spec.group);
      }
    }
  }
  const int64_t R = static_cast<int64_t>(scores.size());
  AdvantageInputs in;
  in.scores = torch::tensor(scores, torch::kFloat64);
  in.response_mask = torch::ones({R, 1}, torch::kFloat64);
  in.groups = groups;
  auto adv = ComputeAdvantages(adv_cfg, in).advantages.select(1, 0);
  int64_t row = 0;
  for (size_t e = 0; e < episodes.size(); ++e) {
    for (size_t t = 0; t < episodes[e].steps.size(); ++t) {
      double a = adv[cfg.return_mode == "episode" ? static_cast<int64_t>(e) : row].item<double>();
      ++row;
      if (episodes[e].steps[t].response.empty()) continue;
      samples.push_back({&episodes[e].steps[t], static_cast<int>(e), a});
    }
  }
  return samples;
}

void TokenTrainer::Setup(Session& s) {
  std::vector<std::string> names;
  std::vector<torch::Tensor> params;
  for (auto& p : s.model->named_parameters()) {
    names.push_back(p.key());
    params.push_back(p.value());
  }
  opt_ = std::make_unique<Optimizer>(params, s.cfg.trainer.optim, s.cfg.trainer.iterations, names);
  s.Sampler();  // the rollout engine, synced with the policy
}

void TokenTrainer::SaveState(const std::string& dir) const { opt_->Save(dir + "/optimizer.pt"); }
void TokenTrainer::LoadState(const std::string& dir) { opt_->Load(dir + "/optimizer.pt"); }

namespace {

// Pads per-sample float vectors into [B, T] float64 (0 at padding).
torch::Tensor Pad(const std::vector<const std::vector<float>*>& rows, int64_t T) {
  auto out = torch::zeros({static_cast<int64_t>(rows.size()), T}, torch::kFloat64);
  auto a = out.accessor<double, 2>();
  for (size_t i = 0; i < rows.size(); ++i)
    for (size_t t = 0; t < rows[i]->size() && static_cast<int64_t>(t) < T; ++t) a[i][t] = (*rows[i])[t];
  return out;
}

}  // namespace

Metrics TokenTrainer::Iterate(Session& s, int64_t it) {
  const TrainerConfig& t = s.cfg.trainer;
  auto& sampler = s.Sampler();
  const double temperature = s.cfg.sampler.temperature > 0 ? s.cfg.sampler.temperature : 1.0;
  policy::ScoreOptions sopts;
  sopts.temperature = temperature;

  // ---- 1. rollout (with DAPO dynamic sampling) ----------------------------------
  const int64_t want_groups = t.episodes_per_iteration / t.group_size;
  std::vector<agents::EpisodeData> kept;
  int64_t rounds = 0, generated_groups = 0, generated_samples = 0, generated_tokens = 0;
  agents::AgentContext ctx = s.AgentCtx(it);
  ctx.sampler = &sampler;
  Metrics metrics;
  std::vector<agents::EpisodeData> dropped;  // generated, filtered out (recorded, not trained on)
  while (static_cast<int64_t>(kept.size()) / t.group_size < want_groups) {
    const int64_t round_it = it * std::max<int64_t>(1, t.max_generation_rounds) + rounds;
    auto specs = TrainSpecs(t, s.cfg.run.seed, round_it);
    int64_t gen_before = s.budget.generated_tokens;
    auto eps = agents::RunTokenEpisodes(ctx, specs, envs::Split::kTrain, /*greedy=*/false, s.budget);
    generated_groups += want_groups;
    generated_tokens += s.budget.generated_tokens - gen_before;
    std::map<int, std::vector<size_t>> by_group;
    for (size_t i = 0; i < eps.size(); ++i) {
      generated_samples += static_cast<int64_t>(eps[i].steps.size());
      by_group[eps[i].spec.group].push_back(i);
    }
    int next_group = static_cast<int>(kept.size() / t.group_size);
    for (auto& [g, members] : by_group) {
      std::vector<const agents::EpisodeData*> grp;
      for (size_t i : members) grp.push_back(&eps[i]);
      bool drop = (t.filter_zero_variance_groups && ZeroVarianceGroup(grp)) ||
                  static_cast<int64_t>(kept.size()) / t.group_size >= want_groups;
      for (size_t i : members) {
        if (drop) {
          dropped.push_back(std::move(eps[i]));
        } else {
          kept.push_back(std::move(eps[i]));
          kept.back().spec.group = next_group;  // renumber: groups stay distinct across rounds
        }
      }
      if (!drop) ++next_group;
    }
    ++rounds;
    if (!t.filter_zero_variance_groups) break;
    if (rounds >= t.max_generation_rounds && static_cast<int64_t>(kept.size()) / t.group_size < want_groups) {
      if (t.on_partial_batch == "error")
        throw NumericError(fmt::format("DAPO could not fill a batch at iteration {}: {} of {} groups had non-zero "
                                       "variance after {} rounds",
                                       it, kept.size() / t.group_size, want_groups, rounds),
                           "raise trainer.sampling.max_generation_rounds or set on_partial_batch = 'continue'");
      spdlog::warn("iteration {}: partial batch, {} of {} groups kept after {} rounds", it,
                   kept.size() / t.group_size, want_groups, rounds);
      break;
    }
  }
  {
    std::vector<agents::EpisodeData> generated = kept;
    generated.insert(generated.end(), dropped.begin(), dropped.end());
    metrics = RolloutMetrics(generated);
  }
  s.budget.groups_generated += generated_groups;
  s.budget.groups_kept += static_cast<int64_t>(kept.size()) / t.group_size;

  // ---- 2. old log-probs (training forward), reference, advantages ---------------
  std::vector<const agents::StepData*> steps_with_response;
  std::vector<policy::ScoreRequest> all_reqs;
  for (auto& e : kept)
    for (auto& st : e.steps)
      if (!st.response.empty()) {
        steps_with_response.push_back(&st);
        all_reqs.push_back({st.prompt.tokens, st.response});
      }
  std::vector<std::vector<double>> kl_per_step;
  {
    torch::NoGradGuard ng;
    s.model->eval();
    for (size_t b0 = 0; b0 < all_reqs.size(); b0 += static_cast<size_t>(t.minibatch_size)) {
      size_t b1 = std::min(all_reqs.size(), b0 + static_cast<size_t>(t.minibatch_size));
      std::vector<policy::ScoreRequest> part(all_reqs.begin() + b0, all_reqs.begin() + b1);
      auto sb = policy::ScoreResponses(s.model, part, sopts);
      auto lp = sb.logp.to(torch::kCPU);
      torch::Tensor ref;
      if (s.ref_model) ref = policy::ScoreResponses(s.ref_model, part, sopts).logp.to(torch::kCPU);
      for (size_t i = b0; i < b1; ++i) {
        auto* st = const_cast<agents::StepData*>(steps_with_response[i]);
        st->train_logp.clear();
        st->ref_log_p.clear();
        for (size_t k = 0; k < st->response.size(); ++k) {
          st->train_logp.push_back(lp[i - b0][k].item<float>());
          if (ref.defined()) st->ref_log_p.push_back(ref[i - b0][k].item<float>());
        }
      }
    }
  }
  if (s.ref_model && t.kl.coef > 0 && t.kl.placement == "reward") {
    for (auto& e : kept) {  // k1 estimate per response, summed over its tokens
      std::vector<double> per_step;
      for (auto& st : e.steps) {
        double kl = 0;
        for (size_t k = 0; k < st.ref_log_p.size(); ++k) kl += st.train_logp[k] - st.ref_log_p[k];
        per_step.push_back(kl);
      }
      kl_per_step.push_back(per_step);
    }
  }
  ctx.policy_version = it;
  s.Record(kept, ctx);
  s.Record(dropped, ctx);
  auto samples = TokenAdvantages(t, s.cfg.sampler.max_new_tokens, kept, kl_per_step);

  // ---- 3. epochs x minibatches ---------------------------------------------------
  Rng shuffle = Rng::Stream(s.cfg.run.seed, "minibatches", it);
  LossConfig loss_cfg = t.loss;
  if (loss_cfg.aggregation == "seq_mean_token_sum_norm" && loss_cfg.aggregation_norm <= 0)
    loss_cfg.aggregation_norm = s.cfg.sampler.max_new_tokens;  // Dr. GRPO's constant: the longest answer
  KlConfig kl_cfg = t.kl;
  if (kl_cfg.placement != "loss" || !s.ref_model) kl_cfg.coef = 0;
  std::map<std::string, double> sums;
  double sum_loss = 0, sum_gn = 0;
  int64_t updates = 0;
  const int64_t N = static_cast<int64_t>(samples.size());
  s.model->train();
  int64_t epochs_run = 0;
  for (int64_t epoch = 0; epoch < t.epochs && N > 0; ++epoch) {
    auto perm = shuffle.Permutation(static_cast<int>(N));
    double epoch_kl = 0;
    int64_t epoch_updates = 0;
    for (int64_t b0 = 0; b0 < N; b0 += t.minibatch_size) {
      int64_t b1 = std::min(N, b0 + t.minibatch_size);
      std::vector<policy::ScoreRequest> reqs;
      std::vector<const std::vector<float>*> old_rows, roll_rows, ref_rows;
      std::vector<double> advs;
      int64_t T = 1;
      for (int64_t k = b0; k < b1; ++k) {
        const auto& smp = samples[perm[k]];
        reqs.push_back({smp.step->prompt.tokens, smp.step->response});
        old_rows.push_back(&smp.step->train_logp);
        roll_rows.push_back(&smp.step->rollout_logp);
        ref_rows.push_back(&smp.step->ref_log_p);
        advs.push_back(smp.advantage);
        T = std::max<int64_t>(T, static_cast<int64_t>(smp.step->response.size()));
      }
      auto sb = policy::ScoreResponses(s.model, reqs, sopts);
      s.budget.train_flops += 3.0 * static_cast<double>(sb.tokens_processed) *
                              s.model->config().ForwardFlopsPerToken(static_cast<int64_t>(reqs[0].prompt.size()));
      auto dev = sb.logp.device();
      PolicyLossInputs in;
      in.log_prob = sb.logp.slice(1, 0, T).to(torch::kFloat64);
      in.response_mask = sb.mask.slice(1, 0, T);
      in.old_log_prob = Pad(old_rows, T).to(dev);
      in.advantages = torch::tensor(advs, torch::kFloat64).to(dev);
      if (t.loss.engine.kind != "none") in.rollout_log_prob = Pad(roll_rows, T).to(dev);
      if (kl_cfg.coef > 0) in.ref_log_prob = Pad(ref_rows, T).to(dev);
      auto res = PolicyLoss(loss_cfg, kl_cfg, in);
      CheckFinite(res.loss, "loss", it);
      opt_->ZeroGrad();
      res.loss.backward();
      sum_gn += opt_->Step(it, it);
      sum_loss += res.loss.item<double>();
      for (const auto& [k, v] : res.metrics) sums[k] += v;
      if (res.metrics.count("approx_kl")) epoch_kl += res.metrics.at("approx_kl");
      ++epoch_updates;
      ++updates;
    }
    ++epochs_run;
    if (t.target_kl > 0 && epoch_updates > 0 && epoch_kl / epoch_updates > t.target_kl) break;
  }
  sampler.SyncWeights(s.model);
  s.budget.samples_used += N;

  // ---- 4. metrics -------------------------------------------------------------------
  double u = std::max<int64_t>(updates, 1);
  metrics.push_back({"losses/policy", sum_loss / u});
  for (const auto& [k, v] : sums) {
    std::string key = k.find('/') == std::string::npos ? (k == "clip_frac" ? "losses/clipfrac" : "losses/" + k) : k;
    metrics.push_back({key, v / u});
  }
  metrics.push_back({"losses/grad_norm", sum_gn / u});
  metrics.push_back({"charts/lr", opt_->current_lr()});
  metrics.push_back({"charts/epochs", static_cast<double>(epochs_run)});
  metrics.push_back({"sampling/rounds", static_cast<double>(rounds)});
  metrics.push_back({"sampling/generated_groups", static_cast<double>(generated_groups)});
  metrics.push_back({"sampling/kept_groups", static_cast<double>(kept.size() / t.group_size)});
  metrics.push_back({"sampling/generated_samples", static_cast<double>(generated_samples)});
  metrics.push_back({"sampling/kept_samples", static_cast<double>(N)});
  metrics.push_back({"sampling/generated_tokens", static_cast<double>(generated_tokens)});
  // Train-vs-rollout engine gap on the kept samples (k1 estimate of KL(rollout || train)).
  double gap = 0, gap_abs = 0;
  int64_t tokens = 0;
  for (const auto& smp : samples)
    for (size_t k = 0; k < smp.step->response.size(); ++k) {
      double d = smp.step->rollout_logp[k] - smp.step->train_logp[k];
      gap += d, gap_abs += std::abs(d);
      ++tokens;
    }
  if (tokens > 0) {
    metrics.push_back({"engine/logp_gap_mean", gap / tokens});
    metrics.push_back({"engine/logp_gap_abs", gap_abs / tokens});
  }
  if (t.grad_variance_every > 0 && it % t.grad_variance_every == 0 && N >= 2) {
    std::vector<std::function<torch::Tensor()>> per_sample;
    for (int64_t i = 0; i < std::min<int64_t>(N, t.grad_variance_samples); ++i) {
      const auto* smp = &samples[i];
      per_sample.push_back([&, smp] {
        auto sb = policy::ScoreResponses(s.model, {{smp->step->prompt.tokens, smp->step->response}}, sopts);
        return -smp->advantage * (sb.logp * sb.mask).sum();
      });
    }
    metrics.push_back({"grad/var_sampled", GradientVariance(s.model, per_sample)});
  }
  return metrics;
}

}  // namespace rlid::trainers

// The token-plane trainer (see token_trainer.h). One iteration reads top to
// bottom: rollout (with DAPO dynamic sampling) -> old / reference log-probs by
// the training forward -> advantages -> epochs x minibatches -> metrics.
#include "trainers/algorithms/token_trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <unordered_map>

#include "core/error.h"
#include "core/log.h"
#include "policy/scoring.h"
#include "trainers/losses/advantages.h"
#include "trainers/losses/kl.h"
#include "trainers/losses/losses.h"
#include "trainers/losses/tensor_checks.h"

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
  if (adv_cfg.estimator != "grpo" && adv_cfg.estimator != "rloo" &&
      adv_cfg.estimator != "reinforce_pp_baseline")
    throw ConfigError(
        fmt::format("token-plane trainers use group advantages; trainer.advantage.estimator = '{}'",
                    adv_cfg.estimator),
        "use grpo, rloo or reinforce_pp_baseline");
  if (!kl_per_step.empty() && kl_per_step.size() != episodes.size())
    throw InternalError(fmt::format("kl_per_step has {} episodes, expected {}", kl_per_step.size(),
                                    episodes.size()));
  // Per-step reward after shaping: DAPO overlong penalty, KL in the reward.
  auto shaped = [&](size_t e, size_t t) {
    const auto& st = episodes[e].steps[t];
    double r = st.reward;
    if (cfg.overlong_buffer > 0) {
      double len = static_cast<double>(st.response.size());
      double start = static_cast<double>(max_new_tokens - cfg.overlong_buffer);
      r += std::min(-(len - start) / static_cast<double>(cfg.overlong_buffer) * cfg.overlong_factor,
                    0.0);
    }
    if (!kl_per_step.empty()) r -= cfg.kl.coef * kl_per_step[e].at(t);
    return r;
  };
  const bool per_step = cfg.return_mode == "discounted";
  std::vector<double> scores;  // one per episode, or one per step
  std::vector<int64_t> groups;
  for (size_t e = 0; e < episodes.size(); ++e) {
    const auto& steps = episodes[e].steps;
    if (per_step) {
      std::vector<double> g(steps.size());
      double acc = 0;
      for (size_t t = steps.size(); t-- > 0;) g[t] = acc = shaped(e, t) + adv_cfg.gamma * acc;
      for (double v : g) {
        scores.push_back(v);
        groups.push_back(episodes[e].spec.group);
      }
    } else {
      double s = 0;
      for (size_t t = 0; t < steps.size(); ++t) s += shaped(e, t);
      scores.push_back(s);
      groups.push_back(episodes[e].spec.group);
    }
  }
  std::vector<TokenSample> samples;
  if (scores.empty()) return samples;
  AdvantageInputs in;
  in.scores = torch::tensor(scores, torch::kFloat64);
  in.response_mask = torch::ones({static_cast<int64_t>(scores.size()), 1}, torch::kFloat64);
  in.groups = groups;
  auto adv = ComputeAdvantages(adv_cfg, in).advantages.select(1, 0).contiguous();
  auto a = adv.accessor<double, 1>();
  int64_t row = 0;
  for (size_t e = 0; e < episodes.size(); ++e) {
    for (size_t t = 0; t < episodes[e].steps.size(); ++t) {
      const double value = a[per_step ? row : static_cast<int64_t>(e)];
      ++row;
      if (episodes[e].steps[t].response.empty()) continue;
      samples.push_back({&episodes[e].steps[t], static_cast<int>(e), value});
    }
  }
  return samples;
}

std::vector<std::vector<size_t>> PromptMinibatches(const std::vector<TokenSample>& samples,
                                                   int64_t size, Rng* rng) {
  if (size <= 0) throw InternalError(fmt::format("minibatch size must be > 0, found {}", size));
  std::unordered_map<uint64_t, size_t> bucket_of;
  std::vector<std::vector<size_t>> buckets;
  for (size_t i = 0; i < samples.size(); ++i) {
    auto [it, inserted] = bucket_of.emplace(samples[i].step->prompt.hash, buckets.size());
    if (inserted) buckets.emplace_back();
    buckets[it->second].push_back(i);
  }
  if (rng) rng->Shuffle(buckets);
  std::vector<std::vector<size_t>> out;
  for (const auto& b : buckets)
    for (size_t i : b) {
      if (out.empty() || static_cast<int64_t>(out.back().size()) >= size) out.emplace_back();
      out.back().push_back(i);
    }
  return out;
}

void TokenTrainer::Setup(Session& s) {
  const TrainerConfig& t = s.cfg.trainer;
  if (t.overlong_buffer > 0 && t.overlong_buffer >= s.cfg.sampler.max_new_tokens)
    throw ConfigError(
        fmt::format(
            "trainer.sampling.overlong_buffer = {} must be below sampler.max_new_tokens = {}: "
            "the penalty starts at max_new_tokens - overlong_buffer tokens, so every answer "
            "would be penalised",
            t.overlong_buffer, s.cfg.sampler.max_new_tokens),
        "raise sampler.max_new_tokens or lower (0 = off) trainer.sampling.overlong_buffer");
  std::vector<std::string> names;
  std::vector<torch::Tensor> params;
  for (auto& p : s.model->named_parameters()) {
    names.push_back(p.key());
    params.push_back(p.value());
  }
  opt_ = std::make_unique<Optimizer>(params, t.optim, t.iterations, names);
  s.Sampler();  // the rollout engine, synced with the policy
}

void TokenTrainer::SaveState(const std::string& dir) const { opt_->Save(dir + "/optimizer.pt"); }
void TokenTrainer::LoadState(const std::string& dir) { opt_->Load(dir + "/optimizer.pt"); }

namespace {

// Rollout work of one kind: groups, responses (agent turns), response tokens.
struct Work {
  int64_t groups = 0, samples = 0, tokens = 0;
  void AddEpisode(const agents::EpisodeData& e) {
    samples += static_cast<int64_t>(e.steps.size());
    for (const auto& st : e.steps) tokens += static_cast<int64_t>(st.response.size());
  }
};

// The episodes of one iteration: kept groups train, dropped groups (DAPO's
// zero-variance groups and any surplus) are only recorded and counted.
struct Rollout {
  std::vector<agents::EpisodeData> kept, dropped;
  int64_t rounds = 0;
  Work generated, kept_work, dropped_work;  // generated = kept + dropped
};

// Plays groups on train seeds until episodes_per_iteration / group_size groups
// are kept (one round unless zero-variance filtering is on). Round r of
// iteration `it` plays the train seeds of TrainSpecs(it * R + r), R = the
// number of rounds allowed, so without filtering an iteration sees the same
// seeds as decision PPO's, and rounds never replay seeds or sampler streams.
Rollout CollectGroups(Session& s, const agents::AgentContext& ctx, int64_t it) {
  const TrainerConfig& t = s.cfg.trainer;
  const int64_t want = t.episodes_per_iteration / t.group_size;
  const int64_t max_rounds =
      t.filter_zero_variance_groups ? std::max<int64_t>(1, t.max_generation_rounds) : 1;
  Rollout out;
  int64_t kept_groups = 0;
  while (kept_groups < want && out.rounds < max_rounds) {
    const int64_t round_it = it * max_rounds + out.rounds;
    agents::AgentContext rctx = ctx;
    rctx.iteration = round_it;  // sampler streams of this round
    const int64_t tokens_before = s.budget.generated_tokens;
    auto eps =
        agents::RunTokenEpisodes(rctx, TrainSpecs(t, s.cfg.run.seed, round_it), envs::Split::kTrain,
                                 /*greedy=*/false, s.budget);
    out.generated.tokens += s.budget.generated_tokens - tokens_before;
    std::map<int, std::vector<size_t>> by_group;
    for (size_t i = 0; i < eps.size(); ++i) {
      out.generated.samples += static_cast<int64_t>(eps[i].steps.size());
      by_group[eps[i].spec.group].push_back(i);
    }
    out.generated.groups += static_cast<int64_t>(by_group.size());
    for (auto& [g, members] : by_group) {
      std::vector<const agents::EpisodeData*> grp;
      for (size_t i : members) grp.push_back(&eps[i]);
      const bool keep =
          kept_groups < want && !(t.filter_zero_variance_groups && ZeroVarianceGroup(grp));
      Work& w = keep ? out.kept_work : out.dropped_work;
      w.groups += 1;
      for (size_t i : members) {
        w.AddEpisode(eps[i]);
        if (keep) {
          eps[i].spec.group = static_cast<int>(kept_groups);  // distinct across rounds
          out.kept.push_back(std::move(eps[i]));
        } else {
          out.dropped.push_back(std::move(eps[i]));
        }
      }
      if (keep) ++kept_groups;
    }
    ++out.rounds;
  }
  if (kept_groups < want) {
    if (t.on_partial_batch == "error")
      throw Error(
          fmt::format(
              "DAPO could not fill the batch of iteration {}: {} of {} groups had non-zero return "
              "variance after {} rounds ({} groups generated)",
              it, kept_groups, want, out.rounds, out.generated.groups),
          "raise trainer.sampling.max_generation_rounds, or set trainer.sampling.on_partial_batch "
          "= "
          "'continue' to train on the partial batch");
    spdlog::warn("iteration {}: partial batch, {} of {} groups kept after {} rounds", it,
                 kept_groups, want, out.rounds);
  }
  return out;
}

double Seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// [B, T] bool mask of the first len_i positions.
torch::Tensor LengthMask(const std::vector<int64_t>& lengths, int64_t T) {
  auto out = torch::zeros({static_cast<int64_t>(lengths.size()), T}, torch::kBool);
  for (size_t i = 0; i < lengths.size(); ++i)
    out[static_cast<int64_t>(i)].slice(0, 0, lengths[i]).fill_(true);
  return out;
}

// Fills StepData::train_logp (and ref_log_p with a reference) for every step
// with a response, by the training forward without gradient; the responses to
// one prompt are scored in the same batch (shared prefix). Counts the forwards.
void ScoreOld(Session& s, std::vector<agents::EpisodeData>& kept,
              const policy::ScoreOptions& sopts) {
  std::vector<TokenSample> rows;
  for (auto& e : kept)
    for (auto& st : e.steps)
      if (!st.response.empty()) rows.push_back({&st, 0, 0.0});
  torch::NoGradGuard no_grad;
  s.model->eval();
  for (const auto& mb : PromptMinibatches(rows, s.cfg.trainer.minibatch_size, nullptr)) {
    std::vector<policy::ScoreRequest> reqs;
    for (size_t i : mb) reqs.push_back({rows[i].step->prompt.tokens, rows[i].step->response});
    auto sb = policy::ScoreResponses(s.model, reqs, sopts);
    auto lp = sb.logp.to(torch::kCPU).to(torch::kFloat32).contiguous();
    torch::Tensor ref;
    if (s.ref_model)
      ref =
          policy::ScoreResponses(s.ref_model, reqs, sopts).logp.to(torch::kCPU).to(torch::kFloat32);
    const int passes = s.ref_model ? 2 : 1;
    s.budget.forward_passes += passes;
    s.budget.train_flops +=
        passes * static_cast<double>(sb.tokens_processed) *
        s.model->config().ForwardFlopsPerToken(static_cast<int64_t>(reqs[0].prompt.size()));
    for (size_t j = 0; j < mb.size(); ++j) {
      auto* st = const_cast<agents::StepData*>(rows[mb[j]].step);
      const int64_t n = static_cast<int64_t>(st->response.size());
      const float* p = lp[static_cast<int64_t>(j)].data_ptr<float>();
      st->train_logp.assign(p, p + n);
      st->ref_log_p.clear();
      if (ref.defined()) {
        auto r = ref[static_cast<int64_t>(j)].contiguous();
        st->ref_log_p.assign(r.data_ptr<float>(), r.data_ptr<float>() + n);
      }
    }
  }
}

// Σ_t kl_t of each step's response under [trainer.kl] (estimator of
// train_logp vs ref_log_p), for the reward placement.
std::vector<std::vector<double>> KlPerStep(const KlConfig& kl,
                                           const std::vector<agents::EpisodeData>& kept) {
  std::vector<std::vector<double>> out;
  for (const auto& e : kept) {
    std::vector<double> per_step;
    for (const auto& st : e.steps) {
      if (st.response.empty()) {
        per_step.push_back(0.0);
        continue;
      }
      const int64_t n = static_cast<int64_t>(st.response.size());
      auto logp = PadRows({&st.train_logp}, n), ref = PadRows({&st.ref_log_p}, n);
      per_step.push_back(
          KlPenalty(kl, logp, ref, torch::ones({1, n}, torch::kBool)).sum().item<double>());
    }
    out.push_back(std::move(per_step));
  }
  return out;
}

// Engine-correction statistics of the whole batch, before the update:
// engine/kl = mean over tokens of (rollout − old) and engine/logp_gap_abs =
// mean |rollout − old|, plus the configured correction's engine/ratio_mean,
// engine/weight_mean and engine/capped_frac (tis) or engine/masked_frac
// (icepop, reject), exactly as the loss applies them.
Metrics EngineMetrics(const EngineConfig& engine, const std::vector<TokenSample>& samples) {
  std::vector<const std::vector<float>*> old_rows, roll_rows;
  std::vector<int64_t> lengths;
  int64_t T = 1;
  for (const auto& smp : samples) {
    old_rows.push_back(&smp.step->train_logp);
    roll_rows.push_back(&smp.step->rollout_logp);
    lengths.push_back(static_cast<int64_t>(smp.step->response.size()));
    T = std::max(T, lengths.back());
  }
  auto old = PadRows(old_rows, T), roll = PadRows(roll_rows, T);
  auto mask = LengthMask(lengths, T);
  auto corr = CorrectEngine(engine, old, roll, mask);
  Metrics m(corr.metrics.begin(), corr.metrics.end());
  m.push_back({"engine/logp_gap_abs", MaskedMean((roll - old).abs(), mask)});
  return m;
}

}  // namespace

Metrics TokenTrainer::Iterate(Session& s, int64_t it) {
  const TrainerConfig& t = s.cfg.trainer;
  auto& sampler = s.Sampler();
  policy::ScoreOptions sopts;
  sopts.temperature =
      s.cfg.sampler.temperature > 0 ? s.cfg.sampler.temperature : 1.0;  // match the sampler

  // ---- 1. rollout: groups on train seeds (DAPO: resample zero-variance groups) ---
  agents::AgentContext ctx = s.AgentCtx(it);
  ctx.sampler = &sampler;
  Rollout ro = CollectGroups(s, ctx, it);
  const double t_score = Seconds();
  Metrics metrics;
  {
    std::vector<agents::EpisodeData> generated = ro.kept;
    generated.insert(generated.end(), ro.dropped.begin(), ro.dropped.end());
    metrics = RolloutMetrics(generated);
  }
  s.budget.groups_generated += ro.generated.groups;
  s.budget.groups_kept += ro.kept_work.groups;

  // ---- 2. old log-probs (training forward), reference, advantages -----------------
  ScoreOld(s, ro.kept, sopts);
  std::vector<std::vector<double>> kl_per_step;
  if (s.ref_model && t.kl.coef > 0 && t.kl.placement == "reward")
    kl_per_step = KlPerStep(t.kl, ro.kept);
  s.Record(ro.kept, ctx);
  s.Record(ro.dropped, ctx);
  auto samples = TokenAdvantages(t, s.cfg.sampler.max_new_tokens, ro.kept, kl_per_step);
  const int64_t N = static_cast<int64_t>(samples.size());
  if (N > 0)
    for (const auto& kv : EngineMetrics(t.loss.engine, samples)) metrics.push_back(kv);

  // ---- 3. epochs x minibatches -------------------------------------------------------
  const double t_update = Seconds();
  Rng shuffle = Rng::Stream(s.cfg.run.seed, "minibatches", it);
  LossConfig loss_cfg = t.loss;
  if (loss_cfg.aggregation == "seq_mean_token_sum_norm" && loss_cfg.aggregation_norm <= 0)
    loss_cfg.aggregation_norm =
        s.cfg.sampler.max_new_tokens;  // Dr. GRPO's constant: the longest answer
  KlConfig kl_cfg = t.kl;
  if (kl_cfg.placement != "loss" || !s.ref_model) kl_cfg.coef = 0;
  std::map<std::string, double> sums;
  double sum_loss = 0, sum_gn = 0;
  int64_t updates = 0, epochs_run = 0;
  s.model->train();
  for (int64_t epoch = 0; epoch < t.epochs && N > 0; ++epoch) {
    double epoch_kl = 0;
    int64_t epoch_updates = 0;
    for (const auto& mb : PromptMinibatches(samples, t.minibatch_size, &shuffle)) {
      std::vector<policy::ScoreRequest> reqs;
      std::vector<const std::vector<float>*> old_rows, roll_rows, ref_rows;
      std::vector<double> advs;
      int64_t T = 1;
      for (size_t k : mb) {
        const auto& smp = samples[k];
        reqs.push_back({smp.step->prompt.tokens, smp.step->response});
        old_rows.push_back(&smp.step->train_logp);
        roll_rows.push_back(&smp.step->rollout_logp);
        ref_rows.push_back(&smp.step->ref_log_p);
        advs.push_back(smp.advantage);
        T = std::max<int64_t>(T, static_cast<int64_t>(smp.step->response.size()));
      }
      auto sb = policy::ScoreResponses(s.model, reqs, sopts);
      s.budget.forward_passes += 1;
      s.budget.train_flops +=
          3.0 * static_cast<double>(sb.tokens_processed) *
          s.model->config().ForwardFlopsPerToken(static_cast<int64_t>(reqs[0].prompt.size()));
      auto dev = sb.logp.device();
      PolicyLossInputs in;
      in.log_prob = sb.logp.slice(1, 0, T).to(torch::kFloat64);
      in.response_mask = sb.mask.slice(1, 0, T);
      in.old_log_prob = PadRows(old_rows, T).to(dev);
      in.advantages = torch::tensor(advs, torch::kFloat64).to(dev);
      if (t.loss.engine.kind != "none") in.rollout_log_prob = PadRows(roll_rows, T).to(dev);
      if (kl_cfg.coef > 0) in.ref_log_prob = PadRows(ref_rows, T).to(dev);
      auto res = PolicyLoss(loss_cfg, kl_cfg, in);
      CheckFinite(res.loss, "loss", it);
      opt_->ZeroGrad();
      res.loss.backward();
      sum_gn += opt_->Step(it, it);
      sum_loss += res.loss.item<double>();
      for (const auto& [k, v] : res.metrics)
        if (k.rfind("engine/", 0) != 0)
          sums[k] += v;  // engine/* is reported once, on the whole batch
      if (res.metrics.count("approx_kl")) epoch_kl += res.metrics.at("approx_kl");
      ++epoch_updates;
      ++updates;
    }
    ++epochs_run;
    if (t.target_kl > 0 && epoch_updates > 0 && epoch_kl / epoch_updates > t.target_kl) break;
  }
  sampler.SyncWeights(s.model);
  s.budget.samples_used += N;
  s.budget.tokens_used += ro.kept_work.tokens;

  // ---- 4. metrics ------------------------------------------------------------------------
  const double u = static_cast<double>(std::max<int64_t>(updates, 1));
  metrics.push_back({"losses/policy", sum_loss / u});
  for (const auto& [k, v] : sums)
    metrics.push_back({k == "clip_frac" ? "losses/clipfrac" : "losses/" + k, v / u});
  metrics.push_back({"losses/grad_norm", sum_gn / u});
  metrics.push_back({"charts/lr", opt_->current_lr()});
  metrics.push_back({"charts/epochs", static_cast<double>(epochs_run)});
  metrics.push_back({"charts/responses", static_cast<double>(N)});
  // time/readout_s, env_s, update_s come from the loop's stage times; this is
  // the share of the update spent re-scoring the rollouts with the training forward.
  metrics.push_back({"time/old_logprob_s", t_update - t_score});
  metrics.push_back({"sampling/rounds", static_cast<double>(ro.rounds)});
  const std::pair<const char*, const Work*> kinds[] = {
      {"generated", &ro.generated}, {"kept", &ro.kept_work}, {"dropped", &ro.dropped_work}};
  for (const auto& [name, w] : kinds) {
    metrics.push_back({fmt::format("sampling/{}_groups", name), static_cast<double>(w->groups)});
    metrics.push_back({fmt::format("sampling/{}_samples", name), static_cast<double>(w->samples)});
    metrics.push_back({fmt::format("sampling/{}_tokens", name), static_cast<double>(w->tokens)});
  }
  if (t.grad_variance_every > 0 && it % t.grad_variance_every == 0 && N >= 2) {
    std::vector<std::function<torch::Tensor()>> per_sample;
    for (int64_t i = 0; i < std::min<int64_t>(N, t.grad_variance_samples); ++i) {
      const auto* smp = &samples[i];
      per_sample.push_back([&, smp] {
        auto sb = policy::ScoreResponses(s.model, {{smp->step->prompt.tokens, smp->step->response}},
                                         sopts);
        return -smp->advantage * (sb.logp * sb.mask).sum();
      });
    }
    metrics.push_back({"grad/var_sampled", GradientVariance(s.model, per_sample)});
  }
  return metrics;
}

}  // namespace rlid::trainers

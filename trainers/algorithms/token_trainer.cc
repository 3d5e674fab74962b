// The token-plane trainer (see token_trainer.h), in the loop's stages
// (trainers/runtime/iteration.h): play (rounds of groups, each scored by the
// training forward for old / reference log-probs; DAPO's dynamic sampling)
// -> prepare (advantages, engine and staleness statistics) -> learn (epochs x
// minibatches, metrics).
#include "trainers/algorithms/token_trainer.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <unordered_map>

#include "core/clock.h"
#include "core/error.h"
#include "core/log.h"
#include "core/strings.h"
#include "policy/reading/routing.h"
#include "policy/reading/scoring.h"
#include "trainers/losses/advantages.h"
#include "trainers/losses/kl.h"
#include "trainers/losses/losses.h"
#include "trainers/losses/tensor_checks.h"
#include "trainers/runtime/epochs.h"
#include "trainers/runtime/rank_metrics.h"

namespace rlid::trainers {

namespace {

// The estimator reads step rows (gigpo), not one outcome per response.
bool StepRows(const TrainerConfig& cfg) {
  return AdvantageRegistry::Global().Make(cfg.advantage.estimator)->needs_steps();
}

}  // namespace

ShapedScores ScoreEpisodes(const TrainerConfig& cfg, int max_new_tokens,
                           const std::vector<agents::EpisodeData>& episodes,
                           const std::vector<std::vector<double>>& kl_per_step) {
  if (!kl_per_step.empty() && kl_per_step.size() != episodes.size())
    throw InternalError(fmt::format("kl_per_step has {} episodes, expected {}", kl_per_step.size(),
                                    episodes.size()));
  // Per-step reward after shaping: DAPO overlong penalty, KL in the reward.
  auto shaped = [&](size_t e, size_t t) {
    const auto& st = episodes[e].steps[t];
    double r = st.reward;
    if (cfg.token.overlong_buffer > 0) {
      double len = static_cast<double>(st.text.response.size());
      double start = static_cast<double>(max_new_tokens - cfg.token.overlong_buffer);
      r += std::min(-(len - start) / static_cast<double>(cfg.token.overlong_buffer) *
                        cfg.token.overlong_factor,
                    0.0);
    }
    if (!kl_per_step.empty()) r -= cfg.kl.coef * kl_per_step[e].at(t);
    return r;
  };
  const bool per_step = cfg.token.return_mode == ReturnMode::kDiscounted;
  ShapedScores out;
  for (size_t e = 0; e < episodes.size(); ++e) {
    const auto& steps = episodes[e].steps;
    if (StepRows(cfg)) {
      for (size_t t = 0; t < steps.size(); ++t) {
        out.scores.push_back(shaped(e, t));
        out.groups.push_back(episodes[e].spec.group);
        out.episodes.push_back(static_cast<int64_t>(e));
        out.anchors.push_back(steps[t].state_hash);
      }
    } else if (per_step) {
      std::vector<double> g(steps.size());
      double acc = 0;
      for (size_t t = steps.size(); t-- > 0;) g[t] = acc = shaped(e, t) + cfg.advantage.gamma * acc;
      for (double v : g) {
        out.scores.push_back(v);
        out.groups.push_back(episodes[e].spec.group);
      }
    } else {
      double s = 0;
      for (size_t t = 0; t < steps.size(); ++t) s += shaped(e, t);
      out.scores.push_back(s);
      out.groups.push_back(episodes[e].spec.group);
    }
  }
  return out;
}

std::vector<int64_t> ZeroVarianceGroups(const ShapedScores& s) {
  std::map<int64_t, std::pair<double, bool>> first_and_equal;
  for (size_t i = 0; i < s.scores.size(); ++i) {
    auto [it, inserted] = first_and_equal.emplace(s.groups[i], std::make_pair(s.scores[i], true));
    if (!inserted && s.scores[i] != it->second.first) it->second.second = false;
  }
  std::vector<int64_t> out;
  for (const auto& [g, fe] : first_and_equal)
    if (fe.second) out.push_back(g);
  return out;
}

namespace {

// Every rank's scores, rank after rank (episode ids made job-wide); *first =
// this rank's first row.
ShapedScores GatherScores(Comm& comm, const ShapedScores& sc, int64_t* first) {
  const auto scores = comm.Gather(sc.scores, "advantage scores");
  const auto groups = comm.Gather(sc.groups, "advantage groups");
  const auto episodes = comm.Gather(sc.episodes, "advantage episodes");
  const auto anchors =
      comm.Gather(std::vector<int64_t>(sc.anchors.begin(), sc.anchors.end()), "advantage anchors");
  ShapedScores all;
  int64_t episode_offset = 0;
  for (int r = 0; r < comm.size(); ++r) {
    if (r < comm.rank()) *first += static_cast<int64_t>(scores[r].size());
    all.scores.insert(all.scores.end(), scores[r].begin(), scores[r].end());
    all.groups.insert(all.groups.end(), groups[r].begin(), groups[r].end());
    int64_t last = -1;
    for (int64_t e : episodes[r])
      all.episodes.push_back(episode_offset + e), last = std::max(last, e);
    episode_offset += last + 1;
    all.anchors.insert(all.anchors.end(), anchors[r].begin(), anchors[r].end());
  }
  return all;
}

}  // namespace

std::vector<TokenSample> TokenAdvantages(const TrainerConfig& cfg, int max_new_tokens,
                                         const std::vector<agents::EpisodeData>& episodes,
                                         const std::vector<std::vector<double>>& kl_per_step,
                                         Comm* comm,
                                         std::vector<std::pair<std::string, double>>* step_groups) {
  const auto& adv_cfg = cfg.advantage;
  if (!AdvantageRegistry::Global().Make(adv_cfg.estimator)->needs_groups()) {
    std::vector<std::string> group_estimators;
    for (const auto& name : AdvantageRegistry::Global().Names())
      if (AdvantageRegistry::Global().Make(name)->needs_groups()) group_estimators.push_back(name);
    throw ConfigError(
        fmt::format("token-plane trainers use group advantages; trainer.advantage.estimator = '{}'",
                    adv_cfg.estimator),
        fmt::format("use one of: {}", Join(group_estimators, ", ")));
  }
  ShapedScores sc = ScoreEpisodes(cfg, max_new_tokens, episodes, kl_per_step);
  const bool per_step = cfg.token.return_mode == ReturnMode::kDiscounted || StepRows(cfg);
  // The job's scores, rank after rank; this rank's are rows [first, first + n).
  int64_t first = 0;
  if (comm && comm->distributed()) sc = GatherScores(*comm, sc, &first);
  std::vector<TokenSample> samples;
  if (sc.scores.empty()) return samples;
  AdvantageInputs in;
  in.scores = torch::tensor(sc.scores, torch::kFloat64);
  in.response_mask = torch::ones({static_cast<int64_t>(sc.scores.size()), 1}, torch::kFloat64);
  in.groups = sc.groups;
  in.episodes = sc.episodes;
  in.anchors = sc.anchors;
  AdvantageResult result = ComputeAdvantages(adv_cfg, in);
  auto adv = result.advantages.select(1, 0).contiguous();
  if (step_groups) *step_groups = std::move(result.metrics);
  auto a = adv.accessor<double, 1>();
  int64_t row = first;
  for (size_t e = 0; e < episodes.size(); ++e) {
    for (size_t t = 0; t < episodes[e].steps.size(); ++t) {
      const double value = a[per_step ? row : first + static_cast<int64_t>(e)];
      ++row;
      if (episodes[e].steps[t].text.response.empty()) continue;
      samples.push_back({&episodes[e].steps[t], static_cast<int>(e), value});
    }
  }
  return samples;
}

std::vector<std::vector<size_t>> PromptMinibatches(const std::vector<TokenSample>& samples,
                                                   int64_t size, Rng* rng) {
  std::vector<uint64_t> hashes;
  for (const auto& smp : samples) hashes.push_back(smp.step->prompt.hash);
  return PromptMinibatches(hashes, size, rng);
}

std::vector<std::vector<size_t>> PromptMinibatches(const std::vector<uint64_t>& prompt_hashes,
                                                   int64_t size, Rng* rng) {
  if (size <= 0) throw InternalError(fmt::format("minibatch size must be > 0, found {}", size));
  std::unordered_map<uint64_t, size_t> bucket_of;
  std::vector<std::vector<size_t>> buckets;
  for (size_t i = 0; i < prompt_hashes.size(); ++i) {
    auto [it, inserted] = bucket_of.emplace(prompt_hashes[i], buckets.size());
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

void TokenTrainer::Setup(const TrainerConfig& cfg, policy::TransformerLM model) {
  auto trainable = TrainableParameters(model);
  opt_ = std::make_unique<Optimizer>(trainable.tensors, cfg.optim, cfg.iterations, trainable.names);
}

TokenTrainer::TokenTrainer() = default;
TokenTrainer::~TokenTrainer() = default;

void TokenTrainer::SaveState(const std::string& dir) const { opt_->Save(dir + "/optimizer.pt"); }
void TokenTrainer::LoadState(const std::string& dir) { opt_->Load(dir + "/optimizer.pt"); }

namespace {

// Rollout work of one kind: groups, responses (agent turns), response tokens.
struct Work {
  int64_t groups = 0, samples = 0, tokens = 0;
  void AddEpisode(const agents::EpisodeData& e) {
    samples += static_cast<int64_t>(e.steps.size());
    for (const auto& st : e.steps) tokens += static_cast<int64_t>(st.text.response.size());
  }
};

// The episodes of one iteration: kept groups train, dropped groups (DAPO's
// zero-variance groups and any surplus) are only recorded and counted.
struct Rollout {
  std::vector<agents::EpisodeData> kept, dropped;
  int64_t rounds = 0;
  Work generated, kept_work, dropped_work;  // generated = kept + dropped
};

// [B, T] bool mask of the first len_i positions (on the CPU).
torch::Tensor LengthMask(const std::vector<int64_t>& lengths, int64_t T) {
  auto out = torch::zeros({static_cast<int64_t>(lengths.size()), T}, torch::kBool);
  for (size_t i = 0; i < lengths.size(); ++i)
    out[static_cast<int64_t>(i)].slice(0, 0, lengths[i]).fill_(true);
  return out;
}

// Log-probs of each step's response under `model` by the training forward,
// without gradient; the responses to one prompt are scored in one batch
// (shared prefix), at most `size` responses per batch.
std::vector<std::vector<float>> ScoreSteps(policy::TransformerLM model,
                                           const std::vector<const agents::StepData*>& steps,
                                           int64_t size, const policy::ScoreOptions& sopts) {
  std::vector<uint64_t> hashes;
  for (const auto* st : steps) hashes.push_back(st->prompt.hash);
  std::vector<std::vector<float>> out(steps.size());
  torch::NoGradGuard no_grad;
  for (const auto& mb : PromptMinibatches(hashes, size, nullptr)) {
    std::vector<policy::ScoreRequest> reqs;
    for (size_t i : mb) reqs.push_back({steps[i]->prompt.tokens, steps[i]->text.response});
    auto lp = policy::ScoreResponses(model, reqs, sopts).logp.to(torch::kCPU).to(torch::kFloat32);
    for (size_t j = 0; j < mb.size(); ++j) {
      auto row = lp[static_cast<int64_t>(j)].contiguous();
      const int64_t n = static_cast<int64_t>(steps[mb[j]]->text.response.size());
      out[mb[j]].assign(row.data_ptr<float>(), row.data_ptr<float>() + n);
    }
  }
  return out;
}

// Fills SampledText::train_logp (and ref_logp with a reference) for every step
// with a response: the training forward of the weights that played them
// (agent.model). The forwards count as update work.
void ScoreOld(const agents::AgentContext& agent, int64_t minibatch_size, agents::Budget& budget,
              std::vector<agents::EpisodeData>& episodes, const policy::ScoreOptions& sopts) {
  std::vector<agents::StepData*> steps;
  for (auto& e : episodes)
    for (auto& st : e.steps)
      if (!st.text.response.empty()) steps.push_back(&st);
  const std::vector<const agents::StepData*> rows(steps.begin(), steps.end());
  policy::TransformerLM model = agent.model, ref_model = agent.ref_model;
  model->eval();
  agents::ComputeScope compute(budget.update, {model, ref_model});
  auto old = ScoreSteps(model, rows, minibatch_size, sopts);
  std::vector<std::vector<float>> ref;
  if (ref_model) ref = ScoreSteps(ref_model, rows, minibatch_size, sopts);
  for (size_t i = 0; i < steps.size(); ++i) {
    steps[i]->text.train_logp = std::move(old[i]);
    steps[i]->text.ref_logp.clear();
    if (ref_model) steps[i]->text.ref_logp = std::move(ref[i]);
  }
}

// pi_prox of every sample: the learner's weights before this update, for a
// batch played with older ones. Counted as update work.
void ScoreProx(IterationContext& c, std::vector<TokenSample>& samples,
               const policy::ScoreOptions& sopts) {
  std::vector<const agents::StepData*> steps;
  for (const auto& smp : samples) steps.push_back(smp.step);
  policy::TransformerLM model = c.agent.model;
  model->eval();
  agents::ComputeScope compute(c.budget.update, {model});
  auto prox = ScoreSteps(model, steps, c.cfg.minibatch_size, sopts);
  for (size_t i = 0; i < samples.size(); ++i) samples[i].prox_logp = std::move(prox[i]);
}

// Σ_t kl_t of each step's response under [trainer.kl] (estimator of
// train_logp vs ref_logp), for the reward placement; empty without one.
std::vector<std::vector<double>> KlPerStep(const IterationContext& c,
                                           const std::vector<agents::EpisodeData>& episodes) {
  const KlConfig& kl = c.cfg.kl;
  if (!c.agent.ref_model || kl.coef <= 0 || kl.placement != KlPlacement::kReward) return {};
  std::vector<std::vector<double>> out;
  for (const auto& e : episodes) {
    std::vector<double> per_step;
    for (const auto& st : e.steps) {
      if (st.text.response.empty()) {
        per_step.push_back(0.0);
        continue;
      }
      const int64_t n = static_cast<int64_t>(st.text.response.size());
      auto logp = PadRows({&st.text.train_logp}, n), ref = PadRows({&st.text.ref_logp}, n);
      per_step.push_back(
          KlPenalty(kl, logp, ref, torch::ones({1, n}, torch::kBool)).sum().item<double>());
    }
    out.push_back(std::move(per_step));
  }
  return out;
}

// The rounds one iteration may play (more than one only with DAPO's filter).
int64_t MaxRounds(const TrainerConfig& t) {
  return t.token.filter_zero_variance_groups ? std::max<int64_t>(1, t.token.max_generation_rounds)
                                             : 1;
}

// One round: this rank's groups of TrainSpecs(agent.iteration), played, and
// scored by the training forward of the weights that played them.
std::vector<agents::EpisodeData> PlayRound(agents::AgentContext& agent, const TrainerConfig& t,
                                           uint64_t seed, const Comm& comm, agents::Budget& budget,
                                           const policy::ScoreOptions& sopts) {
  auto eps = agents::RunTokenEpisodes(agent, RankSpecs(TrainSpecs(t, seed, agent.iteration), comm),
                                      envs::Split::kTrain, /*greedy=*/false, budget);
  ScoreOld(agent, t.minibatch_size, budget, eps, sopts);
  return eps;
}

// The first round of an iteration as RolloutAhead plays it (possibly ahead,
// on its worker): round r of iteration i plays the seeds of i * R + r.
RolloutAhead::Play FirstRound(const IterationContext& c, const policy::ScoreOptions& sopts) {
  const TrainerConfig* t = &c.cfg;
  const Comm* comm = &c.comm;
  const uint64_t seed = c.seed;
  return [t, comm, seed, sopts](agents::AgentContext& agent, agents::Budget& budget) {
    agents::AgentContext round = agent;
    round.iteration = agent.iteration * MaxRounds(*t);  // sampler streams of this round
    return PlayRound(round, *t, seed, *comm, budget, sopts);
  };
}

// Plays groups on train seeds until episodes_per_iteration / group_size groups
// are kept (one round unless zero-variance filtering is on). Every round is
// scored by the training forward at once, so the filter sees the shaped
// rewards (overlong penalty, KL in the reward) that the advantages will use.
// Round r of iteration `it` plays the train seeds of TrainSpecs(it * R + r),
// R = the number of rounds allowed, so without filtering an iteration sees
// the same seeds as decision PPO's, and rounds never replay seeds or sampler
// streams.
Rollout CollectGroups(IterationContext& c, const policy::ScoreOptions& sopts, int max_new_tokens,
                      std::vector<agents::EpisodeData> first, int64_t first_tokens) {
  const TrainerConfig& t = c.cfg;
  const int64_t want = t.episodes_per_iteration / t.group_size;
  const int64_t max_rounds = MaxRounds(t);
  Rollout out;
  int64_t kept_groups = 0;
  while (kept_groups < want && out.rounds < max_rounds) {
    std::vector<agents::EpisodeData> eps;
    if (out.rounds == 0) {
      eps = std::move(first);
      out.generated.tokens += first_tokens;
    } else {
      agents::AgentContext rctx = c.agent;
      rctx.iteration = c.iteration * max_rounds + out.rounds;  // sampler streams of this round
      const int64_t tokens_before = c.budget.generated_tokens;
      eps = PlayRound(rctx, t, c.seed, c.comm, c.budget, sopts);
      out.generated.tokens += c.budget.generated_tokens - tokens_before;
    }
    auto kl = KlPerStep(c, eps);
    std::vector<int64_t> zero;
    if (t.token.filter_zero_variance_groups) zero = ZeroVarianceGroups(ScoreEpisodes(t, max_new_tokens, eps, kl));
    std::map<int, std::vector<size_t>> by_group;
    for (size_t i = 0; i < eps.size(); ++i) {
      out.generated.samples += static_cast<int64_t>(eps[i].steps.size());
      by_group[eps[i].spec.group].push_back(i);
    }
    out.generated.groups += static_cast<int64_t>(by_group.size());
    // Groups that may train (non-zero variance), in order. The job keeps the
    // first `want` of them over rounds and ranks, in one process's order (round,
    // then rank, then group), numbered job-wide.
    int64_t candidates = 0;
    for (const auto& [g, members] : by_group)
      candidates += std::find(zero.begin(), zero.end(), g) == zero.end();
    int64_t before_me = 0, job_candidates = 0;
    {
      const auto all = c.comm.Gather(std::vector<int64_t>{candidates}, "kept groups");
      for (int r = 0; r < c.comm.size(); ++r) {
        if (r < c.comm.rank()) before_me += all[r][0];
        job_candidates += all[r][0];
      }
    }
    int64_t next = kept_groups + before_me;  // job-wide index of this rank's next kept group
    for (auto& [g, members] : by_group) {
      const bool zero_variance = std::find(zero.begin(), zero.end(), g) != zero.end();
      const bool keep = next < want && !zero_variance;
      Work& w = keep ? out.kept_work : out.dropped_work;
      w.groups += 1;
      for (size_t i : members) {
        w.AddEpisode(eps[i]);
        if (keep) {
          eps[i].spec.group = static_cast<int>(next);  // distinct across rounds and ranks
          out.kept.push_back(std::move(eps[i]));
        } else {
          out.dropped.push_back(std::move(eps[i]));
        }
      }
      if (!zero_variance) ++next;
    }
    kept_groups = std::min(want, kept_groups + job_candidates);
    ++out.rounds;
  }
  if (kept_groups < want) {
    if (t.token.on_partial_batch == PartialBatch::kError)
      throw Error(
          fmt::format(
              "DAPO could not fill the batch of iteration {}: {} of {} groups had non-zero return "
              "variance after {} rounds ({} groups generated)",
              c.iteration, kept_groups, want, out.rounds, out.generated.groups),
          "raise trainer.sampling.max_generation_rounds, or set trainer.sampling.on_partial_batch "
          "= 'continue' to train on the partial batch");
    spdlog::warn("iteration {}: partial batch, {} of {} groups kept after {} rounds", c.iteration,
                 kept_groups, want, out.rounds);
  }
  return out;
}

// Engine-correction statistics of the whole batch, before the update, over its
// response tokens (old = the training forward at the behaviour weights,
// rollout = the engine's log-probs of the same ids):
// - the mismatch itself, whatever the correction: engine/logp_gap_abs (mean
//   |rollout − old|), engine/logp_gap_max, engine/kl (mean of rollout − old,
//   the k1 estimate of KL(engine || trainer)), the quantiles
//   engine/ratio_p05, _p50, _p95 of the token ratio π_train / π_engine (with
//   --nproc > 1: token-weighted means of each rank's quantiles), and
//   engine/outside_band_frac, the share of tokens whose ratio lies outside
//   [low, high] of [trainer.loss.engine] (IcePop's band);
// - the configured correction's engine/ratio_mean, engine/weight_mean and
//   engine/capped_frac (tis) or engine/masked_frac (icepop, reject), exactly
//   as the loss applies them.
Metrics EngineMetrics(const EngineConfig& engine, const std::vector<TokenSample>& samples) {
  std::vector<const std::vector<float>*> old_rows, roll_rows;
  std::vector<int64_t> lengths;
  int64_t T = 1;
  for (const auto& smp : samples) {
    old_rows.push_back(&smp.step->text.train_logp);
    roll_rows.push_back(&smp.step->text.rollout_logp);
    lengths.push_back(static_cast<int64_t>(smp.step->text.response.size()));
    T = std::max(T, lengths.back());
  }
  auto old = PadRows(old_rows, T), roll = PadRows(roll_rows, T);
  auto mask = LengthMask(lengths, T);
  auto corr = CorrectEngine(engine, old, roll, mask);
  Metrics m(corr.metrics.begin(), corr.metrics.end());
  m.push_back({"engine/logp_gap_abs", MaskedMean((roll - old).abs(), mask)});
  const auto valid = mask > 0;
  const auto gap = (roll - old).abs().masked_select(valid);
  if (gap.numel() > 0) {
    m.push_back({"engine/logp_gap_max", gap.max().item<double>()});
    const auto ratio = (old - roll).masked_select(valid).to(torch::kFloat64).exp();
    const auto q = torch::quantile(ratio, torch::tensor({0.05, 0.5, 0.95}, torch::kFloat64));
    m.push_back({"engine/ratio_p05", q[0].item<double>()});
    m.push_back({"engine/ratio_p50", q[1].item<double>()});
    m.push_back({"engine/ratio_p95", q[2].item<double>()});
    m.push_back({"engine/outside_band_frac",
                 ((ratio < engine.low) | (ratio > engine.high)).to(torch::kFloat64).mean().item<double>()});
  }
  return m;
}

// The policy-loss inputs of `samples` (indices `which`) against the current
// weights: one shared-prefix training forward.
struct LossBatch {
  PolicyLossInputs in;
};
LossBatch BuildLossInputs(IterationContext& c, const std::vector<TokenSample>& samples,
                          const std::vector<size_t>& which, const policy::ScoreOptions& sopts,
                          const KlConfig& kl_cfg) {
  std::vector<policy::ScoreRequest> reqs;
  std::vector<const std::vector<float>*> old_rows, roll_rows, ref_rows, behav_rows;
  std::vector<double> advs;
  int64_t T = 1;
  // A batch is played with one weight version: stale (pi_prox given) or not.
  const bool stale = !which.empty() && !samples[which.front()].prox_logp.empty();
  for (size_t k : which) {
    const auto& smp = samples[k];
    reqs.push_back({smp.step->prompt.tokens, smp.step->text.response});
    old_rows.push_back(stale ? &smp.prox_logp : &smp.step->text.train_logp);
    behav_rows.push_back(&smp.step->text.train_logp);
    roll_rows.push_back(&smp.step->text.rollout_logp);
    ref_rows.push_back(&smp.step->text.ref_logp);
    advs.push_back(smp.advantage);
    T = std::max<int64_t>(T, static_cast<int64_t>(smp.step->text.response.size()));
  }
  policy::TransformerLM model = c.agent.model;
  auto sb = policy::ScoreResponses(model, reqs, sopts);
  auto dev = sb.logp.device();
  LossBatch b;
  b.in.log_prob = sb.logp.slice(1, 0, T).to(torch::kFloat64);
  b.in.response_mask = sb.mask.slice(1, 0, T);
  b.in.old_log_prob = PadRows(old_rows, T).to(dev);
  b.in.advantages = torch::tensor(advs, torch::kFloat64).to(dev);
  if (c.cfg.loss.engine.kind != EngineKind::kNone) b.in.rollout_log_prob = PadRows(roll_rows, T).to(dev);
  if (kl_cfg.coef > 0) b.in.ref_log_prob = PadRows(ref_rows, T).to(dev);
  if (stale) b.in.behav_log_prob = PadRows(behav_rows, T).to(dev);
  return b;
}

}  // namespace

namespace {

// How the job combines a per-rank metric of the token loss: sums for terms
// already divided by the job's counts, means over the rank's loss tokens
// (weighted by them) otherwise.
const CombineRules& LossMetricRules() {
  static const CombineRules m = {{"pg_loss", Combine::kSum},
                                 {"kl", Combine::kSum},
                                 {"clip_frac", Combine::kWeightedMean},
                                 {"clip_frac_lower", Combine::kWeightedMean},
                                 {"approx_kl", Combine::kWeightedMean},
                                 {"engine/kl", Combine::kWeightedMean},
                                 {"engine/ratio_mean", Combine::kWeightedMean},
                                 {"engine/capped_frac", Combine::kWeightedMean},
                                 {"engine/weight_mean", Combine::kWeightedMean},
                                 {"engine/masked_frac", Combine::kWeightedMean},
                                 {"engine/logp_gap_abs", Combine::kWeightedMean},
                                 {"engine/logp_gap_max", Combine::kMax},
                                 {"engine/ratio_p05", Combine::kWeightedMean},
                                 {"engine/ratio_p50", Combine::kWeightedMean},
                                 {"engine/ratio_p95", Combine::kWeightedMean},
                                 {"engine/outside_band_frac", Combine::kWeightedMean},
                                 {"engine/routing_mismatch", Combine::kWeightedMean},
                                 {"staleness/kl", Combine::kWeightedMean},
                                 {"staleness/ratio_mean", Combine::kWeightedMean},
                                 {"staleness/weight_mean", Combine::kWeightedMean},
                                 {"staleness/capped_frac", Combine::kWeightedMean}};
  return m;
}

// The job's values of this rank's loss metrics, `tokens` its loss tokens.
std::map<std::string, double> ReduceMetrics(const std::map<std::string, double>& local,
                                            double tokens, Comm& comm) {
  return CombineRanks(local, tokens, LossMetricRules(), comm, "token loss metrics");
}

// Where the job's responses are: the ranks' samples in one process's order
// (by kept group, then as each rank listed them), with their prompt hashes.
struct JobSamples {
  std::vector<int> rank;          // owner of the i-th response of the job
  std::vector<size_t> local;      // its index in the owner's samples
  std::vector<uint64_t> hashes;   // its prompt hash
};
JobSamples GatherSamples(const std::vector<TokenSample>& samples,
                         const std::vector<agents::EpisodeData>& kept, Comm& comm) {
  std::vector<int64_t> mine;  // (kept group, prompt hash) per sample
  for (const auto& smp : samples) {
    mine.push_back(kept[smp.episode].spec.group);
    mine.push_back(static_cast<int64_t>(smp.step->prompt.hash));
  }
  const auto all = comm.Gather(mine, "response layout");
  struct Row {
    int64_t group;
    int rank;
    size_t local;
    uint64_t hash;
  };
  std::vector<Row> rows;
  for (int r = 0; r < static_cast<int>(all.size()); ++r)
    for (size_t i = 0; 2 * i < all[r].size(); ++i)
      rows.push_back({all[r][2 * i], r, i, static_cast<uint64_t>(all[r][2 * i + 1])});
  std::stable_sort(rows.begin(), rows.end(),
                   [](const Row& a, const Row& b) { return a.group < b.group; });
  JobSamples js;
  for (const auto& row : rows) {
    js.rank.push_back(row.rank);
    js.local.push_back(row.local);
    js.hashes.push_back(row.hash);
  }
  return js;
}

// What every minibatch's loss uses this iteration: the loss library's configs
// (Dr. GRPO's constant norm resolved; KL off unless it is in the loss and a
// reference exists) and the scoring options that match the sampler.
struct LossSettings {
  LossConfig loss;
  KlConfig kl;
  policy::ScoreOptions sopts;
};

LossSettings ResolveLossSettings(const IterationContext& c, const policy::ScoreOptions& sopts,
                                 int max_new_tokens) {
  LossSettings s{c.cfg.loss, c.cfg.kl, sopts};
  if (s.loss.aggregation == Aggregation::kSeqMeanTokenSumNorm && s.loss.aggregation_norm <= 0)
    s.loss.aggregation_norm = max_new_tokens;  // Dr. GRPO's constant: the longest answer
  if (s.kl.placement != KlPlacement::kLoss || !c.agent.ref_model) s.kl.coef = 0;
  return s;
}

// Train-vs-rollout engine metrics of the kept responses, token-weighted over the job.
void AppendEngineMetrics(const std::vector<TokenSample>& samples, const EngineConfig& engine,
                         Comm& comm, Metrics& metrics) {
  std::map<std::string, double> local;
  double tokens = 0;
  if (!samples.empty()) {
    for (const auto& [k, v] : EngineMetrics(engine, samples)) local[k] = v;
    for (const auto& smp : samples) tokens += static_cast<double>(smp.step->text.response.size());
  }
  for (const auto& [k, v] : ReduceMetrics(local, tokens, comm)) metrics.push_back({k, v});
}

// engine/routing_mismatch: of the (response token, sparse layer) pairs of up to
// kRoutingSamples kept responses, the share whose experts differ between the
// rollout engine's model and the trainer's, at the weights that played them.
// Only a mixture-of-experts policy on rlid's own engine, played on-policy by
// the learner's thread, has both models here; a server engine does not return
// its routing (docs/engines.md), so the key is absent there.
constexpr size_t kRoutingSamples = 32;
void AppendRoutingMetrics(IterationContext& c, const std::vector<TokenSample>& samples,
                          bool on_policy, Metrics& metrics) {
  std::map<std::string, double> local;
  double pairs = 0;
  policy::TransformerLM* engine = c.agent.sampler->local_model();
  if (on_policy && c.cfg.max_staleness == 0 && engine != nullptr &&
      c.agent.model->config().HasSparseLayers() && !samples.empty()) {
    std::vector<policy::ScoreRequest> reqs;
    for (size_t i = 0; i < samples.size() && reqs.size() < kRoutingSamples; ++i)
      if (!samples[i].step->text.response.empty())
        reqs.push_back({samples[i].step->prompt.tokens, samples[i].step->text.response});
    policy::TransformerLM trainer = c.agent.model;
    const auto cmp = policy::CompareRouting(*engine, trainer, reqs);
    if (cmp.pairs > 0) local["engine/routing_mismatch"] = cmp.share();
    pairs = static_cast<double>(cmp.pairs);
  }
  for (const auto& [k, v] : ReduceMetrics(local, pairs, c.comm)) metrics.push_back({k, v});
}

// Staleness-correction statistics of a batch played with older weights
// (samples carry pi_prox), token-weighted over the job, as the loss applies them.
void AppendStalenessMetrics(const std::vector<TokenSample>& samples,
                            const StalenessConfig& staleness, Comm& comm, Metrics& metrics) {
  std::map<std::string, double> local;
  double tokens = 0;
  if (!samples.empty()) {
    std::vector<const std::vector<float>*> prox_rows, behav_rows;
    std::vector<int64_t> lengths;
    int64_t T = 1;
    for (const auto& smp : samples) {
      prox_rows.push_back(&smp.prox_logp);
      behav_rows.push_back(&smp.step->text.train_logp);
      lengths.push_back(static_cast<int64_t>(smp.step->text.response.size()));
      T = std::max(T, lengths.back());
      tokens += static_cast<double>(lengths.back());
    }
    local = CorrectStaleness(staleness, PadRows(prox_rows, T), PadRows(behav_rows, T),
                             LengthMask(lengths, T))
                .metrics;
  }
  for (const auto& [k, v] : ReduceMetrics(local, tokens, comm)) metrics.push_back({k, v});
}

// What the update accumulates over its optimiser steps.
struct UpdateTotals {
  std::map<std::string, double> sums;  // the job's loss metrics, summed over steps
  double loss = 0, grad_norm = 0;
  int64_t updates = 0, epochs = 0;
};

// One optimiser step on minibatch `mb` (indices into the job's responses):
// this rank's loss with the minibatch's job-wide token and sequence counts,
// gradients summed over ranks. Adds the job's loss, gradient norm and metrics
// to `totals`; returns the job's approx_kl of the step (0 when not reported).
double MinibatchStep(IterationContext& c, Optimizer& opt, const std::vector<TokenSample>& samples,
                     const JobSamples& job, const std::vector<size_t>& mb, const LossSettings& s,
                     const std::vector<torch::Tensor>& params, UpdateTotals& totals) {
  std::vector<size_t> which;  // this rank's responses of the minibatch
  for (size_t k : mb)
    if (job.rank[k] == c.comm.rank()) which.push_back(job.local[k]);
  opt.ZeroGrad();
  // This rank's forward and its backward, booked when the step ends.
  agents::ComputeScope compute(c.budget.update, {c.agent.model},
                               agents::ComputeScope::Pass::kForwardBackward);
  LossBatch lb;
  GlobalCounts local{0, 0};
  if (!which.empty()) {
    lb = BuildLossInputs(c, samples, which, s.sopts, s.kl);
    local = LocalCounts(s.loss, lb.in);
  }
  const auto counts = c.comm.Sum({local.tokens, local.sequences}, "token counts");
  std::map<std::string, double> local_metrics;
  double loss_value = 0;
  if (!which.empty()) {
    lb.in.counts = GlobalCounts{counts[0], counts[1]};
    auto res = PolicyLoss(s.loss, s.kl, lb.in);
    res.loss.backward();
    loss_value = res.loss.item<double>();
    for (const auto& [k, v] : res.metrics)  // engine/*, staleness/*: once, on the whole batch
      if (k.rfind("engine/", 0) != 0 && k.rfind("staleness/", 0) != 0) local_metrics[k] = v;
  }
  c.comm.AllReduceGradients(params);
  loss_value = c.comm.Sum(loss_value, "loss");
  if (!std::isfinite(loss_value))
    throw NumericError(fmt::format("non-finite loss at iteration {}", c.iteration),
                       "weights were not updated; lower the learning rate, check rewards, or "
                       "resume from the last checkpoint");
  totals.grad_norm += opt.Step(c.iteration, c.iteration);
  totals.loss += loss_value;
  const auto reduced = ReduceMetrics(local_metrics, local.tokens, c.comm);
  for (const auto& [k, v] : reduced) totals.sums[k] += v;
  ++totals.updates;
  return reduced.count("approx_kl") ? reduced.at("approx_kl") : 0.0;
}

// Epochs x minibatches of the job's responses (RunEpochs: epochs, target_kl
// on approx_kl). Every rank cuts the same prompt-bucketed minibatches of them.
UpdateTotals UpdateEpochs(IterationContext& c, Optimizer& opt,
                          const std::vector<TokenSample>& samples, const JobSamples& job,
                          const LossSettings& s) {
  const TrainerConfig& t = c.cfg;
  policy::TransformerLM model = c.agent.model;
  const std::vector<torch::Tensor> params = TrainableParameters(model).tensors;
  Rng shuffle = Rng::Stream(c.seed, "minibatches", c.iteration);
  UpdateTotals totals;
  model->train();
  const EpochCount count = RunEpochs(
      job.rank.empty() ? 0 : t.epochs, t.target_kl,
      [&] { return PromptMinibatches(job.hashes, t.minibatch_size, &shuffle); },
      [&](const std::vector<size_t>& mb) {
        return MinibatchStep(c, opt, samples, job, mb, s, params, totals);
      });
  totals.epochs = count.epochs;
  return totals;
}

// Generated = kept + dropped, in groups, responses and response tokens, summed over the job.
void AppendSamplingMetrics(const Rollout& ro, Comm& comm, Metrics& metrics) {
  metrics.push_back({"sampling/rounds", static_cast<double>(ro.rounds)});
  const std::pair<const char*, const Work*> kinds[] = {
      {"generated", &ro.generated}, {"kept", &ro.kept_work}, {"dropped", &ro.dropped_work}};
  std::vector<double> work;
  for (const auto& [name, w] : kinds)
    for (int64_t x : {w->groups, w->samples, w->tokens}) work.push_back(static_cast<double>(x));
  work = comm.Sum(work, "sampling counts");
  size_t i = 0;
  for (const auto& [name, w] : kinds) {
    metrics.push_back({fmt::format("sampling/{}_groups", name), work[i++]});
    metrics.push_back({fmt::format("sampling/{}_samples", name), work[i++]});
    metrics.push_back({fmt::format("sampling/{}_tokens", name), work[i++]});
  }
}

}  // namespace

// What Learn needs from Prepare: the kept responses with their advantages,
// where the job's responses are, and the loss settings.
struct TokenTrainer::Prepared {
  std::vector<TokenSample> samples;
  JobSamples job;
  LossSettings settings;
};

namespace {

// Scoring that matches the sampler: its temperature (1 for greedy).
policy::ScoreOptions SamplerScoring(const policy::RolloutEngine& sampler) {
  policy::ScoreOptions sopts;
  sopts.temperature = sampler.options().temperature > 0 ? sampler.options().temperature : 1.0;
  return sopts;
}

}  // namespace

// The first round: this rank's groups on train seeds, scored by the training
// forward of the weights that played them.
RolloutAhead::Play TokenTrainer::Play(const IterationContext& c) {
  return FirstRound(c, SamplerScoring(*c.agent.sampler));
}

// DAPO resamples zero-variance groups job-wide until the batch is full.
Metrics TokenTrainer::Complete(IterationContext& c, PlayedBatch& batch) {
  const auto& sampler = *c.agent.sampler;
  Rollout ro = CollectGroups(c, SamplerScoring(sampler), sampler.options().max_new_tokens,
                             std::move(batch.episodes), batch.spent.generated_tokens);
  c.budget.groups_generated += ro.generated.groups;
  c.budget.groups_kept += ro.kept_work.groups;
  Metrics metrics;
  AppendSamplingMetrics(ro, c.comm, metrics);
  batch.episodes = std::move(ro.kept);
  batch.dropped = std::move(ro.dropped);
  return metrics;
}

// Advantages over the job's groups; the engine's and (for a stale batch) the
// staleness correction's statistics; pi_prox when the correction needs it.
Metrics TokenTrainer::Prepare(IterationContext& c, const PlayedBatch& batch) {
  const TrainerConfig& t = c.cfg;
  const auto& sampler = *c.agent.sampler;
  const int max_new_tokens = sampler.options().max_new_tokens;
  const policy::ScoreOptions sopts = SamplerScoring(sampler);
  prepared_ = std::make_unique<Prepared>();
  auto& samples = prepared_->samples;
  Metrics metrics;  // gigpo's step groups first: whether they formed
  samples = TokenAdvantages(t, max_new_tokens, batch.episodes, KlPerStep(c, batch.episodes),
                            &c.comm, &metrics);
  prepared_->job = GatherSamples(samples, batch.episodes, c.comm);
  AppendEngineMetrics(samples, t.loss.engine, c.comm, metrics);
  AppendRoutingMetrics(c, samples, batch.version == c.iteration, metrics);
  if (batch.version < c.iteration && t.loss.staleness.kind == StalenessKind::kDecoupled) {
    ScoreProx(c, samples, sopts);
    AppendStalenessMetrics(samples, t.loss.staleness, c.comm, metrics);
  }
  prepared_->settings = ResolveLossSettings(c, sopts, max_new_tokens);
  return metrics;
}

// Gradient SNR at the rollout weights (rank 0's responses: the same count of
// episodes in both planes), epochs x minibatches, the update's metrics.
Metrics TokenTrainer::Learn(IterationContext& c, const PlayedBatch& batch) {
  const std::unique_ptr<Prepared> p = std::move(prepared_);
  Metrics metrics;
  if (c.cfg.grad_snr_every > 0 && c.iteration % c.cfg.grad_snr_every == 0 && c.comm.rank() == 0)
    for (const auto& kv : Snr(c, p->samples, p->settings.loss, p->settings.sopts))
      metrics.push_back(kv);
  const UpdateTotals totals = UpdateEpochs(c, *opt_, p->samples, p->job, p->settings);
  Work kept;
  for (const auto& e : batch.episodes) kept.AddEpisode(e);
  c.budget.samples_used += static_cast<int64_t>(p->samples.size());
  c.budget.tokens_used += kept.tokens;

  const double u = static_cast<double>(std::max<int64_t>(totals.updates, 1));
  metrics.push_back({"losses/policy", totals.loss / u});
  for (const auto& [k, v] : totals.sums)
    metrics.push_back({k == "clip_frac" ? "losses/clipfrac" : "losses/" + k, v / u});
  metrics.push_back({"losses/grad_norm", totals.grad_norm / u});
  metrics.push_back({"charts/lr", opt_->current_lr()});
  metrics.push_back({"charts/epochs", static_cast<double>(totals.epochs)});
  metrics.push_back({"charts/responses", static_cast<double>(p->job.rank.size())});
  return metrics;
}

// SNR of the per-episode gradient of this arm's policy loss at the rollout
// weights (ratio 1): episode i's term is the loss of its responses with the
// whole batch's token and sequence counts as the denominators.
Metrics TokenTrainer::Snr(IterationContext& c, const std::vector<TokenSample>& samples,
                          const LossConfig& loss_cfg, const policy::ScoreOptions& sopts) {
  std::map<int, std::vector<size_t>> by_episode;
  for (size_t i = 0; i < samples.size(); ++i) by_episode[samples[i].episode].push_back(i);
  std::vector<std::vector<size_t>> episodes;
  for (auto& [e, idx] : by_episode) episodes.push_back(idx);
  const int64_t n = std::min<int64_t>(c.cfg.grad_snr_episodes, episodes.size());
  if (n < 2) return {};
  // The batch's denominators, so the episode terms sum to the batch loss.
  GlobalCounts counts{0, 0};
  for (const auto& s : samples) {
    const double len = static_cast<double>(s.step->text.response.size());
    counts.tokens += len;
    counts.sequences += len > 0;
  }
  KlConfig no_kl;
  policy::TransformerLM model = c.agent.model;
  model->train();
  auto g = MeasureGradientSnr(
      model, n,
      [&](int64_t e) {
        auto lb = BuildLossInputs(c, samples, episodes[e], sopts, no_kl);
        lb.in.counts = counts;
        return PolicyLoss(loss_cfg, no_kl, lb.in).loss;
      },
      c.budget.diagnostic);
  return SnrMetrics(g);
}

}  // namespace rlid::trainers

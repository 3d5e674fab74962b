#include "trainers/runtime/iteration.h"

#include <cmath>

#include "core/clock.h"

namespace rlid::trainers {

namespace {

void Append(Metrics& to, const Metrics& from) { to.insert(to.end(), from.begin(), from.end()); }

// The played episodes into the store, with the weights that played them.
void Record(IterationContext& c, const PlayedBatch& batch) {
  agents::AgentContext player = c.agent;
  player.policy_version = batch.version;
  c.recorder.Episodes(batch.episodes, player);
  c.recorder.Episodes(batch.dropped, player);
}

// The rollout engine serves the weights this iteration's update made (version
// iteration + 1); the seconds go into the budget.
Metrics SyncEngine(IterationContext& c) {
  const policy::EngineSync s = c.agent.sampler->Sync(c.agent.model, c.iteration + 1);
  c.budget.engine_sync_seconds += s.seconds;
  const policy::SamplerOptions& o = c.agent.sampler->options();
  // 1: top-k / top-p truncate what is sampled, so the engine's log-probs and the
  // trainer's are over different supports and the importance ratio is biased.
  const bool truncated = o.top_p < 1.0 || o.top_k > 0;
  Metrics m = {{"time/engine_sync_s", s.seconds},
               {"engine/restarted", s.restarted ? 1.0 : 0.0},
               {"engine/truncated_sampling", truncated ? 1.0 : 0.0}};
  if (!std::isnan(s.probe_max_abs_diff)) m.push_back({"engine/probe_max_abs_logp_diff", s.probe_max_abs_diff});
  return m;
}

}  // namespace

Metrics Trainer::Complete(IterationContext&, PlayedBatch&) { return {}; }

IterationRunner::IterationRunner(Trainer& trainer, const TrainerConfig& cfg,
                                 policy::TransformerLM model)
    : trainer_(trainer), ahead_(cfg.max_staleness, model) {
  trainer_.Setup(cfg, model);
}

Metrics IterationRunner::Run(IterationContext& c) {
  const double t0 = MonotonicSeconds();
  // ---- play ----------------------------------------------------------------------
  PlayedBatch batch = ahead_.Take(c.agent, c.cfg.iterations, c.budget, trainer_.Play(c));
  JoinOnExit join_on_exit(ahead_);  // the worker plays ahead while this iteration learns
  const Metrics played = trainer_.Complete(c, batch);
  // ---- record --------------------------------------------------------------------
  Record(c, batch);
  Metrics metrics = RolloutMetrics(batch, &c.comm);
  Append(metrics, played);
  if (NothingToLearn(metrics)) return SkippedUpdate(std::move(metrics), c.iteration);
  // ---- prepare -------------------------------------------------------------------
  Append(metrics, trainer_.Prepare(c, batch));
  metrics.push_back({"time/rollout_and_scoring_s", MonotonicSeconds() - t0});
  // ---- learn ---------------------------------------------------------------------
  Append(metrics, trainer_.Learn(c, batch));
  if (c.agent.sampler) Append(metrics, SyncEngine(c));  // the next rollout's weights
  // ---- measure -------------------------------------------------------------------
  const double wait_s = ahead_.Join();
  Append(metrics, AsyncMetrics(c.cfg.max_staleness, c.iteration, batch, wait_s, c.comm));
  return metrics;
}

void IterationRunner::SaveState(const std::string& dir) const {
  trainer_.SaveState(dir);
  ahead_.Save(dir);
}

void IterationRunner::LoadState(const std::string& dir) {
  trainer_.LoadState(dir);
  ahead_.Load(dir);
}

}  // namespace rlid::trainers

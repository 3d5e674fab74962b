// The lockstep scheduler of agents/lockstep.h: slot groups, the spec queue and
// the preparation of one group's steps.
#include "agents/lockstep.h"

#include <algorithm>

#include "core/check.h"
#include "core/error.h"

namespace rlid::agents::internal {

Lockstep::Lockstep(AgentContext& ctx, const std::vector<EpisodeSpec>& specs, envs::Split split,
                   policy::Plane plane)
    : ctx_(ctx),
      specs_(specs),
      split_(split),
      plane_(plane),
      finished_(specs.size()),
      dropped_(specs.size(), false),
      attempts_(specs.size(), 1) {
  for (size_t i = 0; i < specs.size(); ++i) queue_.push_back(i);
  const int slots = std::max(1, ctx.num_envs);
  const int groups = ctx.env->Info().concurrency > 1 && slots > 1 ? 2 : 1;
  for (int g = 0; g < groups; ++g) capacity_.push_back(slots / groups + (g < slots % groups));
  active_.resize(groups);
  for (int g = 0; g < groups; ++g) active_[g].reserve(capacity_[g]);
}

bool Lockstep::Running() const {
  if (!queue_.empty()) return true;
  for (const auto& g : active_)
    if (!g.empty()) return true;
  return false;
}

std::vector<Slot*> Lockstep::Active(int g) {
  std::vector<Slot*> out;
  for (auto& [idx, s] : active_[g]) out.push_back(&s);
  return out;
}

std::vector<Slot*> Lockstep::Fill(int g, Budget& budget) {
  while (static_cast<int>(active_[g].size()) < capacity_[g] && !queue_.empty()) {
    const size_t idx = queue_.front();
    queue_.pop_front();
    Slot s;
    try {
      s = StartEpisode(ctx_, specs_[idx], split_, plane_, local_ids_);
      s.data.attempts = attempts_[idx];
      WriteFacts(ctx_, s, 0);
    } catch (const EnvError& e) {
      if (!CatchesEnvErrors(ctx_.env->Info())) throw;
      s.data.spec = specs_[idx];
      DropEpisode(ctx_, s, e);
      Count(idx, s, budget);
      continue;
    }
    active_[g].emplace_back(idx, std::move(s));
  }
  return Active(g);
}

void Lockstep::Retire(Budget& budget) {
  for (auto& group : active_) {
    for (auto it = group.begin(); it != group.end();) {
      Slot& s = it->second;
      if (!s.done || s.pending) {
        ++it;
        continue;
      }
      Count(it->first, s, budget);
      it = group.erase(it);
    }
  }
}

std::vector<EpisodeData> Lockstep::Finished() {
  RLID_CHECK(!Running(), "Finished() while episodes are still playing");
  std::vector<EpisodeData> out;
  out.reserve(finished_.size());
  for (size_t i = 0; i < finished_.size(); ++i)
    if (!dropped_[i]) out.push_back(std::move(finished_[i]));
  return out;
}

void Lockstep::Count(size_t idx, Slot& s, Budget& budget) {
  if (s.dropped && RetryOrDrop(ctx_.env->Info(), s, attempts_[idx], budget)) {
    ++attempts_[idx];
    queue_.push_front(idx);  // played again next, from reset
    return;
  }
  if (s.dropped) {
    dropped_[idx] = true;
  } else {
    budget.episodes += 1;
    finished_[idx] = std::move(s.data);
  }
  ++retired_;
  if (ctx_.on_episode_end) ctx_.on_episode_end(retired_, static_cast<int64_t>(specs_.size()));
}

GroupSteps PrepareGroup(AgentContext& ctx, Lockstep& lockstep, int g, policy::Plane plane,
                        Budget& budget, double* env_seconds) {
  GroupSteps out;
  {
    StageTimer timer(env_seconds);
    FinishPending(ctx, lockstep.Active(g));
    lockstep.Retire(budget);
    for (Slot* s : lockstep.Fill(g, budget)) {
      if (s->done || s->pending) continue;
      Guarded(ctx, *s, [&] {
        out.steps.push_back(PrepareStep(ctx, *s, plane));
        out.slots.push_back(s);
      });
    }
  }
  if (out.slots.empty()) lockstep.Retire(budget);
  return out;
}

}  // namespace rlid::agents::internal

// Advantage estimators (registered at the bottom) and their building blocks.
// Formulas: docs/algorithms.md. Group statistics use torch's mean and
// unbiased std on each group's scores, like the reference implementations.
#include "trainers/losses/advantages.h"

#include <fmt/format.h>

#include <map>
#include <utility>

#include "core/error.h"
#include "trainers/losses/tensor_checks.h"

namespace rlid::trainers {
namespace {

// Row indices of each group, in order of first appearance.
std::vector<std::vector<int64_t>> GroupMembers(const std::vector<int64_t>& groups) {
  std::map<int64_t, size_t> slot;
  std::vector<std::vector<int64_t>> members;
  for (size_t i = 0; i < groups.size(); ++i) {
    auto [it, inserted] = slot.emplace(groups[i], members.size());
    if (inserted) members.emplace_back();
    members[it->second].push_back(static_cast<int64_t>(i));
  }
  return members;
}

void RequireGroups(const std::vector<int64_t>& groups, int64_t batch, const char* estimator) {
  if (static_cast<int64_t>(groups.size()) != batch)
    throw ConfigError(fmt::format("estimator '{}' needs one group id per response: got {} ids for "
                                  "{} responses",
                                  estimator, groups.size(), batch),
                      "groups[i] names the prompt / env seed response i was sampled for");
}

torch::Tensor Mask(const AdvantageInputs& in) {
  const torch::Tensor& shape_of = in.token_rewards.defined() ? in.token_rewards : in.response_mask;
  return BoolMask("response_mask", in.response_mask, shape_of);
}

torch::Tensor Broadcast(const torch::Tensor& per_sequence, const torch::Tensor& mask) {
  return Clean(per_sequence.unsqueeze(1).expand(mask.sizes()), mask);
}

class Grpo : public AdvantageEstimator {
 public:
  bool uses_values() const override { return false; }
  bool needs_groups() const override { return true; }
  AdvantageResult Compute(const AdvantageConfig& cfg, const AdvantageInputs& in) const override {
    torch::Tensor s = SequenceScores(in);
    RequireGroups(in.groups, s.size(0), "grpo");
    torch::Tensor a =
        Broadcast(GroupNormalizedScores(s, in.groups, cfg.std_norm, cfg.std_eps), Mask(in));
    return {a, a};
  }
};

class Rloo : public AdvantageEstimator {
 public:
  bool uses_values() const override { return false; }
  bool needs_groups() const override { return true; }
  AdvantageResult Compute(const AdvantageConfig& cfg, const AdvantageInputs& in) const override {
    torch::Tensor s = SequenceScores(in);
    RequireGroups(in.groups, s.size(0), "rloo");
    torch::Tensor a = Broadcast(LeaveOneOutScores(s, in.groups), Mask(in));
    return {a, a};
  }
};

class ReinforcePp : public AdvantageEstimator {
 public:
  bool uses_values() const override { return false; }
  bool needs_groups() const override { return false; }
  AdvantageResult Compute(const AdvantageConfig& cfg, const AdvantageInputs& in) const override {
    torch::Tensor m = Mask(in);
    torch::Tensor returns = DiscountedReturns(TokenRewards(in), m, cfg.gamma);
    return {MaskedWhiten(returns, m), returns};
  }
};

class ReinforcePpBaseline : public AdvantageEstimator {
 public:
  bool uses_values() const override { return false; }
  bool needs_groups() const override { return true; }
  AdvantageResult Compute(const AdvantageConfig& cfg, const AdvantageInputs& in) const override {
    torch::Tensor s = SequenceScores(in);
    RequireGroups(in.groups, s.size(0), "reinforce_pp_baseline");
    torch::Tensor m = Mask(in);
    torch::Tensor centred = Broadcast(GroupNormalizedScores(s, in.groups, false, 0.0), m);
    torch::Tensor a = MaskedWhiten(centred, m);
    return {a, a};
  }
};

// GiGPO: rows are steps (scores = r_t; groups, episodes, anchors per row).
class Gigpo : public AdvantageEstimator {
 public:
  bool uses_values() const override { return false; }
  bool needs_groups() const override { return true; }
  bool needs_steps() const override { return true; }
  AdvantageResult Compute(const AdvantageConfig& cfg, const AdvantageInputs& in) const override {
    torch::Tensor r = SequenceScores(in);
    RequireGroups(in.groups, r.size(0), "gigpo");
    const GigpoTerms parts = GigpoParts(r, in.groups, in.episodes, in.anchors, cfg);
    torch::Tensor a =
        Broadcast((parts.episode_term + cfg.step_weight * parts.step_term).to(r.options()), Mask(in));
    return {a, a, GigpoStepGroupMetrics(parts)};
  }
};

// Token-level GAE: each row is one episode whose steps are its valid positions.
class Gae : public AdvantageEstimator {
 public:
  bool uses_values() const override { return true; }
  bool needs_groups() const override { return false; }
  AdvantageResult Compute(const AdvantageConfig& cfg, const AdvantageInputs& in) const override {
    torch::Tensor m = Mask(in);
    if (!in.values.defined())
      throw ConfigError("estimator 'gae' needs values [B,T]",
                        "pass the value head's V(s_t) for every response position");
    RequireSameShape("values", in.values, "response_mask", m);
    torch::Tensor rewards = TokenRewards(in);
    torch::Tensor positions = m.nonzero();  // [N,2], row-major
    torch::Tensor advantages = torch::zeros_like(rewards);
    if (positions.size(0) == 0) return {advantages, advantages.clone()};
    torch::Tensor rows = positions.select(1, 0), cols = positions.select(1, 1);
    DecisionGaeInputs packed;
    packed.rewards = rewards.index({rows, cols});
    packed.values = in.values.to(rewards.scalar_type()).index({rows, cols});
    torch::Tensor next_row = torch::cat({rows.slice(0, 1), torch::full({1}, -1, rows.options())});
    packed.episode_end = next_row != rows;
    if (in.end_values.defined()) packed.end_values = in.end_values.index_select(0, rows);
    AdvantageResult flat = GaeAdvantages(packed, cfg.gamma, cfg.lambda);
    torch::Tensor returns = torch::zeros_like(rewards);
    advantages.index_put_({rows, cols}, flat.advantages);
    returns.index_put_({rows, cols}, flat.returns);
    return {advantages, returns};
  }
};

const Registrar<AdvantageRegistry> kGrpo("grpo", "group-relative: (s - mean_g) [/ (std_g + eps)]",
                                         [] { return std::make_unique<Grpo>(); });
const Registrar<AdvantageRegistry> kRloo("rloo", "leave-one-out: s_i - mean_{j != i} s_j",
                                         [] { return std::make_unique<Rloo>(); });
const Registrar<AdvantageRegistry> kReinforcePp("reinforce_pp",
                                                "discounted token returns, whitened over the batch",
                                                [] { return std::make_unique<ReinforcePp>(); });
const Registrar<AdvantageRegistry> kReinforcePpBaseline(
    "reinforce_pp_baseline", "s_i - mean_g, whitened over the batch",
    [] { return std::make_unique<ReinforcePpBaseline>(); });
const Registrar<AdvantageRegistry> kGigpo(
    "gigpo", "group-in-group: episode term + step_weight * step term over anchor states",
    [] { return std::make_unique<Gigpo>(); });
const Registrar<AdvantageRegistry> kGae("gae", "generalised advantage estimation with a value head",
                                        [] { return std::make_unique<Gae>(); });

}  // namespace

torch::Tensor SequenceScores(const AdvantageInputs& in) {
  if (in.scores.defined()) return in.scores;
  return Clean(in.token_rewards, Mask(in)).sum(1);
}

torch::Tensor TokenRewards(const AdvantageInputs& in) {
  torch::Tensor m = Mask(in);
  if (in.token_rewards.defined()) return Clean(in.token_rewards, m);
  // Last valid position of each row: argmax of position index over valid tokens.
  const auto idx_opts = torch::TensorOptions().dtype(torch::kInt64).device(m.device());
  torch::Tensor index = torch::arange(m.size(1), idx_opts).unsqueeze(0).expand(m.sizes());
  torch::Tensor last = torch::where(m, index, torch::full_like(index, -1)).amax(1);  // [B]
  torch::Tensor rewards = torch::zeros(m.sizes(), in.scores.options());
  torch::Tensor has = last >= 0;
  torch::Tensor rows = torch::arange(m.size(0), idx_opts).masked_select(has);
  rewards.index_put_({rows, last.masked_select(has)}, in.scores.masked_select(has));
  return rewards;
}

torch::Tensor GroupNormalizedScores(const torch::Tensor& scores, const std::vector<int64_t>& groups,
                                    bool std_norm, double std_eps) {
  torch::Tensor out = torch::zeros_like(scores);
  for (const auto& members : GroupMembers(groups)) {
    if (members.size() < 2) continue;
    torch::Tensor idx = torch::tensor(members, torch::kInt64).to(scores.device());
    torch::Tensor s = scores.index_select(0, idx);
    if ((s == s[0]).all().item<bool>()) continue;  // all equal: exactly 0
    torch::Tensor a = s - s.mean();
    if (std_norm) a = a / (s.std() + std_eps);
    out.index_copy_(0, idx, a);
  }
  return out;
}

GigpoTerms GigpoParts(const torch::Tensor& rewards, const std::vector<int64_t>& groups,
                      const std::vector<int64_t>& episodes, const std::vector<uint64_t>& anchors,
                      const AdvantageConfig& cfg) {
  const int64_t B = rewards.size(0);
  if (static_cast<int64_t>(episodes.size()) != B || static_cast<int64_t>(anchors.size()) != B)
    throw ConfigError(
        fmt::format("estimator 'gigpo' needs an episode id and an anchor per step row: got {} "
                    "and {} for {} rows",
                    episodes.size(), anchors.size(), B),
        "episodes[i] names the episode of step row i, anchors[i] its state (a hash)");
  const torch::Tensor cpu = rewards.to(torch::kCPU, torch::kFloat64).contiguous();
  const auto r = cpu.accessor<double, 1>();
  // Episode returns (one member per episode) and each row's return-to-go.
  std::map<int64_t, size_t> episode_slot;
  std::vector<double> episode_return;
  std::vector<int64_t> episode_group;
  std::vector<size_t> slot_of_row(B);
  for (int64_t i = 0; i < B; ++i) {
    auto [it, inserted] = episode_slot.emplace(episodes[i], episode_return.size());
    if (inserted) episode_return.push_back(0.0), episode_group.push_back(groups[i]);
    if (episode_group[it->second] != groups[i])
      throw ConfigError(fmt::format("gigpo: episode {} has steps in groups {} and {}", episodes[i],
                                    episode_group[it->second], groups[i]),
                        "every step of an episode carries its episode's group");
    slot_of_row[i] = it->second;
    episode_return[it->second] += r[i];
  }
  std::vector<double> to_go(B), running(episode_return.size(), 0.0);
  for (int64_t i = B - 1; i >= 0; --i)
    to_go[i] = running[slot_of_row[i]] = r[i] + cfg.gamma * running[slot_of_row[i]];
  // Step groups: (group, anchor) pairs, numbered in order of appearance.
  std::map<std::pair<int64_t, uint64_t>, int64_t> step_group_id;
  std::vector<int64_t> step_groups(B);
  for (int64_t i = 0; i < B; ++i)
    step_groups[i] =
        step_group_id.emplace(std::make_pair(groups[i], anchors[i]), step_group_id.size())
            .first->second;
  const auto f64 = torch::TensorOptions().dtype(torch::kFloat64);
  torch::Tensor episode_adv = GroupNormalizedScores(torch::tensor(episode_return, f64),
                                                    episode_group, cfg.std_norm, cfg.std_eps);
  torch::Tensor step_adv =
      GroupNormalizedScores(torch::tensor(to_go, f64), step_groups, cfg.std_norm, cfg.std_eps);
  std::vector<int64_t> slots(slot_of_row.begin(), slot_of_row.end());
  GigpoTerms out;
  out.episode_term = episode_adv.index_select(0, torch::tensor(slots, torch::kInt64));
  out.step_term = step_adv;
  std::vector<int64_t> size_of(step_group_id.size(), 0);
  for (int64_t g : step_groups) ++size_of[g];
  for (int64_t g : step_groups) out.step_group_size.push_back(size_of[g]);
  return out;
}

torch::Tensor GigpoAdvantages(const torch::Tensor& rewards, const std::vector<int64_t>& groups,
                              const std::vector<int64_t>& episodes,
                              const std::vector<uint64_t>& anchors, const AdvantageConfig& cfg) {
  const GigpoTerms t = GigpoParts(rewards, groups, episodes, anchors, cfg);
  return (t.episode_term + cfg.step_weight * t.step_term).to(rewards.options());
}

std::vector<std::pair<std::string, double>> GigpoStepGroupMetrics(const GigpoTerms& t) {
  const size_t n = t.step_group_size.size();
  if (n == 0) return {};
  double size = 0, largest = 0;
  for (int64_t s : t.step_group_size)
    size += static_cast<double>(s), largest = std::max<double>(largest, s);
  const double nonzero = (t.step_term != 0).sum().item<double>();
  return {{"gigpo/step_group_size", size / static_cast<double>(n)},
          {"gigpo/step_group_size_max", largest},
          {"gigpo/step_term_nonzero", nonzero / static_cast<double>(n)}};
}

torch::Tensor LeaveOneOutScores(const torch::Tensor& scores, const std::vector<int64_t>& groups) {
  torch::Tensor out = torch::zeros_like(scores);
  for (const auto& members : GroupMembers(groups)) {
    if (members.size() < 2) continue;
    torch::Tensor idx = torch::tensor(members, torch::kInt64).to(scores.device());
    torch::Tensor s = scores.index_select(0, idx);
    if ((s == s[0]).all().item<bool>()) continue;
    double n = static_cast<double>(members.size());
    // s_i - (sum - s_i)/(n-1), written as verl does: (s_i - mean) * n / (n-1).
    torch::Tensor a = s * n / (n - 1) - s.mean() * n / (n - 1);
    out.index_copy_(0, idx, a);
  }
  return out;
}

torch::Tensor DiscountedReturns(const torch::Tensor& rewards, const torch::Tensor& mask,
                                double gamma) {
  torch::Tensor m = mask.to(torch::kBool);
  torch::Tensor r = Clean(rewards, m);
  torch::Tensor returns = torch::zeros_like(r);
  torch::Tensor running = torch::zeros({r.size(0)}, r.options());
  for (int64_t t = r.size(1) - 1; t >= 0; --t) {
    torch::Tensor valid = m.select(1, t);
    running = torch::where(valid, r.select(1, t) + gamma * running, running);
    returns.select(1, t).copy_(torch::where(valid, running, torch::zeros_like(running)));
  }
  return returns;
}

torch::Tensor MaskedWhiten(const torch::Tensor& x, const torch::Tensor& mask) {
  torch::Tensor m = mask.to(torch::kBool);
  torch::Tensor clean = Clean(x, m);
  double n = m.sum().item<double>();
  if (n < 2) return torch::zeros_like(clean);
  torch::Tensor mean = clean.sum() / n;
  torch::Tensor centred = Clean(clean - mean, m);
  torch::Tensor var = centred.square().sum() / (n - 1);
  return Clean((clean - mean) * torch::rsqrt(var + 1e-8), m);
}

AdvantageResult GaeAdvantages(const DecisionGaeInputs& in, double gamma, double lambda) {
  if (!in.rewards.defined() || in.rewards.dim() != 1)
    throw ConfigError(
        fmt::format("GAE rewards has shape {}, expected [N]", ShapeString(in.rewards)));
  const int64_t n = in.rewards.size(0);
  RequireShape("GAE values", in.values, {n}, "one per decision");
  RequireShape("GAE episode_end", in.episode_end, {n}, "one per decision");
  if (in.end_values.defined()) RequireShape("GAE end_values", in.end_values, {n}, "");
  torch::Tensor out = torch::zeros({n}, in.rewards.options());
  if (n == 0) return {out, out.clone()};
  // The recursion runs on the host; the result goes back to the rewards' device.
  torch::Tensor r = in.rewards.detach().to(torch::kCPU, torch::kFloat64).contiguous();
  torch::Tensor v = in.values.detach().to(torch::kCPU, torch::kFloat64).contiguous();
  torch::Tensor end = in.episode_end.to(torch::kCPU, torch::kBool).contiguous();
  torch::Tensor end_v = in.end_values.defined()
                            ? in.end_values.detach().to(torch::kCPU, torch::kFloat64).contiguous()
                            : torch::zeros({n}, torch::kFloat64);
  if (!end[n - 1].item<bool>())
    throw ConfigError("GAE: the last decision must end an episode",
                      "mark a cut episode as ended and pass its bootstrap value in end_values");
  auto ra = r.accessor<double, 1>(), va = v.accessor<double, 1>(), ea = end_v.accessor<double, 1>();
  auto done = end.accessor<bool, 1>();
  std::vector<double> adv(n);
  for (int64_t t = n - 1; t >= 0; --t) {
    double next_value = done[t] ? ea[t] : va[t + 1];
    double next_adv = done[t] ? 0.0 : adv[t + 1];
    double delta = ra[t] + gamma * next_value - va[t];
    adv[t] = delta + gamma * lambda * next_adv;
  }
  const auto opts = in.rewards.options();
  torch::Tensor a = torch::tensor(adv, torch::kFloat64).to(opts);
  return {a, a + v.to(opts)};
}

AdvantageInputs CheckAdvantageInputs(const AdvantageConfig& cfg, const AdvantageInputs& in) {
  cfg.Validate();
  if (in.scores.defined() == in.token_rewards.defined())
    throw ConfigError("advantage inputs need exactly one of scores [B] and token_rewards [B,T]",
                      in.scores.defined() ? "drop one of them" : "pass scores or token_rewards");
  AdvantageInputs clean = in;
  int64_t batch = 0;
  if (in.token_rewards.defined()) {
    if (in.token_rewards.dim() != 2 || in.token_rewards.numel() == 0)
      throw ConfigError(fmt::format("token_rewards has shape {}, expected a non-empty [B,T] matrix",
                                    ShapeString(in.token_rewards)));
    batch = in.token_rewards.size(0);
    clean.token_rewards = in.token_rewards.to(torch::kFloat64);
  } else {
    if (in.scores.dim() != 1 || in.scores.numel() == 0)
      throw ConfigError(fmt::format("scores has shape {}, expected a non-empty [B] vector",
                                    ShapeString(in.scores)));
    batch = in.scores.size(0);
    if (!in.response_mask.defined() || in.response_mask.dim() != 2 ||
        in.response_mask.size(0) != batch)
      throw ConfigError(fmt::format("response_mask has shape {}, expected [{}, T] to go with "
                                    "scores [{}]",
                                    ShapeString(in.response_mask), batch, batch),
                        "the mask says which positions of each response are tokens");
    clean.scores = in.scores.to(torch::kFloat64);
  }
  torch::Tensor m = Mask(clean);
  clean.response_mask = m;
  if (!in.groups.empty()) RequireGroups(in.groups, batch, cfg.estimator.c_str());
  if (in.values.defined()) {
    RequireSameShape("values", in.values, "response_mask", m);
    clean.values = Clean(in.values.to(torch::kFloat64), m);
  }
  if (in.end_values.defined()) {
    RequireShape("end_values", in.end_values, {batch}, "one per response");
    clean.end_values = in.end_values.to(torch::kFloat64);
  }
  return clean;
}

AdvantageResult ComputeAdvantages(const AdvantageConfig& cfg, const AdvantageInputs& in) {
  AdvantageInputs clean = CheckAdvantageInputs(cfg, in);
  return AdvantageRegistry::Global().Make(cfg.estimator)->Compute(cfg, clean);
}

}  // namespace rlid::trainers

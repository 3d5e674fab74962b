// Internal to `rlid audit` (trainers/analysis/audit.h): what its checks
// share. audit.cc runs them (RunAudit); this folder holds one file per check
// (finite, marginalisation, rao_blackwell, ppo_gradient, teaching,
// label_bias) and common.cc, the helpers below. Not an API: include it only
// from those files.
#pragma once

#include <fmt/format.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "envs/api/env.h"
#include "policy/model/model.h"
#include "policy/reading/prompt.h"
#include "policy/reading/readout.h"
#include "trainers/analysis/audit.h"

namespace rlid::trainers::audit_internal {

using policy::TokenId;

// Tolerances. Each is on a quantity that is 0 in exact arithmetic and of order
// 1 when a readout or gradient is wrong; the measured float32/float64 noise on
// the tiny test models and on a random Qwen3-0.6B-shaped model is far below
// them (README, "The audit").
constexpr double kLogPTolerance = 1e-3;       // |log p1 - log p2|, i.e. relative error in p
constexpr double kMeanTolerance = 1e-3;       // ||E1 - E2|| / max(||E1||, ||E2||)
constexpr double kVarianceTolerance = 1e-3;   // (v_marginal - v_sampled) / E||g_sampled||^2
constexpr double kMonteCarloZ = 4.0;          // ||MC mean diff|| / standard error
constexpr double kFdTolerance = 1e-5;         // |autograd - FD| / max(|autograd|, |FD|, floor)
constexpr double kFdStep = 1e-4;              // along a unit direction (4-point stencil)
constexpr int64_t kRaoBlackwellStates = 3;    // multi-action states the check compares
constexpr int64_t kPpoStates = 4;             // batch of the PPO gradient check
constexpr int64_t kChunk = int64_t{1} << 20;  // elements per float64 reduction chunk

struct AuditState {
  envs::Menu menu;
  policy::RenderedPrompt prompt;  // with [prompt] reasoning: tokens end with z ++ answer prefix
  std::unique_ptr<envs::State> state;
  int64_t think_begin = 0, think_end = 0;  // the scratchpad z in prompt.tokens (empty: none)
};

// ---- the states and their readouts ------------------------------------------------

// With [prompt] reasoning the checks run given a scratchpad: the model's own
// greedy one (at most max_think_tokens, ending its line), appended with the
// answer prefix as a thinking rollout does (agents::RunDecisionEpisodes).
void AppendGreedyThoughts(policy::TransformerLM& model, const policy::PromptRenderer& renderer,
                          std::vector<AuditState>& states);

// Test-split states reached by seeded random play, menus shuffled per state.
std::vector<AuditState> CollectStates(const envs::Env& env, const policy::PromptRenderer& renderer,
                                      int64_t n, uint64_t seed);

// The request with duplicate realisations of an item removed (so realisation
// indices address distinct events).
policy::ReadoutRequest DistinctRequest(const policy::PromptRenderer& renderer,
                                       const AuditState& a);

// The distinct realisations of a menu as the readout scores them, flattened: a
// realisation that is a token-prefix of another gets the end token (same rule as
// policy::Readout). owner[r] is the item of realisation r.
struct FlatRealisations {
  std::vector<std::vector<TokenId>> tokens;
  std::vector<int64_t> owner;
};

FlatRealisations ScoredRealisations(const policy::ReadoutRequest& r);

// log pi(w|s) of one realisation by one plain forward of prompt ++ w: a scalar with
// its graph when grad mode is on.
torch::Tensor SeparateLogProb(policy::TransformerLM& m, const std::vector<TokenId>& prompt,
                              const std::vector<TokenId>& w);

double LogSumExp(const std::vector<double>& v);

std::string Num(double v);

// Records the non-finite numbers a check compares; any makes the check fail.
// `what` is only formatted for a non-finite value.
class FiniteGuard {
 public:
  bool operator()(double v, const std::function<std::string()>& what) {
    if (std::isfinite(v)) return true;
    if (names_.size() < 4) names_.push_back(fmt::format("{} = {}", what(), v));
    ++count_;
    return false;
  }
  bool ok() const { return count_ == 0; }
  // Fails `c` (also an informational one) with a note naming the values.
  void Apply(AuditCheck& c) const {
    if (ok()) return;
    c.passed = false;
    c.informational = false;
    c.numbers.push_back({"non-finite values (check fails)", std::to_string(count_)});
    std::string list;
    for (const auto& n : names_) list += (list.empty() ? "" : "; ") + n;
    if (count_ > static_cast<int64_t>(names_.size())) list += "; ...";
    c.note = "FAIL: non-finite " + list + (c.note.empty() ? "" : ". " + c.note);
  }

 private:
  std::vector<std::string> names_;
  int64_t count_ = 0;
};

// p(a_k|s) = exp(log p) of the readout's first row for k < K, each checked by
// `finite` under the name item(k) (k from 0); a non-finite one clears
// *all_finite when given.
std::vector<double> MenuProbs(const policy::ReadoutBatch& rb, size_t K, FiniteGuard& finite,
                              const std::function<std::string(size_t)>& item,
                              bool* all_finite = nullptr);

// ---- streaming gradient accumulation ------------------------------------------------
// Every gradient vector the checks need is built by weighted backwards into the
// parameters' own .grad and reduced to float64 scalars at once, tensor by
// tensor, in chunks of kChunk elements: no flat or float64 copy of the model.

// float64 squared norm of sum_k c_k t_k over same-shaped tensors (undefined ones
// count as zero), chunked: the temporaries are kChunk elements long.
double SquaredNormOfSum(const std::vector<std::pair<double, torch::Tensor>>& terms);

double SumSquares(const torch::Tensor& t);

double SumProducts(const torch::Tensor& a, const torch::Tensor& b);

std::vector<torch::Tensor> TrainableParams(policy::TransformerLM& m);

// The gradient vector X = sum over the given models of their parameters' .grad
// (one model when the audited and the reference model are the same; two when a
// separate reference model scores the independent side). With two models the
// parameters pair up by position (same config), and X_i = a_i.grad + b_i.grad.
class GradAccumulator {
 public:
  GradAccumulator(policy::TransformerLM& a, policy::TransformerLM& b) {
    sides_.push_back(TrainableParams(a));
    if (b.ptr() != a.ptr()) {
      sides_.push_back(TrainableParams(b));
      if (sides_[1].size() != sides_[0].size())
        throw ConfigError(
            fmt::format("audit: the reference model has {} tensors that require grad, the "
                        "audited model {}",
                        sides_[1].size(), sides_[0].size()),
            "use a reference model with the audited model's config and requires_grad set "
            "(policy::CloneModel turns it off)");
    }
  }
  ~GradAccumulator() { Release(); }
  // X = 0 (in place; keeps the buffers).
  void Zero() {
    for (auto& side : sides_)
      for (auto& p : side)
        if (p.grad().defined()) p.mutable_grad().zero_();
  }
  size_t size() const { return sides_[0].size(); }
  // ||g - c X_i||^2 for a tensor g shaped like parameter i (g undefined = 0).
  double SquaredNormMinus(size_t i, const torch::Tensor& g, double c) const {
    std::vector<std::pair<double, torch::Tensor>> terms = {{1.0, g}};
    for (const auto& side : sides_) terms.push_back({-c, side[i].grad()});
    return SquaredNormOfSum(terms);
  }
  // ||X||^2 in float64.
  double SquaredNorm() const {
    double s = 0;
    for (size_t i = 0; i < size(); ++i) s += SquaredNormMinus(i, torch::Tensor(), -1.0);
    return s;
  }
  // Frees every .grad.
  void Release() {
    for (auto& side : sides_)
      for (auto& p : side) p.mutable_grad() = torch::Tensor();
  }
  const std::vector<std::vector<torch::Tensor>>& sides() const { return sides_; }

 private:
  std::vector<std::vector<torch::Tensor>> sides_;
};

// While alive, every backward's incoming gradient g_i of each parameter i is
// reduced at once to ||g_i - c X_i||^2 (float64, chunked; c = 1 with
// `minus_accumulated`, else 0) and then dropped: the hook hands autograd a
// broadcast zero, so X (the .grad) is unchanged. Take() adds ||c X_i||^2 for
// the parameters the backwards did not reach. One backward thus yields the
// squared norm of (its gradient - X) without a second parameter-sized buffer
// or a backward to undo it. Use one backward per Take().
class GradientNormProbe {
 public:
  GradientNormProbe(const GradAccumulator& acc, bool minus_accumulated)
      : acc_(acc), state_(std::make_shared<State>()) {
    state_->c = minus_accumulated ? 1.0 : 0.0;
    state_->reached.assign(acc.size(), false);
    for (const auto& side : acc.sides())
      for (size_t i = 0; i < side.size(); ++i) {
        auto st = state_;
        const GradAccumulator* a = &acc;
        unsigned h = side[i].register_hook([st, a, i](const torch::Tensor& g) {
          st->sum += a->SquaredNormMinus(i, g, st->c);
          st->reached[i] = true;
          return torch::zeros({}, g.options()).expand(g.sizes());
        });
        hooks_.push_back({side[i], h});
      }
  }
  ~GradientNormProbe() {
    for (auto& [p, h] : hooks_) p.remove_hook(h);
  }
  GradientNormProbe(const GradientNormProbe&) = delete;
  GradientNormProbe& operator=(const GradientNormProbe&) = delete;
  // ||g - c X||^2 of the backward since the last Take().
  double Take() {
    double s = std::exchange(state_->sum, 0.0);
    for (size_t i = 0; i < acc_.size(); ++i) {
      if (!state_->reached[i] && state_->c != 0)
        s += acc_.SquaredNormMinus(i, torch::Tensor(), state_->c);
      state_->reached[i] = false;
    }
    return s;
  }

 private:
  struct State {
    double c = 0, sum = 0;
    std::vector<bool> reached;
  };
  const GradAccumulator& acc_;
  std::vector<std::pair<torch::Tensor, unsigned>> hooks_;
  std::shared_ptr<State> state_;
};

// g += weight * grad y (y a scalar).
void Backward(const torch::Tensor& y, double weight, bool retain_graph = false);

// ---- the checks, one file each ----------------------------------------------------
// 0. finite.cc
AuditCheck Finite(policy::TransformerLM& model);
// 1. marginalisation.cc
AuditCheck Marginalisation(policy::TransformerLM& model, policy::TransformerLM& ref,
                           const policy::PromptRenderer& renderer,
                           const std::vector<AuditState>& states);
// 2. rao_blackwell.cc
AuditCheck RaoBlackwell(policy::TransformerLM& model, policy::TransformerLM& ref,
                        const policy::PromptRenderer& renderer,
                        const std::vector<AuditState>& states, int64_t mc, uint64_t seed);
// 3. ppo_gradient.cc
AuditCheck PpoGradient(policy::TransformerLM& model, const policy::PromptRenderer& renderer,
                       const std::vector<AuditState>& states, uint64_t seed);
// 4. teaching.cc
AuditCheck Teaching(policy::TransformerLM& model, const policy::PromptRenderer& renderer,
                    const std::vector<AuditState>& states);
// 5. label_bias.cc
AuditCheck LabelBias(policy::TransformerLM& model, const policy::PromptRenderer& renderer,
                     const std::vector<AuditState>& states, const envs::Env& env, uint64_t seed);

}  // namespace rlid::trainers::audit_internal

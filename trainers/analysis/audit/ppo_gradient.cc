// Audit check 3, PPO gradient: the decision-PPO loss's autograd gradient vs
// central finite differences, in float64.
#include <ATen/CPUGeneratorImpl.h>
#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/rng.h"
#include "trainers/analysis/audit/audit_internal.h"
#include "trainers/losses/decision_losses.h"
#include "trainers/losses/losses.h"

namespace rlid::trainers::audit_internal {
namespace {

// The model converted to float64 in place for the scope's lifetime, with
// requires_grad only on the parameters `keep` selects. The destructor releases
// every .grad, converts each parameter back to its original dtype and restores
// its requires_grad flag. The round trip is exact: every float32 (and bf16/f16)
// value is a float64 value, and rounding it back gives the original. Memory: the
// tensors are converted one at a time, so the model holds its float64 weights
// (2x the float32 bytes) plus one tensor in flight, never a float64 clone next
// to the original.
class Float64Scope {
 public:
  Float64Scope(policy::TransformerLM& model, const std::function<bool(const std::string&)>& keep) {
    torch::NoGradGuard ng;
    for (auto& item : model->named_parameters()) {
      auto p = item.value();
      entries_.push_back({p, p.scalar_type(), p.requires_grad()});
      p.mutable_grad() = torch::Tensor();
      p.set_data(p.detach().to(torch::kFloat64));
      const bool k = keep(item.key());
      p.set_requires_grad(k);
      if (k) selected_.push_back({item.key(), p});
    }
  }
  ~Float64Scope() {
    torch::NoGradGuard ng;
    for (auto& e : entries_) {
      e.param.mutable_grad() = torch::Tensor();
      e.param.set_data(e.param.detach().to(e.dtype));
      e.param.set_requires_grad(e.requires_grad);
    }
  }
  Float64Scope(const Float64Scope&) = delete;
  Float64Scope& operator=(const Float64Scope&) = delete;
  const std::vector<std::pair<std::string, torch::Tensor>>& selected() const { return selected_; }

 private:
  struct Entry {
    torch::Tensor param;
    torch::Dtype dtype;
    bool requires_grad;
  };
  std::vector<Entry> entries_;
  std::vector<std::pair<std::string, torch::Tensor>> selected_;
};

// The PPO check's batch: the first kPpoStates states, with a chosen item each,
// random advantages and returns, and offsets of the old log-probs and values
// from the model's own (so ratios and value clipping are exercised).
struct PpoBatch {
  std::vector<policy::ReadoutRequest> reqs;
  std::vector<int64_t> chosen;
  std::vector<double> adv, noise, vnoise, ret;
  int64_t size() const { return static_cast<int64_t>(reqs.size()); }
};

PpoBatch DrawPpoBatch(const policy::PromptRenderer& renderer, const std::vector<AuditState>& states,
                      uint64_t seed) {
  Rng rng = Rng::Stream(seed, "audit_ppo");
  PpoBatch b;
  for (size_t i = 0; i < std::min<size_t>(states.size(), kPpoStates); ++i)
    b.reqs.push_back(DistinctRequest(renderer, states[i]));
  for (const auto& r : b.reqs) {
    b.chosen.push_back(static_cast<int64_t>(rng.UniformInt(r.realisations.size())));
    b.adv.push_back(2 * rng.Uniform() - 1);
    b.noise.push_back(0.3 * (2 * rng.Uniform() - 1));
    b.vnoise.push_back(0.2 * (2 * rng.Uniform() - 1));
    b.ret.push_back(2 * rng.Uniform() - 1);
  }
  return b;
}

// The parameters the directions live on: the first and last decoder layer, the
// final norm and the value head, i.e. every kind of tensor the loss reaches
// except the embedding.
std::function<bool(const std::string&)> PerturbedParameters(int64_t num_layers) {
  const std::string first = "model.layers.0.",
                    last = fmt::format("model.layers.{}.", num_layers - 1);
  return [first, last](const std::string& name) {
    return name.rfind(first, 0) == 0 || name.rfind(last, 0) == 0 || name == "model.norm.weight" ||
           name.rfind("value_head.", 0) == 0;
  };
}

// The audited loss: clipped surrogate on p(a|s) ratios + 0.5 * clipped value
// loss - 0.01 * menu entropy, against old log-probs and values read once at
// construction (without grad). It is the batch mean of per-state losses,
// evaluated state by state (the same function as one batched readout, since
// every term is a mean over states) so that autograd keeps only one state's
// float64 activations.
class PpoAuditLoss {
 public:
  PpoAuditLoss(policy::TransformerLM& model, const PpoBatch& b) : model_(model), b_(b) {
    lc_.clip_low = lc_.clip_high = 0.2;
    {
      torch::NoGradGuard ng;
      auto rb = policy::Readout(model_, b_.reqs, {policy::Normalisation::kMenu, false});
      old_logp_ = rb.log_p.gather(1, torch::tensor(b_.chosen).unsqueeze(1)).squeeze(1) +
                  torch::tensor(b_.noise, torch::kFloat64);
      old_v_ = rb.value + torch::tensor(b_.vnoise, torch::kFloat64);
    }
    adv_t_ = torch::tensor(b_.adv, torch::kFloat64);
    ret_t_ = torch::tensor(b_.ret, torch::kFloat64);
  }
  // State b's term (with its graph when grad mode is on).
  torch::Tensor State(int64_t b) const {
    auto rb = policy::Readout(model_, {b_.reqs[b]}, {policy::Normalisation::kMenu, false});
    auto logp = rb.log_p[0][b_.chosen[b]].reshape({1});
    auto pg = DecisionPpoLoss(lc_, logp, old_logp_[b].reshape({1}), adv_t_[b].reshape({1})).loss;
    auto v = ValueLoss(rb.value, old_v_[b].reshape({1}), ret_t_[b].reshape({1}), 0.2);
    auto ent = MenuEntropy(rb.log_p, rb.item_mask).mean();
    return (pg + 0.5 * v - 0.01 * ent) / static_cast<double>(b_.size());
  }
  // The loss, state by state.
  double Value() const {
    double total = 0;
    for (int64_t b = 0; b < b_.size(); ++b) total += State(b).item<double>();
    return total;
  }

 private:
  policy::TransformerLM& model_;
  const PpoBatch& b_;
  LossConfig lc_;
  torch::Tensor old_logp_, old_v_, adv_t_, ret_t_;
};

// Accumulates the loss's autograd gradient in the parameters' .grad (one
// backward per state); returns its squared norm over `sel`.
double AutogradGradient(const PpoAuditLoss& loss_fn, int64_t B,
                        const std::vector<std::pair<std::string, torch::Tensor>>& sel,
                        FiniteGuard& finite) {
  double loss = 0;
  for (int64_t b = 0; b < B; ++b) {
    auto l = loss_fn.State(b);
    loss += l.item<double>();
    l.backward();
  }
  finite(loss, [] { return std::string("loss"); });
  double grad_sq = 0;
  for (const auto& [name, p] : sel) {
    if (!p.grad().defined()) continue;  // the loss does not reach it
    const double s = SumSquares(p.grad());
    if (finite(s, [&] { return "||autograd gradient of " + name + "||^2"; })) grad_sq += s;
  }
  return grad_sq;
}

// The loss's derivative along one direction over `sel` (dir[i] shaped like
// parameter i; unit norm overall), by a fourth-order central difference with
// step h: truncation O(h^4), rounding ~1e-16 / h. Restores the parameters.
double CentralDifference(const std::vector<std::pair<std::string, torch::Tensor>>& sel,
                         const std::vector<torch::Tensor>& orig,
                         const std::vector<torch::Tensor>& dir, double h,
                         const PpoAuditLoss& loss_fn) {
  auto loss_at = [&](double s) {
    for (size_t i = 0; i < sel.size(); ++i) sel[i].second.copy_(orig[i] + s * dir[i]);
    return loss_fn.Value();
  };
  const double p2 = loss_at(2 * h), p1 = loss_at(h), n1 = loss_at(-h), n2 = loss_at(-2 * h);
  for (size_t i = 0; i < sel.size(); ++i) sel[i].second.copy_(orig[i]);
  return (n2 - 8 * n1 + 8 * p1 - p2) / (12 * h);
}

// Three random unit directions over `sel` (drawn from `seed`): autograd's
// directional derivative (from .grad) vs CentralDifference, each pair added to
// c.numbers. Returns the worst relative error, its denominator floored at
// `typical`. Call without grad mode.
double WorstDirectionalError(const std::vector<std::pair<std::string, torch::Tensor>>& sel,
                             double typical, const PpoAuditLoss& loss_fn, uint64_t seed,
                             FiniteGuard& finite, AuditCheck& c) {
  auto gen = at::make_generator<at::CPUGeneratorImpl>(seed ^ 0x9e3779b97f4a7c15ULL);
  std::vector<torch::Tensor> orig;
  for (const auto& [name, p] : sel) orig.push_back(p.detach().clone());
  double worst = 0;
  for (int d = 0; d < 3; ++d) {
    std::vector<torch::Tensor> dir;
    double sq = 0;
    for (const auto& [name, p] : sel) {
      dir.push_back(torch::randn(p.sizes(), gen, torch::TensorOptions().dtype(torch::kFloat64)));
      sq += SumSquares(dir.back());
    }
    double analytic = 0;
    for (size_t i = 0; i < sel.size(); ++i) {
      dir[i] /= std::sqrt(sq);
      if (sel[i].second.grad().defined()) analytic += SumProducts(sel[i].second.grad(), dir[i]);
    }
    const double fd = CentralDifference(sel, orig, dir, kFdStep, loss_fn);
    auto name = [d](const char* what) {
      return [d, what] { return fmt::format("direction {} {}", d + 1, what); };
    };
    if (!(finite(analytic, name("autograd")) & finite(fd, name("finite difference")))) continue;
    const double rel =
        std::abs(analytic - fd) / std::max({std::abs(analytic), std::abs(fd), typical, 1e-300});
    worst = std::max(worst, rel);
    c.numbers.push_back({fmt::format("direction {}: autograd vs finite difference", d + 1),
                         fmt::format("{:.10g} vs {:.10g}", analytic, fd)});
  }
  return worst;
}

}  // namespace

AuditCheck PpoGradient(policy::TransformerLM& model, const policy::PromptRenderer& renderer,
                       const std::vector<AuditState>& states, uint64_t seed) {
  AuditCheck c{"ppo_gradient",
               "PPO gradient check: autograd vs central finite differences (float64)"};
  FiniteGuard finite;
  const PpoBatch batch = DrawPpoBatch(renderer, states, seed);
  const int64_t B = batch.size();
  const int64_t L = model->config().num_layers;
  int64_t total_values = 0;
  for (auto& p : model->parameters()) total_values += p.numel();
  Float64Scope f64(model, PerturbedParameters(L));
  const auto& sel = f64.selected();
  int64_t sel_values = 0;
  for (const auto& [name, p] : sel) sel_values += p.numel();

  const PpoAuditLoss loss_fn(model, batch);
  const double grad_sq = AutogradGradient(loss_fn, B, sel, finite);
  torch::NoGradGuard ng;
  // A random unit direction's derivative is typically ||grad|| / sqrt(n); it
  // floors the relative error's denominator so that a direction that happens
  // to be nearly orthogonal to the gradient does not turn float64 rounding
  // into a failure, while a wrong gradient still shows at ||error|| / ||grad||.
  const double typical = std::sqrt(grad_sq / static_cast<double>(std::max<int64_t>(sel_values, 1)));
  const double worst = WorstDirectionalError(sel, typical, loss_fn, seed, finite, c);
  c.numbers.push_back(
      {"parameters perturbed",
       fmt::format("{} tensors, {} of {} values (layers 0 and {}, final norm, value head)",
                   sel.size(), sel_values, total_values, L - 1)});
  c.numbers.push_back({"||grad|| on those parameters", Num(std::sqrt(grad_sq))});
  c.numbers.push_back(
      {"max |autograd - FD| / max(|autograd|, |FD|, ||grad|| / sqrt(n))", Num(worst)});
  c.numbers.push_back({"tolerance (relative)", Num(kFdTolerance)});
  c.passed = worst <= kFdTolerance;
  c.note = fmt::format(
      "Loss = clipped surrogate on p(a|s) ratios + 0.5 * clipped value loss - 0.01 * menu "
      "entropy, B = {}; unit random directions, 4-point central differences with step {:g}; "
      "the model is converted to float64 in place and back (exact).",
      B, kFdStep);
  finite.Apply(c);
  return c;
}

}  // namespace rlid::trainers::audit_internal

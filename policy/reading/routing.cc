#include "policy/reading/routing.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/error.h"

namespace rlid::policy {
namespace {

// The experts of every sparse layer at positions [prompt - 1, prompt + response - 1)
// of each request, as [N, Tmax, layers, k] sorted along k (sets), and the valid mask.
struct Routes {
  torch::Tensor experts;  // int64, on the CPU
  torch::Tensor valid;    // [N, Tmax] bool
};

Routes RouteOf(TransformerLM& model, const std::vector<ScoreRequest>& requests) {
  const int64_t N = static_cast<int64_t>(requests.size());
  int64_t L = 1, R = 1;
  for (const auto& r : requests) {
    L = std::max<int64_t>(L, static_cast<int64_t>(r.prompt.size() + r.response.size()));
    R = std::max<int64_t>(R, static_cast<int64_t>(r.response.size()));
  }
  std::vector<int64_t> ids(N * L, 0), take(N * R, 0), lengths;
  std::vector<uint8_t> valid(N * R, 0);  // the predicting position of each response token
  for (int64_t i = 0; i < N; ++i) {
    const auto& r = requests[i];
    const int64_t P = static_cast<int64_t>(r.prompt.size());
    for (int64_t t = 0; t < P; ++t) ids[i * L + t] = r.prompt[t];
    for (int64_t t = 0; t < static_cast<int64_t>(r.response.size()); ++t) {
      ids[i * L + P + t] = r.response[t];
      take[i * R + t] = P + t - 1;
      valid[i * R + t] = 1;
    }
    lengths.push_back(P + static_cast<int64_t>(r.response.size()));
  }
  auto as_tensor = [](auto& v, std::vector<int64_t> shape, torch::Dtype dt) {
    return torch::from_blob(v.data(), shape, dt).clone();
  };
  const auto id_t = as_tensor(ids, {N, L}, torch::kInt64);
  const auto take_t = as_tensor(take, {N, R}, torch::kInt64);
  const auto valid_t = as_tensor(valid, {N, R}, torch::kUInt8).to(torch::kBool);
  const auto device = model->device();
  auto pos = torch::arange(L, torch::kInt64).unsqueeze(0).expand({N, L}).contiguous();
  model->set_record_routing(true);
  struct Off {
    TransformerLM& m;
    ~Off() { m->set_record_routing(false); }
  } off{model};
  model->forward(id_t.to(device), pos.to(device), AttentionMask::Causal(lengths, L, device));
  std::vector<torch::Tensor> layers;
  for (const auto& r : model->routing()) {  // [N, L, k] -> [N, R, k]
    auto at = r.cpu().gather(1, take_t.unsqueeze(-1).expand({N, R, r.size(-1)}));
    layers.push_back(std::get<0>(at.sort(-1)));
  }
  if (layers.empty()) return {torch::zeros({N, R, 0, 0}, torch::kInt64), valid_t};
  return {torch::stack(layers, 2), valid_t};
}

}  // namespace

RoutingComparison CompareRouting(TransformerLM& a, TransformerLM& b,
                                 const std::vector<ScoreRequest>& requests) {
  const auto& ca = a->config();
  const auto& cb = b->config();
  if (ca.sparse != cb.sparse || ca.num_experts != cb.num_experts ||
      ca.experts_per_token != cb.experts_per_token)
    throw ConfigError("routing comparison: the two models' experts differ",
                      "compare an engine with the trainer it serves (the same architecture)");
  RoutingComparison out;
  if (!ca.HasSparseLayers() || requests.empty()) return out;
  torch::NoGradGuard no_grad;
  const Routes ra = RouteOf(a, requests), rb = RouteOf(b, requests);
  const auto same = (ra.experts == rb.experts).all(-1);  // [N, R, layers]
  const auto valid = ra.valid.unsqueeze(-1).expand_as(same);
  out.pairs = valid.sum().item<int64_t>();
  out.differing = (valid & ~same).sum().item<int64_t>();
  return out;
}

}  // namespace rlid::policy

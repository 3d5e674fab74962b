#include "policy/model/gated_delta.h"

#include <limits>

#include "core/check.h"

namespace rlid::policy {
namespace {

torch::Tensor StartState(const torch::Tensor& state, const torch::Tensor& k,
                         const torch::Tensor& v) {
  const int64_t B = k.size(0), H = k.size(1), dk = k.size(3), dv = v.size(3);
  if (!state.defined()) return torch::zeros({B, H, dk, dv}, v.options());
  RLID_CHECK(state.size(1) == H && state.size(2) == dk && state.size(3) == dv,
             "delta-rule state has the wrong shape");
  return state.to(v.scalar_type()).expand({B, H, dk, dv});
}

}  // namespace

DeltaRuleOut RecurrentGatedDeltaRule(const torch::Tensor& q, const torch::Tensor& k,
                                     const torch::Tensor& v, const torch::Tensor& g,
                                     const torch::Tensor& beta, const torch::Tensor& state) {
  auto S = StartState(state, k, v);
  std::vector<torch::Tensor> outs;
  outs.reserve(q.size(2));
  for (int64_t t = 0; t < q.size(2); ++t) {
    auto q_t = q.select(2, t), k_t = k.select(2, t), v_t = v.select(2, t);  // [B, H, d]
    S = S * g.select(2, t).exp().unsqueeze(-1).unsqueeze(-1);
    auto read = (S * k_t.unsqueeze(-1)).sum(-2);  // S^T k [B, H, dv]
    auto delta = (v_t - read) * beta.select(2, t).unsqueeze(-1);
    S = S + k_t.unsqueeze(-1) * delta.unsqueeze(-2);
    outs.push_back((S * q_t.unsqueeze(-1)).sum(-2));
  }
  return {torch::stack(outs, 2), S};
}

DeltaRuleOut ChunkedGatedDeltaRule(const torch::Tensor& q_in, const torch::Tensor& k_in,
                                   const torch::Tensor& v_in, const torch::Tensor& g_in,
                                   const torch::Tensor& beta_in, const torch::Tensor& state,
                                   int64_t C) {
  const int64_t B = q_in.size(0), H = q_in.size(1), T = q_in.size(2);
  const int64_t pad = (C - T % C) % C, N = (T + pad) / C;
  namespace F = torch::nn::functional;
  auto pad_seq = [&](const torch::Tensor& x, bool per_token_vector) {
    return F::pad(x, F::PadFuncOptions(per_token_vector ? std::vector<int64_t>{0, 0, 0, pad}
                                                        : std::vector<int64_t>{0, pad}));
  };
  auto q = pad_seq(q_in, true), k = pad_seq(k_in, true), v = pad_seq(v_in, true);
  auto beta = pad_seq(beta_in, false), g = pad_seq(g_in, false);
  auto chunks = [&](const torch::Tensor& x) { return x.reshape({B, H, N, C, x.size(-1)}); };
  auto v_beta = chunks(v * beta.unsqueeze(-1)), k_beta = chunks(k * beta.unsqueeze(-1));
  q = chunks(q), k = chunks(k);
  auto cum = g.reshape({B, H, N, C}).cumsum(3);  // log decay from the chunk start
  auto upper =
      torch::ones({C, C}, torch::TensorOptions().dtype(torch::kBool).device(q.device())).triu(1);
  auto decay = (cum.unsqueeze(4) - cum.unsqueeze(3))
                   .masked_fill(upper, -std::numeric_limits<double>::infinity())
                   .exp();  // [B, H, N, C, C]: exp(cum_i - cum_j) for j <= i, else 0
  auto ut = torch::matmul(k_beta, k.transpose(-1, -2)) * decay;
  auto intra = torch::matmul(q, k.transpose(-1, -2)) * decay;
  auto values = torch::linalg_solve_triangular(ut, v_beta, /*upper=*/false, /*left=*/true,
                                               /*unitriangular=*/true);
  auto k_cumdecay =
      torch::linalg_solve_triangular(ut, k_beta * cum.exp().unsqueeze(-1), false, true, true);
  auto S = StartState(state, k_in, v_in);
  auto q_decayed = q * cum.exp().unsqueeze(-1);
  auto k_decayed = k * (cum.slice(3, C - 1) - cum).exp().unsqueeze(-1);
  auto chunk_decay = cum.select(3, C - 1).exp().unsqueeze(-1).unsqueeze(-1);  // [B, H, N, 1, 1]
  std::vector<torch::Tensor> outs;
  outs.reserve(N);
  for (int64_t i = 0; i < N; ++i) {
    auto v_new = values.select(2, i) - torch::matmul(k_cumdecay.select(2, i), S);
    outs.push_back(torch::matmul(q_decayed.select(2, i), S) +
                   torch::matmul(intra.select(2, i), v_new));
    S = S * chunk_decay.select(2, i) +
        torch::matmul(k_decayed.select(2, i).transpose(-1, -2), v_new);
  }
  auto out = torch::stack(outs, 2).reshape({B, H, N * C, v_in.size(-1)}).slice(2, 0, T);
  return {out, S};
}

torch::Tensor TreeGatedDeltaRule(const torch::Tensor& q, const torch::Tensor& k,
                                 const torch::Tensor& v, const torch::Tensor& g,
                                 const torch::Tensor& beta, const torch::Tensor& state,
                                 const torch::Tensor& ancestors) {
  const int64_t B = q.size(0), T = q.size(2);
  auto anc = ancestors.expand({B, T, T}).unsqueeze(1);  // [B, 1, T, T]
  // Log decay from the starting state to each token, along its path.
  auto cum = torch::matmul(anc.to(g.scalar_type()), g.unsqueeze(-1)).squeeze(-1);  // [B, H, T]
  auto decay = (cum.unsqueeze(-1) - cum.unsqueeze(-2))
                   .masked_fill(anc.logical_not(), -std::numeric_limits<double>::infinity())
                   .exp();  // exp(cum_i - cum_j) for j an ancestor of i (or i), else 0
  auto k_beta = k * beta.unsqueeze(-1), v_beta = v * beta.unsqueeze(-1);
  auto ut = torch::matmul(k_beta, k.transpose(-1, -2)) * decay;
  auto values = torch::linalg_solve_triangular(ut, v_beta, false, true, true);
  auto k_cumdecay =
      torch::linalg_solve_triangular(ut, k_beta * cum.exp().unsqueeze(-1), false, true, true);
  auto S = StartState(state, k, v);
  auto v_new = values - torch::matmul(k_cumdecay, S);
  auto intra = torch::matmul(q, k.transpose(-1, -2)) * decay;
  return torch::matmul(q * cum.exp().unsqueeze(-1), S) + torch::matmul(intra, v_new);
}

}  // namespace rlid::policy

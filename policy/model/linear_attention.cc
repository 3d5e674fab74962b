// GatedDeltaNetImpl: Qwen3.5's linear-attention layer (policy/model/model.h),
// over chains (sequences, padding as identity steps) or trees (the readout's trie).
#include "core/check.h"
#include "policy/model/gated_delta.h"
#include "policy/model/model.h"

namespace rlid::policy {

GatedDeltaNetImpl::GatedDeltaNetImpl(const ModelConfig& cfg, torch::Dtype dt)
    : key_heads_(cfg.linear_key_heads),
      value_heads_(cfg.linear_value_heads),
      key_dim_(cfg.linear_key_dim),
      value_dim_(cfg.linear_value_dim),
      kernel_(cfg.linear_conv_kernel) {
  const int64_t D = cfg.hidden_size, keys = key_heads_ * key_dim_,
                values = value_heads_ * value_dim_;
  in_proj_qkv = register_module("in_proj_qkv", Linear(D, 2 * keys + values, false, dt));
  in_proj_z = register_module("in_proj_z", Linear(D, values, false, dt));
  in_proj_b = register_module("in_proj_b", Linear(D, value_heads_, false, dt));
  in_proj_a = register_module("in_proj_a", Linear(D, value_heads_, false, dt));
  out_proj = register_module("out_proj", Linear(values, D, false, dt));
  auto opts = torch::TensorOptions().dtype(dt);
  conv1d = register_module("conv1d", std::make_shared<torch::nn::Module>());
  conv_weight =
      conv1d->register_parameter("weight", torch::empty({2 * keys + values, 1, kernel_}, opts));
  dt_bias = register_parameter("dt_bias", torch::empty({value_heads_}, opts));
  A_log = register_parameter("A_log", torch::empty({value_heads_}, opts));
  norm = register_module("norm", RmsNorm(value_dim_, cfg.rms_norm_eps, dt, /*unit_offset=*/false));
}

namespace {

// x [B, C, T] after `conv` [B|1, C, K-1] (zero when undefined) -> the padded
// input [B, C, K-1+T] the causal conv reads.
torch::Tensor WithConvState(const torch::Tensor& x, const torch::Tensor& conv, int64_t K) {
  const int64_t B = x.size(0), C = x.size(1);
  auto before = conv.defined() ? conv.to(x.scalar_type()).expand({B, C, K - 1})
                               : torch::zeros({B, C, K - 1}, x.options());
  return torch::cat({before, x}, 2);
}

// The last K-1 conv inputs up to each row's last token: [B, C, K-1].
torch::Tensor ConvStateAfter(const torch::Tensor& ext, const RecurrentInputs& in, int64_t K) {
  const int64_t T = ext.size(2) - (K - 1);
  if (!in.valid.defined()) return ext.slice(2, T, T + K - 1);
  auto idx =
      in.last.unsqueeze(1) + 1 + torch::arange(K - 1, in.last.options()).unsqueeze(0);  // [B, K-1]
  return ext.gather(2, idx.unsqueeze(1).expand({ext.size(0), ext.size(1), K - 1}));
}

// Trees: window k of token i is [conv state ; tokens][conv_index[i][k]].
torch::Tensor TreeConv(const torch::Tensor& ext, const torch::Tensor& weight,
                       const torch::Tensor& conv_index) {
  const int64_t B = ext.size(0), C = ext.size(1), T = conv_index.size(1), K = conv_index.size(2);
  auto rows = ext.transpose(1, 2);  // [B, K-1+T, C]
  auto window =
      rows.gather(1, conv_index.reshape({B, T * K, 1}).expand({B, T * K, C})).view({B, T, K, C});
  return (window * weight.squeeze(1).t().unsqueeze(0).unsqueeze(0))
      .sum(2)
      .transpose(1, 2);  // [B, C, T]
}

// x * rsqrt(sum(x^2) + 1e-6) over the last dim (the FLA library's l2norm).
torch::Tensor L2Norm(const torch::Tensor& x) {
  return x * torch::rsqrt(x.pow(2).sum(-1, true) + 1e-6);
}

}  // namespace

torch::Tensor GatedDeltaNetImpl::forward(const torch::Tensor& x_in, const RecurrentInputs& in,
                                         const LayerKV* past, LayerKV* state_out) {
  RLID_CHECK(!(in.tree() && state_out), "a tree forward has no state to return");
  const int64_t B = x_in.size(0), T = x_in.size(1), K = kernel_;
  const int64_t keys = key_heads_ * key_dim_, values = value_heads_ * value_dim_;
  const auto ct = ComputeType(x_in.scalar_type());
  // Padding contributes nothing: zero inputs (as transformers does), identity steps below.
  auto x = in.valid.defined() ? x_in * in.valid.unsqueeze(-1).to(x_in.scalar_type()) : x_in;
  const torch::Tensor conv_past = past ? past->conv : torch::Tensor();
  auto ext = WithConvState(in_proj_qkv(x).transpose(1, 2), conv_past, K);  // [B, C, K-1+T]
  auto mixed = in.tree()
                   ? TreeConv(ext, conv_weight, in.conv_index)
                   : torch::conv1d(ext.to(conv_weight.scalar_type()), conv_weight, torch::Tensor(),
                                   /*stride=*/at::IntArrayRef{1}, /*padding=*/at::IntArrayRef{0},
                                   /*dilation=*/at::IntArrayRef{1}, ext.size(1));
  mixed = torch::silu(mixed).to(x.scalar_type()).transpose(1, 2);  // [B, T, C]
  auto qkv = mixed.split_with_sizes({keys, keys, values}, -1);
  const int64_t G = value_heads_ / key_heads_;
  auto heads = [&](const torch::Tensor& t, int64_t h, int64_t d) {
    auto r = t.reshape({B, T, h, d}).to(ct).transpose(1, 2);  // [B, h, T, d]
    return G > 1 && h == key_heads_ ? r.repeat_interleave(G, 1) : r;
  };
  auto q = L2Norm(heads(qkv[0], key_heads_, key_dim_)) / std::sqrt(static_cast<double>(key_dim_));
  auto k = L2Norm(heads(qkv[1], key_heads_, key_dim_));
  auto v = heads(qkv[2], value_heads_, value_dim_);
  auto beta = torch::sigmoid(in_proj_b(x)).to(ct).transpose(1, 2);  // [B, H, T]
  auto g =
      (-A_log.to(ct).exp() * torch::softplus(in_proj_a(x).to(ct) + dt_bias.to(ct))).transpose(1, 2);
  if (in.valid.defined()) {
    auto keep = in.valid.unsqueeze(1).to(ct);  // [B, 1, T]
    beta = beta * keep, g = g * keep;
  }
  const torch::Tensor state_past = past ? past->state : torch::Tensor();
  torch::Tensor out;
  if (in.tree()) {
    out = TreeGatedDeltaRule(q, k, v, g, beta, state_past, in.ancestors);
  } else {
    const bool recurrent =
        in.form == RecurrentForm::kRecurrent || (in.form == RecurrentForm::kAuto && T == 1);
    auto rule = recurrent ? RecurrentGatedDeltaRule(q, k, v, g, beta, state_past)
                          : ChunkedGatedDeltaRule(q, k, v, g, beta, state_past);
    out = rule.out;
    if (state_out) {
      state_out->conv = ConvStateAfter(ext, in, K);
      state_out->state = rule.state;
    }
  }
  auto z = in_proj_z(x).view({B, T, value_heads_, value_dim_});
  auto o = norm(out.transpose(1, 2).to(x.scalar_type())) * torch::silu(z.to(ct));  // gated RMSNorm
  return out_proj(o.to(x.scalar_type()).reshape({B, T, values}));
}

}  // namespace rlid::policy

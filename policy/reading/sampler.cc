// Rollout engine. Prompts are right-padded and encoded once per group; each row
// keeps a key-validity mask (prompt keys < its length, then every generated key)
// so prompts of different lengths decode together with correct positions.
// Sampling is inverse-CDF with uniforms from a seeded CPU torch generator (one
// uniform per row per step, drawn for every row so a sample does not depend on
// when other rows stop), which keeps it deterministic on any device.
#include "policy/reading/sampler.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/autocast_mode.h>
#include <fmt/format.h>

#include <cmath>
#include <numeric>
#include <limits>

#include "core/check.h"
#include "core/clock.h"
#include "core/error.h"
#include "policy/model/device.h"
#include "core/rng.h"
#include "policy/model/lora.h"

namespace rlid::policy {
namespace {

// bf16 autocast for CUDA ops while alive (when `on`); restores the previous
// state and drops autocast's cast cache at the outermost exit.
class CudaBf16Autocast {
 public:
  explicit CudaBf16Autocast(bool on) : on_(on) {
    if (!on_) return;
    was_enabled_ = at::autocast::is_autocast_enabled(at::kCUDA);
    was_dtype_ = at::autocast::get_autocast_dtype(at::kCUDA);
    at::autocast::set_autocast_enabled(at::kCUDA, true);
    at::autocast::set_autocast_dtype(at::kCUDA, at::kBFloat16);
    at::autocast::increment_nesting();
  }
  ~CudaBf16Autocast() {
    if (!on_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(at::kCUDA, was_enabled_);
    at::autocast::set_autocast_dtype(at::kCUDA, was_dtype_);
  }
  CudaBf16Autocast(const CudaBf16Autocast&) = delete;
  CudaBf16Autocast& operator=(const CudaBf16Autocast&) = delete;

 private:
  bool on_, was_enabled_ = false;
  at::ScalarType was_dtype_ = at::kBFloat16;
};

torch::Tensor IndexTensor(const std::vector<int64_t>& v, const torch::Device& device) {
  return HostToDevice(v, device);
}

}  // namespace

torch::Tensor TopPFilter(const torch::Tensor& logits, double top_p) {
  if (!(top_p > 0.0 && top_p <= 1.0))
    throw ConfigError(fmt::format("top_p must be in (0, 1], found {}", top_p));
  if (top_p >= 1.0) return logits;
  auto [sorted, order] = logits.sort(-1, /*descending=*/true);
  auto probs = torch::softmax(sorted.to(torch::kFloat64), -1);
  auto mass_before = probs.cumsum(-1) - probs;  // exclusive cumulative mass
  auto drop_sorted = mass_before >= top_p;       // the nucleus was complete before this token
  auto drop = torch::zeros_like(drop_sorted).scatter(-1, order, drop_sorted);
  return logits.masked_fill(drop, -std::numeric_limits<float>::infinity());
}

torch::Tensor TopKFilter(const torch::Tensor& logits, int top_k) {
  if (top_k <= 0 || top_k >= logits.size(-1)) return logits;
  auto kth = std::get<0>(logits.topk(top_k, -1)).narrow(-1, top_k - 1, 1);  // [..., 1]
  return logits.masked_fill(logits < kth, -std::numeric_limits<float>::infinity());
}

namespace {
void ValidateOptions(const SamplerOptions& o) {
  if (!(o.temperature >= 0.0) || !std::isfinite(o.temperature))
    throw ConfigError(
        fmt::format("sampler temperature must be a finite number >= 0, found {}", o.temperature),
        "0 means greedy decoding");
  if (!(o.top_p > 0.0 && o.top_p <= 1.0))
    throw ConfigError(fmt::format("sampler top_p must be in (0, 1], found {}", o.top_p));
  if (o.top_k < 0)
    throw ConfigError(fmt::format("sampler top_k must be >= 0, found {}", o.top_k), "0 means no top-k truncation");
  if (o.max_new_tokens < 1)
    throw ConfigError(fmt::format("sampler max_new_tokens must be >= 1, found {}", o.max_new_tokens));
}
}  // namespace

TextSampler::TextSampler(const ModelConfig& config, SamplerOptions options, torch::Device device)
    : options_(std::move(options)), device_(device) {
  ValidateOptions(options_);
  // Weights arrive with SyncWeights(); until then the engine holds zeros (no
  // random initialisation that would be overwritten). RoPE stays float32.
  const auto dtype = TorchDtype(options_.dtype);
  engine_ = TransformerLM(config, dtype, /*initialise=*/false);
  torch::NoGradGuard no_grad;
  for (auto& p : engine_->parameters()) {
    p.set_requires_grad(false);
    p.zero_();
  }
  engine_->to(device_);
  engine_->eval();
}

TextSampler::TextSampler(TransformerLM model, SamplerOptions options)
    : options_(std::move(options)), device_(model->device()) {
  ValidateOptions(options_);
  const auto dtype = TorchDtype(options_.dtype);
  if (model->lora() || model->dtype() != dtype)
    throw InternalError(fmt::format("TextSampler: a model to sample with in place must have no "
                                    "LoRA adapters and be {}",
                                    options_.dtype));
  engine_ = std::move(model);
  for (auto& p : engine_->parameters()) p.set_requires_grad(false);
  engine_->eval();
}

void TextSampler::SetOptions(const SamplerOptions& options) {
  if (options.dtype != options_.dtype)
    throw InternalError(fmt::format("TextSampler::SetOptions cannot change the engine dtype ({} -> {})",
                                    options_.dtype, options.dtype));
  ValidateOptions(options);
  options_ = options;
}

EngineSync TextSampler::Sync(TransformerLM& model, int64_t version) {
  const double t0 = MonotonicSeconds();
  SyncWeights(model);
  EngineSync out;
  out.seconds = MonotonicSeconds() - t0;
  out.version = version;
  return out;
}

void TextSampler::SyncWeights(TransformerLM& train_model) {
  torch::NoGradGuard no_grad;
  auto dst = engine_->named_parameters();
  size_t copied = 0;
  // LoRA adapters are folded into the engine's weights (one merged tensor at a time).
  ForEachMergedParameter(
      train_model,
      [&](const std::string& name, const torch::Tensor& src) {
        torch::Tensor* d = dst.find(name);
        if (d == nullptr || d->sizes() != src.sizes())
          throw ConfigError(fmt::format("training-model parameter '{}' has no same-shaped counterpart "
                                        "in the sampler engine",
                                        name),
                            "build the sampler from the training model's ModelConfig");
        d->copy_(src);
        ++copied;
      },
      /*include_value_head=*/true);
  if (copied != dst.size())
    throw ConfigError(fmt::format("sampler engine has {} parameter tensors, the training model {}", dst.size(),
                                  copied),
                      "build the sampler from the training model's ModelConfig");
}

TextSampler::Drawn TextSampler::Draw(const torch::Tensor& logits, const torch::Tensor& u) const {
  torch::Tensor tok, lp;
  // The ids the tokenizer has; padded embedding rows are never drawn.
  const int64_t V = logits.size(-1);
  const int64_t limit = options_.vocab_limit > 0 ? std::min(options_.vocab_limit, V) : V;
  auto drawable = [&](const torch::Tensor& t) { return limit == V ? t : t.slice(-1, 0, limit); };
  if (options_.temperature == 0.0) {
    tok = drawable(logits).argmax(-1);
    lp = torch::log_softmax(logits, -1).gather(1, tok.unsqueeze(1)).squeeze(1);
  } else {
    auto scaled = logits / options_.temperature;
    auto logp = torch::log_softmax(scaled, -1);
    auto kept = TopPFilter(TopKFilter(drawable(scaled), options_.top_k), options_.top_p);
    auto cdf = torch::softmax(kept.to(torch::kFloat64), -1).cumsum(-1);  // [A, V]
    auto x = (u * cdf.select(1, cdf.size(1) - 1)).unsqueeze(1);
    tok = torch::searchsorted(cdf, x, /*out_int32=*/false, /*right=*/true).squeeze(1).clamp_max(cdf.size(1) - 1);
    lp = logp.gather(1, tok.unsqueeze(1)).squeeze(1);
  }
  return {tok.to(torch::kInt64), lp.to(torch::kFloat32)};
}

std::vector<std::vector<SampleResult>> TextSampler::Sample(const std::vector<std::vector<TokenId>>& prompts,
                                                           int n, const StopFn& stop, uint64_t seed) {
  std::vector<uint64_t> row_seeds;
  for (size_t r = 0; r < prompts.size() * static_cast<size_t>(std::max(n, 0)); ++r)
    row_seeds.push_back(Rng::DeriveSeed(seed, "text_sampler", r));
  return Sample(prompts, n, stop, row_seeds);
}

namespace {

// The distinct prompts of one Sample call, checked against the vocabulary and
// right-padded into [N, Pmax] (host), with each one's length and the flat
// index of its last token.
struct PaddedPrompts {
  torch::Tensor ids;
  std::vector<int64_t> lengths, last;
  int64_t width = 0;  // Pmax
};

PaddedPrompts PadPrompts(const std::vector<std::vector<TokenId>>& prompts, int64_t vocab) {
  const int64_t N = static_cast<int64_t>(prompts.size());
  PaddedPrompts p;
  for (size_t i = 0; i < prompts.size(); ++i) {
    if (prompts[i].empty()) throw ConfigError(fmt::format("sampler prompt {} is empty", i));
    for (TokenId t : prompts[i])
      if (t < 0 || t >= vocab)
        throw ConfigError(fmt::format("sampler prompt {}: token id {} is outside the vocabulary [0, {})", i, t,
                                      vocab));
    p.width = std::max<int64_t>(p.width, prompts[i].size());
  }
  p.ids = torch::zeros({N, p.width}, torch::kInt64);
  p.lengths.resize(N);
  p.last.resize(N);
  for (int64_t i = 0; i < N; ++i) {
    p.lengths[i] = static_cast<int64_t>(prompts[i].size());
    p.last[i] = i * p.width + p.lengths[i] - 1;
    for (int64_t t = 0; t < p.lengths[i]; ++t) p.ids[i][t] = prompts[i][t];
  }
  return p;
}

// Uniforms for every (row, step): 53 bits of a counter-based hash of (row
// seed, step), made on the host and uploaded once, [rows, max_new].
torch::Tensor RowUniforms(const std::vector<uint64_t>& row_seeds, int64_t max_new,
                          const torch::Device& device) {
  const auto rows = static_cast<int64_t>(row_seeds.size());
  std::vector<double> u_host(static_cast<size_t>(rows * max_new));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t step = 0; step < max_new; ++step)
      u_host[r * max_new + step] =
          static_cast<double>(Rng::DeriveSeed(row_seeds[r], "u", step) >> 11) * 0x1.0p-53;
  return HostToDevice(u_host, device).view({rows, max_new});
}

// The rows still decoding, aligned with `active` (row indices in batch order):
// on the device their indices, prompt lengths, KV cache and key-validity mask
// (KV path only), and the logits their next token is drawn from.
struct DecodeRows {
  std::vector<int64_t> row_prompt;  // row r samples from prompt r / n
  std::vector<int64_t> active;
  std::vector<std::vector<TokenId>> generated;
  torch::Tensor logits, active_dev, active_len, key_valid;
  PastKV past;
};

// Encodes the N distinct prompts in one forward and starts the N * n rows
// (row r samples from prompt r / n): their first logits, and with a KV cache
// the prompts' keys and values per row and which keys are valid.
DecodeRows EncodePrompts(TransformerLM& engine, const PaddedPrompts& p, int n, bool kv_cache,
                         const torch::Device& device) {
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  const int64_t N = p.ids.size(0), width = p.width, rows = N * n;
  auto len_t = IndexTensor(p.lengths, device);
  auto pos = torch::arange(width, i64.device(device)).unsqueeze(0).expand({N, width}).contiguous();
  engine->CheckPosition(width - 1);
  auto enc = engine->forward(p.ids.to(device), pos, AttentionMask::Causal(p.lengths, width, device),
                             nullptr, kv_cache);
  auto first_logits = engine->Logits(
      enc.hidden.reshape({N * width, -1}).index_select(0, IndexTensor(p.last, device)));  // [N, V]
  DecodeRows d;
  d.row_prompt.resize(rows);
  d.active.resize(rows);
  for (int64_t r = 0; r < rows; ++r) {
    d.row_prompt[r] = r / n;
    d.active[r] = r;
  }
  d.logits = first_logits.index_select(0, IndexTensor(d.row_prompt, device));
  d.generated.resize(rows);
  if (kv_cache) {
    d.past = std::move(enc.present);  // [N, ...]; a single prompt broadcasts over rows
    if (N > 1) {
      auto sel = IndexTensor(d.row_prompt, device);
      for (auto& kv : d.past) kv = kv.Rows(sel);
    }
    auto ar = torch::arange(width, i64.device(device));
    d.key_valid = ar.unsqueeze(0) < len_t.index_select(0, IndexTensor(d.row_prompt, device)).unsqueeze(1);
  }
  d.active_dev = IndexTensor(d.active, device);
  d.active_len = len_t.index_select(0, IndexTensor(d.row_prompt, device));
  return d;
}

// Appends one drawn token (host copies `tok`, `lp`, aligned with `active`) to
// every active row's result and returns the positions within `active` that
// continue: not stopped by `stop` and shorter than max_new.
std::vector<int64_t> RecordTokens(const double* tok, const double* lp, DecodeRows& d, int n,
                                  int64_t max_new, const StopFn& stop,
                                  std::vector<std::vector<SampleResult>>& results) {
  std::vector<int64_t> keep;
  for (size_t a = 0; a < d.active.size(); ++a) {
    const int64_t r = d.active[a];
    auto& res = results[r / n][r % n];
    const auto t = static_cast<TokenId>(tok[a]);
    d.generated[r].push_back(t);
    res.tokens.push_back(t);
    res.logprobs.push_back(static_cast<float>(lp[a]));
    if (stop && stop(d.generated[r])) {
      res.finish = "stop";
    } else if (static_cast<int>(d.generated[r].size()) >= max_new) {
      res.finish = "length";
    } else {
      keep.push_back(static_cast<int64_t>(a));
    }
  }
  return keep;
}

// Drops finished rows from every per-row device tensor (and the drawn tokens).
void KeepRows(const std::vector<int64_t>& keep, bool kv_cache, const torch::Device& device,
              DecodeRows& d, torch::Tensor& next_tokens) {
  auto sel = HostToDevice(keep, device);
  next_tokens = next_tokens.index_select(0, sel);
  d.active_dev = d.active_dev.index_select(0, sel);
  d.active_len = d.active_len.index_select(0, sel);
  if (kv_cache) {
    for (auto& kv : d.past)
      if (kv.Batch() == static_cast<int64_t>(d.active.size())) kv = kv.Rows(sel);
    d.key_valid = d.key_valid.index_select(0, sel);
  }
}

// KV path: the drawn tokens at position prompt length + step, one forward
// over the cache; returns the next logits [A, V].
torch::Tensor DecodeCached(TransformerLM& engine, const torch::Tensor& next_tokens, int step,
                           const std::vector<int64_t>& next_active,
                           const std::vector<int64_t>& lengths, DecodeRows& d) {
  const int64_t A = static_cast<int64_t>(next_active.size());
  auto in = next_tokens.view({A, 1});
  auto in_pos = (d.active_len + step).view({A, 1});
  int64_t max_pos = 0;
  for (int64_t r : next_active) max_pos = std::max(max_pos, lengths[d.row_prompt[r]] + step);
  engine->CheckPosition(max_pos);
  d.key_valid = torch::cat({d.key_valid, torch::ones({A, 1}, d.key_valid.options())}, 1);
  // The new token sees its prompt and the step + 1 tokens fed so far.
  int64_t pairs = 0;
  for (int64_t a = 0; a < A; ++a) pairs += lengths[d.row_prompt[next_active[a]]] + step + 1;
  auto out =
      engine->forward(in, in_pos, {d.key_valid.view({A, 1, 1, -1}), A, pairs}, &d.past, true);
  d.past = std::move(out.present);
  return engine->Logits(out.hidden.select(1, 0));
}

// Without a KV cache: recomputes prompt ++ generated for every unfinished row;
// returns the next logits [A, V].
torch::Tensor DecodeRecomputed(TransformerLM& engine,
                               const std::vector<std::vector<TokenId>>& prompts, int64_t width,
                               int step, const std::vector<int64_t>& next_active,
                               const DecodeRows& d, const torch::Device& device) {
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64);
  const int64_t A = static_cast<int64_t>(next_active.size());
  const int64_t T = width + step + 1;
  auto seq = torch::zeros({A, T}, i64);
  std::vector<int64_t> seq_len(A), seq_last(A);
  for (int64_t a = 0; a < A; ++a) {
    const int64_t r = next_active[a];
    const auto& p = prompts[d.row_prompt[r]];
    int64_t t = 0;
    for (TokenId id : p) seq[a][t++] = id;
    for (TokenId id : d.generated[r]) seq[a][t++] = id;
    seq_len[a] = t;
    seq_last[a] = a * T + t - 1;
  }
  auto seq_pos = torch::arange(T, i64.device(device)).unsqueeze(0).expand({A, T}).contiguous();
  engine->CheckPosition(T - 1);
  auto h =
      engine->forward(seq.to(device), seq_pos, AttentionMask::Causal(seq_len, T, device)).hidden;
  return engine->Logits(h.reshape({A * T, -1}).index_select(0, IndexTensor(seq_last, device)));
}

}  // namespace

// Encodes every distinct prompt once, then decodes all rows together: draw,
// record (the one device -> host copy per token), drop finished rows, feed the
// drawn tokens (KV cache) or recompute (without).
std::vector<std::vector<SampleResult>> TextSampler::Sample(const std::vector<std::vector<TokenId>>& prompts,
                                                           int n, const StopRule& stop,
                                                           const std::vector<uint64_t>& row_seeds) {
  if (n < 1) throw ConfigError(fmt::format("samples per prompt must be >= 1, found {}", n));
  const int64_t N = static_cast<int64_t>(prompts.size());
  if (row_seeds.size() != static_cast<size_t>(N * n))
    throw InternalError(fmt::format("{} row seeds for {} prompts x {} samples", row_seeds.size(), N, n));
  std::vector<std::vector<SampleResult>> results(N, std::vector<SampleResult>(n));
  if (N == 0) return results;
  PaddedPrompts padded = PadPrompts(prompts, engine_->config().vocab_size);
  // Inference mode (no autograd bookkeeping at all, not just no graph): nothing
  // made here leaves as a tensor, the results are host vectors.
  c10::InferenceMode inference;
  CudaBf16Autocast autocast(device_.is_cuda() && options_.autocast && options_.dtype == Precision::kFloat32);
  const ForwardCost work_before = engine_->work();
  DecodeRows d = EncodePrompts(engine_, padded, n, options_.kv_cache, device_);
  prompt_tokens_ += std::accumulate(padded.lengths.begin(), padded.lengths.end(), int64_t{0});
  const auto u_all = RowUniforms(row_seeds, options_.max_new_tokens, device_);
  for (int step = 0; step < options_.max_new_tokens; ++step) {
    const Drawn drawn = Draw(d.logits, u_all.select(1, step).index_select(0, d.active_dev));
    auto host = torch::stack({drawn.tokens.to(torch::kFloat64), drawn.logprobs.to(torch::kFloat64)})
                    .to(torch::kCPU);  // the stop test needs the tokens (exact in float64)
    const double* tok = host.data_ptr<double>();
    tokens_generated_ += static_cast<int64_t>(d.active.size());
    const std::vector<int64_t> keep =
        RecordTokens(tok, tok + host.size(1), d, n, options_.max_new_tokens, stop.done, results);
    if (keep.empty()) break;
    std::vector<int64_t> next_active;
    for (int64_t a : keep) next_active.push_back(d.active[a]);
    torch::Tensor next_tokens = drawn.tokens;
    if (keep.size() != d.active.size()) KeepRows(keep, options_.kv_cache, device_, d, next_tokens);
    d.logits =
        options_.kv_cache
            ? DecodeCached(engine_, next_tokens, step, next_active, padded.lengths, d)
            : DecodeRecomputed(engine_, prompts, padded.width, step, next_active, d, device_);
    d.active = std::move(next_active);
  }
  cost_ += Difference(engine_->work(), work_before);
  return results;
}

}  // namespace rlid::policy

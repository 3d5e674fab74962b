// Response scoring. The plain path runs prompt ++ response[:-1] per row; the
// shared-prefix path encodes the distinct prompts as one batch, gathers their
// keys/values per response (a single prompt broadcasts without copies), and runs
// the responses on top. Logits are computed only at the positions that predict a
// response token.
#include "policy/reading/scoring.h"

#include <fmt/format.h>

#include <map>

#include "core/error.h"

namespace rlid::policy {
namespace {

torch::Tensor IndexTensor(const std::vector<int64_t>& v, const torch::Device& device) {
  return torch::tensor(v, torch::kInt64).to(device);
}

// Right-padded [rows, T] ids from token lists.
torch::Tensor PackIds(const std::vector<std::vector<int64_t>>& seqs, int64_t T) {
  auto ids = torch::zeros({static_cast<int64_t>(seqs.size()), T}, torch::kInt64);
  auto a = ids.accessor<int64_t, 2>();
  for (size_t i = 0; i < seqs.size(); ++i)
    for (size_t t = 0; t < seqs[i].size(); ++t) a[i][t] = seqs[i][t];
  return ids;
}

// Hidden rows -> per-target tempered log-prob (and entropy), written into
// [N * Tmax] slots.
void Finish(TransformerLM& model, const torch::Tensor& hidden_rows, const std::vector<int64_t>& targets,
            const std::vector<int64_t>& slots, int64_t N, int64_t Tmax, const ScoreOptions& options,
            ScoreBatch& out) {
  const torch::Device device = model->device();
  auto fopts = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  auto slot_t = IndexTensor(slots, device);
  out.mask = torch::zeros({N * Tmax}, fopts).index_fill_(0, slot_t, 1.0).view({N, Tmax});
  if (targets.empty()) {
    out.logp = torch::zeros({N, Tmax}, fopts);
    if (options.entropy) out.entropy = torch::zeros({N, Tmax}, fopts);
    return;
  }
  auto logp_rows = torch::log_softmax(model->Logits(hidden_rows) / options.temperature, -1);  // [M, V]
  auto tok = logp_rows.gather(1, IndexTensor(targets, device).unsqueeze(1)).squeeze(1);
  out.logp = torch::zeros({N * Tmax}, fopts).scatter(0, slot_t, tok).view({N, Tmax});
  if (options.entropy) {
    auto ent = -(torch::exp(logp_rows) * logp_rows).sum(-1);
    out.entropy = torch::zeros({N * Tmax}, fopts).scatter(0, slot_t, ent).view({N, Tmax});
  }
}

// Every prompt is non-empty and every token id inside the vocabulary.
void CheckRequests(const std::vector<ScoreRequest>& reqs, int64_t vocab) {
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (reqs[i].prompt.empty()) throw ConfigError(fmt::format("score request {}: empty prompt", i));
    for (const auto* seq : {&reqs[i].prompt, &reqs[i].response})
      for (TokenId t : *seq)
        if (t < 0 || t >= vocab)
          throw ConfigError(fmt::format("score request {}: token id {} is outside the vocabulary [0, {})", i, t,
                                        vocab),
                            "render with the model's tokenizer");
  }
}

// Plain path: one causal row per non-empty response, prompt ++ response[:-1].
ScoreBatch ScorePlain(TransformerLM& model, const std::vector<ScoreRequest>& reqs, int64_t Tmax,
                      const ScoreOptions& options) {
  const int64_t N = static_cast<int64_t>(reqs.size());
  const torch::Device device = model->device();
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(device);
  ScoreBatch out;
  std::vector<int64_t> targets, slots;  // in the order of the gathered hidden rows
  std::vector<std::vector<int64_t>> seqs;
  std::vector<int64_t> lengths, hidden_idx;
  int64_t L = 0;
  for (int64_t i = 0; i < N; ++i) {
    const auto& q = reqs[i];
    if (q.response.empty()) continue;
    std::vector<int64_t> s(q.prompt.begin(), q.prompt.end());
    s.insert(s.end(), q.response.begin(), q.response.end() - 1);
    L = std::max<int64_t>(L, s.size());
    lengths.push_back(static_cast<int64_t>(s.size()));
    seqs.push_back(std::move(s));
  }
  for (size_t row = 0, i = 0; i < reqs.size(); ++i) {
    const auto& q = reqs[i];
    if (q.response.empty()) continue;
    const int64_t P = static_cast<int64_t>(q.prompt.size());
    for (size_t t = 0; t < q.response.size(); ++t) {
      hidden_idx.push_back(static_cast<int64_t>(row) * L + P - 1 + static_cast<int64_t>(t));
      targets.push_back(q.response[t]);
      slots.push_back(static_cast<int64_t>(i) * Tmax + static_cast<int64_t>(t));
    }
    ++row;
  }
  torch::Tensor rows_h;
  if (!seqs.empty()) {
    const int64_t B = static_cast<int64_t>(seqs.size());
    auto pos = torch::arange(L, i64).unsqueeze(0).expand({B, L}).contiguous();
    model->CheckPosition(L - 1);
    auto h =
        model->forward(PackIds(seqs, L).to(device), pos, AttentionMask::Causal(lengths, L, device))
            .hidden;
    rows_h = h.reshape({B * L, -1}).index_select(0, IndexTensor(hidden_idx, device));
  }
  Finish(model, rows_h, targets, slots, N, Tmax, options, out);
  return out;
}

// The distinct prompts of the requests with a non-empty response, in order of
// first appearance.
struct PromptGroups {
  std::vector<std::vector<int64_t>> prompts;  // [U]
  std::vector<int64_t> plen;                  // [U] prompt lengths
  std::vector<int64_t> of_request;            // [N] group of request i; -1 for an empty response
  int64_t Pmax = 0;
};

PromptGroups GroupPrompts(const std::vector<ScoreRequest>& reqs) {
  PromptGroups g;
  std::map<std::vector<TokenId>, int64_t> group_of;
  g.of_request.assign(reqs.size(), -1);
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (reqs[i].response.empty()) continue;
    auto [it, inserted] = group_of.emplace(reqs[i].prompt, static_cast<int64_t>(g.prompts.size()));
    if (inserted) {
      g.prompts.emplace_back(reqs[i].prompt.begin(), reqs[i].prompt.end());
      g.plen.push_back(static_cast<int64_t>(reqs[i].prompt.size()));
      g.Pmax = std::max<int64_t>(g.Pmax, g.plen.back());
    }
    g.of_request[i] = it->second;
  }
  return g;
}

// Responses with >= 2 tokens: response[:-1], run on top of their prompt's
// keys/values.
struct Continuations {
  std::vector<std::vector<int64_t>> tokens;  // [M] response[:-1]
  std::vector<int64_t> group, len;           // [M] prompt group, |response| - 1
  int64_t T2 = 0;                            // max len
};

Continuations CollectContinuations(const std::vector<ScoreRequest>& reqs, const PromptGroups& g) {
  Continuations c;
  for (size_t i = 0; i < reqs.size(); ++i) {
    const auto& r = reqs[i].response;
    if (r.size() < 2) continue;
    c.tokens.emplace_back(r.begin(), r.end() - 1);
    c.group.push_back(g.of_request[i]);
    c.len.push_back(static_cast<int64_t>(r.size()) - 1);
    c.T2 = std::max(c.T2, c.len.back());
  }
  return c;
}

// The continuation forward -> hidden rows [Σ len, D] predicting response
// tokens 1.. (appended to targets/slots in the same order). plen_t: [U]
// prompt lengths on the device; present: the prompts' keys/values [U, ...].
torch::Tensor ContinueResponses(TransformerLM& model, const std::vector<ScoreRequest>& reqs,
                                const PromptGroups& g, const Continuations& c,
                                const torch::Tensor& plen_t, const PastKV& present, int64_t Tmax,
                                std::vector<int64_t>& targets, std::vector<int64_t>& slots) {
  const torch::Device device = model->device();
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(device);
  const int64_t N = static_cast<int64_t>(reqs.size()), U = static_cast<int64_t>(g.prompts.size());
  const int64_t M = static_cast<int64_t>(c.tokens.size()), T2 = c.T2, Pmax = g.Pmax;
  std::vector<int64_t> cont_idx;
  for (int64_t row = 0, i = 0; i < N; ++i) {
    const auto& r = reqs[i].response;
    if (r.size() < 2) continue;
    for (size_t t = 1; t < r.size(); ++t) {
      cont_idx.push_back(row * T2 + static_cast<int64_t>(t) - 1);
      targets.push_back(r[t]);
      slots.push_back(i * Tmax + static_cast<int64_t>(t));
    }
    ++row;
  }
  auto group_t = IndexTensor(c.group, device);
  PastKV past = present;
  if (U > 1)
    for (auto& kv : past) kv = kv.Rows(group_t);
  auto ar_p = torch::arange(Pmax, i64), ar_t = torch::arange(T2, i64);
  auto prompt_keys = (ar_p.unsqueeze(0) < plen_t.index_select(0, group_t).unsqueeze(1))  // [M, Pmax]
                         .unsqueeze(1)
                         .expand({M, T2, Pmax});
  auto resp_keys =  // [M, T2, T2]
      TransformerLMImpl::CausalMask(IndexTensor(c.len, device), T2).squeeze(1);
  // Continuation token t sees its prompt and the t + 1 response tokens up to itself.
  int64_t tokens = 0, pairs = 0;
  for (size_t m = 0; m < c.len.size(); ++m)
    tokens += c.len[m], pairs += g.plen[c.group[m]] * c.len[m] + CausalPairs(c.len[m]);
  AttentionMask mask(torch::cat({prompt_keys, resp_keys}, -1).unsqueeze(1), tokens,
                     pairs);  // [M, 1, T2, Pmax + T2]
  // Padded queries get position 0 so they never exceed policy.max_position.
  auto pos = torch::where(ar_t.unsqueeze(0) < IndexTensor(c.len, device).unsqueeze(1),
                          plen_t.index_select(0, group_t).unsqueeze(1) + ar_t.unsqueeze(0),
                          torch::zeros({1, 1}, i64));
  int64_t max_pos = 0;
  for (size_t m = 0; m < c.len.size(); ++m)
    max_pos = std::max(max_pos, g.plen[c.group[m]] + c.len[m] - 1);
  model->CheckPosition(max_pos);
  auto h = model->forward(PackIds(c.tokens, T2).to(device), pos, mask, &past).hidden;
  return h.reshape({M * T2, -1}).index_select(0, IndexTensor(cont_idx, device));
}

// Shared-prefix path: the distinct prompts in one forward (their last hidden
// row predicts response token 0), then the continuations on their keys/values.
ScoreBatch ScoreShared(TransformerLM& model, const std::vector<ScoreRequest>& reqs, int64_t Tmax,
                       const ScoreOptions& options) {
  const int64_t N = static_cast<int64_t>(reqs.size());
  const torch::Device device = model->device();
  const auto i64 = torch::TensorOptions().dtype(torch::kInt64).device(device);
  ScoreBatch out;
  std::vector<int64_t> targets, slots;  // in the order of the gathered hidden rows
  const PromptGroups g = GroupPrompts(reqs);
  if (g.prompts.empty()) {
    Finish(model, torch::Tensor(), targets, slots, N, Tmax, options, out);
    return out;
  }
  const int64_t U = static_cast<int64_t>(g.prompts.size()), Pmax = g.Pmax;
  auto ppos = torch::arange(Pmax, i64).unsqueeze(0).expand({U, Pmax}).contiguous();
  auto plen_t = IndexTensor(g.plen, device);
  model->CheckPosition(Pmax - 1);
  auto enc = model->forward(PackIds(g.prompts, Pmax).to(device), ppos,
                            AttentionMask::Causal(g.plen, Pmax, device), nullptr,
                            /*return_present=*/true);
  std::vector<int64_t> first_idx;  // hidden rows of the last prompt token, per response
  for (int64_t i = 0; i < N; ++i) {
    const int64_t group = g.of_request[i];
    if (group < 0) continue;
    first_idx.push_back(group * Pmax + g.plen[group] - 1);
    targets.push_back(reqs[i].response[0]);
    slots.push_back(i * Tmax);
  }
  auto hidden_rows = enc.hidden.reshape({U * Pmax, -1}).index_select(0, IndexTensor(first_idx, device));

  const Continuations c = CollectContinuations(reqs, g);
  if (!c.tokens.empty()) {
    auto cont_rows =
        ContinueResponses(model, reqs, g, c, plen_t, enc.present, Tmax, targets, slots);
    hidden_rows = torch::cat({hidden_rows, cont_rows});
  }
  Finish(model, hidden_rows, targets, slots, N, Tmax, options, out);
  return out;
}

}  // namespace

ScoreBatch ScoreResponses(TransformerLM& model, const std::vector<ScoreRequest>& reqs,
                          const ScoreOptions& options) {
  if (reqs.empty()) throw ConfigError("no responses to score", "pass at least one ScoreRequest");
  if (!(options.temperature > 0.0))
    throw ConfigError(fmt::format("scoring temperature must be > 0, found {}", options.temperature),
                      "use the sampler's temperature (1 for greedy rollouts)");
  CheckRequests(reqs, model->config().vocab_size);
  int64_t Tmax = 0;
  for (const auto& q : reqs) Tmax = std::max<int64_t>(Tmax, q.response.size());
  const ForwardCost work_before = model->work();
  ScoreBatch out = options.shared_prefix ? ScoreShared(model, reqs, Tmax, options)
                                         : ScorePlain(model, reqs, Tmax, options);
  out.cost = Difference(model->work(), work_before);
  return out;
}

}  // namespace rlid::policy

// Single-pass label readout. Each row of the packed batch is
//   prompt (P tokens) | realisation trie (one node per distinct prefix) | afterstate branches
// with a tree mask: trie nodes see the prompt and their own ancestors, branch
// tokens see the prompt and their own earlier tokens. Log-softmax is taken only
// at the last prompt token and at trie nodes that have children.
#include "policy/reading/readout.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <memory>

#include "core/check.h"
#include "core/error.h"
#include "policy/model/device.h"

namespace rlid::policy {
namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();
constexpr int64_t kMinSharedPrefix = 8;  // shorter common prefixes are not worth a second call

std::string Repr(const std::vector<TokenId>& w) { return fmt::format("[{}]", fmt::join(w, ", ")); }

bool IsProperPrefix(const std::vector<TokenId>& a, const std::vector<TokenId>& b) {
  return a.size() < b.size() && std::equal(a.begin(), a.end(), b.begin());
}

void CheckIds(const std::vector<TokenId>& ids, int64_t vocab, const char* what, size_t row) {
  for (TokenId t : ids)
    if (t < 0 || t >= vocab)
      throw ConfigError(fmt::format("readout request {}: {} token id {} is outside the vocabulary [0, {})",
                                    row, what, t, vocab),
                        "render prompts and labels with the model's tokenizer");
}

torch::Tensor IndexTensor(const std::vector<int64_t>& v, const torch::Device& device) {
  return HostToDevice(v, device);
}

// One distinct realisation of a row after deduplication and end-token handling.
struct DistinctRealisation {
  int64_t item = 0;
  std::vector<TokenId> tokens;
  int64_t leaf = -1;  // trie node of its last token
};

// The packed layout of one request.
struct PackedRow {
  std::vector<int64_t> ids, positions;
  int64_t prompt_len = 0;
  int64_t num_items = 0;
  std::vector<DistinctRealisation> distinct;        // in order of first appearance
  std::vector<std::vector<int64_t>> slot_distinct;  // [k][r] -> index into distinct
  // Trie: node n sits at sequence index prompt_len + n.
  std::vector<int64_t> node_parent;  // -1 = root (the last prompt token)
  std::vector<TokenId> node_token;
  std::vector<bool> node_has_children;
  // Afterstate branch k occupies [branch_start[k], branch_start[k] + branch_len[k]).
  std::vector<int64_t> branch_start, branch_len;
  std::vector<TokenId> label_tokens;  // distinct first tokens of realisations[k][0]
  int64_t attention_pairs = 0;         // true entries of this row's mask over its real tokens
  int64_t span_begin = 0, span_end = 0;  // ReadoutRequest::scored_begin/end
};

// The prompt is non-empty and in the vocabulary, the menu non-empty, the span
// (if any) inside the prompt with a token before it.
void CheckPromptAndSpan(const ReadoutRequest& req, size_t row, int64_t vocab) {
  if (req.prompt.empty())
    throw ConfigError(fmt::format("readout request {}: empty prompt", row),
                      "a prompt must end with the answer prefix");
  if (req.realisations.empty())
    throw ConfigError(fmt::format("readout request {}: the menu has no items", row),
                      "a state with no legal action is terminal; do not read it out");
  CheckIds(req.prompt, vocab, "prompt", row);
  const int64_t P = static_cast<int64_t>(req.prompt.size());
  const bool no_span = req.scored_begin == 0 && req.scored_end == 0;
  if (!no_span && (req.scored_begin < 1 || req.scored_begin > req.scored_end || req.scored_end > P))
    throw ConfigError(fmt::format("readout request {}: scored span [{}, {}) is not inside the prompt "
                                  "[1, {}]",
                                  row, req.scored_begin, req.scored_end, P),
                      "a scored span needs at least one token before it and must end within the "
                      "prompt");
}

// Distinct realisations: identical sequences within an item count once; across
// items they make the events ambiguous. Fills distinct, slot_distinct and
// label_tokens.
void CollectRealisations(const ReadoutRequest& req, size_t row, int64_t vocab, PackedRow& pr) {
  std::map<std::vector<TokenId>, int64_t> seen;  // tokens -> index into distinct
  pr.slot_distinct.resize(pr.num_items);
  for (int64_t k = 0; k < pr.num_items; ++k) {
    const auto& item = req.realisations[k];
    if (item.empty())
      throw ConfigError(fmt::format("readout request {}: menu item {} has no realisations", row, k),
                        "every item needs at least its label");
    for (size_t r = 0; r < item.size(); ++r) {
      const auto& w = item[r];
      if (w.empty())
        throw ConfigError(
            fmt::format("readout request {}: item {} realisation {} is empty", row, k, r));
      CheckIds(w, vocab, "realisation", row);
      auto [it, inserted] = seen.emplace(w, static_cast<int64_t>(pr.distinct.size()));
      if (inserted) {
        pr.distinct.push_back({k, w, -1});
      } else if (pr.distinct[it->second].item != k) {
        throw ConfigError(
            fmt::format("readout request {}: items {} and {} share the realisation {}", row,
                        pr.distinct[it->second].item, k, Repr(w)),
            "two different strings tokenize identically; reword one of the actions");
      }
      pr.slot_distinct[k].push_back(it->second);
    }
    if (std::find(pr.label_tokens.begin(), pr.label_tokens.end(), item[0][0]) == pr.label_tokens.end())
      pr.label_tokens.push_back(item[0][0]);
  }
}

// Prefix-freeness: a realisation that is a token-prefix of another gets end_token;
// afterwards no realisation may equal or prefix another.
void AppendEndTokens(const ReadoutRequest& req, size_t row, int64_t vocab, PackedRow& pr) {
  const size_t W = pr.distinct.size();
  std::vector<bool> needs_end(W, false);
  for (size_t i = 0; i < W; ++i)
    for (size_t j = 0; j < W; ++j)
      if (i != j && IsProperPrefix(pr.distinct[i].tokens, pr.distinct[j].tokens)) {
        if (req.end_token < 0)
          throw ConfigError(
              fmt::format("readout request {}: realisation {} (item {}) is a token-prefix of "
                          "realisation {} (item {})",
                          row, Repr(pr.distinct[i].tokens), pr.distinct[i].item,
                          Repr(pr.distinct[j].tokens), pr.distinct[j].item),
              "set ReadoutRequest::end_token (e.g. the newline or end-of-text id) so the shorter "
              "realisation means 'this and nothing more'");
        needs_end[i] = true;
      }
  if (req.end_token >= 0) CheckIds({req.end_token}, vocab, "end", row);
  for (size_t i = 0; i < W; ++i)
    if (needs_end[i]) pr.distinct[i].tokens.push_back(req.end_token);
  for (size_t i = 0; i < W; ++i)
    for (size_t j = 0; j < W; ++j)
      if (i != j && (pr.distinct[i].tokens == pr.distinct[j].tokens ||
                     IsProperPrefix(pr.distinct[i].tokens, pr.distinct[j].tokens)))
        throw ConfigError(
            fmt::format(
                "readout request {}: after appending end token {}, realisation {} (item {}) "
                "still collides with realisation {} (item {})",
                row, req.end_token, Repr(pr.distinct[i].tokens), pr.distinct[i].item,
                Repr(pr.distinct[j].tokens), pr.distinct[j].item),
            "the end token must not occur inside realisations");
}

// Trie over the distinct realisations; nodes in insertion order (parents first).
void BuildTrie(PackedRow& pr) {
  std::map<std::pair<int64_t, TokenId>, int64_t> child;  // (parent, token) -> node
  for (auto& w : pr.distinct) {
    int64_t parent = -1;
    for (TokenId t : w.tokens) {
      auto [it, inserted] = child.emplace(std::make_pair(parent, t), static_cast<int64_t>(pr.node_token.size()));
      if (inserted) {
        pr.node_parent.push_back(parent);
        pr.node_token.push_back(t);
        pr.node_has_children.push_back(false);
        if (parent >= 0) pr.node_has_children[parent] = true;
      }
      parent = it->second;
    }
    w.leaf = parent;
  }
}

// Token layout of the prompt and the trie: ids, positions, attention pairs.
void LayOutPromptAndTrie(const ReadoutRequest& req, PackedRow& pr) {
  pr.ids.assign(req.prompt.begin(), req.prompt.end());
  for (int64_t i = 0; i < pr.prompt_len; ++i) pr.positions.push_back(i);
  std::vector<int64_t> depth(pr.node_token.size());
  pr.attention_pairs = CausalPairs(pr.prompt_len);
  for (size_t n = 0; n < pr.node_token.size(); ++n) {
    depth[n] = pr.node_parent[n] < 0 ? 1 : depth[pr.node_parent[n]] + 1;
    pr.ids.push_back(pr.node_token[n]);
    pr.positions.push_back(pr.prompt_len - 1 + depth[n]);
    pr.attention_pairs += pr.prompt_len + depth[n];  // the prompt and its own ancestors
  }
}

// Appends one afterstate branch per item after the trie.
void AppendBranches(const ReadoutRequest& req, size_t row, int64_t vocab, PackedRow& pr) {
  if (static_cast<int64_t>(req.afterstates.size()) != pr.num_items)
    throw ConfigError(fmt::format("readout request {}: {} afterstate branches for {} menu items", row,
                                  req.afterstates.size(), pr.num_items),
                      "give one branch per item, or turn afterstate_values off");
  for (const auto& br : req.afterstates) {
    CheckIds(br, vocab, "afterstate", row);
    pr.branch_start.push_back(static_cast<int64_t>(pr.ids.size()));
    pr.branch_len.push_back(static_cast<int64_t>(br.size()));
    for (size_t t = 0; t < br.size(); ++t) {
      pr.ids.push_back(br[t]);
      pr.positions.push_back(pr.prompt_len + static_cast<int64_t>(t));
      pr.attention_pairs += pr.prompt_len + static_cast<int64_t>(t) + 1;
    }
  }
}

PackedRow PackRow(const ReadoutRequest& req, size_t row, int64_t vocab, bool with_afterstates) {
  CheckPromptAndSpan(req, row, vocab);
  PackedRow pr;
  pr.span_begin = req.scored_begin;
  pr.span_end = req.scored_end;
  pr.prompt_len = static_cast<int64_t>(req.prompt.size());
  pr.num_items = static_cast<int64_t>(req.realisations.size());
  CollectRealisations(req, row, vocab, pr);
  AppendEndTokens(req, row, vocab, pr);
  BuildTrie(pr);
  LayOutPromptAndTrie(req, pr);
  if (with_afterstates) AppendBranches(req, row, vocab, pr);
  return pr;
}

// Writes row `pr`'s [L, L] attention pattern into `mask` (row-major, zeroed).
void FillMask(const PackedRow& pr, int64_t L, bool* mask) {
  const int64_t P = pr.prompt_len, n_nodes = static_cast<int64_t>(pr.node_token.size());
  const int64_t len = static_cast<int64_t>(pr.ids.size());
  for (int64_t i = 0; i < P; ++i)
    for (int64_t j = 0; j <= i; ++j) mask[i * L + j] = true;
  for (int64_t n = 0; n < n_nodes; ++n) {
    bool* q = mask + (P + n) * L;
    std::fill(q, q + P, true);
    for (int64_t a = n; a >= 0; a = pr.node_parent[a]) q[P + a] = true;
  }
  for (size_t k = 0; k < pr.branch_start.size(); ++k) {
    const int64_t s0 = pr.branch_start[k];
    for (int64_t t = 0; t < pr.branch_len[k]; ++t) {
      bool* q = mask + (s0 + t) * L;
      std::fill(q, q + P, true);
      for (int64_t j = s0; j <= s0 + t; ++j) q[j] = true;
    }
  }
  for (int64_t i = len; i < L; ++i) mask[i * L + i] = true;  // padding sees itself only
}

// The packed batch: B rows, padded to L tokens, K items and R realisations per item.
struct PackedBatch {
  std::vector<PackedRow> rows;
  int64_t B = 0, L = 0, K = 0, R = 0;
};

PackedBatch PackBatch(const std::vector<ReadoutRequest>& batch, int64_t vocab,
                      bool with_afterstates) {
  PackedBatch pb;
  pb.B = static_cast<int64_t>(batch.size());
  pb.rows.reserve(pb.B);
  for (int64_t b = 0; b < pb.B; ++b) {
    pb.rows.push_back(PackRow(batch[b], b, vocab, with_afterstates));
    const auto& pr = pb.rows.back();
    pb.L = std::max<int64_t>(pb.L, pr.ids.size());
    pb.K = std::max(pb.K, pr.num_items);
    for (const auto& s : pr.slot_distinct) pb.R = std::max<int64_t>(pb.R, s.size());
  }
  return pb;
}

// The packed (unpadded) tokens and their mask pairs.
ForwardCost PackedWork(const PackedBatch& pb) {
  ForwardCost work;
  for (const auto& pr : pb.rows) {
    work.tokens += static_cast<int64_t>(pr.ids.size());
    work.attention_pairs += pr.attention_pairs;
  }
  return work;
}

// Host inputs, right-padded (padding: id 0, position 0, attends to itself).
struct PackedInputs {
  torch::Tensor ids, pos;  // [B, L] int64
  torch::Tensor mask;      // [B, 1, L, L] bool
};

PackedInputs PackInputs(const PackedBatch& pb) {
  const int64_t B = pb.B, L = pb.L;
  PackedInputs in{torch::zeros({B, L}, torch::kInt64), torch::zeros({B, L}, torch::kInt64),
                  torch::zeros({B, 1, L, L}, torch::kBool)};
  auto ida = in.ids.accessor<int64_t, 2>();
  auto posa = in.pos.accessor<int64_t, 2>();
  bool* m = in.mask.data_ptr<bool>();
  for (int64_t b = 0; b < B; ++b) {
    const auto& pr = pb.rows[b];
    for (size_t i = 0; i < pr.ids.size(); ++i) {
      ida[b][i] = pr.ids[i];
      posa[b][i] = pr.positions[i];
    }
    FillMask(pr, L, m + b * L * L);
  }
  return in;
}

// The batch's common prompt prefix C, leaving every row >= 1 prompt token of
// its own (the root logits come from the last one); 0 below kMinSharedPrefix.
int64_t SharedPrefixLength(const std::vector<PackedRow>& rows) {
  if (rows.size() < 2) return 0;
  int64_t C = rows[0].prompt_len - 1;
  for (size_t b = 1; b < rows.size() && C > 0; ++b) {
    C = std::min(C, rows[b].prompt_len - 1);
    int64_t same = 0;
    while (same < C && rows[b].ids[same] == rows[0].ids[same]) ++same;
    C = same;
  }
  return C < kMinSharedPrefix ? 0 : C;
}

// The tries and branches of every row, after its prompt: ids and positions
// [B, N], their mask [B, 1, N, Pmax + N] over the prompts' keys (row b's first
// P_b) and their own (each token sees itself and its ancestors, a forest;
// padding sees itself only), and the rows of [prompts ; tries] hidden states
// ([B * Pmax] then [B * N]) that make the packed layout [B * L].
struct TreeInputs {
  torch::Tensor ids, pos, mask;
  std::vector<int64_t> packed_row;  // [B * L]
  int64_t N = 0;
};

TreeInputs PackTrees(const PackedBatch& pb, int64_t Pmax) {
  const int64_t B = pb.B, L = pb.L;
  TreeInputs t;
  for (const auto& pr : pb.rows) t.N = std::max<int64_t>(t.N, pr.ids.size() - pr.prompt_len);
  const int64_t N = t.N, S = Pmax + N;
  t.ids = torch::zeros({B, N}, torch::kInt64), t.pos = torch::zeros({B, N}, torch::kInt64);
  t.mask = torch::zeros({B, 1, N, S}, torch::kBool);
  auto ida = t.ids.accessor<int64_t, 2>(), posa = t.pos.accessor<int64_t, 2>();
  bool* m = t.mask.data_ptr<bool>();
  std::unique_ptr<bool[]> row_mask(new bool[static_cast<size_t>(L * L)]);
  bool* packed = row_mask.get();
  t.packed_row.assign(B * L, 0);
  for (int64_t b = 0; b < B; ++b) {
    const auto& pr = pb.rows[b];
    const int64_t P = pr.prompt_len, n = static_cast<int64_t>(pr.ids.size()) - P;
    std::fill(packed, packed + L * L, false);
    FillMask(pr, L, packed);
    for (int64_t i = 0; i < N; ++i) {
      bool* q = m + (b * N + i) * S;
      if (i >= n) {  // padding: a root that sees itself
        q[Pmax + i] = true;
        continue;
      }
      ida[b][i] = pr.ids[P + i], posa[b][i] = pr.positions[P + i];
      const bool* src = packed + (P + i) * L;
      std::copy(src, src + P, q);                 // the row's prompt keys
      std::copy(src + P, src + P + n, q + Pmax);  // its own tree
    }
    for (int64_t i = 0; i < L; ++i)
      t.packed_row[b * L + i] = i < P ? b * Pmax + i : i < P + n ? B * Pmax + b * N + (i - P) : 0;
  }
  return t;
}

// Models with recurrent layers (Qwen3.5) cannot mask a recurrence: the prompts
// run as chains (each recurrent layer keeps its state after the row's last
// prompt token; a shared prefix first, once, when C > 0), then every trie and
// branch as a tree on those states, within the same counted pass.
torch::Tensor RunRecurrentForward(TransformerLM& model, const PackedBatch& pb, int64_t C) {
  const int64_t B = pb.B;
  const torch::Device device = model->device();
  std::vector<int64_t> plen;
  ForwardCost prompts;
  for (const auto& pr : pb.rows) {
    plen.push_back(pr.prompt_len);
    prompts.tokens += pr.prompt_len, prompts.attention_pairs += CausalPairs(pr.prompt_len);
  }
  const int64_t Pmax = *std::max_element(plen.begin(), plen.end());
  auto ids = torch::zeros({B, Pmax}, torch::kInt64);
  auto ida = ids.accessor<int64_t, 2>();
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < plen[b]; ++i) ida[b][i] = pb.rows[b].ids[i];
  auto pos = torch::arange(Pmax, torch::kInt64).unsqueeze(0).expand({B, Pmax}).contiguous();
  auto causal = AttentionMask::Causal(plen, Pmax, torch::kCPU).mask;
  ids = ids.to(device), pos = pos.to(device), causal = causal.to(device);
  torch::Tensor hidden;
  ForwardOut enc;
  if (C > 0) {
    auto pre =
        model->forward(ids.slice(0, 0, 1).slice(1, 0, C), pos.slice(0, 0, 1).slice(1, 0, C),
                       {causal.slice(0, 0, 1).slice(2, 0, C).slice(3, 0, C), C, CausalPairs(C), 0},
                       nullptr, /*return_present=*/true);
    enc = model->forward(ids.slice(1, C), pos.slice(1, C),
                         {causal.slice(2, C), prompts.tokens - B * C,
                          prompts.attention_pairs - B * CausalPairs(C), 0},
                         &pre.present, /*return_present=*/true);
    hidden = torch::cat({pre.hidden.expand({B, -1, -1}), enc.hidden}, 1);
  } else {
    enc = model->forward(ids, pos, {causal, prompts.tokens, prompts.attention_pairs, 0}, nullptr,
                         /*return_present=*/true);
    hidden = enc.hidden;
  }
  TreeInputs t = PackTrees(pb, Pmax);
  const ForwardCost packed = PackedWork(pb);
  AttentionMask tree(t.mask.to(device), packed.tokens - prompts.tokens,
                     packed.attention_pairs - prompts.attention_pairs);
  tree.tree = true;
  auto rest = model->forward(t.ids.to(device), t.pos.to(device), tree, &enc.present).hidden;
  const int64_t D = hidden.size(-1);
  return torch::cat({hidden.reshape({B * Pmax, D}), rest.reshape({B * t.N, D})})
      .index_select(0, IndexTensor(t.packed_row, device));
}

// Packed batch -> hidden [B * L, D], in one readout pass. With C > 0 the
// first C tokens run once (row 0's copy) and every row attends to their
// keys/values: the model counts the work saved.
torch::Tensor RunForward(TransformerLM& model, const PackedBatch& pb, int64_t C) {
  const int64_t B = pb.B, L = pb.L;
  if (model->config().HasLinearLayers()) {
    for (const auto& pr : pb.rows)
      model->CheckPosition(*std::max_element(pr.positions.begin(), pr.positions.end()));
    return RunRecurrentForward(model, pb, C);
  }
  auto [ids, pos, mask] = PackInputs(pb);
  const ForwardCost packed = PackedWork(pb);
  const torch::Device device = model->device();
  torch::Tensor hidden;  // [B, L, D]
  if (pos.numel() > 0) model->CheckPosition(pos.max().item<int64_t>());  // on the host copy
  ids = ids.to(device), pos = pos.to(device), mask = mask.to(device);
  if (C > 0) {
    // The prefix counts as part of the pass its continuation completes.
    AttentionMask prefix(mask.slice(0, 0, 1).slice(2, 0, C).slice(3, 0, C), C, CausalPairs(C),
                         /*calls=*/0);
    AttentionMask after(mask.slice(2, C), packed.tokens - B * C,
                        packed.attention_pairs - B * CausalPairs(C));
    auto pre = model->forward(ids.slice(0, 0, 1).slice(1, 0, C), pos.slice(0, 0, 1).slice(1, 0, C),
                              prefix, nullptr, /*return_present=*/true);
    auto rest = model->forward(ids.slice(1, C), pos.slice(1, C), after, &pre.present);
    hidden = torch::cat({pre.hidden.expand({B, -1, -1}), rest.hidden}, 1);
  } else {
    hidden = model->forward(ids, pos, {mask, packed.tokens, packed.attention_pairs}).hidden;
  }
  return hidden.reshape({B * L, hidden.size(-1)});
}

// Flat hidden rows that get logits: per row the root (its last prompt token),
// then every trie node with children; then the scored spans, whose token t is
// read at the row of token t - 1.
struct LogitRows {
  std::vector<int64_t> hidden_row;                  // [N] index into the [B * L] hidden
  std::vector<int64_t> root;                        // [B] logit row of each root
  std::vector<std::vector<int64_t>> node;           // [B][node] logit row, or -1 (a leaf)
  std::vector<int64_t> span_row, span_tok, span_b;  // per scored token: logit row, token, b
  std::vector<int64_t> label_row, label_tok, label_b;  // distinct label tokens, at the root
};

LogitRows PlanLogitRows(const PackedBatch& pb) {
  const int64_t B = pb.B, L = pb.L;
  LogitRows lr;
  lr.root.resize(B);
  lr.node.resize(B);
  for (int64_t b = 0; b < B; ++b) {
    const auto& pr = pb.rows[b];
    lr.root[b] = static_cast<int64_t>(lr.hidden_row.size());
    lr.hidden_row.push_back(b * L + pr.prompt_len - 1);
    lr.node[b].assign(pr.node_token.size(), -1);
    for (size_t n = 0; n < pr.node_token.size(); ++n)
      if (pr.node_has_children[n]) {
        lr.node[b][n] = static_cast<int64_t>(lr.hidden_row.size());
        lr.hidden_row.push_back(b * L + pr.prompt_len + static_cast<int64_t>(n));
      }
  }
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = pb.rows[b].span_begin; t < pb.rows[b].span_end; ++t) {
      lr.span_row.push_back(static_cast<int64_t>(lr.hidden_row.size()));
      lr.hidden_row.push_back(b * L + t - 1);
      lr.span_tok.push_back(pb.rows[b].ids[t]);
      lr.span_b.push_back(b);
    }
  for (int64_t b = 0; b < B; ++b)
    for (TokenId t : pb.rows[b].label_tokens) {
      lr.label_row.push_back(lr.root[b]);
      lr.label_tok.push_back(t);
      lr.label_b.push_back(b);
    }
  return lr;
}

// Index lists that read realisations and items off the log-softmax rows: one
// edge per trie node (its token at its parent's row); a distinct realisation is
// the sum of the edges on its root path; realisations fill [B, K, R] slots.
struct TrieGather {
  std::vector<int64_t> edge_row, edge_tok;         // per edge: parent's logit row, node token
  std::vector<int64_t> pair_distinct, pair_edge;   // (distinct one, an edge on its root path)
  int64_t n_distinct = 0;                          // distinct realisations over the batch
  std::vector<int64_t> slot_index, slot_distinct;  // per slot: (b*K + k)*R + r, its distinct one
  std::vector<int64_t> distinct_slot;              // first slot of each distinct one, in order
  std::vector<int64_t> item_valid;                 // b*K + k of each real item
  std::vector<int64_t> padding_slot;               // first slot of each padding item
};

TrieGather PlanTrieGather(const PackedBatch& pb, const LogitRows& lr) {
  const int64_t K = pb.K, R = pb.R;
  TrieGather g;
  for (int64_t b = 0; b < pb.B; ++b) {
    const auto& pr = pb.rows[b];
    const int64_t edge_base = static_cast<int64_t>(g.edge_row.size());
    for (size_t n = 0; n < pr.node_token.size(); ++n) {
      int64_t parent = pr.node_parent[n];
      g.edge_row.push_back(parent < 0 ? lr.root[b] : lr.node[b][parent]);
      g.edge_tok.push_back(pr.node_token[n]);
    }
    for (size_t w = 0; w < pr.distinct.size(); ++w) {
      const int64_t wid = g.n_distinct + static_cast<int64_t>(w);
      for (int64_t a = pr.distinct[w].leaf; a >= 0; a = pr.node_parent[a]) {
        g.pair_distinct.push_back(wid);
        g.pair_edge.push_back(edge_base + a);
      }
    }
    std::vector<bool> placed(pr.distinct.size(), false);
    for (int64_t k = 0; k < pr.num_items; ++k) {
      g.item_valid.push_back(b * K + k);
      for (size_t r = 0; r < pr.slot_distinct[k].size(); ++r) {
        const int64_t slot = (b * K + k) * R + static_cast<int64_t>(r), w = pr.slot_distinct[k][r];
        g.slot_index.push_back(slot);
        g.slot_distinct.push_back(g.n_distinct + w);
        if (!placed[w]) g.distinct_slot.push_back(slot);  // distinct order == first appearance
        placed[w] = true;
      }
    }
    for (int64_t k = pr.num_items; k < K; ++k) g.padding_slot.push_back((b * K + k) * R);
    g.n_distinct += static_cast<int64_t>(pr.distinct.size());
  }
  return g;
}

// logp_rows [N, V] -> log π(realisation | prompt) [W], one per distinct realisation.
torch::Tensor DistinctLogProbs(const torch::Tensor& logp_rows, const TrieGather& g,
                               const torch::Device& device) {
  auto edge_logp =
      logp_rows.index({IndexTensor(g.edge_row, device), IndexTensor(g.edge_tok, device)});
  return torch::zeros({g.n_distinct}, logp_rows.options())
      .index_add(0, IndexTensor(g.pair_distinct, device),
                 edge_logp.index_select(0, IndexTensor(g.pair_edge, device)));
}

// logp_rows [N, V] -> Σ over each row's scored span [B]; 0 without a span.
torch::Tensor SpanLogProbs(const torch::Tensor& logp_rows, const LogitRows& lr, int64_t B,
                           const torch::Device& device) {
  auto span_logp = torch::zeros({B}, logp_rows.options());
  if (!lr.span_row.empty())
    span_logp = span_logp.index_add(
        0, IndexTensor(lr.span_b, device),
        logp_rows.index({IndexTensor(lr.span_row, device), IndexTensor(lr.span_tok, device)}));
  return span_logp;
}

// distinct_logp [W] -> realisation_logp [B,K,R], item_mask [B,K], log_p [B,K],
// log_p_other [B] and menu_entropy [B].
void Marginalise(const torch::Tensor& distinct_logp, const TrieGather& g, const PackedBatch& pb,
                 Normalisation normalisation, const torch::Device& device, ReadoutBatch& out) {
  const int64_t B = pb.B, K = pb.K, R = pb.R;
  auto fopts = distinct_logp.options();
  auto slot_t = IndexTensor(g.slot_index, device);
  out.realisation_logp =
      torch::full({B * K * R}, kNegInf, fopts)
          .scatter(0, slot_t, distinct_logp.index_select(0, IndexTensor(g.slot_distinct, device)))
          .view({B, K, R});
  auto valid_t = IndexTensor(g.item_valid, device);
  out.item_mask = torch::zeros({B * K}, fopts.dtype(torch::kBool)).index_fill_(0, valid_t, true).view({B, K});
  // Item marginals over distinct realisations: [B,K,R] with -inf elsewhere; a padding
  // item holds one finite 0 so its logsumexp (masked out below) has finite gradients.
  auto marginal = torch::full({B * K * R}, kNegInf, fopts)
                      .index_fill_(0, IndexTensor(g.padding_slot, device), 0.0)
                      .scatter(0, IndexTensor(g.distinct_slot, device), distinct_logp)
                      .view({B, K, R});
  auto item_lse = torch::where(out.item_mask, torch::logsumexp(marginal, -1), kNegInf);  // [B,K]
  auto menu_lse = torch::logsumexp(item_lse, -1);                                       // [B] log Σ_a p
  auto log_p_menu = item_lse - menu_lse.unsqueeze(1);
  out.log_p = normalisation == Normalisation::kMenu ? log_p_menu : item_lse;
  out.log_p_other = torch::log(-torch::expm1(torch::clamp_max(menu_lse, 0.0)));
  auto lp_safe = torch::where(out.item_mask, log_p_menu, 0.0);
  out.menu_entropy = -(torch::exp(lp_safe) * lp_safe).sum(-1);
}

// The full-vocabulary answer rows -> row_entropy [B] and candidate_mass [B].
void ReadAnswerRows(const torch::Tensor& logp_rows, const LogitRows& lr, int64_t B,
                    const torch::Device& device, ReadoutBatch& out) {
  auto root_logp = logp_rows.index_select(0, IndexTensor(lr.root, device));  // [B, V]
  out.row_entropy = -(torch::exp(root_logp) * root_logp).sum(-1);
  out.candidate_mass =
      torch::zeros({B}, logp_rows.options())
          .index_add(0, IndexTensor(lr.label_b, device),
                     torch::exp(logp_rows.index(
                         {IndexTensor(lr.label_row, device), IndexTensor(lr.label_tok, device)})));
}

// Value head at each row's state (the last prompt token, or the one before the
// scored span) -> value [B]; with afterstates also at the last token of each
// branch (an empty branch is the prompt itself) -> afterstate_value [B,K].
void ReadValues(TransformerLM& model, const torch::Tensor& flat_hidden, const PackedBatch& pb,
                bool afterstate_values, ReadoutBatch& out) {
  const int64_t B = pb.B, L = pb.L, K = pb.K;
  const torch::Device device = model->device();
  std::vector<int64_t> value_rows;
  for (int64_t b = 0; b < B; ++b) {
    const auto& pr = pb.rows[b];
    value_rows.push_back(b * L + (pr.span_end > 0 ? pr.span_begin : pr.prompt_len) - 1);
  }
  std::vector<int64_t> branch_slot;
  if (afterstate_values) {
    for (int64_t b = 0; b < B; ++b) {
      const auto& pr = pb.rows[b];
      for (int64_t k = 0; k < pr.num_items; ++k) {
        int64_t last = pr.branch_len[k] > 0 ? pr.branch_start[k] + pr.branch_len[k] - 1 : pr.prompt_len - 1;
        value_rows.push_back(b * L + last);
        branch_slot.push_back(b * K + k);
      }
    }
  }
  auto values = model->Value(flat_hidden.index_select(0, IndexTensor(value_rows, device)));
  out.value = values.slice(0, 0, B);
  if (afterstate_values)
    out.afterstate_value = torch::zeros({B * K}, values.options())
                               .scatter(0, IndexTensor(branch_slot, device), values.slice(0, B))
                               .view({B, K});
}

}  // namespace

// Pack -> forward -> log-softmax at roots, inner trie nodes and spans -> trie
// edges summed per realisation -> items marginalised over realisations -> values.
ReadoutBatch Readout(TransformerLM& model, const std::vector<ReadoutRequest>& batch,
                     const ReadoutOptions& options) {
  if (batch.empty()) throw ConfigError("readout batch is empty", "pass at least one state");
  const PackedBatch pb = PackBatch(batch, model->config().vocab_size, options.afterstate_values);
  // Lengths before the [B, 1, L, L] mask: a prompt past policy.max_position is
  // the model's error now, not after an allocation that grows with L^2.
  int64_t max_position = 0;
  for (const auto& row : pb.rows)
    for (int64_t p : row.positions) max_position = std::max(max_position, p);
  model->CheckPosition(max_position);
  const torch::Device device = model->device();
  ReadoutBatch out;
  out.normalisation = options.normalisation;
  const ForwardCost work_before = model->work();
  const int64_t C = options.share_prefix ? SharedPrefixLength(pb.rows) : 0;
  auto flat_hidden = RunForward(model, pb, C);  // [B * L, D]

  const LogitRows lr = PlanLogitRows(pb);
  auto logp_rows = torch::log_softmax(  // [N, V]
      model->Logits(flat_hidden.index_select(0, IndexTensor(lr.hidden_row, device))), -1);
  const TrieGather g = PlanTrieGather(pb, lr);
  auto distinct_logp = DistinctLogProbs(logp_rows, g, device);  // [W]
  out.span_logp = SpanLogProbs(logp_rows, lr, pb.B, device);
  Marginalise(distinct_logp, g, pb, options.normalisation, device, out);
  ReadAnswerRows(logp_rows, lr, pb.B, device, out);
  ReadValues(model, flat_hidden, pb, options.afterstate_values, out);
  out.cost = Difference(model->work(), work_before);
  return out;
}

DecisionLogProbs DecisionDistribution(const ReadoutBatch& rb) {
  if (rb.normalisation == Normalisation::kMenu) return {rb.log_p, rb.item_mask};
  auto other_mask = torch::ones({rb.item_mask.size(0), 1}, rb.item_mask.options());
  return {torch::cat({rb.log_p, rb.log_p_other.unsqueeze(1)}, 1),
          torch::cat({rb.item_mask, other_mask}, 1)};
}

torch::Tensor NaiveRealisationLogProbs(TransformerLM& model, const std::vector<TokenId>& prompt,
                                       const std::vector<TokenId>& realisation) {
  if (prompt.empty() || realisation.empty())
    throw ConfigError("naive readout needs a non-empty prompt and realisation");
  const int64_t vocab = model->config().vocab_size;
  CheckIds(prompt, vocab, "prompt", 0);
  CheckIds(realisation, vocab, "realisation", 0);
  const int64_t P = static_cast<int64_t>(prompt.size());
  const int64_t n = static_cast<int64_t>(realisation.size());
  const torch::Device device = model->device();
  std::vector<int64_t> seq(prompt.begin(), prompt.end());
  seq.insert(seq.end(), realisation.begin(), realisation.end());
  auto ids = torch::tensor(seq, torch::kInt64).view({1, P + n}).to(device);
  auto positions = torch::arange(P + n, torch::TensorOptions().dtype(torch::kInt64).device(device)).view({1, P + n});
  auto mask = AttentionMask::Causal({P + n}, P + n, device);
  model->CheckPosition(P + n - 1);
  auto hidden = model->forward(ids, positions, mask).hidden.squeeze(0).slice(0, P - 1, P + n - 1);  // [n, D]
  auto logp = torch::log_softmax(model->Logits(hidden), -1);                                       // [n, V]
  auto targets =
      torch::tensor(std::vector<int64_t>(realisation.begin(), realisation.end()), torch::kInt64)
          .to(device);
  return logp.gather(1, targets.unsqueeze(1)).squeeze(1);
}

torch::Tensor ContentFreePrior(TransformerLM& model, const std::vector<TokenId>& prompt_without_content,
                               const std::vector<TokenId>& label_tokens) {
  ReadoutRequest req;
  req.prompt = prompt_without_content;
  for (TokenId t : label_tokens) req.realisations.push_back({{t}});
  return Readout(model, {req}, {}).log_p[0];
}

// ---- label-position statistics --------------------------------------------------

void LabelPositionStats::AddMenu(const std::vector<double>& probs) {
  if (probs.empty()) throw ConfigError("LabelPositionStats: empty menu distribution");
  const size_t K = probs.size();
  if (mass_sum_.size() < K) {
    mass_sum_.resize(K, 0.0);
    lift_sum_.resize(K, 0.0);
    count_.resize(K, 0);
  }
  for (size_t i = 0; i < K; ++i) {
    mass_sum_[i] += probs[i];
    lift_sum_[i] += static_cast<double>(K) * probs[i];
    ++count_[i];
  }
  ++menus_;
}

void LabelPositionStats::AddReversedPair(const std::vector<double>& forward,
                                         const std::vector<double>& reversed) {
  if (forward.size() != reversed.size())
    throw ConfigError(fmt::format("LabelPositionStats: forward menu has {} items, reversed has {}",
                                  forward.size(), reversed.size()),
                      "pass the same menu in both orders");
  AddMenu(forward);
  AddMenu(reversed);
  const size_t K = forward.size();
  // Argmax by forward item index; ties resolve to the lowest index in both.
  size_t best_f = 0, best_r = 0;
  for (size_t k = 1; k < K; ++k) {
    if (forward[k] > forward[best_f]) best_f = k;
    if (reversed[K - 1 - k] > reversed[K - 1 - best_r]) best_r = k;
  }
  ++pairs_;
  if (best_f != best_r) ++flips_;
}

std::vector<double> LabelPositionStats::MassByPosition() const {
  std::vector<double> out(mass_sum_.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = mass_sum_[i] / static_cast<double>(count_[i]);
  return out;
}

std::vector<double> LabelPositionStats::LiftByPosition() const {
  std::vector<double> out(lift_sum_.size());
  for (size_t i = 0; i < out.size(); ++i) out[i] = lift_sum_[i] / static_cast<double>(count_[i]);
  return out;
}

double LabelPositionStats::FlipRate() const {
  return pairs_ == 0 ? 0.0 : static_cast<double>(flips_) / static_cast<double>(pairs_);
}

}  // namespace rlid::policy

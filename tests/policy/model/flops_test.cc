// FLOP accounting against hand counts on a tiny model: the work each forward
// reports (tokens fed, attention pairs, vocabulary and value rows) for the
// single-pass readout, response scoring (shared-prefix and plain) and the
// rollout engine (KV cache and recomputation), and the FLOPs formula itself.
#include <gtest/gtest.h>

#include "policy/reading/readout.h"
#include "policy/reading/sampler.h"
#include "policy/reading/scoring.h"

namespace rlid::policy {
namespace {

// V = 20, D = 8, head_dim 4, 2 query heads, 1 KV head, SwiGLU 16, 2 layers.
ModelConfig Tiny() {
  ModelConfig c;
  c.preset = "custom";
  c.vocab_size = 20;
  c.hidden_size = 8;
  c.head_dim = 4;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.intermediate_size = 16;
  c.num_layers = 2;
  c.Validate();
  return c;
}

TransformerLM Model() {
  TransformerLM m(Tiny());
  m->InitWeights(3);
  return m;
}

void ExpectCost(const ForwardCost& c, int64_t calls, int64_t tokens, int64_t pairs,
                int64_t logits, int64_t values) {
  EXPECT_EQ(c.calls, calls);
  EXPECT_EQ(c.tokens, tokens);
  EXPECT_EQ(c.attention_pairs, pairs);
  EXPECT_EQ(c.logit_rows, logits);
  EXPECT_EQ(c.value_rows, values);
}

TEST(Flops, FormulaByHand) {
  const ModelConfig c = Tiny();
  // Per layer: q (8x8) + k (8x4) + v (8x4) + o (8x8) = 8*4*(2*2 + 2*1) = 192; MLP 3*8*16 = 384.
  EXPECT_EQ(c.LayerMatmulParameters(), 576);
  ForwardCost cost{1, 7, 23, 2, 1};
  // 2*2*576*7 + 4*2*(2*4)*23 + 2*20*8*2 + 2*8*1
  EXPECT_DOUBLE_EQ(c.ForwardFlops(cost), 16128 + 1472 + 640 + 16);
  EXPECT_DOUBLE_EQ(c.ForwardFlops({}), 0);
}

TEST(Flops, ReadoutCountsThePromptTheTrieAndTheBranches) {
  auto m = Model();
  ReadoutRequest r;
  r.prompt = {1, 2, 3};
  r.realisations = {{{5}}, {{6}, {7, 8}}};  // trie: 5 | 6 | 7 -> 8
  auto rb = Readout(m, {r});
  // Tokens 3 + 4 nodes; pairs: causal prompt 6, nodes 5, 6, 7 see 3 + 1 each, node 8 sees 3 + 2;
  // logits at the last prompt token and at node 7 (it has a child); one value.
  ExpectCost(rb.cost, 1, 7, 6 + 4 + 4 + 4 + 5, 2, 1);
  EXPECT_DOUBLE_EQ(m->config().ForwardFlops(rb.cost), 18256);
  // Afterstate branches [9] and [10, 11]: 3 more tokens seeing the prompt and
  // their own earlier tokens; one value per branch.
  r.afterstates = {{9}, {10, 11}};
  auto ra = Readout(m, {r}, {Normalisation::kMenu, true});
  ExpectCost(ra.cost, 1, 10, 23 + 4 + 4 + 5, 2, 3);
  // Two rows in one call add up.
  auto rb2 = Readout(m, {r, r});
  ExpectCost(rb2.cost, 1, 14, 46, 4, 2);
}

TEST(Flops, ScoringSharedPrefixAndPlain) {
  auto m = Model();
  std::vector<ScoreRequest> reqs = {{{1, 2, 3}, {4, 5, 6}}, {{1, 2, 3}, {4, 7}}};
  auto s = ScoreResponses(m, reqs);
  // The prompt once (3 tokens, 6 pairs); continuations feed [4, 5] and [4]:
  // 3 * 2 + 3 and 3 * 1 + 1 pairs; one logit row per response token.
  ExpectCost(s.cost, 2, 3 + 2 + 1, 6 + 9 + 4, 5, 0);
  ScoreOptions plain;
  plain.shared_prefix = false;
  auto p = ScoreResponses(m, reqs, plain);
  // Rows of 5 and 4 tokens, causal.
  ExpectCost(p.cost, 1, 9, 15 + 10, 5, 0);
}

TEST(Flops, RolloutEngineWithAndWithoutKvCache) {
  auto m = Model();
  SamplerOptions o;
  o.max_new_tokens = 3;
  TextSampler kv(m->config(), o, torch::kCPU);
  kv.SyncWeights(m);
  kv.Sample({{1, 2, 3}}, 2, nullptr, 7);
  // Encode (3 tokens, 6 pairs, 1 logit row), then two decode steps of two rows
  // each seeing 3 + step + 1 keys; the third sampled token is never fed.
  ExpectCost(kv.cost(), 3, 3 + 2 + 2, 6 + 2 * 4 + 2 * 5, 1 + 2 + 2, 0);
  EXPECT_EQ(kv.tokens_generated(), 6);
  o.kv_cache = false;
  TextSampler re(m->config(), o, torch::kCPU);
  re.SyncWeights(m);
  re.Sample({{1, 2, 3}}, 2, nullptr, 7);
  // Recomputation: rows of 4 then 5 tokens, causal.
  ExpectCost(re.cost(), 3, 3 + 2 * 4 + 2 * 5, 6 + 2 * 10 + 2 * 15, 1 + 2 + 2, 0);
}

}  // namespace
}  // namespace rlid::policy

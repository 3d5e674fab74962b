// Label readout: the single tree-packed forward equals naive per-realisation
// scoring (random models, random menus with shared prefixes, mixed prompt
// lengths), marginalisation, permutation equivariance, both normalisations,
// candidate mass / entropies / values against direct computation, gradients,
// input errors, and the label-bias helpers.
#include "policy/reading/readout.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <set>

#include "core/error.h"
#include "core/rng.h"
#include "tests/policy/family_models.h"

namespace rlid::policy {
namespace {

constexpr int64_t kVocab = 61;
constexpr TokenId kEnd = 60;
// Weights are scaled up from the 0.02-std init so distributions are far from
// uniform (realisation log-probs reach about -20 nats).
constexpr double kWeightScale = 6.0;

// A random model with sharp distributions (weights scaled up) so that errors in
// masks or positions show up as large differences.
// family: "qwen3" (rlid's default model), "mistral" / "gemma3_text" with a
// sliding window of 4 tokens, shorter than most prompts below, or
// "qwen3_5_text" (a Gated DeltaNet layer, then full attention).
TransformerLM RandomModel(uint64_t seed, const std::string& family = "qwen3") {
  ModelConfig c;
  c.ApplyPreset("tiny");
  c.vocab_size = kVocab;
  c.num_layers = 2;
  if (family != "qwen3") c = rlid::testing::FamilyConfig(family, kVocab);
  return rlid::testing::SharpenedModel(c, seed, kWeightScale);
}

std::vector<TokenId> RandomTokens(Rng& rng, int64_t n, TokenId lo, TokenId hi) {
  std::vector<TokenId> v(n);
  for (auto& t : v) t = static_cast<TokenId>(rng.UniformRange(lo, hi));
  return v;
}

// Every parameter's gradient of `loss()`, from zero (zeros where none flows).
std::vector<torch::Tensor> Gradients(TransformerLM& m, const std::function<torch::Tensor()>& loss) {
  m->zero_grad();
  loss().backward();
  std::vector<torch::Tensor> g;
  for (auto& p : m->parameters())
    g.push_back(p.grad().defined() ? p.grad().clone() : torch::zeros_like(p));
  return g;
}

double MaxGradientDiff(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  double d = 0;
  for (size_t i = 0; i < a.size(); ++i) d = std::max(d, (a[i] - b[i]).abs().max().item<double>());
  return d;
}

// Random menu over a small alphabet (tokens 1..5) so realisations share prefixes
// and collide as prefixes: a single-token label, then 0-2 more realisations of
// 2..max_len tokens. Items never share a realisation; an item may repeat one.
ReadoutRequest RandomRequest(Rng& rng, int64_t prompt_len, int max_len) {
  ReadoutRequest req;
  req.prompt = RandomTokens(rng, prompt_len, 0, kVocab - 2);
  req.end_token = kEnd;
  std::set<std::vector<TokenId>> used;
  const int K = static_cast<int>(rng.UniformRange(2, 5));
  for (int k = 0; k < K; ++k) {
    std::vector<std::vector<TokenId>> item;
    const int R = static_cast<int>(rng.UniformRange(1, 3));
    while (static_cast<int>(item.size()) < R) {
      auto w = RandomTokens(rng, item.empty() ? 1 : rng.UniformRange(2, max_len), 1, 5);
      bool mine = std::find(item.begin(), item.end(), w) != item.end();
      if (used.count(w) && !mine) continue;
      used.insert(w);
      item.push_back(w);
    }
    req.realisations.push_back(item);
    req.afterstates.push_back(RandomTokens(rng, rng.UniformRange(0, 4), 0, kVocab - 2));
  }
  return req;
}

bool IsPrefix(const std::vector<TokenId>& a, const std::vector<TokenId>& b) {
  return a.size() < b.size() && std::equal(a.begin(), a.end(), b.begin());
}

// The realisation as the readout scores it: end token appended when it is a proper
// token-prefix of any other realisation of the menu.
std::vector<TokenId> Effective(const ReadoutRequest& req, const std::vector<TokenId>& w) {
  for (const auto& item : req.realisations)
    for (const auto& o : item)
      if (IsPrefix(w, o)) {
        auto e = w;
        e.push_back(req.end_token);
        return e;
      }
  return w;
}

double NaiveLogProb(TransformerLM& m, const ReadoutRequest& req, const std::vector<TokenId>& w) {
  return NaiveRealisationLogProbs(m, req.prompt, Effective(req, w)).sum().item<double>();
}

// log Σ_distinct realisations of item k of π(w|s), computed naively.
double NaiveItemLogProb(TransformerLM& m, const ReadoutRequest& req, size_t k) {
  std::set<std::vector<TokenId>> distinct(req.realisations[k].begin(), req.realisations[k].end());
  double s = 0;
  for (const auto& w : distinct) s += std::exp(NaiveLogProb(m, req, w));
  return std::log(s);
}

// Direct forward of the prompt (plus optional tail): hidden at every position.
torch::Tensor PlainHidden(TransformerLM& m, const std::vector<TokenId>& seq) {
  const int64_t T = static_cast<int64_t>(seq.size());
  auto ids = torch::tensor(std::vector<int64_t>(seq.begin(), seq.end()), torch::kInt64).view({1, T});
  auto pos = torch::arange(T, torch::kInt64).view({1, T});
  return m->forward(ids, pos, TransformerLMImpl::CausalMask(torch::full({1}, T, torch::kInt64), T))
      .hidden.squeeze(0);
}

void ExpectReadoutEqualsNaiveScoring(const std::string& family) {
  torch::NoGradGuard ng;
  double max_diff = 0, min_logp = 0;
  int realisations = 0, multi = 0;
  for (uint64_t seed = 0; seed < 4; ++seed) {
    TransformerLM m = RandomModel(100 + seed, family);
    Rng rng(seed);
    std::vector<ReadoutRequest> batch;
    for (int64_t len : {3, 17, 9}) batch.push_back(RandomRequest(rng, len + seed, 3));
    auto out = Readout(m, batch, {});
    for (size_t b = 0; b < batch.size(); ++b)
      for (size_t k = 0; k < batch[b].realisations.size(); ++k)
        for (size_t r = 0; r < batch[b].realisations[k].size(); ++r) {
          const auto& w = batch[b].realisations[k][r];
          double naive = NaiveLogProb(m, batch[b], w);
          double packed = out.realisation_logp[b][k][r].item<double>();
          max_diff = std::max(max_diff, std::abs(naive - packed));
          min_logp = std::min(min_logp, naive);
          ++realisations;
          multi += Effective(batch[b], w).size() > 1;
        }
  }
  std::printf("%s, packed vs naive: %d realisations (%d multi-token, min log-prob %.1f), "
              "max |diff| = %.3g\n",
              family.c_str(), realisations, multi, min_logp, max_diff);
  EXPECT_GT(multi, 10);
  // Recurrent layers sum their state in another order in the packed readout
  // (chunks) than in per-realisation scoring: float32 rounding of up to ~1.3e-5 on
  // some CPUs, as the hybrid model's own continuation test allows 5e-5.
  EXPECT_LT(max_diff, family == "qwen3_5_text" ? 5e-5 : 1e-5) << family;
}

TEST(Readout, EqualsNaivePerRealisationScoring) { ExpectReadoutEqualsNaiveScoring("qwen3"); }

// Each realisation's tokens sit at prompt length + depth in the packed trie, so a
// window counts positions, not packed slots: as if the realisation followed the
// prompt alone.
TEST(Readout, EqualsNaiveScoringThroughSlidingWindows) {
  ExpectReadoutEqualsNaiveScoring("mistral");
  ExpectReadoutEqualsNaiveScoring("gemma3_text");
}

// A recurrent layer continues each realisation from the prompt's state, forked per
// trie branch: the same numbers as scoring each realisation after the prompt alone,
// also for prompts longer than a 64-token chunk.
TEST(Readout, EqualsNaiveScoringThroughRecurrentLayers) {
  ExpectReadoutEqualsNaiveScoring("qwen3_5_text");
  torch::NoGradGuard ng;
  TransformerLM m = RandomModel(5, "qwen3_5_text");
  Rng rng(11);
  std::vector<ReadoutRequest> batch = {RandomRequest(rng, 70, 4), RandomRequest(rng, 131, 3)};
  auto out = Readout(m, batch, {});
  double max_diff = 0;
  for (size_t b = 0; b < batch.size(); ++b)
    for (size_t k = 0; k < batch[b].realisations.size(); ++k)
      for (size_t r = 0; r < batch[b].realisations[k].size(); ++r)
        max_diff =
            std::max(max_diff, std::abs(NaiveLogProb(m, batch[b], batch[b].realisations[k][r]) -
                                        out.realisation_logp[b][k][r].item<double>()));
  EXPECT_LT(max_diff, 1e-5);
}

// Each token's experts are chosen from its own hidden state, so the packed trie routes
// every realisation's tokens as scoring it alone does.
TEST(Readout, EqualsNaiveScoringThroughExperts) { ExpectReadoutEqualsNaiveScoring("qwen3_moe"); }

TEST(Readout, MarginalisesDistinctRealisationsAndNormalises) {
  torch::NoGradGuard ng;
  TransformerLM m = RandomModel(7);
  ReadoutRequest req;
  req.prompt = {4, 9, 33, 2, 17};
  req.end_token = kEnd;
  // Item 0 lists "1" twice (counted once); item 1 has "2" and "2 3" (needs end
  // token); item 2 has "3 1" and "3 4".
  req.realisations = {{{1}, {1}, {5, 6}}, {{2}, {2, 3}}, {{3, 1}, {3, 4}}};
  ReadoutOptions other;
  other.normalisation = Normalisation::kOther;
  auto o = Readout(m, {req}, other);
  auto mn = Readout(m, {req}, {});
  double total = 0;
  for (size_t k = 0; k < 3; ++k) {
    double naive = NaiveItemLogProb(m, req, k);
    EXPECT_NEAR(o.log_p[0][k].item<double>(), naive, 1e-5) << k;
    total += std::exp(naive);
  }
  for (size_t k = 0; k < 3; ++k)
    EXPECT_NEAR(mn.log_p[0][k].item<double>(), NaiveItemLogProb(m, req, k) - std::log(total), 1e-5);
  // Duplicate slot repeats the value; the marginal counted it once.
  EXPECT_FLOAT_EQ(o.realisation_logp[0][0][0].item<float>(), o.realisation_logp[0][0][1].item<float>());
  EXPECT_NEAR(mn.log_p[0].exp().sum().item<double>(), 1.0, 1e-6);
  EXPECT_NEAR(o.log_p[0].exp().sum().item<double>() + o.log_p_other[0].exp().item<double>(), 1.0, 1e-6);
  EXPECT_NEAR(o.log_p_other[0].item<double>(), std::log(1.0 - total), 1e-5);
  EXPECT_FLOAT_EQ(o.log_p_other[0].item<float>(), mn.log_p_other[0].item<float>());
  // Padding: R = 3, item 1 has 2 realisations.
  EXPECT_TRUE(std::isinf(o.realisation_logp[0][1][2].item<double>()));
  // Trie nodes: 1, 5, 6, 2, end, 3, 3(after 2)... : prompt 5 + nodes {1,5,6,2,2.end,2.3,3,3.1,3.4} = 9.
  EXPECT_EQ(o.cost.tokens, 5 + 9);
}

TEST(Readout, PermutingItemsPermutesProbabilities) {
  torch::NoGradGuard ng;
  TransformerLM m = RandomModel(11);
  Rng rng(5);
  ReadoutRequest req = RandomRequest(rng, 12, 3);
  ReadoutOptions opt;
  opt.afterstate_values = true;
  auto base = Readout(m, {req}, opt);
  auto perm = rng.Permutation(static_cast<int>(req.realisations.size()));
  ReadoutRequest p = req;
  for (size_t i = 0; i < perm.size(); ++i) {
    p.realisations[i] = req.realisations[perm[i]];
    p.afterstates[i] = req.afterstates[perm[i]];
  }
  auto permuted = Readout(m, {p}, opt);
  for (size_t i = 0; i < perm.size(); ++i) {
    EXPECT_NEAR(permuted.log_p[0][i].item<double>(), base.log_p[0][perm[i]].item<double>(), 1e-5);
    EXPECT_NEAR(permuted.afterstate_value[0][i].item<double>(), base.afterstate_value[0][perm[i]].item<double>(),
                1e-5);
  }
  EXPECT_NEAR(permuted.menu_entropy[0].item<double>(), base.menu_entropy[0].item<double>(), 1e-5);
}

TEST(Readout, DiagnosticsAndValuesMatchDirectComputation) {
  torch::NoGradGuard ng;
  TransformerLM m = RandomModel(3);
  Rng rng(9);
  std::vector<ReadoutRequest> batch = {RandomRequest(rng, 6, 2), RandomRequest(rng, 14, 3)};
  ReadoutOptions opt;
  opt.afterstate_values = true;
  auto out = Readout(m, batch, opt);
  for (size_t b = 0; b < batch.size(); ++b) {
    const auto& req = batch[b];
    auto h = PlainHidden(m, req.prompt);
    auto row = torch::log_softmax(m->Logits(h[-1]), -1);
    std::set<TokenId> labels;
    for (const auto& item : req.realisations) labels.insert(item[0][0]);
    double mass = 0;
    for (TokenId t : labels) mass += row[t].exp().item<double>();
    EXPECT_NEAR(out.candidate_mass[b].item<double>(), mass, 1e-5);
    EXPECT_NEAR(out.row_entropy[b].item<double>(), -(row.exp() * row).sum().item<double>(), 1e-4);
    EXPECT_NEAR(out.value[b].item<double>(), m->Value(h[-1]).item<double>(), 1e-5);
    double ent = 0;
    for (size_t k = 0; k < req.realisations.size(); ++k) {
      double lp = out.log_p[b][k].item<double>();
      ent -= std::exp(lp) * lp;
      auto seq = req.prompt;
      seq.insert(seq.end(), req.afterstates[k].begin(), req.afterstates[k].end());
      EXPECT_NEAR(out.afterstate_value[b][k].item<double>(), m->Value(PlainHidden(m, seq)[-1]).item<double>(), 1e-5)
          << b << " " << k;
    }
    EXPECT_NEAR(out.menu_entropy[b].item<double>(), ent, 1e-5);
    for (int64_t k = 0; k < out.item_mask.size(1); ++k)
      EXPECT_EQ(out.item_mask[b][k].item<bool>(), k < static_cast<int64_t>(req.realisations.size()));
  }
}

// Think-then-decide: a scratchpad z inside the prompt is scored in the same
// pass. span_logp equals plain teacher-forced scoring of z after the state,
// the menu is read after z exactly as without a span, the value moves to the
// token before z, the span's gradient is the teacher-forced one, and each
// span token costs one logit row.
void ExpectScoredSpanEqualsPlainTeacherForcedScoring(const std::string& family) {
  SCOPED_TRACE(family);
  TransformerLM m = RandomModel(17, family);
  Rng rng(23);
  std::vector<ReadoutRequest> batch, plain;
  std::vector<std::vector<TokenId>> states, thoughts;
  for (int b = 0; b < 3; ++b) {
    auto req = RandomRequest(rng, 4 + 3 * b, 3);
    plain.push_back(req);
    const auto state = std::vector<TokenId>(req.prompt.begin(), req.prompt.end() - 2);
    states.push_back(state);
    thoughts.push_back(std::vector<TokenId>(req.prompt.end() - 2, req.prompt.end()));
    // b = 2 scores nothing: a row without a span in a batch with spans.
    if (b < 2) {
      req.scored_begin = static_cast<int64_t>(state.size());
      req.scored_end = static_cast<int64_t>(req.prompt.size()) - (b == 1 ? 1 : 0);
    }
    batch.push_back(req);
  }
  auto out = Readout(m, batch);
  auto ref = Readout(m, plain);
  EXPECT_LT((out.log_p - ref.log_p).masked_fill(out.item_mask.logical_not(), 0).abs().max().item<double>(),
            1e-5);
  for (int b = 0; b < 3; ++b) {
    const auto& req = batch[b];
    const int64_t n = req.scored_end - req.scored_begin;
    if (n == 0) {
      EXPECT_EQ(out.span_logp[b].item<double>(), 0.0);
      EXPECT_NEAR(out.value[b].item<double>(), ref.value[b].item<double>(), 1e-6);
      continue;
    }
    std::vector<TokenId> z(req.prompt.begin() + req.scored_begin, req.prompt.begin() + req.scored_end);
    torch::NoGradGuard ng;
    const double expect = NaiveRealisationLogProbs(m, states[b], z).sum().item<double>();
    EXPECT_NEAR(out.span_logp[b].item<double>(), expect, 1e-4 * std::max(1.0, std::abs(expect))) << b;
    EXPECT_LT(out.span_logp[b].item<double>(), -0.5);  // sharp weights: a real number, not 0
    EXPECT_NEAR(out.value[b].item<double>(), m->Value(PlainHidden(m, states[b])[-1]).item<double>(), 1e-5);
  }
  EXPECT_EQ(out.cost.logit_rows - ref.cost.logit_rows, 2 + 1);
  EXPECT_EQ(out.cost.tokens, ref.cost.tokens);

  // Gradient of span_logp[0] = gradient of the teacher-forced log-likelihood.
  const auto packed = Gradients(m, [&] { return Readout(m, {batch[0]}).span_logp[0]; });
  const auto naive =
      Gradients(m, [&] { return NaiveRealisationLogProbs(m, states[0], thoughts[0]).sum(); });
  EXPECT_LT(MaxGradientDiff(packed, naive), 1e-4);

  for (auto [b0, b1] : {std::pair<int64_t, int64_t>{0, 2}, {3, 2}, {1, 99}}) {
    auto bad = batch[0];
    bad.scored_begin = b0, bad.scored_end = b1;
    EXPECT_THROW(Readout(m, {bad}), ConfigError) << b0 << " " << b1;
  }
}

TEST(Readout, ScoredSpanEqualsPlainTeacherForcedScoring) {
  ExpectScoredSpanEqualsPlainTeacherForcedScoring("qwen3");
  // The span is part of the prompt chain; the tries continue from its end state.
  ExpectScoredSpanEqualsPlainTeacherForcedScoring("qwen3_5_text");
}

void ExpectGradientEqualsNaiveGradient(const std::string& family) {
  SCOPED_TRACE(family);
  TransformerLM m = RandomModel(21, family);
  ReadoutRequest req;
  req.prompt = {8, 1, 40, 22};
  req.realisations = {{{1}, {2, 3}}, {{4}}, {{2, 5}}};
  ReadoutOptions opt;
  opt.normalisation = Normalisation::kOther;
  const auto packed = Gradients(m, [&] { return Readout(m, {req}, opt).log_p[0][0]; });
  const auto naive = Gradients(m, [&] {
    auto a = NaiveRealisationLogProbs(m, req.prompt, {1}).sum();
    auto b = NaiveRealisationLogProbs(m, req.prompt, {2, 3}).sum();
    return torch::logsumexp(torch::stack({a, b}), 0);
  });
  const double max_diff = MaxGradientDiff(packed, naive);
  std::printf("gradient packed vs naive (%s): max |diff| = %.3g\n", family.c_str(), max_diff);
  EXPECT_LT(max_diff, 1e-4);
}

TEST(Readout, GradientEqualsNaiveGradient) {
  ExpectGradientEqualsNaiveGradient("qwen3");
  // Through the tree form of the delta rule (ancestor mask, path decay).
  ExpectGradientEqualsNaiveGradient("qwen3_5_text");
}

// Rows whose prompts share a prefix (the instructions of one env): computing
// it once gives the same probabilities, values and gradients, and counts less work.
void ExpectSharedPrefixChangesNothingButTheCost(const std::string& family) {
  SCOPED_TRACE(family);
  TransformerLM m = RandomModel(5, family);
  Rng rng(11);
  const auto common = RandomTokens(rng, 20, 0, kVocab - 2);
  std::vector<ReadoutRequest> batch;
  for (int b = 0; b < 4; ++b) {
    auto req = RandomRequest(rng, 3 + 2 * b, 3);
    req.prompt.insert(req.prompt.begin(), common.begin(), common.end());
    batch.push_back(req);
  }
  ReadoutOptions shared, plain;
  shared.afterstate_values = plain.afterstate_values = true;
  shared.share_prefix = true;
  EXPECT_FALSE(plain.share_prefix);  // opt-in
  auto grads = [&](const ReadoutOptions& o, ReadoutBatch* out) {
    return Gradients(m, [&] {
      *out = Readout(m, batch, o);
      return out->log_p.masked_fill(out->item_mask.logical_not(), 0).sum() + out->value.sum() +
             out->afterstate_value.masked_fill(out->item_mask.logical_not(), 0).sum();
    });
  };
  ReadoutBatch a, b;
  auto ga = grads(shared, &a), gb = grads(plain, &b);
  const auto valid = a.item_mask;
  EXPECT_TRUE(torch::equal(valid, b.item_mask));
  EXPECT_LT((a.log_p - b.log_p).masked_fill(valid.logical_not(), 0).abs().max().item<double>(), 1e-4);
  EXPECT_LT((a.value - b.value).abs().max().item<double>(), 1e-5);
  double gmax = 0, gscale = 0;
  for (size_t i = 0; i < ga.size(); ++i) {
    gmax = std::max(gmax, (ga[i] - gb[i]).abs().max().item<double>());
    gscale = std::max(gscale, gb[i].abs().max().item<double>());
  }
  EXPECT_LT(gmax, 1e-4 * std::max(1.0, gscale)) << "gradient scale " << gscale;
  EXPECT_EQ(a.cost.calls, 1);
  EXPECT_EQ(b.cost.tokens - a.cost.tokens, 3 * 20);
  EXPECT_EQ(b.cost.attention_pairs - a.cost.attention_pairs, 3 * CausalPairs(20));
  EXPECT_EQ(a.cost.logit_rows, b.cost.logit_rows);
}

TEST(Readout, SharedPromptPrefixChangesNothingButTheCost) {
  ExpectSharedPrefixChangesNothingButTheCost("qwen3");
  // The continuation reads the prefix's key positions from its KV (LayerKV::pos).
  ExpectSharedPrefixChangesNothingButTheCost("mistral");
  ExpectSharedPrefixChangesNothingButTheCost("gemma3_text");
  // The continuation starts from the prefix's recurrent state (LayerKV::conv, state).
  ExpectSharedPrefixChangesNothingButTheCost("qwen3_5_text");
}

TEST(Readout, GradientsAreFiniteWithPaddedItemsAndRows) {
  TransformerLM m = RandomModel(22);
  Rng rng(3);
  std::vector<ReadoutRequest> batch = {RandomRequest(rng, 4, 3), RandomRequest(rng, 11, 2)};
  batch[0].realisations.resize(2);  // fewer items than row 1: padded items
  batch[0].afterstates.resize(2);
  ReadoutOptions opt;
  opt.afterstate_values = true;
  auto out = Readout(m, batch, opt);
  auto valid = torch::where(out.item_mask, out.log_p, 0.0);
  (valid.sum() + out.value.sum() + out.afterstate_value.sum() + out.menu_entropy.sum() +
   out.log_p_other.sum())
      .backward();
  for (auto& p : m->named_parameters()) {
    if (p.value().grad().defined()) {
      EXPECT_TRUE(torch::isfinite(p.value().grad()).all().item<bool>()) << p.key();
    }
  }
  // Menu normalisation: gradient of log p(a0|s) equals the naive one.
  ReadoutRequest req;
  req.prompt = {8, 1, 40, 22};
  req.realisations = {{{1}, {2, 3}}, {{4}}};
  const auto packed = Gradients(m, [&] { return Readout(m, {req}, {}).log_p[0][0]; });
  const auto naive = Gradients(m, [&] {
    auto a = torch::logsumexp(torch::stack({NaiveRealisationLogProbs(m, req.prompt, {1}).sum(),
                                            NaiveRealisationLogProbs(m, req.prompt, {2, 3}).sum()}),
                              0);
    auto b = NaiveRealisationLogProbs(m, req.prompt, {4}).sum();
    return a - torch::logsumexp(torch::stack({a, b}), 0);
  });
  EXPECT_LT(MaxGradientDiff(packed, naive), 1e-4);
}

TEST(Readout, RejectsAmbiguousOrInvalidMenus) {
  torch::NoGradGuard ng;
  TransformerLM m = RandomModel(1);
  ReadoutRequest req;
  req.prompt = {1, 2, 3};
  req.realisations = {{{4}}, {{4, 5}}};  // prefix, no end token
  try {
    Readout(m, {req}, {});
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("[4]"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[4, 5]"), std::string::npos) << e.what();
  }
  req.end_token = kEnd;
  EXPECT_NO_THROW(Readout(m, {req}, {}));
  req.realisations = {{{4}}, {{6}, {4}}};  // identical realisations across items
  EXPECT_THROW(Readout(m, {req}, {}), ConfigError);
  req.realisations = {{{4}}, {{kVocab}}};
  EXPECT_THROW(Readout(m, {req}, {}), ConfigError);
  req.realisations = {{{4}}, {}};
  EXPECT_THROW(Readout(m, {req}, {}), ConfigError);
  req.realisations = {{{4}, {4, kEnd}}};  // end token collides
  EXPECT_THROW(Readout(m, {req}, {}), ConfigError);
  req.realisations = {{{4}}};
  ReadoutOptions after;
  after.afterstate_values = true;  // no branches given
  EXPECT_THROW(Readout(m, {req}, after), ConfigError);
  req.prompt.clear();
  EXPECT_THROW(Readout(m, {req}, {}), ConfigError);
}

TEST(Readout, ContentFreePriorIsTheLabelRowRenormalised) {
  torch::NoGradGuard ng;
  TransformerLM m = RandomModel(4);
  std::vector<TokenId> prompt = {5, 6, 7}, labels = {10, 11, 12, 13};
  auto prior = ContentFreePrior(m, prompt, labels);
  auto row = torch::log_softmax(m->Logits(PlainHidden(m, prompt)[-1]), -1);
  auto sel = row.index_select(0, torch::tensor({10, 11, 12, 13}, torch::kInt64));
  auto expect = sel - torch::logsumexp(sel, 0);
  EXPECT_LT((prior - expect).abs().max().item<double>(), 1e-5);
}

TEST(LabelPositionStats, HandComputed) {
  LabelPositionStats s;
  s.AddMenu({0.5, 0.3, 0.2});
  s.AddMenu({0.9, 0.1});
  auto mass = s.MassByPosition();
  ASSERT_EQ(mass.size(), 3u);
  EXPECT_DOUBLE_EQ(mass[0], 0.7);
  EXPECT_DOUBLE_EQ(mass[1], 0.2);
  EXPECT_DOUBLE_EQ(mass[2], 0.2);
  auto lift = s.LiftByPosition();
  EXPECT_DOUBLE_EQ(lift[0], (1.5 + 1.8) / 2);
  EXPECT_DOUBLE_EQ(lift[2], 0.6);
  // Forward prefers item 0 (position 0). Reversed listing [item2, item1, item0]:
  // position 0 wins again -> item 2: a flip.
  s.AddReversedPair({0.6, 0.3, 0.1}, {0.5, 0.2, 0.3});
  // Consistent: item 1 wins in both orders.
  s.AddReversedPair({0.2, 0.7, 0.1}, {0.1, 0.7, 0.2});
  // Tie between items 0 and 1 in both orders: no flip.
  s.AddReversedPair({0.4, 0.4, 0.2}, {0.2, 0.4, 0.4});
  EXPECT_EQ(s.pairs(), 3);
  EXPECT_EQ(s.menus(), 8);
  EXPECT_DOUBLE_EQ(s.FlipRate(), 1.0 / 3.0);
  EXPECT_THROW(s.AddReversedPair({0.5, 0.5}, {1.0}), ConfigError);
}

}  // namespace
}  // namespace rlid::policy

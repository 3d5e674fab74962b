// Decision-plane label readout: one forward pass over a batch of prompts reads
// log p(a|s) for every menu item by packing all realisations of all items as a token
// trie after the prompt (tree attention mask), and optionally the value of each
// afterstate branch. Callers build prompts with the renderer; this file works on
// token ids only. Also: the naive per-realisation reference scorer and label-bias
// diagnostics (content-free prior, per-position mass, order flip rate).
#pragma once

#include <torch/torch.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/modes.h"
#include "policy/model/model.h"
#include "policy/tokenizer/types.h"

namespace rlid::policy {

struct ReadoutRequest {
  std::vector<TokenId> prompt;  // ends with the answer prefix; non-empty
  // Per menu item k its realisations as token sequences; realisations[k][0] is the
  // label (its first token counts towards candidate_mass). Every item has >= 1
  // non-empty realisation.
  std::vector<std::vector<std::vector<TokenId>>> realisations;
  // Optional, one branch per item (empty vector: no branches). Read only when
  // ReadoutOptions::afterstate_values is set.
  std::vector<std::vector<TokenId>> afterstates;
  // Appended to a realisation that is a token-prefix of another realisation of the menu
  // so that the events "the answer starts with realisation r" are disjoint; -1 means
  // no end token (a prefix collision is then a ConfigError).
  TokenId end_token = -1;
  // Optional scored span [scored_begin, scored_end) of the prompt (a sampled
  // scratchpad z between the state and the answer prefix): the same pass reads
  // log π(z|s) = Σ_t log π(prompt[t] | prompt[<t]) into ReadoutBatch::span_logp,
  // and the value head is read at the token before the span (the state s,
  // before the thought). Needs 1 <= scored_begin <= scored_end <= prompt size;
  // scored_begin = scored_end = 0 (the default) scores nothing.
  int64_t scored_begin = 0, scored_end = 0;
};

// What p(a|s) is normalised over ([readout] normalisation).
// kMenu ("menu"): p(a|s) renormalised over the menu (Σ_a p = 1).
// kOther ("other"): unnormalised Σ_r π(r|s); Σ_a p + p_other = 1.
enum class Normalisation { kMenu, kOther };
constexpr auto Spellings(Normalisation) {
  return ModeNames<Normalisation>({{Normalisation::kMenu, "menu"}, {Normalisation::kOther, "other"}});
}

struct ReadoutOptions {
  Normalisation normalisation = Normalisation::kMenu;
  bool afterstate_values = false;
  // Compute the prompts' common prefix (e.g. the shared instructions or system
  // turn) once for the batch and let every row attend to its keys/values: the
  // same numbers up to float rounding, less work (counted in cost). Used when
  // >= 8 tokens are shared. Off by default: the rounding differs from the
  // unshared pass, so runs would not reproduce earlier ones bit for bit.
  bool share_prefix = false;
};

// B states, K = max items, R = max realisations per item.
struct ReadoutBatch {
  torch::Tensor log_p;             // [B,K] log p(a|s); padding = -inf
  torch::Tensor log_p_other;       // [B] log(1 - Σ_a Σ_r π(r|s)), both modes
  torch::Tensor item_mask;         // [B,K] bool
  torch::Tensor realisation_logp;  // [B,K,R] log π(r|s) incl. an appended end token;
                                   // a duplicate realisation repeats its value (counted once
                                   // in log_p); padding = -inf
  torch::Tensor candidate_mass;    // [B] Σ over distinct label tokens of softmax(row)
  torch::Tensor row_entropy;       // [B] entropy of the full-vocabulary answer row
  torch::Tensor menu_entropy;      // [B] entropy of the menu-normalised p(·|s)
  torch::Tensor value;             // [B] value head at the last prompt token (at the token
                                   // before the scored span when a request has one)
  torch::Tensor span_logp;         // [B] log π(scored span | what precedes it); 0 without a span
  torch::Tensor afterstate_value;  // [B,K] value at each branch's last token (0 padding);
                                   // undefined unless afterstate_values
  ForwardCost cost;                // what the model counted for this call (one pass): packed
                                   // (unpadded) tokens, mask pairs, logit/value rows (a scored
                                   // span adds one logit row per token)
  Normalisation normalisation{};  // ReadoutOptions::normalisation it was read with
};

// The distribution a decision-plane policy samples from and trains on (the
// PPO ratio, KL and entropy use exactly this one): normalisation "menu" ->
// log_p [B,K] over the menu items; "other" -> [B,K+1], column K being the
// off-menu outcome log(1 - Σ_a p(a|s)). mask [B,K(+1)] marks real outcomes;
// padding holds -inf. Each row sums to 1.
struct DecisionLogProbs {
  torch::Tensor log_p, mask;
};
DecisionLogProbs DecisionDistribution(const ReadoutBatch& rb);

// One forward pass over the whole batch. Gradients flow through log_p,
// log_p_other, realisation_logp, span_logp, value and afterstate_value when grad
// mode is on.
// Throws ConfigError for empty prompts/menus/realisations, token ids outside the
// vocabulary, identical realisations of different items, prefix collisions without
// an end token, or a scored span outside the prompt.
ReadoutBatch Readout(TransformerLM& model, const std::vector<ReadoutRequest>& batch,
                     const ReadoutOptions& options = {});

// Reference scorer: one plain forward of prompt ++ realisation. Returns [len(realisation)]
// float32 per-token log-probs log π(w_t | prompt, w_<t); their sum is log π(w|s).
torch::Tensor NaiveRealisationLogProbs(TransformerLM& model, const std::vector<TokenId>& prompt,
                                       const std::vector<TokenId>& realisation);

// Label distribution on a content-free prompt (the prompt with the observation
// and menu content removed, ending with the answer prefix): log prior [K] over the
// distinct single-token labels, normalised over them. Calibrate with
// log p(a|s) - log prior(a) (renormalised).
torch::Tensor ContentFreePrior(TransformerLM& model, const std::vector<TokenId>& prompt_without_content,
                               const std::vector<TokenId>& label_tokens);

// Label-position bias diagnostics. Probabilities are given in display order
// (position i = the i-th listed label).
class LabelPositionStats {
 public:
  // One menu's distribution (sums to ~1; K >= 1).
  void AddMenu(const std::vector<double>& probs);
  // The same menu shown forward and in reversed order: reversed[i] is the
  // probability of the item shown at position i of the reversed listing, i.e. of
  // forward item K-1-i. Both listings also count in the position statistics.
  // A flip: the most probable item (ties -> lowest forward index) differs.
  void AddReversedPair(const std::vector<double>& forward, const std::vector<double>& reversed);

  // Mean probability at position i over the menus that have a position i.
  std::vector<double> MassByPosition() const;
  // Mean of K * p_i at position i (1 = no positional preference).
  std::vector<double> LiftByPosition() const;
  // Fraction of reversed pairs whose argmax item changed (0 if none added).
  double FlipRate() const;
  int64_t menus() const { return menus_; }
  int64_t pairs() const { return pairs_; }

 private:
  std::vector<double> mass_sum_, lift_sum_;
  std::vector<int64_t> count_;
  int64_t menus_ = 0, pairs_ = 0, flips_ = 0;
};

}  // namespace rlid::policy

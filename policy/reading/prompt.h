// PromptRenderer: (task instructions, observation, memory items, menu) ->
// prompt text and tokens. Both planes get the *same* prompt (interface
// matching): it ends with the answer prefix ("Action:"); the decision plane
// reads the next token's distribution over the menu labels, the token plane
// samples free text from the same position. Options hide afterstates or
// memory so their effect can be measured.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/config.h"
#include "envs/api/menu.h"
#include "policy/tokenizer/tokenizer.h"

namespace rlid::jinja {
class Template;
}

namespace rlid::policy {

enum class Plane { kDecision, kToken };
const char* PlaneName(Plane p);

// The order of a step's menu ([prompt] label_order): a seeded per-step
// permutation (shuffle) or the env's order (fixed).
enum class LabelOrder { kShuffle, kFixed };
constexpr auto Spellings(LabelOrder) {
  return ModeNames<LabelOrder>({{LabelOrder::kShuffle, "shuffle"}, {LabelOrder::kFixed, "fixed"}});
}
// [prompt] chat_template: the model's own template when its tokenizer has one
// (auto), or plain text (none).
enum class ChatTemplateUse { kAuto, kNone };
constexpr auto Spellings(ChatTemplateUse) {
  return ModeNames<ChatTemplateUse>({{ChatTemplateUse::kAuto, "auto"}, {ChatTemplateUse::kNone, "none"}});
}

struct PromptConfig {
  bool show_instructions = true;          // the env's rules at the top
  bool show_afterstates = true;           // "A) go north -> <afterstate>"
  bool show_memory = true;                // retrieved memory items (when memory is enabled)
  std::string answer_prefix = "Action:";  // the label is the next token
  LabelOrder label_order = LabelOrder::kShuffle;
  // Both planes: ask for brief reasoning before "<answer_prefix> <label>"; the
  // prompt ends "Reasoning:". The token plane samples the reasoning and the
  // answer as free text; the decision plane samples a scratchpad z (one line,
  // at most max_think_tokens) and then reads the menu in one pass after
  // "z\n<answer_prefix>" (think-then-decide, docs/reasoning.md).
  bool reasoning = false;
  int max_think_tokens = 48;
  // "auto": wrap the prompt in the model's own chat template when its tokenizer
  // has one (instructions as the system turn, the rest as the user turn, the
  // assistant turn opened and started with the answer prefix); "none": plain text.
  ChatTemplateUse chat_template = ChatTemplateUse::kAuto;
  bool enable_thinking = false;  // chat templates that read it (Qwen3): allow a <think> block
  // Templates that print a date (Llama 3.x) get this one, so prompts do not change by day.
  std::string date_string = "26 Jul 2024";
  // Multi-turn prompts: the episode's last N observations and the actions
  // taken there, oldest first (chat templates: as user/assistant turns), the
  // same in both planes. 0 = only the current observation.
  int history_steps = 0;
  void Load(ConfigNode n);
};

// One earlier step of the episode as a prompt shows it: what was observed and
// the command of the action taken there ("" when the answer named no action).
struct HistoryTurn {
  std::string observation;
  std::string action;
};

// The prompt in its parts: the system turn (instructions), the user turn
// (memory, observation, menu and any request), and how the answer starts.
struct PromptParts {
  std::string system;        // "" when instructions are hidden or empty
  std::vector<HistoryTurn> history;  // earlier steps, oldest first (at most history_steps)
  std::string user;
  std::string answer_start;  // the answer prefix ("Action:") or "Reasoning:"
};
PromptParts RenderPromptParts(const PromptConfig& cfg, const std::string& instructions,
                              const std::string& observation, const std::vector<std::string>& memory,
                              const envs::Menu& menu, Plane plane,
                              const std::vector<HistoryTurn>& history = {});

// The prompt text alone (no tokenizer): also used to build tokenizer corpora
// that contain exactly what the model will read. History comes first, one
// "<observation>\n=> <action>" entry per earlier step.
std::string RenderPromptText(const PromptConfig& cfg, const std::string& instructions,
                             const std::string& observation, const std::vector<std::string>& memory,
                             const envs::Menu& menu, Plane plane,
                             const std::vector<HistoryTurn>& history = {});

struct RenderedPrompt {
  std::string text;
  std::vector<TokenId> tokens;
  uint64_t hash = 0;  // of the text
};

class PromptRenderer {
 public:
  // Checks that every label A..Z is one token after the answer prefix
  // (ConfigError otherwise, listing prefixes that would work), and parses the
  // tokenizer's chat template when cfg.chat_template = "auto" and it has one.
  PromptRenderer(PromptConfig cfg, Tokenizer tokenizer);
  ~PromptRenderer();
  bool uses_chat_template() const { return chat_ != nullptr; }

  // `history`: the episode's earlier steps, oldest first; the last
  // config().history_steps of them are shown.
  RenderedPrompt Render(const std::string& instructions, const std::string& observation,
                        const std::vector<std::string>& memory, const envs::Menu& menu,
                        Plane plane, const std::vector<HistoryTurn>& history = {}) const;
  // Readout realisations per menu item: {label token} first, then (all = true)
  // " " + each of MenuItem::realisations.
  std::vector<std::vector<std::vector<TokenId>>> Realisations(const envs::Menu& menu,
                                                              bool all) const;
  // Afterstate branches for the afterstate critic: " <command> -> <afterstate>".
  std::vector<std::vector<TokenId>> AfterstateBranches(const envs::Menu& menu) const;
  // The token-plane target answer for an item, then end-of-text: " <label>",
  // or (command = true) " <canonical command>"; with a thought (reasoning
  // prompts), ThoughtTokens(thought) ++ "<answer_prefix>" before it.
  std::vector<TokenId> AnswerTokens(const envs::MenuItem& item, bool command = false,
                                    const std::string& thought = "") const;
  // A scratchpad line as the model writes it after "Reasoning:": " <thought>\n".
  std::vector<TokenId> ThoughtTokens(const std::string& thought) const;
  // What the decision plane appends to a sampled scratchpad before the
  // readout: "<answer_prefix>" after a scratchpad that ended its line (its
  // decoded text holds a newline), "\n<answer_prefix>" after one the token
  // limit (or end-of-text) cut.
  std::vector<TokenId> AfterThought(const std::string& thought_text) const;
  // "<answer_prefix>" alone: what follows a scratchpad written through ThoughtTokens
  // (which ends its line).
  std::vector<TokenId> AnswerPrefixTokens() const;
  TokenId LabelToken(const std::string& label) const;
  // Encodes with a cache (menu realisations repeat across steps). Thread-safe.
  std::vector<TokenId> EncodeCached(const std::string& text) const;

  const PromptConfig& config() const { return cfg_; }
  const Tokenizer& tokenizer() const { return tok_; }

 private:
  PromptConfig cfg_;
  Tokenizer tok_;
  std::unique_ptr<const jinja::Template> chat_;  // null: plain prompts
  std::vector<TokenId> label_tokens_;  // A..Z
  mutable std::mutex mu_;
  mutable std::unordered_map<std::string, std::vector<TokenId>> cache_;
};

}  // namespace rlid::policy

#include "policy/prompt.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/hash.h"

namespace rlid::policy {

const char* PlaneName(Plane p) { return p == Plane::kDecision ? "decision" : "token"; }

void PromptConfig::Load(ConfigNode n) {
  n.Get("show_instructions", show_instructions, "show the env's rules at the top of the prompt");
  n.Get("show_afterstates", show_afterstates, "show each action's afterstate in the menu");
  n.Get("show_memory", show_memory, "show retrieved memory items (when [memory] is enabled)");
  n.Get("answer_prefix", answer_prefix, "text after which the label is the next token");
  n.GetEnum("label_order", label_order, {"shuffle", "fixed"},
            "menu order per step: seeded permutation or the env's order");
  n.Get("reasoning", reasoning, "token plane: ask for brief reasoning before the action");
  if (answer_prefix.empty() || answer_prefix.back() == ' ')
    throw ConfigError(fmt::format("{}: 'prompt.answer_prefix' must be non-empty and not end with "
                                  "a space, found '{}'",
                                  n.Where("answer_prefix"), answer_prefix),
                      "the label token carries its own leading space (' B')");
}

PromptRenderer::PromptRenderer(PromptConfig cfg, Tokenizer tokenizer)
    : cfg_(std::move(cfg)), tok_(std::move(tokenizer)) {
  if (cfg_.answer_prefix.empty() || cfg_.answer_prefix.back() == ' ')
    throw ConfigError(
        fmt::format("prompt.answer_prefix '{}' must be non-empty and not end with a space",
                    cfg_.answer_prefix),
        "the label token carries its own leading space (' B')");
  const auto prefix = tok_.Encode(cfg_.answer_prefix);
  for (int i = 0; i < envs::kMaxMenuSize; ++i) {
    std::string label = envs::LabelFor(i);
    TokenId id = tok_.RequireLabelToken(label);
    auto joined = tok_.Encode(cfg_.answer_prefix + " " + label);
    auto expect = prefix;
    expect.push_back(id);
    if (joined != expect)
      throw ConfigError(
          fmt::format("label '{}' is not one token after the answer prefix '{}'", label,
                      cfg_.answer_prefix),
          "use a tokenizer trained by `rlid tokenizer train` or an answer prefix ending in ':'");
    label_tokens_.push_back(id);
  }
}

TokenId PromptRenderer::LabelToken(const std::string& label) const {
  if (label.size() != 1 || label[0] < 'A' || label[0] > 'Z')
    throw ConfigError(fmt::format("label '{}' is not a capital letter", label));
  return label_tokens_[label[0] - 'A'];
}

std::vector<TokenId> PromptRenderer::EncodeCached(const std::string& text) const {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(text);
    if (it != cache_.end()) return it->second;
  }
  auto ids = tok_.Encode(text, /*allow_special=*/false);
  std::lock_guard<std::mutex> lock(mu_);
  if (cache_.size() > 200000) cache_.clear();  // bound memory on very long runs
  cache_.emplace(text, ids);
  return ids;
}

std::string RenderPromptText(const PromptConfig& cfg, const std::string& instructions,
                             const std::string& observation, const std::vector<std::string>& memory,
                             const envs::Menu& menu, Plane plane) {
  std::string text;
  if (cfg.show_instructions && !instructions.empty()) text += instructions + "\n";
  if (cfg.show_memory && !memory.empty()) {
    text += "Memory:\n";
    for (const auto& m : memory) text += "- " + m + "\n";
  }
  text += observation + "\nOptions:\n";
  for (const auto& it : menu.items) {
    text += it.label + ") " + it.command;
    if (cfg.show_afterstates && !it.afterstate.empty()) text += " -> " + it.afterstate;
    text += "\n";
  }
  if (plane == Plane::kToken && cfg.reasoning)
    text += "Think briefly, then end with '" + cfg.answer_prefix + " <letter>'.\nReasoning:";
  else
    text += cfg.answer_prefix;
  return text;
}

RenderedPrompt PromptRenderer::Render(const std::string& instructions,
                                      const std::string& observation,
                                      const std::vector<std::string>& memory,
                                      const envs::Menu& menu, Plane plane) const {
  RenderedPrompt out;
  out.text = RenderPromptText(cfg_, instructions, observation, memory, menu, plane);
  out.tokens = tok_.Encode(out.text, /*allow_special=*/false);
  out.hash = HashBytes(out.text);
  return out;
}

std::vector<std::vector<std::vector<TokenId>>> PromptRenderer::Realisations(const envs::Menu& menu,
                                                                            bool all) const {
  std::vector<std::vector<std::vector<TokenId>>> out;
  out.reserve(menu.size());
  for (const auto& it : menu.items) {
    std::vector<std::vector<TokenId>> words = {{LabelToken(it.label)}};
    if (all)
      for (const auto& r : it.realisations) words.push_back(EncodeCached(" " + r));
    out.push_back(std::move(words));
  }
  return out;
}

std::vector<std::vector<TokenId>> PromptRenderer::AfterstateBranches(const envs::Menu& menu) const {
  std::vector<std::vector<TokenId>> out;
  for (const auto& it : menu.items)
    out.push_back(EncodeCached(" " + it.command + " -> " + it.afterstate));
  return out;
}

std::vector<TokenId> PromptRenderer::AnswerTokens(const envs::MenuItem& item, bool command) const {
  std::vector<TokenId> out =
      command ? EncodeCached(" " + item.command) : std::vector<TokenId>{LabelToken(item.label)};
  out.push_back(tok_.eos_id());
  return out;
}

}  // namespace rlid::policy

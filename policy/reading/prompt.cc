#include "policy/reading/prompt.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/hash.h"
#include "jinja/jinja.h"

namespace rlid::policy {

const char* PlaneName(Plane p) { return p == Plane::kDecision ? "decision" : "token"; }

void PromptConfig::Load(ConfigNode n) {
  n.Get("show_instructions", show_instructions, "show the env's rules at the top of the prompt");
  n.Get("show_afterstates", show_afterstates, "show each action's afterstate in the menu");
  n.Get("show_memory", show_memory, "show retrieved memory items (when [memory] is enabled)");
  n.Get("answer_prefix", answer_prefix, "text after which the label is the next token");
  n.GetEnum("label_order", label_order,
            "menu order per step: seeded permutation or the env's order");
  n.Get("reasoning", reasoning,
        "both planes reason before the action (token: free text; decision: a scratchpad line, "
        "then the menu readout)");
  n.Get("max_think_tokens", max_think_tokens,
        "decision plane with reasoning: the scratchpad's token limit", IntRange::AtLeast(1));
  n.GetEnum("chat_template", chat_template,
            "wrap prompts in the model's chat template when it has one (auto) or not (none)");
  n.Get("enable_thinking", enable_thinking, "chat templates that read it (Qwen3): allow <think>");
  n.Get("date_string", date_string, "the date templates that print one (Llama 3.x) see");
  n.Get("history_steps", history_steps,
        "show the episode's last N observations and actions taken, oldest first (chat "
        "templates: as turns); 0 = only the current observation",
        IntRange::Closed(0, 64));
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
  // The labels that are not one token right after `prefix` (with the token ids).
  auto failing = [&](const std::string& prefix) {
    std::vector<std::string> bad;
    const auto prefix_ids = tok_.Encode(prefix);
    for (int i = 0; i < envs::kMaxMenuSize; ++i) {
      const std::string label = envs::LabelFor(i);
      auto id = tok_.SingleTokenId(" " + label);
      auto expect = prefix_ids;
      if (id) expect.push_back(*id);
      if (!id || tok_.Encode(prefix + " " + label) != expect) bad.push_back(label);
    }
    return bad;
  };
  if (auto bad = failing(cfg_.answer_prefix); !bad.empty()) {
    std::vector<std::string> work;
    for (const char* p : {"Action:", "Answer:", "Choice:", "Option:", "Move:", "A:"})
      if (p != cfg_.answer_prefix && failing(p).empty()) work.push_back(fmt::format("'{}'", p));
    throw ConfigError(
        fmt::format("with tokenizer '{}', label(s) {} are not one token after the answer prefix "
                    "'{}' (the readout needs \"<prefix> <label>\" to end in the label's own token)",
                    tok_.source(), fmt::join(bad, ", "), cfg_.answer_prefix),
        work.empty() ? std::string("use a tokenizer trained by `rlid tokenizer train`")
                     : fmt::format("set prompt.answer_prefix to one of {} (all 26 labels are single "
                                   "tokens after it with this tokenizer)",
                                   fmt::join(work, ", ")));
  }
  for (int i = 0; i < envs::kMaxMenuSize; ++i) label_tokens_.push_back(tok_.RequireLabelToken(envs::LabelFor(i)));
  if (cfg_.chat_template == ChatTemplateUse::kAuto && !tok_.config().chat_template.empty()) {
    try {
      chat_ = std::make_unique<const jinja::Template>(jinja::Template::Parse(
          tok_.config().chat_template, fmt::format("tokenizer '{}'", tok_.source())));
    } catch (const ConfigError& e) {
      throw ConfigError(fmt::format("the chat template of tokenizer '{}' cannot be used: {}",
                                    tok_.source(), e.what()),
                        "set prompt.chat_template = \"none\" to use plain prompts");
    }
  }
}

PromptRenderer::~PromptRenderer() = default;

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

PromptParts RenderPromptParts(const PromptConfig& cfg, const std::string& instructions,
                              const std::string& observation, const std::vector<std::string>& memory,
                              const envs::Menu& menu, Plane plane,
                              const std::vector<HistoryTurn>& history) {
  PromptParts p;
  if (cfg.show_instructions) p.system = instructions;
  const size_t shown = std::min(history.size(), static_cast<size_t>(cfg.history_steps));
  p.history.assign(history.end() - static_cast<std::ptrdiff_t>(shown), history.end());
  std::string& text = p.user;
  if (cfg.show_memory && !memory.empty()) {
    text += "Memory:\n";
    for (const auto& m : memory) text += "- " + m + "\n";
  }
  // A menu that carries no afterstate at all (an external env without them)
  // says so, so the agent does not read "no arrow" as "nothing happens".
  const bool none_known =
      cfg.show_afterstates && !menu.items.empty() &&
      std::all_of(menu.items.begin(), menu.items.end(),
                  [](const envs::MenuItem& it) { return it.afterstate.empty(); });
  text += observation + (none_known ? "\nOptions (where each leads is not shown):\n" : "\nOptions:\n");
  for (const auto& it : menu.items) {
    text += it.label + ") " + it.command;
    if (cfg.show_afterstates && !it.afterstate.empty()) text += " -> " + it.afterstate;
    text += "\n";
  }
  (void)plane;  // both planes see the same prompt (interface matching)
  if (cfg.reasoning) {
    text += "Think briefly, then end with '" + cfg.answer_prefix + " <letter>'.\n";
    p.answer_start = "Reasoning:";
  } else {
    p.answer_start = cfg.answer_prefix;
  }
  return p;
}

std::string RenderPromptText(const PromptConfig& cfg, const std::string& instructions,
                             const std::string& observation, const std::vector<std::string>& memory,
                             const envs::Menu& menu, Plane plane,
                             const std::vector<HistoryTurn>& history) {
  const PromptParts p = RenderPromptParts(cfg, instructions, observation, memory, menu, plane, history);
  std::string earlier;
  if (!p.history.empty()) {
    earlier = "Earlier steps:\n";
    for (const auto& h : p.history)
      earlier += h.observation + "\n=> " + (h.action.empty() ? "(no valid action)" : h.action) + "\n";
    earlier += "Now:\n";
  }
  return (p.system.empty() ? "" : p.system + "\n") + earlier + p.user + p.answer_start;
}

RenderedPrompt PromptRenderer::Render(const std::string& instructions,
                                      const std::string& observation,
                                      const std::vector<std::string>& memory,
                                      const envs::Menu& menu, Plane plane,
                                      const std::vector<HistoryTurn>& history) const {
  RenderedPrompt out;
  if (chat_) {
    const PromptParts p = RenderPromptParts(cfg_, instructions, observation, memory, menu, plane, history);
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    if (!p.system.empty()) messages.push_back({{"role", "system"}, {"content", p.system}});
    // Earlier steps as turns: what the agent saw, then what it did.
    for (const auto& h : p.history) {
      messages.push_back({{"role", "user"}, {"content", h.observation}});
      messages.push_back({{"role", "assistant"},
                          {"content", cfg_.answer_prefix + " " +
                                          (h.action.empty() ? "(no valid action)" : h.action)}});
    }
    std::string user = p.user;
    if (!user.empty() && user.back() == '\n') user.pop_back();
    messages.push_back({{"role", "user"}, {"content", user}});
    nlohmann::ordered_json ctx = {{"messages", messages},
                                  {"add_generation_prompt", true},
                                  {"enable_thinking", cfg_.enable_thinking},
                                  {"date_string", cfg_.date_string},
                                  {"bos_token", tok_.config().bos_token},
                                  {"eos_token", tok_.config().eos_token}};
    out.text = chat_->Render(ctx) + p.answer_start;
    // As transformers' apply_chat_template: the template writes the special
    // tokens (BOS included) as text, and they encode as their ids.
    out.tokens = tok_.Encode(out.text, /*allow_special=*/true);
  } else {
    out.text = RenderPromptText(cfg_, instructions, observation, memory, menu, plane, history);
    out.tokens = tok_.Encode(out.text, /*allow_special=*/false);
    if (tok_.config().add_bos) out.tokens.insert(out.tokens.begin(), *tok_.bos_id());
  }
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

std::vector<TokenId> PromptRenderer::AnswerTokens(const envs::MenuItem& item, bool command,
                                                  const std::string& thought) const {
  std::vector<TokenId> out;
  if (!thought.empty()) {
    out = ThoughtTokens(thought);
    auto prefix = EncodeCached(cfg_.answer_prefix);
    out.insert(out.end(), prefix.begin(), prefix.end());
  }
  if (command) {
    auto words = EncodeCached(" " + item.command);
    out.insert(out.end(), words.begin(), words.end());
  } else {
    out.push_back(LabelToken(item.label));
  }
  out.push_back(tok_.eos_id());
  return out;
}

std::vector<TokenId> PromptRenderer::ThoughtTokens(const std::string& thought) const {
  return EncodeCached(" " + thought + "\n");
}

std::vector<TokenId> PromptRenderer::AfterThought(const std::string& thought_text) const {
  return thought_text.find('\n') != std::string::npos ? AnswerPrefixTokens()
                                                      : EncodeCached("\n" + cfg_.answer_prefix);
}

std::vector<TokenId> PromptRenderer::AnswerPrefixTokens() const { return EncodeCached(cfg_.answer_prefix); }

}  // namespace rlid::policy

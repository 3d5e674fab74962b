// Env text for tokenizer training (see tokenizer_corpus.h).
#include "policy/tokenizer/tokenizer_corpus.h"

#include <fmt/format.h>

#include "core/error.h"
#include "core/rng.h"
#include "envs/api/env.h"
#include "envs/api/reasoning_oracle.h"

namespace rlid::policy {

std::vector<std::string> EnvTextCorpus(const envs::Env& env, const EnvCorpusOptions& opt) {
  if (opt.episodes < 1)
    throw ConfigError(
        fmt::format("tokenizer corpus needs at least 1 episode, found {}", opt.episodes));
  std::vector<std::string> docs;
  docs.reserve(opt.episodes);
  const std::string instructions = env.Instructions();
  for (int e = 0; e < opt.episodes; ++e) {
    Rng rng = Rng::Stream(opt.seed, "tokenizer_corpus", static_cast<uint64_t>(e));
    auto state = env.NewState(envs::SplitSeed(envs::Split::kTrain, static_cast<uint64_t>(e)));
    std::string doc = instructions + "\n\n";
    while (!state->IsTerminal()) {
      doc += state->Observation() + "\n";
      const envs::Menu menu = state->CompileMenu();
      for (const auto& item : menu.items)
        doc += fmt::format("  {}) {}\n", item.label, item.command);
      for (const auto& item : menu.items) {
        for (const auto& r : item.realisations) doc += r + "\n";
        doc += item.afterstate + "\n";
      }
      // Worked reasoning, as reasoning prompts show it (envs with a ReasoningOracle).
      if (auto* worked = dynamic_cast<const envs::ReasoningOracle*>(state.get()))
        doc += "Reasoning: " + worked->OracleReasoning() + "\n";
      const auto& chosen = menu.items[rng.UniformInt(menu.size())];
      doc += "Action: " + chosen.label + "\n";
      state->Apply(chosen.action);
    }
    doc += state->Observation() + "\n";
    docs.push_back(std::move(doc));
  }
  return docs;
}

}  // namespace rlid::policy

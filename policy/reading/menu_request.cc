#include "policy/reading/menu_request.h"

#include <utility>

namespace rlid::policy {

ReadoutRequest MenuReadoutRequest(const PromptRenderer& renderer, std::vector<TokenId> prompt,
                                  const envs::Menu& menu, bool all_realisations) {
  ReadoutRequest r;
  r.prompt = std::move(prompt);
  r.realisations = renderer.Realisations(menu, all_realisations);
  r.end_token = renderer.tokenizer().eos_id();
  return r;
}

}  // namespace rlid::policy

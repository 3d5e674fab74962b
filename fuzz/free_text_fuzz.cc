// Free-text compile of every registered env: input = 8-byte seed, a step count
// and menu choices (to reach later states), then the answer text. Menu::Compile
// promises to never throw; a valid result names an item consistently and an
// invalid one says why; compiling twice gives the same result.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "envs/api/env.h"
#include "fuzz/fuzz_util.h"

namespace rlid::fuzz {
namespace {

const std::vector<std::unique_ptr<envs::Env>>& AllEnvs() {
  static const auto* envs = [] {
    auto* out = new std::vector<std::unique_ptr<envs::Env>>;
    for (const auto& name : envs::BuiltInEnvNames()) out->push_back(envs::MakeEnv(name));
    return out;
  }();
  return *envs;
}

bool Same(const envs::CompileResult& a, const envs::CompileResult& b) {
  return a.action == b.action && a.item == b.item && a.matched == b.matched &&
         a.realisation == b.realisation && a.reason == b.reason;
}

void CheckResult(const envs::Menu& menu, const envs::CompileResult& r) {
  if (r.valid()) {
    FUZZ_CHECK(r.item >= 0 && static_cast<size_t>(r.item) < menu.size());
    const envs::MenuItem& it = menu.items[r.item];
    FUZZ_CHECK(r.action == it.action);
    FUZZ_CHECK(r.reason.empty());
    FUZZ_CHECK(r.realisation >= 0 && static_cast<size_t>(r.realisation) <= it.realisations.size());
    FUZZ_CHECK(r.matched == (r.realisation == 0 ? it.label : it.realisations[r.realisation - 1]));
  } else {
    FUZZ_CHECK(r.item == -1);
    FUZZ_CHECK(r.realisation == -1);
    FUZZ_CHECK(r.matched.empty());
    FUZZ_CHECK(!r.reason.empty());
  }
}

// Compiles `text` against the state's menu (both entry points) and checks the result.
void CompileChecked(const envs::State& state, std::string_view text) {
  envs::CompileResult a, b, via_state;
  envs::Menu menu;
  try {
    menu = state.CompileMenu();
    a = menu.Compile(text);
    b = menu.Compile(text);
    via_state = state.Compile(text);
  } catch (...) {
    FUZZ_CHECK(!"Compile threw");  // documented never to throw
  }
  CheckResult(menu, a);
  FUZZ_CHECK(Same(a, b));
  FUZZ_CHECK(Same(a, via_state));
}

}  // namespace
}  // namespace rlid::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rlid::fuzz;
  Input in(data, size);
  const uint64_t seed = in.TakeInt(8);
  const uint8_t steps_byte = in.TakeByte();
  const int steps = steps_byte % 4;
  std::vector<uint8_t> choices;
  for (int i = 0; i < steps; ++i) choices.push_back(in.TakeByte());
  const std::string_view text = in.Rest();
  for (const auto& env : AllEnvs()) {
    std::unique_ptr<rlid::envs::State> state = env->NewState(seed);
    CompileChecked(*state, text);
    for (uint8_t c : choices) {
      if (state->IsTerminal()) break;
      const auto legal = state->LegalActions();
      FUZZ_CHECK(!legal.empty());
      state->Apply(legal[c % legal.size()]);
      CompileChecked(*state, text);
    }
  }
  return 0;
}

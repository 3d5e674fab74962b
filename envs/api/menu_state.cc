#include "envs/api/menu_state.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/check.h"
#include "core/strings.h"

namespace rlid::envs {

Menu MenuState::BuildMenu(bool with_afterstates) const {
  if (done_) return Menu{};
  return BuildMenuIgnoringCut(with_afterstates);
}

Menu MenuState::MenuAtCut() const {
  RLID_CHECK(cut_, "MenuAtCut() on a state the step limit did not cut");
  return BuildMenuIgnoringCut(/*with_afterstates=*/true);
}

Menu MenuState::BuildMenuIgnoringCut(bool with_afterstates) const {
  Menu menu;
  for (auto& spec : Actions()) {
    MenuItem item;
    item.action = spec.action;
    item.command = spec.command;
    item.realisations.push_back(spec.command);
    for (auto& a : spec.aliases)
      if (std::find(item.realisations.begin(), item.realisations.end(), a) == item.realisations.end())
        item.realisations.push_back(a);
    if (with_afterstates) {
      auto child = Clone();
      auto* ms = static_cast<MenuState*>(child.get());
      ms->Step(spec.action);  // legal by construction: skip Apply's Actions() scan
      item.afterstate = ms->AfterstateText();
      item.afterstate_hash = ms->Hash();
    }
    menu.items.push_back(std::move(item));
  }
  AssignDefaultLabels(menu);
  if (with_afterstates) MarkSameAfterstates(menu);
  return menu;
}

CompileResult MenuState::Compile(std::string_view text) const {
  return BuildMenu(/*with_afterstates=*/false).Compile(text);
}

std::vector<ActionId> MenuState::LegalActions() const {
  std::vector<ActionId> out;
  if (done_) return out;
  for (const auto& spec : Actions()) out.push_back(spec.action);
  return out;
}

StepOutcome MenuState::Apply(ActionId action) {
  RLID_CHECK(!done_, "Apply({}) on a terminal state", action);
  auto legal = LegalActions();
  RLID_CHECK(std::find(legal.begin(), legal.end(), action) != legal.end(),
             "action {} is not legal here", action);
  return Step(action);
}

StepOutcome MenuState::Step(ActionId action) {
  StepOutcome out = Transition(action);
  ++steps_;
  if (!out.terminal && steps_ >= step_limit_) {
    out.terminal = true;
    out.truncated = true;
    cut_ = true;
  }
  done_ = out.terminal;
  return out;
}

}  // namespace rlid::envs

// MenuState: the base every built-in environment derives from. It turns the
// env's action specs into a Menu (labels, realisations, afterstates computed
// by Clone()+Apply()), compiles free text through Menu::Compile, and does the
// episode bookkeeping (step counter, step-limit truncation, terminal flag).
#pragma once

#include <string>
#include <vector>

#include "envs/api/env.h"

namespace rlid::envs {

// One legal action as the env describes it, before labelling.
struct ActionSpec {
  ActionId action = kNoAction;
  std::string command;               // canonical realisation
  std::vector<std::string> aliases;  // other accepted realisations (no labels)
};

class MenuState : public State, public CutState {
 public:
  Menu CompileMenu() const override { return BuildMenu(/*with_afterstates=*/true); }
  // The menu with default labels (empty when terminal); afterstates are
  // skipped when not needed.
  Menu BuildMenu(bool with_afterstates) const;
  bool WasCut() const final { return cut_; }
  Menu MenuAtCut() const final;
  CompileResult Compile(std::string_view text) const override;
  std::vector<ActionId> LegalActions() const final;
  StepOutcome Apply(ActionId action) final;
  bool IsTerminal() const final { return done_; }
  int StepCount() const final { return steps_; }
  int step_limit() const { return step_limit_; }
  // Short text describing this state when shown as an afterstate.
  virtual std::string AfterstateText() const = 0;

 protected:
  explicit MenuState(int step_limit) : step_limit_(step_limit) {}
  // The legal actions of this (non-terminal) state, in menu order.
  virtual std::vector<ActionSpec> Actions() const = 0;
  // The env's transition for a legal action: reward, success, terminal.
  virtual StepOutcome Transition(ActionId action) = 0;

 private:
  // Apply() without the legality check, for actions taken from Actions().
  StepOutcome Step(ActionId action);
  Menu BuildMenuIgnoringCut(bool with_afterstates) const;

  int step_limit_;
  int steps_ = 0;
  bool done_ = false;
  bool cut_ = false;  // done_ because of the step limit
};

}  // namespace rlid::envs

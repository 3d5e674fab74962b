// Menus: the executable actions of one state, each with a short label
// ("A".."Z"), a canonical command, its realisations (the texts that name it:
// label, command and aliases), and the afterstate it leads to. Menu::Compile
// maps free text to an item.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace rlid {
class Rng;
}

namespace rlid::envs {

using ActionId = int32_t;
constexpr ActionId kNoAction = -1;
constexpr int kMaxMenuSize = 26;  // one capital letter per item

struct MenuItem {
  ActionId action = kNoAction;
  std::string label;                      // "A"; unique within the menu
  std::string command;                    // canonical realisation, e.g. "go north"
  std::vector<std::string> realisations;  // every realisation but the label, command first
  std::string afterstate;                 // text of the state this action leads to
  uint64_t afterstate_hash = 0;
  int same_afterstate_as = -1;  // index of the first earlier item with the same afterstate
};

struct CompileResult {
  ActionId action = kNoAction;  // kNoAction when invalid
  int item = -1;                // menu index of the action
  // The realisation that matched, as the menu lists it: the item's label, or one of
  // its realisations verbatim (not the normalised text of the answer). Empty
  // when invalid. An env's own compiler (TextCompiler) sets the answer text.
  std::string matched;
  // Which realisation `matched` is: 0 = the label, k >= 1 = realisations[k - 1]
  // (1 = the command); -1 when invalid or compiled by an env's own compiler.
  int realisation = -1;
  std::string reason;  // why the text is invalid (empty when valid)
  bool valid() const { return action != kNoAction; }
};

struct Menu {
  std::vector<MenuItem> items;

  size_t size() const { return items.size(); }
  int IndexOfAction(ActionId a) const;             // -1 if absent
  int IndexOfLabel(std::string_view label) const;  // exact label, -1 if absent
  // Free text -> item, by the exact grammar of docs/free_text.md: the label
  // ("B", "b", "(B)"), a realisation up to ASCII case and whitespace, or the
  // label then its own realisation ("B) go south"), optionally after a lead-in
  // ("I choose B.") or an "Action:" marker. Anything else (negations,
  // questions, two actions, a mere mention) is invalid with a reason. Never
  // throws on any input.
  CompileResult Compile(std::string_view text) const;
};

// The label of position i: "A", "B", ... (i < kMaxMenuSize).
std::string LabelFor(int i);
// Relabels items A, B, C in their current order.
void AssignDefaultLabels(Menu& menu);
// Reorders the items by `order` (a permutation of 0..n-1: new position j shows
// old item order[j]) and relabels in display order, so labels carry no fixed
// meaning across steps. same_afterstate_as indices are remapped.
void PermuteMenu(Menu& menu, const std::vector<int>& order);
void ShuffleMenu(Menu& menu, Rng& rng);
// Whether the item shows where it leads: an env that cannot copy its state
// leaves afterstate empty and afterstate_hash 0 (the menu shows none).
inline bool HasAfterstate(const MenuItem& item) {
  return item.afterstate_hash != 0 || !item.afterstate.empty();
}
// Sets same_afterstate_as from afterstate hashes; items without an afterstate
// are never the same as another (-1).
void MarkSameAfterstates(Menu& menu);
// Checks the menu contract (non-empty, <= 26 items, unique labels and actions,
// realisations non-empty and not shared between actions); InternalError if not.
void ValidateMenu(const Menu& menu);

}  // namespace rlid::envs

// Menu helpers and the free-text compiler shared by every environment.
#include "envs/api/menu.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include "core/check.h"
#include "core/rng.h"
#include "core/strings.h"
#include "core/utf8.h"

namespace rlid::envs {

int Menu::IndexOfAction(ActionId a) const {
  for (size_t i = 0; i < items.size(); ++i)
    if (items[i].action == a) return static_cast<int>(i);
  return -1;
}

int Menu::IndexOfLabel(std::string_view label) const {
  for (size_t i = 0; i < items.size(); ++i)
    if (items[i].label == label) return static_cast<int>(i);
  return -1;
}

std::string LabelFor(int i) {
  RLID_CHECK(i >= 0 && i < kMaxMenuSize, "menu position {} has no label", i);
  return std::string(1, static_cast<char>('A' + i));
}

void AssignDefaultLabels(Menu& menu) {
  for (size_t i = 0; i < menu.items.size(); ++i)
    menu.items[i].label = LabelFor(static_cast<int>(i));
}

void MarkSameAfterstates(Menu& menu) {
  std::unordered_map<uint64_t, int> first;
  for (size_t i = 0; i < menu.items.size(); ++i) {
    MenuItem& item = menu.items[i];
    if (!HasAfterstate(item)) {
      item.same_afterstate_as = -1;
      continue;
    }
    auto [it, inserted] = first.emplace(item.afterstate_hash, static_cast<int>(i));
    item.same_afterstate_as = inserted ? -1 : it->second;
  }
}

void PermuteMenu(Menu& menu, const std::vector<int>& order) {
  RLID_CHECK_EQ(order.size(), menu.items.size());
  std::vector<MenuItem> items;
  items.reserve(order.size());
  std::vector<bool> seen(order.size(), false);
  for (int o : order) {
    RLID_CHECK(o >= 0 && o < static_cast<int>(order.size()) && !seen[o], "not a permutation");
    seen[o] = true;
    items.push_back(std::move(menu.items[o]));
  }
  menu.items = std::move(items);
  AssignDefaultLabels(menu);
  MarkSameAfterstates(menu);
}

void ShuffleMenu(Menu& menu, Rng& rng) {
  PermuteMenu(menu, rng.Permutation(static_cast<int>(menu.items.size())));
}

void ValidateMenu(const Menu& menu) {
  RLID_CHECK(!menu.items.empty(), "a non-terminal state must offer at least one action");
  RLID_CHECK_LE(menu.items.size(), static_cast<size_t>(kMaxMenuSize));
  std::set<std::string> labels;
  std::set<ActionId> actions;
  std::map<std::string, ActionId> realisation_owner;
  for (const auto& it : menu.items) {
    RLID_CHECK(labels.insert(it.label).second, "duplicate label '{}'", it.label);
    RLID_CHECK(actions.insert(it.action).second, "duplicate action {}", it.action);
    RLID_CHECK(!it.realisations.empty() && it.realisations[0] == it.command,
               "item '{}': realisations must start with the command", it.command);
    for (const auto& r : it.realisations) {
      auto [pos, inserted] = realisation_owner.emplace(ToLower(r), it.action);
      RLID_CHECK(inserted || pos->second == it.action, "realisation '{}' names two actions", r);
    }
  }
  // A realisation that is a bare letter reads as a label. Labels may be shuffled
  // (readout.label_order), so any item can carry any of the menu's labels:
  // "C" would name another item than the one whose command it is.
  std::set<std::string> any_label;  // lower-cased: the compiler reads a lone letter in either case
  for (const auto& l : labels) any_label.insert(ToLower(l));
  for (size_t i = 0; i < menu.items.size(); ++i)
    any_label.insert(ToLower(LabelFor(static_cast<int>(i))));
  for (const auto& it : menu.items)
    for (const auto& r : it.realisations) {
      const std::string w = ToLower(std::string(Trim(r)));
      RLID_CHECK(
          !any_label.count(w),
          "item '{}': the realisation '{}' is also a label of this menu (labels may be shuffled, "
          "so it can name another item); give the action a realisation of a word or more, e.g. "
          "'press {}'",
          it.command, r, Trim(r));
    }
}

// ---- free-text compiler ---------------------------------------------------------
// The grammar is documented in docs/free_text.md; keep the
// two in step. Everything here is ASCII byte logic: a byte >= 0x80 is never
// whitespace, decoration or a letter, so it only ever matches itself.
namespace {

constexpr size_t kMaxAnswerBytes = 512;

bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }
bool IsLetter(char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z'); }
bool IsAlnum(char c) { return IsLetter(c) || (c >= '0' && c <= '9'); }
char Lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

// ASCII letters lowercased, each run of ASCII whitespace one space, no space at
// either end; every other byte kept as it is ("Go  NORTH\t" -> "go north").
std::string Fold(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (IsSpace(c)) {
      if (!out.empty() && out.back() != ' ') out.push_back(' ');
    } else {
      out.push_back(Lower(c));
    }
  }
  if (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

// Characters that may surround an answer: brackets, quotes, markdown emphasis,
// and closing punctuation. '?' is deliberately absent: a question is not a choice.
bool IsDecoration(char c) {
  return IsSpace(c) || c == '(' || c == ')' || c == '[' || c == ']' || c == '{' || c == '}' ||
         c == '<' || c == '>' || c == '*' || c == '_' || c == '`' || c == '\'' || c == '"' ||
         c == '.' || c == ',' || c == ':' || c == '!';
}

std::string_view StripDecoration(std::string_view s) {
  while (!s.empty() && IsDecoration(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsDecoration(s.back())) s.remove_suffix(1);
  return s;
}

// Lead-in phrases that may precede the choice (folded), longest first so that
// "i want to" is tried before "i".
const std::vector<std::string>& LeadIns() {
  static const std::vector<std::string> k = [] {
    std::vector<std::string> v = {
        "final answer", "the answer is", "my answer is", "my answer", "answer",   "action",
        "my choice is", "my choice",     "choice",       "option",    "i choose", "i pick",
        "i select",     "i will",        "i'll",         "i would",   "i'd",      "i want to",
        "let's",        "lets",          "choose",       "pick",      "select",   "so",
        "ok",           "okay",          "then",         "to",        "i"};
    std::stable_sort(v.begin(), v.end(), [](const std::string& a, const std::string& b) {
      return a.size() > b.size();
    });
    return v;
  }();
  return k;
}

// Removes lead-ins from the front of folded text, each followed by a space or a
// colon ("i choose: b" -> "b"), together with the decoration after them.
std::string_view StripLeadIns(std::string_view s) {
  for (bool changed = true; changed && !s.empty();) {
    changed = false;
    for (const auto& p : LeadIns()) {
      if (s.size() > p.size() && StartsWith(s, p) && (s[p.size()] == ' ' || s[p.size()] == ':')) {
        s = StripDecoration(s.substr(p.size()));
        changed = true;
        break;
      }
    }
  }
  return s;
}

// The answer's line: after the last "action:"/"answer:" marker (any case, at
// the start of a word), the rest of that line, or the next non-empty line if
// the marker ends its line; without a marker, the first non-empty line.
std::string_view AnswerSegment(std::string_view text) {
  size_t best = std::string_view::npos;
  for (std::string_view marker : {"action:", "answer:"}) {
    for (size_t i = text.size() >= marker.size() ? text.size() - marker.size() + 1 : 0; i-- > 0;) {
      bool match = i == 0 || !IsAlnum(text[i - 1]);
      for (size_t j = 0; j < marker.size() && match; ++j) match = Lower(text[i + j]) == marker[j];
      if (match) {
        if (best == std::string_view::npos || i + marker.size() > best) best = i + marker.size();
        break;
      }
    }
  }
  std::string_view seg = best == std::string_view::npos ? text : text.substr(best);
  while (!seg.empty()) {
    size_t nl = seg.find('\n');
    std::string_view line = Trim(seg.substr(0, nl));
    if (!line.empty() || nl == std::string_view::npos) return line;
    seg = seg.substr(nl + 1);
  }
  return seg;
}

// The first 60 characters of `s` for a reason: well-formed UTF-8 as it is
// ("clé", "左"), a control character or an ill-formed byte as '?'; never cut
// inside a character.
std::string Preview(std::string_view s) {
  const std::string_view head = Utf8Prefix(s, 60);
  std::string out;
  for (size_t i = 0; i < head.size();) {
    const Utf8Scalar u = DecodeUtf8At(head, i);
    const bool shown = u.well_formed && u.code_point >= 32 && u.code_point != 127;
    if (shown) out.append(head.substr(i, static_cast<size_t>(u.length)));
    else out.push_back('?');
    i += static_cast<size_t>(u.length);
  }
  if (head.size() < s.size()) out += "...";
  return out;
}

// A match of item `item` by realisation number `realisation` (0 = label, k = realisations[k-1]).
CompileResult Valid(const Menu& menu, int item, int realisation) {
  const MenuItem& it = menu.items[item];
  CompileResult r;
  r.item = item;
  r.action = it.action;
  r.realisation = realisation;
  r.matched = realisation == 0 ? it.label : it.realisations[realisation - 1];
  return r;
}

CompileResult Invalid(std::string reason) {
  CompileResult r;
  r.reason = std::move(reason);
  return r;
}

// For the reason of an invalid answer only: the items the text mentions, by a
// realisation of >= 3 characters as whole words (letters and digits compared, the
// rest as word breaks) or by an uppercase one-letter word that is a label
// ("I" never; a sentence-initial "A " before a lowercase word is an article).
std::set<int> MentionedItems(const Menu& menu, std::string_view seg) {
  auto words = [](std::string_view s) {
    std::string out = " ";
    for (char c : s) {
      if (IsAlnum(c))
        out.push_back(Lower(c));
      else if (out.back() != ' ')
        out.push_back(' ');
    }
    if (out.back() != ' ') out.push_back(' ');
    return out;
  };
  std::set<int> out;
  const std::string body = words(seg);
  for (size_t i = 0; i < menu.items.size(); ++i)
    for (const auto& r : menu.items[i].realisations) {
      std::string w = words(r);  // " go north "
      if (w.size() >= 5 && body.find(w) != std::string::npos) out.insert(static_cast<int>(i));
    }
  std::vector<std::string> tokens;
  std::string cur;
  for (char c : std::string(seg) + " ") {
    if (IsAlnum(c)) {
      cur.push_back(c);
    } else if (!cur.empty()) {
      tokens.push_back(cur);
      cur.clear();
    }
  }
  for (size_t k = 0; k < tokens.size(); ++k) {
    const std::string& w = tokens[k];
    if (w.size() != 1 || w[0] < 'A' || w[0] > 'Z' || w == "I") continue;
    if (k == 0 && w == "A" && tokens.size() > 1 && tokens[1][0] >= 'a' && tokens[1][0] <= 'z')
      continue;
    if (int i = menu.IndexOfLabel(w); i >= 0) out.insert(i);
  }
  return out;
}

}  // namespace

CompileResult Menu::Compile(std::string_view text) const {
  if (items.empty()) return Invalid("the menu is empty (terminal state)");
  const std::string_view seg = AnswerSegment(text);
  if (seg.empty()) return Invalid("empty answer");
  if (seg.size() > kMaxAnswerBytes)
    return Invalid(fmt::format("answer too long ({} bytes) to be a menu choice", seg.size()));

  // Every realisation folded, as the answer is.
  std::vector<std::vector<std::string>> folded_realisations(items.size());
  for (size_t i = 0; i < items.size(); ++i)
    for (const auto& r : items[i].realisations) folded_realisations[i].push_back(Fold(r));
  // Item and realisation number (k >= 1) of the first realisation equal to s; {-1, -1} if none.
  auto find_realisation = [&](std::string_view s) -> std::pair<int, int> {
    for (size_t i = 0; i < items.size(); ++i)
      for (size_t k = 0; k < folded_realisations[i].size(); ++k)
        if (folded_realisations[i][k] == s) return {static_cast<int>(i), static_cast<int>(k) + 1};
    return {-1, -1};
  };
  // A one-letter label in either case; -1 if s is not one.
  auto label = [&](std::string_view s) -> int {
    if (s.size() != 1 || !IsLetter(s[0])) return -1;
    const char upper = static_cast<char>(s[0] >= 'a' ? s[0] - 'a' + 'A' : s[0]);
    return IndexOfLabel(std::string_view(&upper, 1));
  };

  // 1. The bare label in the menu's own case: "B", "(B)", "**B**" -- unless
  // it is also another item's realisation (a menu that breaks ValidateMenu's
  // contract): an item's own command never compiles to another item.
  const std::string_view raw = StripDecoration(seg);
  if (int i = IndexOfLabel(raw); i >= 0) {
    if (auto [w, k] = find_realisation(Fold(raw)); w >= 0 && w != i)
      return Invalid(fmt::format("ambiguous: '{}' is the label of {} and a realisation of {} ({})",
                                 std::string(raw), items[i].label, items[w].label,
                                 items[w].command));
    return Valid(*this, i, 0);
  }

  // 2.-4. As it stands, then without lead-ins: a realisation, a label in either
  // case, or a label followed by a separator and its own item's realisation.
  // A label before another item's realisation is invalid unless the text without
  // lead-ins compiles ("I take the red key" on a menu with a label I).
  const std::string folded = Fold(raw);
  std::string mismatch;
  for (std::string_view cand : {std::string_view(folded), StripLeadIns(folded)}) {
    if (cand.empty()) continue;
    if (auto [i, k] = find_realisation(cand); i >= 0) return Valid(*this, i, k);
    if (int i = label(cand); i >= 0) return Valid(*this, i, 0);
    if (cand.size() >= 3 && IsLetter(cand[0])) {
      size_t sep = 1;
      auto is_sep = [](char c) {
        return c == ' ' || c == ')' || c == ']' || c == '.' || c == ':' || c == '-' || c == ',' ||
               c == '*';
      };
      while (sep < cand.size() && is_sep(cand[sep])) ++sep;
      const int li = label(cand.substr(0, 1));
      // The whole separator run first; a realisation may itself start with a
      // separator character ("B) -150"), so shorter runs (>= 1 character)
      // follow. A mismatch names the longest realisation found after the label.
      std::string other;
      for (size_t at = sep; li >= 0 && at > 1 && sep < cand.size(); --at) {
        const std::string_view rest = StripDecoration(cand.substr(at));
        const auto [ri, rk] = find_realisation(rest);
        if (ri == li) return Valid(*this, li, 0);
        if (ri >= 0)
          other = fmt::format("label {} does not match '{}' (that is {})", items[li].label, rest,
                              items[ri].label);
      }
      if (mismatch.empty()) mismatch = other;
    }
  }

  if (!mismatch.empty()) return Invalid(mismatch);

  // Invalid: say what the text seems to name, so a reader sees why.
  const std::set<int> named = MentionedItems(*this, seg);
  std::vector<std::string> names;
  for (int i : named) names.push_back(items[i].label + " (" + items[i].command + ")");
  if (named.size() > 1)
    return Invalid(fmt::format("ambiguous: '{}' names {}; answer with one label or one command",
                               Preview(seg), Join(names, " and ")));
  if (named.size() == 1)
    return Invalid(
        fmt::format("'{}' mentions {} but is not an answer: give the label or a realisation "
                    "alone, optionally after a lead-in such as 'I choose'",
                    Preview(seg), names[0]));
  return Invalid(fmt::format("no menu action matches '{}'", Preview(seg)));
}

}  // namespace rlid::envs

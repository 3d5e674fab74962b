// Menu helpers and the free-text compiler shared by every environment.
#include "envs/menu.h"

#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>
#include <unordered_map>

#include "core/check.h"
#include "core/rng.h"
#include "core/strings.h"

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
  for (size_t i = 0; i < menu.items.size(); ++i) menu.items[i].label = LabelFor(static_cast<int>(i));
}

void MarkSameAfterstates(Menu& menu) {
  std::unordered_map<uint64_t, int> first;
  for (size_t i = 0; i < menu.items.size(); ++i) {
    auto [it, inserted] = first.emplace(menu.items[i].afterstate_hash, static_cast<int>(i));
    menu.items[i].same_afterstate_as = inserted ? -1 : it->second;
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
  std::map<std::string, ActionId> wording_owner;
  for (const auto& it : menu.items) {
    RLID_CHECK(labels.insert(it.label).second, "duplicate label '{}'", it.label);
    RLID_CHECK(actions.insert(it.action).second, "duplicate action {}", it.action);
    RLID_CHECK(!it.realisations.empty() && it.realisations[0] == it.command,
               "item '{}': realisations must start with the command", it.command);
    for (const auto& r : it.realisations) {
      auto [pos, inserted] = wording_owner.emplace(ToLower(r), it.action);
      RLID_CHECK(inserted || pos->second == it.action, "wording '{}' names two actions", r);
    }
  }
}

// ---- free-text compiler ---------------------------------------------------------
namespace {

constexpr size_t kMaxAnswerBytes = 512;

// Lowercase ASCII letters/digits kept, everything else becomes a single space.
std::string Normalise(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool space = true;
  for (unsigned char c : s) {
    char lc = 0;
    if (c >= 'A' && c <= 'Z') lc = static_cast<char>(c - 'A' + 'a');
    else if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) lc = static_cast<char>(c);
    if (lc) {
      out.push_back(lc);
      space = false;
    } else if (!space) {
      out.push_back(' ');
      space = true;
    }
  }
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

// Lead-in phrases models and people put before the answer.
const std::vector<std::string>& LeadIns() {
  static const std::vector<std::string> k = {
      "final answer", "the answer is", "answer", "action", "my choice is", "my choice",
      "i choose",     "i pick",        "i select", "i will", "i ll",      "i would",
      "i d",          "choose",        "pick",     "select", "option",    "let s",
      "lets",         "i want to",     "i",        "to",     "is",        "choice",
      "my answer is", "my answer",     "so",       "ok",     "okay",      "then"};
  return k;
}

std::string StripLeadIns(std::string norm) {
  bool changed = true;
  while (changed && !norm.empty()) {
    changed = false;
    for (const auto& p : LeadIns()) {
      if (norm.size() > p.size() && StartsWith(norm, p) && norm[p.size()] == ' ') {
        norm = norm.substr(p.size() + 1);
        changed = true;
        break;
      }
    }
  }
  return norm;
}

// Text after the last "action:"/"answer:" marker, up to the end of its line;
// otherwise the first non-empty line.
std::string_view AnswerSegment(std::string_view text) {
  size_t best = std::string_view::npos;
  for (std::string_view marker : {"action:", "answer:"}) {
    // Case-insensitive search from the end.
    for (size_t i = text.size() >= marker.size() ? text.size() - marker.size() + 1 : 0; i-- > 0;) {
      bool match = true;
      for (size_t j = 0; j < marker.size() && match; ++j) {
        char c = text[i + j];
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
        match = c == marker[j];
      }
      if (match) {
        if (best == std::string_view::npos || i + marker.size() > best) best = i + marker.size();
        break;
      }
    }
  }
  std::string_view seg = best == std::string_view::npos ? text : text.substr(best);
  // First non-empty line.
  while (!seg.empty()) {
    size_t nl = seg.find('\n');
    std::string_view line = Trim(seg.substr(0, nl));
    if (!line.empty() || nl == std::string_view::npos) return line;
    seg = seg.substr(nl + 1);
  }
  return seg;
}

// "(B)", "B.", "**B**", "[B]", "B)", "'B'" -> "B"; otherwise the trimmed text.
std::string_view StripDecoration(std::string_view s) {
  auto is_deco = [](char c) {
    return c == '(' || c == ')' || c == '[' || c == ']' || c == '*' || c == '.' || c == '\'' ||
           c == '"' || c == '`' || c == ':' || c == ',' || c == '!' || c == ' ' || c == '<' ||
           c == '>' || c == '{' || c == '}' || c == '_';
  };
  while (!s.empty() && is_deco(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_deco(s.back())) s.remove_suffix(1);
  return s;
}

std::string Preview(std::string_view s) {
  std::string out;
  for (unsigned char c : s.substr(0, 60)) out.push_back(c >= 32 && c < 127 ? static_cast<char>(c) : '?');
  if (s.size() > 60) out += "...";
  return out;
}

// A match of item `item` by its wording `realisation` (0 = label, k = realisations[k-1]).
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

}  // namespace

CompileResult Menu::Compile(std::string_view text) const {
  if (items.empty()) return Invalid("the menu is empty (terminal state)");
  std::string_view seg = AnswerSegment(text);
  if (seg.empty()) return Invalid("empty answer");
  if (seg.size() > kMaxAnswerBytes)
    return Invalid(fmt::format("answer too long ({} bytes) to be a menu choice", seg.size()));

  // 1. A bare label, exact case, possibly decorated: "B", "(B)", "**B**".
  std::string_view core = StripDecoration(seg);
  if (int i = IndexOfLabel(core); i >= 0) return Valid(*this, i, 0);

  // 2. Normalised exact match against realisations, then lowercase labels.
  std::string norm = Normalise(seg);
  if (norm.empty()) return Invalid(fmt::format("no menu action in '{}'", Preview(seg)));
  std::vector<std::vector<std::string>> wordings(items.size());
  for (size_t i = 0; i < items.size(); ++i)
    for (const auto& r : items[i].realisations) wordings[i].push_back(Normalise(r));
  // Item and realisation number (k >= 1) of the first wording equal to s; {-1, -1} if none.
  auto exact_wording = [&](const std::string& s) -> std::pair<int, int> {
    for (size_t i = 0; i < items.size(); ++i)
      for (size_t k = 0; k < wordings[i].size(); ++k)
        if (wordings[i][k] == s) return {static_cast<int>(i), static_cast<int>(k) + 1};
    return {-1, -1};
  };
  auto exact = [&](const std::string& s) -> int { return exact_wording(s).first; };
  auto label_ci = [&](const std::string& s) -> int {
    if (s.size() != 1) return -1;
    for (size_t i = 0; i < items.size(); ++i)
      if (ToLower(items[i].label) == s) return static_cast<int>(i);
    return -1;
  };
  for (const std::string& cand : {norm, StripLeadIns(norm)}) {
    if (auto [i, k] = exact_wording(cand); i >= 0) return Valid(*this, i, k);
    if (int i = label_ci(cand); i >= 0) return Valid(*this, i, 0);
  }
  std::string body = StripLeadIns(norm);

  // Uppercase single-letter words that are labels. "I" never counts; a
  // sentence-initial "A" followed by a space and a lowercase word ("A good
  // choice is B") is an article, unless that word joins labels ("A or B").
  std::set<int> named_labels;
  {
    struct Word {
      std::string text;
      char after;
    };
    std::vector<Word> words;
    std::string word;
    for (char c : std::string(seg) + " ") {
      bool alnum = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
      if (alnum) {
        word.push_back(c);
      } else if (!word.empty()) {
        words.push_back({word, c});
        word.clear();
      }
    }
    for (size_t k = 0; k < words.size(); ++k) {
      const std::string& w = words[k].text;
      if (w.size() != 1 || w[0] < 'A' || w[0] > 'Z' || w == "I") continue;
      if (k == 0 && w == "A" && words[0].after == ' ' && words.size() > 1) {
        const std::string& next = words[1].text;
        bool joins = next == "and" || next == "or" || next == "nor" || next == "vs" || next == "then";
        if (next[0] >= 'a' && next[0] <= 'z' && !joins) continue;
      }
      if (int i = IndexOfLabel(w); i >= 0) named_labels.insert(i);
    }
  }

  // 3. "<LABEL> <anything>": the first word after lead-ins is the only label
  //    named ("B) go south", "I choose B because ...").
  {
    size_t first_space = body.find(' ');
    std::string first = body.substr(0, first_space);
    std::string rest = first_space == std::string::npos ? "" : body.substr(first_space + 1);
    if (first.size() == 1 && first[0] >= 'a' && first[0] <= 'z') {
      std::string upper(1, static_cast<char>(first[0] - 'a' + 'A'));
      int li = IndexOfLabel(upper);
      if (li >= 0 && named_labels == std::set<int>{li}) {
        int ri = rest.empty() ? -1 : exact(rest);
        if (ri >= 0 && ri != li)
          return Invalid(fmt::format("label {} does not match '{}' (that is {})", upper, rest,
                                     items[ri].label));
        return Valid(*this, li, 0);
      }
    }
  }

  // 4. Realisations (>= 3 characters) mentioned as whole words. A mention
  //    inside a longer mention ("key" inside "red key") does not count; two
  //    different actions mentioned is ambiguous.
  {
    struct Span {
      size_t begin, end;
      int item;
      int realisation;  // k >= 1: realisations[k - 1]
    };
    std::vector<Span> spans;
    for (size_t i = 0; i < items.size(); ++i) {
      for (size_t k = 0; k < wordings[i].size(); ++k) {
        const std::string& w = wordings[i][k];
        if (w.size() < 3) continue;
        for (size_t pos = body.find(w); pos != std::string::npos; pos = body.find(w, pos + 1)) {
          size_t end = pos + w.size();
          if ((pos == 0 || body[pos - 1] == ' ') && (end == body.size() || body[end] == ' '))
            spans.push_back({pos, end, static_cast<int>(i), static_cast<int>(k) + 1});
        }
      }
    }
    std::set<int> mentioned;
    const Span* first = nullptr;  // the leftmost (then longest) mention not inside another
    for (const auto& a : spans) {
      bool inside = false;
      for (const auto& b : spans)
        inside |= b.begin <= a.begin && a.end <= b.end && (b.end - b.begin) > (a.end - a.begin);
      if (inside) continue;
      mentioned.insert(a.item);
      if (!first || a.begin < first->begin ||
          (a.begin == first->begin && a.end - a.begin > first->end - first->begin))
        first = &a;
    }
    if (mentioned.size() == 1) return Valid(*this, first->item, first->realisation);
    if (mentioned.size() > 1) {
      std::vector<std::string> names;
      for (int i : mentioned) names.push_back(items[i].label + " (" + items[i].command + ")");
      return Invalid(fmt::format("ambiguous: '{}' matches {}", Preview(seg), Join(names, " and ")));
    }
  }

  // 5. Exactly one uppercase single-letter label among the words ("I think C").
  if (named_labels.size() == 1) return Valid(*this, *named_labels.begin(), 0);
  if (named_labels.size() > 1) {
    std::vector<std::string> names;
    for (int i : named_labels) names.push_back(items[i].label);
    return Invalid(fmt::format("ambiguous: '{}' names labels {}", Preview(seg), Join(names, ", ")));
  }
  return Invalid(fmt::format("no menu action matches '{}'", Preview(seg)));
}

}  // namespace rlid::envs

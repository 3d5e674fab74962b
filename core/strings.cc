#include "core/strings.h"

#include <algorithm>

#include <fmt/format.h>

namespace rlid {

std::string ToLower(std::string_view s) {
  std::string out(s);
  for (char& c : out)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return out;
}

std::string_view Trim(std::string_view s) {
  const char* ws = " \t\r\n\f\v";
  size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  size_t e = s.find_last_not_of(ws);
  return s.substr(b, e - b + 1);
}

std::vector<std::string> Split(std::string_view s, char sep) {
  std::vector<std::string> out;
  size_t start = 0;
  while (true) {
    size_t pos = s.find(sep, start);
    if (pos == std::string_view::npos) {
      out.emplace_back(s.substr(start));
      return out;
    }
    out.emplace_back(s.substr(start, pos - start));
    start = pos + 1;
  }
}

std::string Join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i) out += sep;
    out += parts[i];
  }
  return out;
}

std::string ListInWords(const std::vector<std::string>& items, std::string_view none) {
  if (items.empty()) return std::string(none);
  if (items.size() == 1) return items[0];
  const std::vector<std::string> head(items.begin(), items.end() - 1);
  return Join(head, ", ") + " and " + items.back();
}

bool StartsWith(std::string_view s, std::string_view prefix) {
  return s.size() >= prefix.size() && s.substr(0, prefix.size()) == prefix;
}

size_t EditDistance(std::string_view a, std::string_view b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string Nearest(std::string_view key, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const auto& c : candidates) {
    size_t d = EditDistance(ToLower(key), ToLower(c));
    if (d < best_d) best_d = d, best = c;
  }
  // Accept when the edit is small relative to the word (typos, not guesses).
  size_t limit = std::max<size_t>(2, key.size() / 3);
  return best_d <= limit ? best : std::string();
}

std::string DidYouMean(std::string_view key, const std::vector<std::string>& candidates) {
  std::string n = Nearest(key, candidates);
  return n.empty() ? std::string() : fmt::format(" (did you mean '{}'?)", n);
}

}  // namespace rlid

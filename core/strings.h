// Small string helpers shared by config parsing, registries and the free-text
// compiler: case folding, trimming, splitting, and "did you mean" suggestions.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/utf8.h"  // IsValidUtf8 lived here; strings.h users still get it

namespace rlid {

std::string ToLower(std::string_view s);  // ASCII only; other bytes unchanged.
std::string_view Trim(std::string_view s);
std::vector<std::string> Split(std::string_view s, char sep);
std::string Join(const std::vector<std::string>& parts, std::string_view sep);
// "a", "a and b", "a, b and c"; `none` when there are no items (env texts).
std::string ListInWords(const std::vector<std::string>& items, std::string_view none = "nothing");
bool StartsWith(std::string_view s, std::string_view prefix);

// Levenshtein distance (bytes).
size_t EditDistance(std::string_view a, std::string_view b);
// The candidate closest to `key`, or "" if none is reasonably close.
std::string Nearest(std::string_view key, const std::vector<std::string>& candidates);
// " (did you mean 'x'?)" or "".
std::string DidYouMean(std::string_view key, const std::vector<std::string>& candidates);

}  // namespace rlid

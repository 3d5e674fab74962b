// The one way the CLI prints JSON. Text the CLI reports can hold bytes that are
// not UTF-8 (a sampled answer decodes to whatever bytes its tokens spell), and
// nlohmann::json::dump throws on those; DumpJson never throws and always
// prints valid JSON, and TextWithBytes keeps the exact bytes next to the text.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "core/utf8.h"  // IsValidUtf8, which the CLI pairs with these

namespace rlid::cli {

// j as JSON text (indent < 0: one line). Invalid UTF-8 in a string becomes
// U+FFFD, one per maximal ill-formed subpart (nlohmann's replacement:
// "\xe2\x82" becomes one U+FFFD, "\xed\xa0\x80" three); everything else is
// printed unchanged.
std::string DumpJson(const nlohmann::json& j, int indent = -1);

// Lowercase hex of every byte of `text`: "A\xff" -> "41ff".
std::string HexBytes(std::string_view text);

// Sets j[key] = text and j[key + "_hex"] = HexBytes(text): the text as printed
// (invalid bytes shown as U+FFFD) and its exact bytes.
void TextWithBytes(nlohmann::json& j, const std::string& key, std::string_view text);

}  // namespace rlid::cli

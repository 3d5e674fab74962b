// The text helpers the lexer and the interpreter share: UTF-8 decoding and encoding,
// JavaScript's and Python's whitespace sets, UTF-16 lengths and case mapping, each as the
// reference (JavaScript) or jinja2 (Python) defines it. Text is UTF-8 in std::string throughout.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/utf8.h"

namespace rlid::jinja::internal {

// NextUtf8 and AppendUtf8 (core/utf8.h) decode and encode: an invalid byte reads as U+FFFD
// (1 byte), the way a decoder would hand the text to JavaScript.
std::vector<uint32_t> CodePoints(std::string_view s);

// JavaScript's \s and String.prototype.trim set: WhiteSpace plus LineTerminator.
bool IsJsSpace(uint32_t cp);
// Byte length of the JavaScript whitespace character at s[i], or 0.
size_t JsSpaceAt(std::string_view s, size_t i);
std::string_view JsTrimStart(std::string_view s);
std::string_view JsTrimEnd(std::string_view s);
std::string_view JsTrim(std::string_view s);

// Python's str.isspace() set, which str.strip()/split() and jinja2's trim use.
bool IsPySpace(uint32_t cp);
// str.strip/lstrip/rstrip(chars): drops code points in `chars` (Python whitespace when null).
std::string_view PyStrip(std::string_view s, const std::string* chars, bool front, bool back);

// String.prototype.length: UTF-16 code units.
size_t Utf16Length(std::string_view s);

// toUpperCase / toLowerCase (upper = false).
std::string ChangeCase(std::string_view s, bool upper);
bool IsAsciiWord(char c);
// titleCase(): value.replace(/\b\w/g, toUpperCase) -- ASCII word boundaries only.
std::string TitleCase(std::string_view s);
// charAt(0).toUpperCase() + slice(1): the first UTF-16 unit only, the rest untouched.
std::string Capitalize(std::string_view s);

}  // namespace rlid::jinja::internal

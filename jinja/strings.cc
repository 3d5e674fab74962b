// UTF-8, whitespace, length and case helpers (strings.h) for the lexer and the interpreter:
// JavaScript's semantics where the reference uses them, Python's where jinja2 is the reference.
// UTF-8 itself is core/utf8.h's: an invalid byte reads as U+FFFD, one byte at a time.
#include "jinja/strings.h"

#include <utf8proc.h>

#include <algorithm>

namespace rlid::jinja::internal {

std::vector<uint32_t> CodePoints(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(NextUtf8(s, i));
  return out;
}

// JavaScript's \s and String.prototype.trim set: WhiteSpace plus LineTerminator.
bool IsJsSpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000 || cp == 0xFEFF;
}

// Byte length of the JavaScript whitespace character at s[i], or 0.
size_t JsSpaceAt(std::string_view s, size_t i) {
  if (i >= s.size()) return 0;
  size_t j = i;
  return IsJsSpace(NextUtf8(s, j)) ? j - i : 0;
}

std::string_view JsTrimStart(std::string_view s) {
  size_t i = 0;
  while (size_t n = JsSpaceAt(s, i)) i += n;
  return s.substr(i);
}

std::string_view JsTrimEnd(std::string_view s) {
  size_t end = 0;  // end of the last non-space code point
  for (size_t i = 0; i < s.size();) {
    if (!IsJsSpace(NextUtf8(s, i))) end = i;
  }
  return s.substr(0, end);
}

std::string_view JsTrim(std::string_view s) { return JsTrimEnd(JsTrimStart(s)); }

// Python's str.isspace() set, which str.strip()/split() and jinja2's trim use: JavaScript's
// set without U+FEFF, plus U+001C..U+001F and U+0085 (NEL).
bool IsPySpace(uint32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 ||
         cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 ||
         cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// str.strip/lstrip/rstrip(chars): drops code points in `chars` (Python whitespace when null).
std::string_view PyStrip(std::string_view s, const std::string* chars, bool front, bool back) {
  std::vector<uint32_t> set;
  if (chars) set = CodePoints(*chars);
  auto strippable = [&](uint32_t cp) {
    return chars ? std::find(set.begin(), set.end(), cp) != set.end() : IsPySpace(cp);
  };
  size_t begin = 0;
  if (front) {
    while (begin < s.size()) {
      size_t next = begin;
      if (!strippable(NextUtf8(s, next))) break;
      begin = next;
    }
  }
  size_t end = s.size();
  if (back) {
    end = begin;  // end of the last code point kept
    for (size_t i = begin; i < s.size();) {
      if (!strippable(NextUtf8(s, i))) end = i;
    }
  }
  return s.substr(begin, end - begin);
}

// String.prototype.length: UTF-16 code units.
size_t Utf16Length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size();) n += NextUtf8(s, i) >= 0x10000 ? 2 : 1;
  return n;
}

bool IsCasedLetter(uint32_t cp) {
  const auto c = utf8proc_category(static_cast<utf8proc_int32_t>(cp));
  return c == UTF8PROC_CATEGORY_LU || c == UTF8PROC_CATEGORY_LL || c == UTF8PROC_CATEGORY_LT;
}

// toUpperCase / toLowerCase with Unicode simple case mapping, plus the two context rules chat
// text meets: ß -> SS and a word-final Σ -> ς.
std::string ChangeCase(std::string_view s, bool upper) {
  std::string out;
  out.reserve(s.size());
  uint32_t prev = 0;
  for (size_t i = 0; i < s.size();) {
    const uint32_t cp = NextUtf8(s, i);
    const uint32_t before = prev;
    prev = cp;
    if (!upper && cp == 0x3A3 && IsCasedLetter(before)) {
      size_t j = i;
      const bool final_sigma = j >= s.size() || !IsCasedLetter(NextUtf8(s, j));
      AppendUtf8(final_sigma ? 0x3C2 : 0x3C3, out);
      continue;
    }
    if (cp < 0x80) {
      out += static_cast<char>(upper ? (cp >= 'a' && cp <= 'z' ? cp - 32 : cp)
                                     : (cp >= 'A' && cp <= 'Z' ? cp + 32 : cp));
    } else if (upper && cp == 0xDF) {
      out += "SS";
    } else {
      const auto mapped = upper ? utf8proc_toupper(static_cast<utf8proc_int32_t>(cp))
                                : utf8proc_tolower(static_cast<utf8proc_int32_t>(cp));
      AppendUtf8(static_cast<uint32_t>(mapped), out);
    }
  }
  return out;
}

bool IsAsciiWord(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

// titleCase(): value.replace(/\b\w/g, toUpperCase) -- ASCII word boundaries only.
std::string TitleCase(std::string_view s) {
  std::string out(s);
  bool prev_word = false;
  for (char& c : out) {
    const bool word = IsAsciiWord(c);
    if (word && !prev_word && c >= 'a' && c <= 'z') c = static_cast<char>(c - 32);
    prev_word = word;
  }
  return out;
}

// charAt(0).toUpperCase() + slice(1): the first UTF-16 unit only, the rest untouched.
std::string Capitalize(std::string_view s) {
  if (s.empty()) return {};
  size_t i = 0;
  const uint32_t cp = NextUtf8(s, i);
  if (cp >= 0x10000) return std::string(s);
  std::string first;
  AppendUtf8(cp, first);
  return ChangeCase(first, /*upper=*/true) + std::string(s.substr(i));
}

}  // namespace rlid::jinja::internal

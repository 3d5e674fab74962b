// The Jinja-subset interpreter behind jinja/jinja.h. It is a port of @huggingface/jinja 0.5.11
// (lexer.ts, parser.ts, runtime.ts): the same preprocessing (lstrip_blocks, trim_blocks, the
// transformers `generation` tag), the same grammar and the same JavaScript value semantics
// (numbers are doubles, `==` is loose equality, strings measure length in UTF-16 units), so a
// chat template renders byte-for-byte as in transformers.js. Extensions only fill in where the
// reference throws (a few standard Jinja filters and tests); every runaway is a ConfigError.
// Where jinja2 through transformers' apply_chat_template differs, it is the reference now
// (tests/live/test_chat_templates.py): numbers print as Python's repr (2.0, 1e+20, exact big
// context integers), strip/trim/split use Python's whitespace and strip's argument, and
// str + non-str is an error.
// @huggingface/jinja is Copyright (c) 2023 Hugging Face, MIT License: see
// jinja/LICENSE.
#include "jinja/jinja.h"

#include <fmt/format.h>
#include <utf8proc.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_set>
#include <utility>
#include <vector>

#include "core/error.h"

namespace rlid::jinja {
namespace internal {

// ---- Unicode and JavaScript string helpers ------------------------------------------------------

// Decodes one code point at s[i] and advances i; an invalid byte reads as U+FFFD (1 byte), the
// way a decoder would hand the text to JavaScript.
uint32_t DecodeUtf8(std::string_view s, size_t& i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) {
    ++i;
    return b0;
  }
  int len = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : b0 >= 0xC0 ? 2 : 0;
  if (len == 0 || b0 > 0xF4 || i + len > s.size()) {
    ++i;
    return 0xFFFD;
  }
  uint32_t cp = b0 & (0x7F >> len);
  for (int k = 1; k < len; ++k) {
    const auto b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) {
      ++i;
      return 0xFFFD;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  static constexpr uint32_t kMin[5] = {0, 0, 0x80, 0x800, 0x10000};
  if (cp < kMin[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
    ++i;
    return 0xFFFD;
  }
  i += len;
  return cp;
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;  // a lone surrogate has no UTF-8 form
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

std::vector<uint32_t> CodePoints(std::string_view s) {
  std::vector<uint32_t> out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) out.push_back(DecodeUtf8(s, i));
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
  return IsJsSpace(DecodeUtf8(s, j)) ? j - i : 0;
}

std::string_view JsTrimStart(std::string_view s) {
  size_t i = 0;
  while (size_t n = JsSpaceAt(s, i)) i += n;
  return s.substr(i);
}

std::string_view JsTrimEnd(std::string_view s) {
  size_t end = 0;  // end of the last non-space code point
  for (size_t i = 0; i < s.size();) {
    if (!IsJsSpace(DecodeUtf8(s, i))) end = i;
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
      if (!strippable(DecodeUtf8(s, next))) break;
      begin = next;
    }
  }
  size_t end = s.size();
  if (back) {
    end = begin;  // end of the last code point kept
    for (size_t i = begin; i < s.size();) {
      if (!strippable(DecodeUtf8(s, i))) end = i;
    }
  }
  return s.substr(begin, end - begin);
}

// String.prototype.length: UTF-16 code units.
size_t Utf16Length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size();) n += DecodeUtf8(s, i) >= 0x10000 ? 2 : 1;
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
    const uint32_t cp = DecodeUtf8(s, i);
    const uint32_t before = prev;
    prev = cp;
    if (!upper && cp == 0x3A3 && IsCasedLetter(before)) {
      size_t j = i;
      const bool final_sigma = j >= s.size() || !IsCasedLetter(DecodeUtf8(s, j));
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
  const uint32_t cp = DecodeUtf8(s, i);
  if (cp >= 0x10000) return std::string(s);
  std::string first;
  AppendUtf8(cp, first);
  return ChangeCase(first, /*upper=*/true) + std::string(s.substr(i));
}

// ---- JavaScript number formatting and parsing ---------------------------------------------------

// Number.prototype.toString(): the shortest round-trip digits, laid out as ECMA-262 says.
std::string JsNumber(double x) {
  if (std::isnan(x)) return "NaN";
  if (x == 0) return "0";
  if (std::isinf(x)) return x < 0 ? "-Infinity" : "Infinity";
  if (x < 0) return "-" + JsNumber(-x);
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, res.ptr);  // d[.ddd]e[+-]XX
  const size_t e_pos = sci.find('e');
  std::string digits = sci.substr(0, 1) + (e_pos > 2 ? sci.substr(2, e_pos - 2) : "");
  const int exp10 = std::stoi(sci.substr(e_pos + 1));
  const int k = static_cast<int>(digits.size());
  const int n = exp10 + 1;
  if (k <= n && n <= 21) return digits + std::string(n - k, '0');
  if (0 < n && n <= 21) return digits.substr(0, n) + "." + digits.substr(n);
  if (-6 < n && n <= 0) return "0." + std::string(-n, '0') + digits;
  const int e = n - 1;
  std::string exp = std::string(e < 0 ? "-" : "+") + std::to_string(std::abs(e));
  if (k == 1) return digits + "e" + exp;
  return digits.substr(0, 1) + "." + digits.substr(1) + "e" + exp;
}

// Python's repr(float), which str(), json.dumps and so jinja2 write: the shortest round-trip
// digits, positional for 1e-4 <= |x| < 1e16 (with ".0" when integral), else d.ddde+XX.
std::string PyFloatRepr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x < 0 ? "-inf" : "inf";
  if (x == 0) return std::signbit(x) ? "-0.0" : "0.0";
  if (x < 0) return "-" + PyFloatRepr(-x);
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  const std::string sci(buf, res.ptr);  // d[.ddd]e[+-]XX
  const size_t e_pos = sci.find('e');
  const std::string digits = sci.substr(0, 1) + (e_pos > 2 ? sci.substr(2, e_pos - 2) : "");
  const int decpt = std::stoi(sci.substr(e_pos + 1)) + 1;  // digits before the point
  const int k = static_cast<int>(digits.size());
  if (decpt > -4 && decpt <= 16) {
    if (decpt <= 0) return "0." + std::string(-decpt, '0') + digits;
    if (decpt >= k) return digits + std::string(decpt - k, '0') + ".0";
    return digits.substr(0, decpt) + "." + digits.substr(decpt);
  }
  const int e = decpt - 1;
  return (k == 1 ? digits : digits.substr(0, 1) + "." + digits.substr(1)) +
         fmt::format("e{}{:02d}", e < 0 ? '-' : '+', std::abs(e));
}

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// The length of the StrDecimalLiteral prefix of s (no sign, no "Infinity"), 0 if none.
size_t DecimalPrefix(std::string_view s) {
  size_t i = 0;
  size_t int_digits = 0, frac_digits = 0;
  while (i < s.size() && IsDigit(s[i])) ++i, ++int_digits;
  if (i < s.size() && s[i] == '.') {
    size_t j = i + 1;
    while (j < s.size() && IsDigit(s[j])) ++j, ++frac_digits;
    if (int_digits + frac_digits > 0) i = j;
  }
  if (int_digits + frac_digits == 0) return 0;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    size_t j = i + 1;
    if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
    const size_t exp_start = j;
    while (j < s.size() && IsDigit(s[j])) ++j;
    if (j > exp_start) i = j;
  }
  return i;
}

double ParseDecimal(std::string_view s) {
  std::string copy(s);
  return std::strtod(copy.c_str(), nullptr);
}

// parseFloat(): the longest decimal prefix after leading whitespace, or NaN.
double JsParseFloat(std::string_view s) {
  s = JsTrimStart(s);
  double sign = 1;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    if (s[0] == '-') sign = -1;
    s.remove_prefix(1);
  }
  if (s.substr(0, 8) == "Infinity") return sign * std::numeric_limits<double>::infinity();
  const size_t n = DecimalPrefix(s);
  if (n == 0) return std::numeric_limits<double>::quiet_NaN();
  return sign * ParseDecimal(s.substr(0, n));
}

// parseInt(s, 10): leading whitespace, a sign, then decimal digits up to the first non-digit.
double JsParseInt(std::string_view s) {
  s = JsTrimStart(s);
  double sign = 1;
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) {
    if (s[0] == '-') sign = -1;
    s.remove_prefix(1);
  }
  size_t n = 0;
  while (n < s.size() && IsDigit(s[n])) ++n;
  if (n == 0) return std::numeric_limits<double>::quiet_NaN();
  return sign * ParseDecimal(s.substr(0, n));
}

// ToNumber(string) as loose equality uses it: "" -> 0, whitespace trimmed, hex/octal/binary
// literals, Infinity; anything else NaN.
double JsStringToNumber(std::string_view s) {
  s = JsTrim(s);
  if (s.empty()) return 0;
  if (s.size() > 2 && s[0] == '0' && std::strchr("xXoObB", s[1]) != nullptr) {
    const int base = (s[1] == 'x' || s[1] == 'X') ? 16 : (s[1] == 'o' || s[1] == 'O') ? 8 : 2;
    double value = 0;
    for (char c : s.substr(2)) {
      int d = IsDigit(c)               ? c - '0'
              : (c >= 'a' && c <= 'f') ? c - 'a' + 10
              : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                       : 99;
      if (d >= base) return std::numeric_limits<double>::quiet_NaN();
      value = value * base + d;
    }
    return value;
  }
  double sign = 1;
  std::string_view body = s;
  if (body[0] == '+' || body[0] == '-') {
    if (body[0] == '-') sign = -1;
    body.remove_prefix(1);
  }
  if (body == "Infinity") return sign * std::numeric_limits<double>::infinity();
  const size_t n = DecimalPrefix(body);
  if (n == 0 || n != body.size()) return std::numeric_limits<double>::quiet_NaN();
  return sign * ParseDecimal(body);
}

// JSON.stringify(string); with ensure_ascii, every UTF-16 unit >= 0x7f becomes \uXXXX.
void AppendJsonString(std::string_view s, bool ensure_ascii, std::string& out) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\b':
          out += "\\b";
          break;
        case '\f':
          out += "\\f";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        default:
          if (c < 0x20 || (ensure_ascii && c == 0x7F)) {
            out += fmt::format("\\u{:04x}", c);
          } else {
            out += static_cast<char>(c);
          }
      }
      continue;
    }
    const uint32_t cp = DecodeUtf8(s, i);
    if (!ensure_ascii) {
      AppendUtf8(cp, out);
    } else if (cp >= 0x10000) {
      const uint32_t v = cp - 0x10000;
      out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
    } else {
      out += fmt::format("\\u{:04x}", cp);
    }
  }
  out += '"';
}

// ---- Source text: preprocessing with an offset map ----------------------------------------------

// Preprocessed template text; origin[i] is the offset in the original source of text[i], so
// errors name the line and column the author wrote.
struct Mapped {
  std::string text;
  std::vector<uint32_t> origin;
  void Push(char c, uint32_t at) {
    text += c;
    origin.push_back(at);
  }
  void Copy(const Mapped& from, size_t begin, size_t end) {
    text.append(from.text, begin, end - begin);
    origin.insert(origin.end(), from.origin.begin() + begin, from.origin.begin() + end);
  }
};

bool IsLineTerminatorBefore(std::string_view s, size_t i) {
  if (i == 0) return true;
  if (s[i - 1] == '\n' || s[i - 1] == '\r') return true;
  // U+2028 / U+2029 are E2 80 A8 / E2 80 A9.
  return i >= 3 && s.substr(i - 3, 2) == "\xE2\x80" && (s[i - 1] == '\xA8' || s[i - 1] == '\xA9');
}

// template.replace(/^[ \t]*({[#%-])/gm, "$1")
Mapped LstripBlocks(const Mapped& in) {
  Mapped out;
  const std::string& s = in.text;
  size_t i = 0;
  while (i < s.size()) {
    if (IsLineTerminatorBefore(s, i)) {
      size_t j = i;
      while (j < s.size() && (s[j] == ' ' || s[j] == '\t')) ++j;
      if (j + 1 < s.size() && s[j] == '{' &&
          (s[j + 1] == '#' || s[j + 1] == '%' || s[j + 1] == '-')) {
        out.Copy(in, j, j + 2);
        i = j + 2;
        continue;
      }
    }
    out.Copy(in, i, i + 1);
    ++i;
  }
  return out;
}

// template.replace(/([#%-]})\n/g, "$1")
Mapped TrimBlocks(const Mapped& in) {
  Mapped out;
  const std::string& s = in.text;
  size_t i = 0;
  while (i < s.size()) {
    if (i + 2 < s.size() && (s[i] == '#' || s[i] == '%' || s[i] == '-') && s[i + 1] == '}' &&
        s[i + 2] == '\n') {
      out.Copy(in, i, i + 2);
      i += 3;
      continue;
    }
    out.Copy(in, i, i + 1);
    ++i;
  }
  return out;
}

// The end of a `{%-? (end)?generation -?%}` tag starting at s[i] ("{%"), or 0; sets the flags.
size_t GenerationTagEnd(std::string_view s, size_t i, bool& lstrip, bool& rstrip) {
  size_t j = i + 2;
  lstrip = j < s.size() && s[j] == '-';
  if (lstrip) ++j;
  while (size_t n = JsSpaceAt(s, j)) j += n;
  if (s.substr(j, 3) == "end") j += 3;
  if (s.substr(j, 10) != "generation") return 0;
  j += 10;
  while (size_t n = JsSpaceAt(s, j)) j += n;
  rstrip = j < s.size() && s[j] == '-';
  if (rstrip) ++j;
  if (s.substr(j, 2) != "%}") return 0;
  return j + 2;
}

// template.replace(/(\s*){%(-?)\s*(?:end)?generation\s*(-?)%}(\s*)/gs, ...): the transformers
// `generation` tag vanishes, taking adjacent whitespace along where it carries a `-`.
Mapped StripGenerationTags(const Mapped& in) {
  const std::string& s = in.text;
  if (s.find("generation") == std::string::npos) return in;
  Mapped out;
  size_t pos = 0;  // where the regex resumes scanning
  for (size_t q = s.find("{%"); q != std::string::npos; q = s.find("{%", q + 1)) {
    if (q < pos) continue;
    bool lstrip = false, rstrip = false;
    const size_t end = GenerationTagEnd(s, q, lstrip, rstrip);
    if (end == 0) continue;
    // The whitespace run before the tag, back to `pos` at most.
    size_t ws = q;
    while (ws > pos) {
      size_t back = ws - 1;
      while (back > pos && (static_cast<unsigned char>(s[back]) & 0xC0) == 0x80) --back;
      if (JsSpaceAt(s, back) != ws - back) break;
      ws = back;
    }
    size_t after = end;
    while (size_t n = JsSpaceAt(s, after)) after += n;
    out.Copy(in, pos, lstrip ? ws : q);
    if (!rstrip) out.Copy(in, end, after);
    pos = after;
    q = after == 0 ? 0 : after - 1;
  }
  out.Copy(in, pos, s.size());
  return out;
}

// ---- Lexer ------------------------------------------------------------------------------------

enum class Tok {
  kText,
  kNumber,
  kString,
  kIdent,
  kEquals,
  kOpenParen,
  kCloseParen,
  kOpenStatement,
  kCloseStatement,
  kOpenExpression,
  kCloseExpression,
  kOpenBracket,
  kCloseBracket,
  kOpenCurly,
  kCloseCurly,
  kComma,
  kDot,
  kColon,
  kPipe,
  kAdditive,
  kMultiplicative,
  kPower,
  kComparison,
  kUnary,
  kComment,
  kEnd
};

struct Token {
  Tok type;
  std::string value;
  size_t pos;  // offset in the original source
};

}  // namespace internal

// ---- AST --------------------------------------------------------------------------------------

namespace internal {

enum class Kind {
  kText,
  kInteger,
  kFloat,
  kString,
  kIdentifier,
  kArray,
  kTuple,
  kObject,
  kMember,
  kSlice,
  kCall,
  kKeywordArg,
  kSpread,
  kKeywordSpread,
  kBinary,
  kUnary,
  kFilter,
  kTest,
  kSelect,
  kTernary,
  kSet,
  kIf,
  kFor,
  kMacro,
  kCallBlock,
  kFilterBlock,
  kBreak,
  kContinue
};

struct Node;
using NodePtr = std::unique_ptr<Node>;

// One AST node; which fields are used depends on `kind` (see the parser).
struct Node {
  Kind kind;
  size_t pos = 0;
  std::string str;  // identifier, string literal, operator, test or macro name
  double number = 0;
  bool flag = false;  // member: computed; test: negated; call block: has caller args
  NodePtr x, y, z;
  std::vector<NodePtr> a, b;
  std::vector<std::vector<NodePtr>> blocks;  // if: one body per condition in `a`, then else

  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  // Iterative, so a tree as deep as the parser allows never recurses on destruction.
  ~Node() {
    std::vector<NodePtr> pending;
    MoveChildren(pending);
    while (!pending.empty()) {
      NodePtr n = std::move(pending.back());
      pending.pop_back();
      if (n) n->MoveChildren(pending);
    }
  }
  void MoveChildren(std::vector<NodePtr>& out) {
    for (NodePtr* p : {&x, &y, &z}) {
      if (*p) out.push_back(std::move(*p));
    }
    for (auto* list : {&a, &b}) {
      for (auto& c : *list) out.push_back(std::move(c));
      list->clear();
    }
    for (auto& block : blocks) {
      for (auto& c : block) out.push_back(std::move(c));
    }
    blocks.clear();
  }
};

}  // namespace internal

struct Template::Program {
  std::string name;  // says which template in messages; may be empty
  std::string source;
  std::vector<size_t> line_starts;
  std::vector<internal::NodePtr> body;

  std::string Where(size_t pos) const {
    const auto it = std::upper_bound(line_starts.begin(), line_starts.end(), pos);
    const size_t line = static_cast<size_t>(it - line_starts.begin());
    return fmt::format("{}:{}", line, pos - line_starts[line - 1] + 1);
  }
  [[noreturn]] void Fail(size_t pos, const std::string& message, std::string hint = {}) const {
    const std::string which = name.empty() ? "chat template" : fmt::format("chat template of {}", name);
    throw ConfigError(fmt::format("{} {}: {}", which, Where(pos), message), std::move(hint));
  }
};

namespace internal {

using Program = Template::Program;

constexpr const char* kSubsetHint =
    "the supported Jinja subset is what @huggingface/jinja implements: if/elif/else, for (with "
    "else, loop.*), set (incl. namespaces and blocks), macro, call, filter blocks, break/continue";

class Lexer {
 public:
  Lexer(const Mapped& src, const Program& program) : s_(src.text), src_(src), program_(program) {}

  std::vector<Token> Run() {
    while (i_ < s_.size()) {
      const Tok last = tokens_.empty() ? Tok::kEnd : tokens_.back().type;
      if (last == Tok::kEnd || last == Tok::kCloseStatement || last == Tok::kCloseExpression ||
          last == Tok::kComment) {
        const size_t start = i_;
        while (i_ < s_.size() && !(s_[i_] == '{' && i_ + 1 < s_.size() &&
                                   (s_[i_ + 1] == '%' || s_[i_ + 1] == '{' || s_[i_ + 1] == '#'))) {
          ++i_;
        }
        if (i_ > start) {
          Push(Tok::kText, s_.substr(start, i_ - start), start);
          continue;
        }
      }
      if (At("{#")) {
        LexComment();
        continue;
      }
      if (At("{%-")) {
        StripTrailingWhitespace();
        Push(Tok::kOpenStatement, "{%", i_);
        i_ += 3;
        continue;
      }
      if (At("{{-")) {
        StripTrailingWhitespace();
        Push(Tok::kOpenExpression, "{{", i_);
        curly_depth_ = 0;
        i_ += 3;
        continue;
      }
      while (size_t n = JsSpaceAt(s_, i_)) i_ += n;
      if (i_ >= s_.size()) Fail(i_, "unexpected end of template inside a tag");
      if (At("-%}")) {
        Push(Tok::kCloseStatement, "%}", i_);
        i_ += 3;
        SkipLeadingWhitespace();
        continue;
      }
      if (At("-}}")) {
        Push(Tok::kCloseExpression, "}}", i_);
        i_ += 3;
        SkipLeadingWhitespace();
        continue;
      }
      const char c = s_[i_];
      if ((c == '-' || c == '+') && LexUnary()) continue;
      if (LexOperator()) continue;
      if (c == '\'' || c == '"') {
        LexString();
        continue;
      }
      if (IsDigit(c)) {
        const size_t start = i_;
        std::string num = Digits();
        if ((tokens_.empty() || tokens_.back().type != Tok::kDot) && i_ + 1 < s_.size() &&
            s_[i_] == '.' && IsDigit(s_[i_ + 1])) {
          ++i_;
          num += "." + Digits();
        }
        Push(Tok::kNumber, num, start);
        continue;
      }
      if (IsAsciiWord(c)) {
        const size_t start = i_;
        while (i_ < s_.size() && IsAsciiWord(s_[i_])) ++i_;
        if (i_ >= s_.size()) Fail(i_, "unexpected end of template inside a tag");
        Push(Tok::kIdent, s_.substr(start, i_ - start), start);
        continue;
      }
      size_t next = i_;
      std::string character;
      AppendUtf8(DecodeUtf8(s_, next), character);
      Fail(i_, fmt::format("unexpected character '{}'", character));
    }
    return std::move(tokens_);
  }

 private:
  [[noreturn]] void Fail(size_t at, const std::string& message) const {
    program_.Fail(Origin(at), message, "close every {{ with }}, {% with %} and {# with #}");
  }
  size_t Origin(size_t at) const {
    return at < src_.origin.size() ? src_.origin[at] : program_.source.size();
  }
  bool At(std::string_view seq) const { return s_.compare(i_, seq.size(), seq) == 0; }
  void Push(Tok type, std::string value, size_t at) {
    tokens_.push_back(Token{type, std::move(value), Origin(at)});
  }
  void StripTrailingWhitespace() {
    if (!tokens_.empty() && tokens_.back().type == Tok::kText) {
      tokens_.back().value = std::string(JsTrimEnd(tokens_.back().value));
      if (tokens_.back().value.empty()) tokens_.pop_back();
    }
  }
  void SkipLeadingWhitespace() {
    while (size_t n = JsSpaceAt(s_, i_)) i_ += n;
  }
  // Digits at i_; a number may not run to the end of the template (the reference's rule).
  std::string Digits() {
    const size_t start = i_;
    while (i_ < s_.size() && IsDigit(s_[i_])) ++i_;
    if (i_ >= s_.size()) Fail(i_, "unexpected end of template inside a tag");
    return s_.substr(start, i_ - start);
  }
  void LexComment() {
    const size_t open = i_;
    i_ += 2;
    const bool strip_before = i_ < s_.size() && s_[i_] == '-';
    if (strip_before) ++i_;
    const size_t close = s_.find("#}", i_);
    if (close == std::string::npos) Fail(open, "unclosed comment: expected '#}'");
    const bool strip_after = close > i_ && s_[close - 1] == '-';
    if (strip_before) StripTrailingWhitespace();
    Push(Tok::kComment, "", open);
    i_ = close + 2;
    if (strip_after) SkipLeadingWhitespace();
  }
  // A '-' or '+' that starts a value is a sign (folded into a number literal when digits
  // follow); after a value it is the binary operator, left to LexOperator.
  bool LexUnary() {
    const char c = s_[i_];
    if (tokens_.empty() || tokens_.back().type == Tok::kText) {
      Fail(i_, fmt::format("unexpected character '{}'", c));
    }
    switch (tokens_.back().type) {
      case Tok::kIdent:
      case Tok::kNumber:
      case Tok::kString:
      case Tok::kCloseParen:
      case Tok::kCloseBracket:
        return false;
      default:
        break;
    }
    const size_t start = i_++;
    std::string num;
    if (i_ < s_.size() && IsDigit(s_[i_])) {
      num = Digits();
      if (i_ + 1 < s_.size() && s_[i_] == '.' && IsDigit(s_[i_ + 1])) {
        ++i_;
        num += "." + Digits();
      }
    } else if (i_ >= s_.size()) {
      Fail(i_, "unexpected end of template inside a tag");
    }
    if (num.empty()) {
      Push(Tok::kUnary, std::string(1, c), start);
    } else {
      Push(Tok::kNumber, c + num, start);
    }
    return true;
  }
  bool LexOperator() {
    static const std::pair<std::string_view, Tok> kTable[] = {
        {"{%", Tok::kOpenStatement},  {"%}", Tok::kCloseStatement},
        {"{{", Tok::kOpenExpression}, {"}}", Tok::kCloseExpression},
        {"(", Tok::kOpenParen},       {")", Tok::kCloseParen},
        {"{", Tok::kOpenCurly},       {"}", Tok::kCloseCurly},
        {"[", Tok::kOpenBracket},     {"]", Tok::kCloseBracket},
        {",", Tok::kComma},           {".", Tok::kDot},
        {":", Tok::kColon},           {"|", Tok::kPipe},
        {"<=", Tok::kComparison},     {">=", Tok::kComparison},
        {"==", Tok::kComparison},     {"!=", Tok::kComparison},
        {"<", Tok::kComparison},      {">", Tok::kComparison},
        {"+", Tok::kAdditive},        {"-", Tok::kAdditive},
        {"~", Tok::kAdditive},        {"**", Tok::kPower},
        {"*", Tok::kMultiplicative},  {"//", Tok::kMultiplicative},
        {"/", Tok::kMultiplicative},  {"%", Tok::kMultiplicative},
        {"=", Tok::kEquals}};
    for (const auto& [seq, type] : kTable) {
      if (seq == "}}" && curly_depth_ > 0) continue;  // "}}" closes nested dict literals
      if (!At(seq)) continue;
      Push(type, std::string(seq), i_);
      if (type == Tok::kOpenExpression) curly_depth_ = 0;
      if (type == Tok::kOpenCurly) ++curly_depth_;
      if (type == Tok::kCloseCurly) --curly_depth_;
      i_ += seq.size();
      return true;
    }
    return false;
  }
  int HexValue(size_t at, size_t len) {
    if (at + len > s_.size()) return -1;
    int v = 0;
    for (size_t k = 0; k < len; ++k) {
      const char h = s_[at + k];
      const int d = IsDigit(h)               ? h - '0'
                    : (h >= 'a' && h <= 'f') ? h - 'a' + 10
                    : (h >= 'A' && h <= 'F') ? h - 'A' + 10
                                             : -1;
      if (d < 0) return -1;
      v = v * 16 + d;
    }
    return v;
  }
  void LexString() {
    const char quote = s_[i_];
    const size_t start = i_++;
    std::string value;
    uint32_t pending_high = 0;  // a \uD8xx waiting for its low surrogate
    auto flush_high = [&] {
      if (pending_high != 0) AppendUtf8(0xFFFD, value);
      pending_high = 0;
    };
    while (true) {
      if (i_ >= s_.size()) Fail(start, "unterminated string literal");
      const char c = s_[i_];
      if (c == quote) break;
      if (c != '\\') {
        flush_high();
        value += c;
        ++i_;
        continue;
      }
      if (++i_ >= s_.size()) Fail(start, "unterminated string literal");
      const char e = s_[i_++];
      if (e == 'x' || e == 'u') {
        const size_t len = e == 'x' ? 2 : 4;
        const int v = HexValue(i_, len);
        if (v < 0) Fail(i_ - 2, fmt::format("invalid hexadecimal escape sequence \\{}", e));
        i_ += len;
        const auto unit = static_cast<uint32_t>(v);
        if (unit >= 0xDC00 && unit <= 0xDFFF && pending_high != 0) {
          AppendUtf8(0x10000 + ((pending_high - 0xD800) << 10) + (unit - 0xDC00), value);
          pending_high = 0;
        } else {
          flush_high();
          if (unit >= 0xD800 && unit <= 0xDBFF) {
            pending_high = unit;
          } else {
            AppendUtf8(unit, value);
          }
        }
        continue;
      }
      flush_high();
      switch (e) {
        case 'n':
          value += '\n';
          break;
        case 't':
          value += '\t';
          break;
        case 'r':
          value += '\r';
          break;
        case 'b':
          value += '\b';
          break;
        case 'f':
          value += '\f';
          break;
        case 'v':
          value += '\v';
          break;
        case '\'':
          value += '\'';
          break;
        case '"':
          value += '"';
          break;
        case '\\':
          value += '\\';
          break;
        default:
          Fail(i_ - 2, fmt::format("unexpected escaped character '{}'", e));
      }
    }
    flush_high();
    Push(Tok::kString, std::move(value), start);
    ++i_;  // the closing quote
  }

  const std::string& s_;
  const Mapped& src_;
  const Program& program_;
  size_t i_ = 0;
  int curly_depth_ = 0;
  std::vector<Token> tokens_;
};

// ---- Parser -----------------------------------------------------------------------------------

// Deepest nesting the parser accepts (statements, parentheses, operator chains together); it
// keeps parsing, evaluating and destroying the tree within a small stack.
constexpr int kMaxParseDepth = 200;

class Parser {
 public:
  Parser(std::vector<Token> tokens, const Program& program)
      : tokens_(std::move(tokens)), program_(program) {
    end_ = Token{Tok::kEnd, "", program.source.size()};
  }

  std::vector<NodePtr> Run() {
    std::vector<NodePtr> body;
    while (current_ < tokens_.size()) Append(body, ParseAny());
    return body;
  }

 private:
  struct Guard {
    Guard(Parser& p, size_t pos) : p(p) {
      if (++p.depth_ > kMaxParseDepth) {
        p.program_.Fail(pos, fmt::format("template nests deeper than {} levels", kMaxParseDepth),
                        "flatten the expression or the blocks");
      }
    }
    ~Guard() { --p.depth_; }
    Parser& p;
  };

  const Token& Peek(size_t ahead = 0) const {
    return current_ + ahead < tokens_.size() ? tokens_[current_ + ahead] : end_;
  }
  bool Is(Tok type) const { return Peek().type == type; }
  bool IsIdent(std::string_view name, size_t ahead = 0) const {
    return Peek(ahead).type == Tok::kIdent && Peek(ahead).value == name;
  }
  bool IsStatement(std::initializer_list<std::string_view> names) const {
    if (Peek().type != Tok::kOpenStatement || Peek(1).type != Tok::kIdent) return false;
    return std::find(names.begin(), names.end(), Peek(1).value) != names.end();
  }
  [[noreturn]] void Fail(const std::string& message, std::string hint = {}) const {
    program_.Fail(Peek().pos, message, std::move(hint));
  }
  static const char* Describe(Tok t) {
    switch (t) {
      case Tok::kText:
        return "text";
      case Tok::kNumber:
        return "a number";
      case Tok::kString:
        return "a string";
      case Tok::kIdent:
        return "a name";
      case Tok::kEquals:
        return "'='";
      case Tok::kOpenParen:
        return "'('";
      case Tok::kCloseParen:
        return "')'";
      case Tok::kOpenStatement:
        return "'{%'";
      case Tok::kCloseStatement:
        return "'%}'";
      case Tok::kOpenExpression:
        return "'{{'";
      case Tok::kCloseExpression:
        return "'}}'";
      case Tok::kOpenBracket:
        return "'['";
      case Tok::kCloseBracket:
        return "']'";
      case Tok::kOpenCurly:
        return "'{'";
      case Tok::kCloseCurly:
        return "'}'";
      case Tok::kComma:
        return "','";
      case Tok::kDot:
        return "'.'";
      case Tok::kColon:
        return "':'";
      case Tok::kPipe:
        return "'|'";
      case Tok::kAdditive:
      case Tok::kMultiplicative:
      case Tok::kPower:
      case Tok::kComparison:
      case Tok::kUnary:
        return "an operator";
      case Tok::kComment:
        return "a comment";
      case Tok::kEnd:
        return "the end of the template";
    }
    return "?";
  }
  const Token& Expect(Tok type, std::string_view what) {
    if (Peek().type != type) {
      Fail(fmt::format("expected {}, found {}{}", what, Describe(Peek().type),
                       Peek().value.empty() || Peek().type == Tok::kText
                           ? ""
                           : fmt::format(" '{}'", Peek().value)));
    }
    return tokens_[current_++];
  }
  void ExpectIdent(std::string_view name) {
    if (!IsIdent(name)) Fail(fmt::format("expected '{}'", name));
    ++current_;
  }
  void ExpectEnd(std::string_view name) {
    if (current_ >= tokens_.size()) {
      Fail(fmt::format("unclosed block: expected {{% {} %}}", name));
    }
    Expect(Tok::kOpenStatement, "'{%'");
    ExpectIdent(name);
    Expect(Tok::kCloseStatement, "'%}'");
  }
  NodePtr Make(Kind kind, size_t pos) {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    n->pos = pos;
    return n;
  }
  static void Append(std::vector<NodePtr>& body, NodePtr n) {
    if (n) body.push_back(std::move(n));
  }
  // Statements up to one of `ends` (not consumed); the end of the tokens is an unclosed block.
  std::vector<NodePtr> ParseBody(std::initializer_list<std::string_view> ends,
                                 std::string_view block) {
    std::vector<NodePtr> body;
    while (!IsStatement(ends)) {
      if (current_ >= tokens_.size()) {
        Fail(fmt::format("unclosed {{% {} %}}: expected {{% end{} %}}", block, block),
             fmt::format("close the {{% {} %}} block", block));
      }
      Append(body, ParseAny());
    }
    return body;
  }

  // A statement, an expression tag or text; comments parse to nothing.
  NodePtr ParseAny() {
    Guard guard(*this, Peek().pos);
    const Token& t = Peek();
    switch (t.type) {
      case Tok::kComment:
        ++current_;
        return nullptr;
      case Tok::kText: {
        auto n = Make(Kind::kText, t.pos);
        n->str = t.value;
        ++current_;
        return n;
      }
      case Tok::kOpenStatement:
        return ParseStatement();
      case Tok::kOpenExpression: {
        ++current_;
        auto n = ParseExpression();
        Expect(Tok::kCloseExpression, "'}}'");
        return n;
      }
      default:
        Fail(fmt::format("unexpected {}", Describe(t.type)));
    }
  }

  NodePtr ParseStatement() {
    Expect(Tok::kOpenStatement, "'{%'");
    if (!Is(Tok::kIdent)) Fail("expected a statement name after '{%'", kSubsetHint);
    const Token& name_token = Peek();
    const std::string name = name_token.value;
    const size_t pos = name_token.pos;
    ++current_;
    if (name == "set") return ParseSet(pos);
    if (name == "if") {
      auto n = ParseIf(pos);
      ExpectEnd("endif");
      return n;
    }
    if (name == "for") {
      auto n = ParseFor(pos);
      ExpectEnd("endfor");
      return n;
    }
    if (name == "macro") {
      auto n = Make(Kind::kMacro, pos);
      NodePtr id = ParsePrimary();
      if (id->kind != Kind::kIdentifier) program_.Fail(id->pos, "expected a macro name");
      n->str = id->str;
      n->a = ParseArgs(/*parameters=*/true);
      Expect(Tok::kCloseStatement, "'%}'");
      n->b = ParseBody({"endmacro"}, "macro");
      ExpectEnd("endmacro");
      return n;
    }
    if (name == "call") {
      auto n = Make(Kind::kCallBlock, pos);
      if (Is(Tok::kOpenParen)) {
        n->flag = true;
        n->a = ParseArgs(/*parameters=*/true);
      }
      NodePtr callee = ParsePrimary();
      if (callee->kind != Kind::kIdentifier) {
        program_.Fail(callee->pos, "expected a macro name after 'call'");
      }
      auto call = Make(Kind::kCall, callee->pos);
      call->a = ParseArgs(/*parameters=*/false);
      call->x = std::move(callee);
      n->x = std::move(call);
      Expect(Tok::kCloseStatement, "'%}'");
      n->b = ParseBody({"endcall"}, "call");
      ExpectEnd("endcall");
      return n;
    }
    if (name == "break" || name == "continue") {
      Expect(Tok::kCloseStatement, "'%}'");
      return Make(name == "break" ? Kind::kBreak : Kind::kContinue, pos);
    }
    if (name == "filter") {
      auto n = Make(Kind::kFilterBlock, pos);
      NodePtr filter = ParsePrimary();
      if (filter->kind == Kind::kIdentifier && Is(Tok::kOpenParen)) {
        filter = ParseCall(std::move(filter));
      }
      n->y = std::move(filter);
      Expect(Tok::kCloseStatement, "'%}'");
      n->a = ParseBody({"endfilter"}, "filter");
      ExpectEnd("endfilter");
      return n;
    }
    program_.Fail(pos, fmt::format("unsupported statement {{% {} %}}", name),
                  name == "include" || name == "extends" || name == "import" || name == "from"
                      ? std::string("templates are self-contained here: inline the other "
                                    "template's text; ") +
                            kSubsetHint
                      : std::string(kSubsetHint));
  }

  NodePtr ParseSet(size_t pos) {
    auto n = Make(Kind::kSet, pos);
    n->x = ParseExpressionSequence(/*primary=*/false);
    if (Is(Tok::kEquals)) {
      ++current_;
      n->y = ParseExpressionSequence(/*primary=*/false);
    } else {
      Expect(Tok::kCloseStatement, "'%}' or '='");
      n->a = ParseBody({"endset"}, "set");
      Expect(Tok::kOpenStatement, "'{%'");
      ExpectIdent("endset");
    }
    Expect(Tok::kCloseStatement, "'%}'");
    return n;
  }

  // if/elif chains become one node with a condition and a body per branch (no recursion per
  // elif); blocks.back() is the else body when blocks has one more entry than conditions.
  NodePtr ParseIf(size_t pos) {
    auto n = Make(Kind::kIf, pos);
    while (true) {
      n->a.push_back(ParseExpression());
      Expect(Tok::kCloseStatement, "'%}'");
      n->blocks.push_back(ParseBody({"elif", "else", "endif"}, "if"));
      if (IsStatement({"elif"})) {
        current_ += 2;
        continue;
      }
      if (IsStatement({"else"})) {
        current_ += 2;
        Expect(Tok::kCloseStatement, "'%}'");
        n->blocks.push_back(ParseBody({"endif"}, "if"));
      }
      return n;
    }
  }

  NodePtr ParseFor(size_t pos) {
    auto n = Make(Kind::kFor, pos);
    n->x = ParseExpressionSequence(/*primary=*/true);
    if (n->x->kind != Kind::kIdentifier && n->x->kind != Kind::kTuple) {
      program_.Fail(n->x->pos, "expected a loop variable name (or names) after 'for'");
    }
    if (!IsIdent("in")) Fail("expected 'in' after the loop variable");
    ++current_;
    n->y = ParseExpression();
    Expect(Tok::kCloseStatement, "'%}'");
    n->a = ParseBody({"endfor", "else"}, "for");
    if (IsStatement({"else"})) {
      current_ += 2;
      Expect(Tok::kCloseStatement, "'%}'");
      n->b = ParseBody({"endfor"}, "for");
    }
    return n;
  }

  NodePtr ParseExpressionSequence(bool primary) {
    const size_t pos = Peek().pos;
    NodePtr first = primary ? ParsePrimary() : ParseExpression();
    if (!Is(Tok::kComma)) return first;
    auto tuple = Make(Kind::kTuple, pos);
    tuple->a.push_back(std::move(first));
    while (true) {
      ++current_;  // the comma
      tuple->a.push_back(primary ? ParsePrimary() : ParseExpression());
      if (!Is(Tok::kComma)) break;
    }
    return tuple;
  }

  NodePtr ParseExpression() {
    Guard guard(*this, Peek().pos);
    NodePtr a = ParseOr();
    if (!IsIdent("if")) return a;
    const size_t pos = Peek().pos;
    ++current_;
    NodePtr test = ParseOr();
    if (IsIdent("else")) {
      ++current_;
      auto n = Make(Kind::kTernary, pos);
      n->x = std::move(test);
      n->y = std::move(a);
      n->z = ParseExpression();
      return n;
    }
    auto n = Make(Kind::kSelect, pos);
    n->x = std::move(a);
    n->y = std::move(test);
    return n;
  }

  // Left-associative chains grow the tree without recursing, so each link counts as a level.
  NodePtr Binary(std::string op, size_t pos, NodePtr left, NodePtr right, int& chain) {
    if (++chain > kMaxParseDepth) {
      program_.Fail(pos, fmt::format("operator chain longer than {} links", kMaxParseDepth),
                    "split the expression with {% set %}");
    }
    auto n = Make(Kind::kBinary, pos);
    n->str = std::move(op);
    n->x = std::move(left);
    n->y = std::move(right);
    return n;
  }

  NodePtr ParseOr() {
    NodePtr left = ParseAnd();
    int chain = 0;
    while (IsIdent("or")) {
      const size_t pos = Peek().pos;
      ++current_;
      left = Binary("or", pos, std::move(left), ParseAnd(), chain);
    }
    return left;
  }
  NodePtr ParseAnd() {
    NodePtr left = ParseNot();
    int chain = 0;
    while (IsIdent("and")) {
      const size_t pos = Peek().pos;
      ++current_;
      left = Binary("and", pos, std::move(left), ParseNot(), chain);
    }
    return left;
  }
  NodePtr ParseNot() {
    if (!IsIdent("not")) return ParseComparison();
    Guard guard(*this, Peek().pos);
    auto n = Make(Kind::kUnary, Peek().pos);
    n->str = "not";
    ++current_;
    n->x = ParseNot();
    return n;
  }
  NodePtr ParseComparison() {
    NodePtr left = ParseAdditive();
    int chain = 0;
    while (true) {
      const size_t pos = Peek().pos;
      std::string op;
      if (IsIdent("not") && IsIdent("in", 1)) {
        op = "not in";
        current_ += 2;
      } else if (IsIdent("in")) {
        op = "in";
        ++current_;
      } else if (Is(Tok::kComparison)) {
        op = tokens_[current_++].value;
      } else {
        break;
      }
      left = Binary(std::move(op), pos, std::move(left), ParseAdditive(), chain);
    }
    return left;
  }
  NodePtr ParseAdditive() {
    NodePtr left = ParseMultiplicative();
    int chain = 0;
    while (Is(Tok::kAdditive)) {
      const Token& t = tokens_[current_++];
      left = Binary(t.value, t.pos, std::move(left), ParseMultiplicative(), chain);
    }
    return left;
  }
  NodePtr ParseMultiplicative() {
    NodePtr left = ParsePower();
    int chain = 0;
    while (Is(Tok::kMultiplicative)) {
      const Token& t = tokens_[current_++];
      left = Binary(t.value, t.pos, std::move(left), ParsePower(), chain);
    }
    return left;
  }
  NodePtr ParsePower() {
    NodePtr left = ParseTest();
    int chain = 0;
    while (Is(Tok::kPower)) {
      const Token& t = tokens_[current_++];
      left = Binary(t.value, t.pos, std::move(left), ParseTest(), chain);
    }
    return left;
  }
  NodePtr ParseTest() {
    NodePtr operand = ParseFilter();
    int chain = 0;
    while (IsIdent("is")) {
      const size_t pos = Peek().pos;
      ++current_;
      const bool negate = IsIdent("not");
      if (negate) ++current_;
      NodePtr test = ParsePrimary();
      if (test->kind != Kind::kIdentifier) program_.Fail(test->pos, "expected a test name");
      if (++chain > kMaxParseDepth) program_.Fail(pos, "too many chained tests");
      auto n = Make(Kind::kTest, pos);
      n->x = std::move(operand);
      n->str = test->str;
      n->flag = negate;
      operand = std::move(n);
    }
    return operand;
  }
  NodePtr ParseFilter() {
    NodePtr operand = ParseSign();
    int chain = 0;
    while (Is(Tok::kPipe)) {
      const size_t pos = Peek().pos;
      ++current_;
      NodePtr filter = ParsePrimary();
      if (filter->kind != Kind::kIdentifier) program_.Fail(filter->pos, "expected a filter name");
      if (Is(Tok::kOpenParen)) filter = ParseCall(std::move(filter));
      if (++chain > kMaxParseDepth) program_.Fail(pos, "too many chained filters");
      auto n = Make(Kind::kFilter, pos);
      n->x = std::move(operand);
      n->y = std::move(filter);
      operand = std::move(n);
    }
    return operand;
  }
  NodePtr ParseSign() {
    const Token& t = Peek();
    if ((t.type == Tok::kUnary || t.type == Tok::kAdditive) && (t.value == "-" || t.value == "+")) {
      Guard guard(*this, t.pos);
      auto n = Make(Kind::kUnary, t.pos);
      n->str = t.value;
      ++current_;
      n->x = ParseSign();
      return n;
    }
    NodePtr member = ParseMember(ParsePrimary());
    if (Is(Tok::kOpenParen)) return ParseCall(std::move(member));
    return member;
  }
  // callee(args) followed by any .x / [i] / (args) suffixes, iteratively.
  NodePtr ParseCall(NodePtr callee) {
    int chain = 0;
    while (true) {
      if (++chain > kMaxParseDepth) program_.Fail(callee->pos, "too many chained calls");
      auto n = Make(Kind::kCall, callee->pos);
      n->a = ParseArgs(/*parameters=*/false);
      n->x = std::move(callee);
      callee = ParseMember(std::move(n));
      if (!Is(Tok::kOpenParen)) return callee;
    }
  }
  std::vector<NodePtr> ParseArgs(bool parameters) {
    Expect(Tok::kOpenParen, "'('");
    std::vector<NodePtr> args;
    std::vector<std::string> names;
    bool saw_keyword = false, saw_spread = false;
    while (!Is(Tok::kCloseParen)) {
      if (Is(Tok::kEnd)) Fail("expected ')'");
      const size_t pos = Peek().pos;
      const bool keyword_spread = Is(Tok::kPower);
      const bool positional_spread = Is(Tok::kMultiplicative) && Peek().value == "*";
      if (parameters && (keyword_spread || positional_spread)) {
        Fail("argument unpacking is not allowed in parameter declarations");
      }
      if (keyword_spread) {
        ++current_;
        auto n = Make(Kind::kKeywordSpread, pos);
        n->x = ParseExpression();
        args.push_back(std::move(n));
        if (Is(Tok::kComma)) ++current_;
        if (!Is(Tok::kCloseParen)) Fail("'**' must be applied to the final argument");
        break;
      }
      NodePtr argument;
      if (positional_spread) {
        if (saw_spread) Fail("only one '*' argument unpacking is allowed");
        saw_spread = true;
        ++current_;
        argument = Make(Kind::kSpread, pos);
        argument->x = ParseExpression();
      } else {
        argument = ParseExpression();
        if (Is(Tok::kEquals)) {
          ++current_;
          if (argument->kind != Kind::kIdentifier) {
            program_.Fail(argument->pos, parameters ? "expected a parameter name"
                                                    : "expected a keyword argument name");
          }
          auto kw = Make(Kind::kKeywordArg, argument->pos);
          kw->str = argument->str;
          kw->x = ParseExpression();
          argument = std::move(kw);
        }
        if (parameters) {
          if (argument->kind != Kind::kIdentifier && argument->kind != Kind::kKeywordArg) {
            program_.Fail(argument->pos, "expected a parameter name");
          }
          if (std::find(names.begin(), names.end(), argument->str) != names.end()) {
            program_.Fail(argument->pos, fmt::format("duplicate parameter '{}'", argument->str));
          }
          names.push_back(argument->str);
        }
        if (argument->kind == Kind::kKeywordArg) {
          saw_keyword = true;
        } else if (saw_keyword) {
          program_.Fail(argument->pos, parameters ? "a parameter without default follows one with"
                                                  : "positional arguments must come before keyword "
                                                    "arguments");
        } else if (saw_spread) {
          program_.Fail(argument->pos, "positional arguments must not follow '*' unpacking");
        }
      }
      args.push_back(std::move(argument));
      if (Is(Tok::kComma)) ++current_;
    }
    Expect(Tok::kCloseParen, "')'");
    return args;
  }
  // [i], [a:b:c] and the like; a slice keeps null for omitted parts.
  NodePtr ParseSubscript(size_t pos) {
    std::vector<NodePtr> parts;
    bool is_slice = false;
    while (!Is(Tok::kCloseBracket)) {
      if (Is(Tok::kEnd)) Fail("expected ']'");
      if (Is(Tok::kColon)) {
        parts.push_back(nullptr);
        ++current_;
        is_slice = true;
      } else {
        parts.push_back(ParseExpression());
        if (Is(Tok::kColon)) {
          ++current_;
          is_slice = true;
        }
      }
    }
    if (parts.empty()) program_.Fail(pos, "expected an index or a slice inside '[]'");
    if (!is_slice) return std::move(parts[0]);
    if (parts.size() > 3) program_.Fail(pos, "a slice takes at most 3 parts");
    auto n = Make(Kind::kSlice, pos);
    parts.resize(3);
    n->x = std::move(parts[0]);
    n->y = std::move(parts[1]);
    n->z = std::move(parts[2]);
    return n;
  }
  NodePtr ParseMember(NodePtr object) {
    int chain = 0;
    while (Is(Tok::kDot) || Is(Tok::kOpenBracket)) {
      const Token& op = tokens_[current_++];
      if (++chain > kMaxParseDepth) program_.Fail(op.pos, "too many chained member accesses");
      auto n = Make(Kind::kMember, op.pos);
      n->flag = op.type == Tok::kOpenBracket;
      if (n->flag) {
        Guard guard(*this, op.pos);
        n->y = ParseSubscript(op.pos);
        Expect(Tok::kCloseBracket, "']'");
      } else {
        n->y = ParsePrimary();
        if (n->y->kind != Kind::kIdentifier && n->y->kind != Kind::kInteger) {
          program_.Fail(n->y->pos, "expected a name or an integer after '.'");
        }
      }
      n->x = std::move(object);
      object = std::move(n);
    }
    return object;
  }
  NodePtr ParsePrimary() {
    Guard guard(*this, Peek().pos);
    if (current_ >= tokens_.size()) Fail("unexpected end of template: expected a value");
    const Token& t = tokens_[current_++];
    switch (t.type) {
      case Tok::kNumber: {
        auto n =
            Make(t.value.find('.') != std::string::npos ? Kind::kFloat : Kind::kInteger, t.pos);
        n->number = ParseDecimal(t.value);
        return n;
      }
      case Tok::kString: {
        auto n = Make(Kind::kString, t.pos);
        n->str = t.value;
        while (Is(Tok::kString)) n->str += tokens_[current_++].value;  // 'a' 'b' -> 'ab'
        return n;
      }
      case Tok::kIdent: {
        auto n = Make(Kind::kIdentifier, t.pos);
        n->str = t.value;
        return n;
      }
      case Tok::kOpenParen: {
        NodePtr n = ParseExpressionSequence(/*primary=*/false);
        Expect(Tok::kCloseParen, "')'");
        return n;
      }
      case Tok::kOpenBracket: {
        auto n = Make(Kind::kArray, t.pos);
        while (!Is(Tok::kCloseBracket)) {
          if (Is(Tok::kEnd)) Fail("expected ']'");
          n->a.push_back(ParseExpression());
          if (Is(Tok::kComma)) ++current_;
        }
        ++current_;
        return n;
      }
      case Tok::kOpenCurly: {
        auto n = Make(Kind::kObject, t.pos);
        while (!Is(Tok::kCloseCurly)) {
          if (Is(Tok::kEnd)) Fail("expected '}'");
          n->a.push_back(ParseExpression());
          Expect(Tok::kColon, "':' between a key and its value");
          n->b.push_back(ParseExpression());
          if (Is(Tok::kComma)) ++current_;
        }
        ++current_;
        return n;
      }
      default:
        program_.Fail(t.pos, fmt::format("unexpected {}", Describe(t.type)));
    }
  }

  std::vector<Token> tokens_;
  const Program& program_;
  Token end_;
  size_t current_ = 0;
  int depth_ = 0;
};

}  // namespace internal

// ---- Runtime values ---------------------------------------------------------------------------

namespace internal {

// The reference's runtime types; the names appear in error messages as the reference spells
// them. kTuple is an array to every check except those on the exact type name (the reference
// cannot serialize or unpack tuples); kKwargs is an object the same way.
enum class Type {
  kUndefined,
  kNull,
  kBool,
  kInteger,
  kFloat,
  kString,
  kArray,
  kTuple,
  kObject,
  kKwargs,
  kNamespace,
  kFunction
};

const char* TypeName(Type t) {
  switch (t) {
    case Type::kUndefined:
      return "UndefinedValue";
    case Type::kNull:
      return "NullValue";
    case Type::kBool:
      return "BooleanValue";
    case Type::kInteger:
      return "IntegerValue";
    case Type::kFloat:
      return "FloatValue";
    case Type::kString:
      return "StringValue";
    case Type::kArray:
      return "ArrayValue";
    case Type::kTuple:
      return "TupleValue";
    case Type::kObject:
      return "ObjectValue";
    case Type::kKwargs:
      return "KeywordArgumentsValue";
    case Type::kNamespace:
      return "NamespaceValue";
    case Type::kFunction:
      return "FunctionValue";
  }
  return "?";
}

struct Value;
struct Object;
struct Function;
struct Env;
using EnvPtr = std::shared_ptr<Env>;
using Array = std::vector<Value>;

// A runtime value. Numbers are doubles as in JavaScript (kInteger marks Number.isInteger
// values); strings and arrays are immutable and shared; objects are mutable only as namespaces.
struct Value {
  Type type = Type::kUndefined;
  bool boolean = false;
  double number = 0;
  std::shared_ptr<const std::string> string;
  // A context integer beyond 2^53: its exact digits (Python ints are exact; `number` rounds).
  std::shared_ptr<const std::string> digits;
  std::shared_ptr<const Array> array;
  std::shared_ptr<Object> object;
  std::shared_ptr<const Function> function;

  bool IsNumber() const { return type == Type::kInteger || type == Type::kFloat; }
  bool IsArray() const { return type == Type::kArray || type == Type::kTuple; }
  bool IsObject() const { return type == Type::kObject || type == Type::kKwargs; }
  bool IsContainer() const { return IsObject() || type == Type::kNamespace; }
  bool IsNullish() const { return type == Type::kUndefined || type == Type::kNull; }
  const std::string& Str() const { return *string; }
};

struct Object {
  std::vector<std::pair<std::string, Value>> entries;  // insertion order, unique keys

  const Value* Find(std::string_view key) const {
    for (const auto& [k, v] : entries) {
      if (k == key) return &v;
    }
    return nullptr;
  }
  void Set(std::string_view key, Value value) {
    for (auto& [k, v] : entries) {
      if (k == key) {
        v = std::move(value);
        return;
      }
    }
    entries.emplace_back(std::string(key), std::move(value));
  }
};

enum class FnKind {
  kRaiseException,
  kRange,
  kStrftimeNow,
  kNamespace,
  kStringMethod,
  kObjectMethod,
  kMacro,
  kCaller
};

struct Function {
  FnKind kind;
  std::string method;          // string/object method name
  Value self;                  // the string/object a method is bound to
  const Node* node = nullptr;  // macro or call block
  EnvPtr closure;              // call block: where the {% call %} stands
};

Value Undefined() { return Value{}; }
Value Null() {
  Value v;
  v.type = Type::kNull;
  return v;
}
Value Bool(bool b) {
  Value v;
  v.type = Type::kBool;
  v.boolean = b;
  return v;
}
Value Integer(double x) {
  Value v;
  v.type = Type::kInteger;
  v.number = x;
  return v;
}
Value Float(double x) {
  Value v;
  v.type = Type::kFloat;
  v.number = x;
  return v;
}
// convertToRuntimeValues on a JS number: integral values are integers.
Value Number(double x) { return std::isfinite(x) && std::floor(x) == x ? Integer(x) : Float(x); }
Value String(std::string s) {
  Value v;
  v.type = Type::kString;
  v.string = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value MakeArray(Array items, Type type = Type::kArray) {
  Value v;
  v.type = type;
  v.array = std::make_shared<const Array>(std::move(items));
  return v;
}
Value MakeObject(std::shared_ptr<Object> object, Type type = Type::kObject) {
  Value v;
  v.type = type;
  v.object = std::move(object);
  return v;
}
Value MakeFunction(Function f) {
  Value v;
  v.type = Type::kFunction;
  v.function = std::make_shared<const Function>(std::move(f));
  return v;
}

// RuntimeValue.__bool__().
bool Truthy(const Value& v) {
  switch (v.type) {
    case Type::kUndefined:
    case Type::kNull:
      return false;
    case Type::kBool:
      return v.boolean;
    case Type::kInteger:
    case Type::kFloat:
      return v.number != 0 && !std::isnan(v.number);
    case Type::kString:
      return !v.Str().empty();
    case Type::kArray:
    case Type::kTuple:
      return !v.array->empty();
    case Type::kObject:
    case Type::kKwargs:
      return !v.object->entries.empty();
    case Type::kNamespace:
    case Type::kFunction:
      return true;
  }
  return false;
}

// JavaScript truthiness of the raw value (`!!value.value`): containers are always truthy.
bool RawTruthy(const Value& v) {
  switch (v.type) {
    case Type::kArray:
    case Type::kTuple:
    case Type::kObject:
    case Type::kKwargs:
      return true;
    default:
      return Truthy(v);
  }
}

struct Env {
  EnvPtr parent;
  std::map<std::string, Value, std::less<>> vars;

  Value Lookup(std::string_view name) const {
    for (const Env* e = this; e != nullptr; e = e->parent.get()) {
      if (auto it = e->vars.find(name); it != e->vars.end()) return it->second;
    }
    return Undefined();
  }
  void Set(std::string_view name, Value value) {
    if (auto it = vars.find(name); it != vars.end()) {
      it->second = std::move(value);
    } else {
      vars.emplace(std::string(name), std::move(value));
    }
  }
};

EnvPtr Child(const EnvPtr& parent) {
  auto e = std::make_shared<Env>();
  e->parent = parent;
  return e;
}

// Control flow of {% break %} / {% continue %}: thrown like the reference does, so a break
// inside a macro called from a loop ends that loop.
struct BreakSignal {
  size_t pos;
};
struct ContinueSignal {
  size_t pos;
};

const char* const kMonthsShort[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                    "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
const char* const kMonthsLong[] = {"January",   "February", "March",    "April",
                                   "May",       "June",     "July",     "August",
                                   "September", "October",  "November", "December"};

// ---- Interpreter ------------------------------------------------------------------------------

class Interpreter {
 public:
  Interpreter(const Program& program, const RenderOptions& options)
      : program_(program), options_(options) {}

  // Namespaces are the only mutable values, so every reference cycle runs through one;
  // emptying them after the render frees everything the render built.
  ~Interpreter() {
    for (const auto& ns : namespaces_) ns->entries.clear();
  }

  std::string Run(const EnvPtr& global) {
    try {
      return Block(program_.body, global);
    } catch (const BreakSignal& s) {
      program_.Fail(s.pos, "{% break %} outside a for loop");
    } catch (const ContinueSignal& s) {
      program_.Fail(s.pos, "{% continue %} outside a for loop");
    }
  }

  // Converts a JSON context value (nlohmann::json or ordered_json).
  template <typename Json>
  Value FromJson(const Json& j, int depth = 0) {
    if (depth > options_.max_depth) {
      throw ConfigError(
          fmt::format("chat template context nests deeper than max_depth={}", options_.max_depth),
          "flatten the context or raise RenderOptions::max_depth");
    }
    switch (j.type()) {
      case nlohmann::json::value_t::null:
        return Null();
      case nlohmann::json::value_t::boolean:
        return Bool(j.template get<bool>());
      case nlohmann::json::value_t::number_integer:
      case nlohmann::json::value_t::number_unsigned: {
        Value v = Integer(j.is_number_unsigned() ? static_cast<double>(j.template get<uint64_t>())
                                                 : static_cast<double>(j.template get<int64_t>()));
        if (std::fabs(v.number) >= 9007199254740992.0)  // 2^53: doubles start rounding
          v.digits = std::make_shared<const std::string>(j.dump());
        return v;
      }
      case nlohmann::json::value_t::number_float:
        return Float(j.template get<double>());  // json.loads keeps 2.0 a float
      case nlohmann::json::value_t::string:
        return String(j.template get<std::string>());
      case nlohmann::json::value_t::array: {
        Array items;
        items.reserve(j.size());
        for (const auto& item : j) items.push_back(FromJson(item, depth + 1));
        return MakeArray(std::move(items));
      }
      case nlohmann::json::value_t::object: {
        auto object = std::make_shared<Object>();
        object->entries.reserve(j.size());
        for (auto it = j.begin(); it != j.end(); ++it) {
          object->entries.emplace_back(it.key(), FromJson(it.value(), depth + 1));
        }
        return MakeObject(std::move(object));
      }
      default:
        throw ConfigError("chat template context holds a binary or discarded JSON value",
                          "pass plain JSON values");
    }
  }

 private:
  // ---- bounds ----
  struct DepthGuard {
    DepthGuard(Interpreter& in, size_t pos) : in(in) {
      if (++in.depth_ > in.options_.max_depth) {
        in.program_.Fail(pos,
                         fmt::format("evaluation nests deeper than max_depth={} (runaway "
                                     "recursion?)",
                                     in.options_.max_depth),
                         "check macros that call themselves, or raise RenderOptions::max_depth");
      }
    }
    ~DepthGuard() { --in.depth_; }
    Interpreter& in;
  };

  [[noreturn]] void Fail(const Node& n, const std::string& message) const {
    program_.Fail(n.pos, message);
  }
  [[noreturn]] void Fail(size_t pos, const std::string& message) const {
    program_.Fail(pos, message);
  }

  // Every string the template builds stays within max_output_bytes; called before appending.
  void CheckSize(size_t size, size_t pos) const {
    if (size > options_.max_output_bytes) {
      program_.Fail(
          pos, fmt::format("a string would exceed max_output_bytes={}", options_.max_output_bytes),
          "the template builds runaway output; raise RenderOptions::max_output_bytes "
          "if it is legitimate");
    }
  }
  void Append(std::string& out, std::string_view add, size_t pos) {
    CheckSize(out.size() + add.size(), pos);
    Charge(add.size(), pos);
    out += add;
  }
  // Interpreted operations plus bytes read or written by string operations share max_work;
  // charged before the work it pays for, so a runaway stops within one operation's cost.
  void Charge(size_t n, size_t pos) {
    if (n > options_.max_work - std::min(effort_, options_.max_work)) {
      program_.Fail(pos,
                    fmt::format("the template exceeded max_work={} (interpreted operations plus "
                                "bytes of strings read and written)",
                                options_.max_work),
                    "real chat templates need a small fraction of this; check for loops over "
                    "large strings, or raise RenderOptions::max_work");
    }
    effort_ += n;
  }
  // What an operation on `v` reads: a string's bytes, a container's elements.
  static size_t Weight(const Value& v) {
    if (v.type == Type::kString) return v.string->size();
    if (v.IsArray()) return v.array->size();
    if (v.IsContainer() && v.object) return v.object->entries.size();
    return 0;
  }
  // For-loop iterations, range() elements and built array elements share one budget.
  void Spend(size_t n, size_t pos) {
    if (n > options_.max_loop_iterations - std::min(work_, options_.max_loop_iterations)) {
      program_.Fail(pos,
                    fmt::format("the template exceeded max_loop_iterations={} (loop "
                                "iterations plus range() and built list elements)",
                                options_.max_loop_iterations),
                    "check for runaway loops, or raise RenderOptions::max_loop_iterations");
    }
    work_ += n;
  }
  Value NewArray(Array items, size_t pos, Type type = Type::kArray) {
    Spend(items.size(), pos);
    return MakeArray(std::move(items), type);
  }

  // ---- string forms ----

  static std::string IntegerString(const Value& v) {
    return v.digits ? *v.digits : JsNumber(v.number);
  }

  // RuntimeValue.toString(), what {{ }} prints.
  std::string ToString(const Value& v, size_t pos, int depth = 0) {
    switch (v.type) {
      case Type::kUndefined:
        return "undefined";
      case Type::kNull:
        return "null";
      case Type::kBool:
        return v.boolean ? "true" : "false";
      case Type::kInteger:
        return IntegerString(v);
      case Type::kFloat:
        return PyFloatRepr(v.number);
      case Type::kString:
        return v.Str();
      case Type::kFunction:
        Fail(pos, "cannot print a function (did you forget the call parentheses?)");
      default: {
        std::string out;
        ToJson(v, JsonStyle{}, depth, /*undefined_to_null=*/false, pos, out);
        return out;
      }
    }
  }

  // `value.toString()` on the raw JavaScript value, which `~`, `+` and join use: numbers
  // without the float's ".0", arrays comma-joined, objects "[object Map]".
  std::string RawString(const Value& v, size_t pos, int depth = 0) {
    switch (v.type) {
      case Type::kUndefined:
        return "";
      case Type::kNull:
        return "";
      case Type::kBool:
        return v.boolean ? "true" : "false";
      case Type::kInteger:
        return IntegerString(v);
      case Type::kFloat:
        return PyFloatRepr(v.number);
      case Type::kString:
        return v.Str();
      case Type::kArray:
      case Type::kTuple: {
        if (depth > options_.max_depth) Fail(pos, "value nests deeper than max_depth");
        std::string out;
        for (size_t i = 0; i < v.array->size(); ++i) {
          if (i > 0) Append(out, ",", pos);
          Append(out, ToString((*v.array)[i], pos, depth + 1), pos);
        }
        return out;
      }
      case Type::kObject:
      case Type::kKwargs:
      case Type::kNamespace:
        return "[object Map]";
      case Type::kFunction:
        Fail(pos, "cannot turn a function into a string");
    }
    return "";
  }

  struct JsonStyle {
    int indent = 0;
    bool ensure_ascii = false;
    bool sort_keys = false;
    bool custom_separators = false;
    std::string item_separator, key_separator;
  };

  // toJSON() of the reference: Python json.dumps spacing (", " and ": ", or "," plus newlines
  // when indenting), insertion-ordered keys, floats as JSON.stringify writes them.
  void ToJson(const Value& v, const JsonStyle& style, int depth, bool undefined_to_null, size_t pos,
              std::string& out) {
    if (depth > options_.max_depth) {
      Fail(pos, fmt::format("value nests deeper than max_depth={} (a namespace holding itself?)",
                            options_.max_depth));
    }
    CheckSize(out.size(), pos);
    std::string item_sep =
        style.custom_separators ? style.item_separator : (style.indent != 0 ? "," : ", ");
    const std::string key_sep = style.custom_separators ? style.key_separator : ": ";
    switch (v.type) {
      case Type::kNull:
        out += "null";
        return;
      case Type::kUndefined:
        out += undefined_to_null ? "null" : "undefined";
        return;
      case Type::kInteger:
        out += std::isfinite(v.number) ? IntegerString(v) : "null";
        return;
      case Type::kFloat:  // json.dumps: repr(float); NaN and Infinity as Python writes them
        out += std::isnan(v.number)   ? "NaN"
               : std::isinf(v.number) ? (v.number < 0 ? "-Infinity" : "Infinity")
                                      : PyFloatRepr(v.number);
        return;
      case Type::kBool:
        out += v.boolean ? "true" : "false";
        return;
      case Type::kString: {
        std::string quoted;
        AppendJsonString(v.Str(), style.ensure_ascii, quoted);
        Append(out, quoted, pos);
        return;
      }
      case Type::kArray:
      case Type::kObject:
      case Type::kNamespace:
        break;
      default:
        Fail(pos, fmt::format("cannot convert {} to JSON", TypeName(v.type)));
    }
    const std::string indent_unit(style.indent > 0 ? style.indent : 0, ' ');
    std::string base_padding = "\n";
    std::string child_padding = "\n";
    if (style.indent != 0) {
      CheckSize(indent_unit.size() * (depth + 1), pos);
      for (int i = 0; i < depth; ++i) base_padding += indent_unit;
      child_padding = base_padding + indent_unit;
    }
    if (v.type == Type::kArray) {
      const Array& items = *v.array;
      out += '[';
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) Append(out, item_sep, pos);
        if (style.indent != 0) Append(out, child_padding, pos);
        ToJson(items[i], style, depth + 1, undefined_to_null, pos, out);
      }
      if (style.indent != 0 && !items.empty()) Append(out, base_padding, pos);
      out += ']';
      return;
    }
    std::vector<const std::pair<std::string, Value>*> entries;
    for (const auto& e : v.object->entries) entries.push_back(&e);
    if (style.sort_keys) {
      std::stable_sort(entries.begin(), entries.end(),
                       [](const auto* a, const auto* b) { return LocaleLess(a->first, b->first); });
    }
    out += '{';
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i > 0) Append(out, item_sep, pos);
      if (style.indent != 0) Append(out, child_padding, pos);
      std::string key;
      AppendJsonString(entries[i]->first, style.ensure_ascii, key);
      Append(out, key, pos);
      Append(out, key_sep, pos);
      ToJson(entries[i]->second, style, depth + 1, undefined_to_null, pos, out);
    }
    if (style.indent != 0 && !entries.empty()) Append(out, base_padding, pos);
    out += '}';
  }

  // An approximation of String.prototype.localeCompare (ICU root collation) for sort_keys:
  // punctuation before digits before letters, letters case-insensitively, lowercase first.
  static bool LocaleLess(const std::string& a, const std::string& b) {
    auto key = [](const std::string& s) {
      std::vector<std::pair<int, uint32_t>> k;
      for (size_t i = 0; i < s.size();) {
        uint32_t cp = DecodeUtf8(s, i);
        const bool upper = cp >= 'A' && cp <= 'Z';
        const uint32_t lower = upper ? cp + 32 : cp;
        const int cls = (lower >= 'a' && lower <= 'z')                ? 2
                        : IsDigit(static_cast<char>(cp)) && cp < 0x80 ? 1
                        : cp < 0x80                                   ? 0
                                                                      : 3;
        k.emplace_back(cls, lower);
      }
      return k;
    };
    const auto ka = key(a), kb = key(b);
    if (ka != kb) return ka < kb;
    return a > b;  // lowercase (greater in ASCII) first on a case-only difference
  }

  // ---- equality and ordering ----

  static double RawNumber(const Value& v) {
    return v.type == Type::kBool ? (v.boolean ? 1 : 0) : v.number;
  }

  // JavaScript `==` on the raw values, as the reference compares.
  bool LooseEquals(const Value& a, const Value& b, size_t pos) {
    if (a.IsNullish() || b.IsNullish()) return a.IsNullish() && b.IsNullish();
    if (a.type == Type::kBool) return LooseEquals(Integer(a.boolean ? 1 : 0), b, pos);
    if (b.type == Type::kBool) return LooseEquals(a, Integer(b.boolean ? 1 : 0), pos);
    const bool a_prim = a.IsNumber() || a.type == Type::kString;
    const bool b_prim = b.IsNumber() || b.type == Type::kString;
    if (a_prim && b_prim) {
      if (a.type == Type::kString && b.type == Type::kString) return a.Str() == b.Str();
      const double x = a.type == Type::kString ? JsStringToNumber(a.Str()) : a.number;
      const double y = b.type == Type::kString ? JsStringToNumber(b.Str()) : b.number;
      return x == y;
    }
    if (!a_prim && !b_prim) return SameReference(a, b);
    // An object against a primitive compares its primitive (string) form.
    const Value& obj = a_prim ? b : a;
    const Value& prim = a_prim ? a : b;
    if (obj.type == Type::kFunction) return false;
    return LooseEquals(String(RawString(obj, pos)), prim, pos);
  }

  static bool SameReference(const Value& a, const Value& b) {
    if (a.IsArray() && b.IsArray()) return a.array == b.array;
    if (a.IsContainer() && b.IsContainer()) return a.object == b.object;
    if (a.type == Type::kFunction && b.type == Type::kFunction) return a.function == b.function;
    return false;
  }

  // `===` on the raw values (the `in` operator, equalto): no coercion, containers by identity.
  static bool StrictEquals(const Value& a, const Value& b) {
    if (a.IsNumber() && b.IsNumber()) return a.number == b.number;
    if (a.type != b.type) {
      return SameReference(a, b);  // array vs tuple or object vs kwargs sharing storage
    }
    switch (a.type) {
      case Type::kUndefined:
      case Type::kNull:
        return true;
      case Type::kBool:
        return a.boolean == b.boolean;
      case Type::kString:
        return a.Str() == b.Str();
      default:
        return SameReference(a, b);
    }
  }

  // compareRuntimeValues(): numbers (and booleans) with each other, strings with strings.
  int Compare(const Value& a, const Value& b, bool case_sensitive, size_t pos) {
    if (a.type == Type::kNull && b.type == Type::kNull) return 0;
    if (a.type == Type::kUndefined && b.type == Type::kUndefined) return 0;
    if (a.IsNullish() || b.IsNullish()) {
      Fail(pos, fmt::format("cannot compare {} with {}", TypeName(a.type), TypeName(b.type)));
    }
    const bool a_num = a.IsNumber() || a.type == Type::kBool;
    const bool b_num = b.IsNumber() || b.type == Type::kBool;
    if (a_num && b_num) {
      const double x = RawNumber(a), y = RawNumber(b);
      return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.type != b.type) {
      Fail(pos, fmt::format("cannot compare different types: {} and {}", TypeName(a.type),
                            TypeName(b.type)));
    }
    if (a.type != Type::kString) Fail(pos, fmt::format("cannot compare {}", TypeName(a.type)));
    if (case_sensitive) return a.Str() < b.Str() ? -1 : a.Str() > b.Str() ? 1 : 0;
    const std::string x = ChangeCase(a.Str(), false), y = ChangeCase(b.Str(), false);
    return x < y ? -1 : x > y ? 1 : 0;
  }

  // A stable merge sort that stays in bounds whatever the comparator answers (NaN included).
  template <typename Less>
  static void StableSort(Array& items, Less less) {
    Array buffer(items.size());
    for (size_t width = 1; width < items.size(); width *= 2) {
      for (size_t lo = 0; lo < items.size(); lo += 2 * width) {
        const size_t mid = std::min(lo + width, items.size());
        const size_t hi = std::min(lo + 2 * width, items.size());
        size_t i = lo, j = mid, k = lo;
        while (i < mid && j < hi) buffer[k++] = less(items[j], items[i]) ? items[j++] : items[i++];
        while (i < mid) buffer[k++] = items[i++];
        while (j < hi) buffer[k++] = items[j++];
      }
      items.swap(buffer);
    }
  }

  // ---- evaluation ----

  std::string Block(const std::vector<NodePtr>& body, const EnvPtr& env) {
    std::string out;
    if (body.empty()) return out;
    DepthGuard guard(*this, body.front()->pos);
    for (const auto& statement : body) {
      if (statement->kind == Kind::kText) {
        Append(out, statement->str, statement->pos);
        continue;
      }
      const Value v = Eval(*statement, env);
      if (v.IsNullish()) continue;
      if (v.type == Type::kString) {
        Append(out, v.Str(), statement->pos);
      } else {
        Append(out, ToString(v, statement->pos), statement->pos);
      }
    }
    return out;
  }

  Value Eval(const Node& n, const EnvPtr& env) {
    DepthGuard guard(*this, n.pos);
    Charge(1, n.pos);
    switch (n.kind) {
      case Kind::kText:
      case Kind::kString:
        return String(n.str);
      case Kind::kInteger:
        return Integer(n.number);
      case Kind::kFloat:
        return Float(n.number);
      case Kind::kIdentifier:
        return env->Lookup(n.str);
      case Kind::kArray:
      case Kind::kTuple: {
        Array items;
        items.reserve(n.a.size());
        for (const auto& e : n.a) items.push_back(Eval(*e, env));
        return NewArray(std::move(items), n.pos,
                        n.kind == Kind::kTuple ? Type::kTuple : Type::kArray);
      }
      case Kind::kObject: {
        auto object = std::make_shared<Object>();
        for (size_t i = 0; i < n.a.size(); ++i) {
          const Value key = Eval(*n.a[i], env);
          if (key.type != Type::kString) {
            Fail(*n.a[i], fmt::format("object keys must be strings: got {}", TypeName(key.type)));
          }
          object->Set(key.Str(), Eval(*n.b[i], env));
        }
        Spend(object->entries.size(), n.pos);
        return MakeObject(std::move(object));
      }
      case Kind::kMember:
        return EvalMember(n, env);
      case Kind::kCall:
        return Charged(EvalCall(n, env), n.pos);
      case Kind::kUnary:
        return EvalUnary(n, env);
      case Kind::kBinary:
        return Charged(EvalBinary(n, env), n.pos);
      case Kind::kFilter:
        return Charged(ApplyFilter(Eval(*n.x, env), *n.y, env), n.pos);
      case Kind::kTest: {
        const Value operand = Eval(*n.x, env);
        const bool result = RunTest(n.str, operand, nullptr, n);
        return Bool(n.flag ? !result : result);
      }
      case Kind::kSelect:
        if (!Truthy(Eval(*n.y, env))) return Undefined();
        return Eval(*n.x, env);
      case Kind::kTernary:
        return Truthy(Eval(*n.x, env)) ? Eval(*n.y, env) : Eval(*n.z, env);
      case Kind::kSet:
        EvalSet(n, env);
        return Null();
      case Kind::kIf: {
        for (size_t i = 0; i < n.a.size(); ++i) {
          if (Truthy(Eval(*n.a[i], env))) return String(Block(n.blocks[i], env));
        }
        if (n.blocks.size() > n.a.size()) return String(Block(n.blocks.back(), env));
        return String("");
      }
      case Kind::kFor:
        return EvalFor(n, env);
      case Kind::kMacro: {
        Function f{FnKind::kMacro, n.str, {}, &n, nullptr};
        env->Set(n.str, MakeFunction(std::move(f)));
        return Null();
      }
      case Kind::kCallBlock:
        return EvalCallBlock(n, env);
      case Kind::kFilterBlock:
        return ApplyFilter(String(Block(n.a, env)), *n.y, env);
      case Kind::kBreak:
        throw BreakSignal{n.pos};
      case Kind::kContinue:
        throw ContinueSignal{n.pos};
      case Kind::kSlice:
      case Kind::kKeywordArg:
      case Kind::kSpread:
      case Kind::kKeywordSpread:
        break;
    }
    Fail(n, "unexpected expression here");
  }

  // Charges what a call, operator or filter produced.
  Value Charged(Value v, size_t pos) {
    Charge(Weight(v), pos);
    return v;
  }

  void EvalSet(const Node& n, const EnvPtr& env) {
    const Value rhs = n.y ? Eval(*n.y, env) : String(Block(n.a, env));
    const Node& target = *n.x;
    if (target.kind == Kind::kIdentifier) {
      env->Set(target.str, rhs);
    } else if (target.kind == Kind::kTuple) {
      if (!rhs.IsArray()) {
        Fail(n, fmt::format("cannot unpack non-iterable type in set: {}", TypeName(rhs.type)));
      }
      if (rhs.array->size() != target.a.size()) {
        Fail(n, fmt::format("too {} items to unpack in set",
                            target.a.size() > rhs.array->size() ? "few" : "many"));
      }
      for (size_t i = 0; i < target.a.size(); ++i) {
        if (target.a[i]->kind != Kind::kIdentifier) Fail(n, "can only unpack into names in set");
        env->Set(target.a[i]->str, (*rhs.array)[i]);
      }
    } else if (target.kind == Kind::kMember) {
      const Value object = Eval(*target.x, env);
      if (object.type != Type::kNamespace) {
        Fail(n, "cannot assign an attribute on a non-namespace object");
      }
      if (target.flag || target.y->kind != Kind::kIdentifier) {
        Fail(n, "can only assign a namespace attribute by name (ns.name = ...)");
      }
      object.object->Set(target.y->str, rhs);
    } else {
      Fail(n, "invalid target of set");
    }
  }

  Value EvalFor(const Node& n, const EnvPtr& env) {
    EnvPtr scope = Child(env);
    const Node* test = nullptr;
    Value iterable;
    if (n.y->kind == Kind::kSelect) {
      iterable = Eval(*n.y->x, scope);
      test = n.y->y.get();
    } else {
      iterable = Eval(*n.y, scope);
    }
    if (iterable.IsObject()) {
      Array keys;
      for (const auto& [k, v] : iterable.object->entries) keys.push_back(String(k));
      iterable = MakeArray(std::move(keys));
    } else if (!iterable.IsArray()) {
      Fail(*n.y, fmt::format("expected an array or object to loop over: got {}",
                             TypeName(iterable.type)));
    }
    const Node& var = *n.x;
    auto bind = [&](const EnvPtr& target, const Value& item) {
      if (var.kind == Kind::kIdentifier) {
        target->Set(var.str, item);
        return;
      }
      if (item.type != Type::kArray) {
        Fail(var, fmt::format("cannot unpack non-iterable type: {}", TypeName(item.type)));
      }
      if (item.array->size() != var.a.size()) {
        Fail(var, fmt::format("too {} items to unpack",
                              var.a.size() > item.array->size() ? "few" : "many"));
      }
      for (size_t j = 0; j < var.a.size(); ++j) {
        if (var.a[j]->kind != Kind::kIdentifier) Fail(var, "can only unpack into names");
        target->Set(var.a[j]->str, (*item.array)[j]);
      }
    };
    Array items;
    for (const Value& item : *iterable.array) {
      Spend(1, n.pos);
      if (test != nullptr) {
        EnvPtr loop_scope = Child(scope);
        bind(loop_scope, item);
        if (!Truthy(Eval(*test, loop_scope))) continue;
      } else if (var.kind == Kind::kTuple) {
        bind(Child(scope), item);  // the reference checks unpacking before the first iteration
      }
      items.push_back(item);
    }
    std::string out;
    bool no_iteration = true;
    const size_t count = items.size();
    for (size_t i = 0; i < count; ++i) {
      auto loop = std::make_shared<Object>();
      loop->entries = {{"index", Integer(static_cast<double>(i + 1))},
                       {"index0", Integer(static_cast<double>(i))},
                       {"revindex", Integer(static_cast<double>(count - i))},
                       {"revindex0", Integer(static_cast<double>(count - i - 1))},
                       {"first", Bool(i == 0)},
                       {"last", Bool(i + 1 == count)},
                       {"length", Integer(static_cast<double>(count))},
                       {"previtem", i > 0 ? items[i - 1] : Undefined()},
                       {"nextitem", i + 1 < count ? items[i + 1] : Undefined()}};
      scope->Set("loop", MakeObject(std::move(loop)));
      bind(scope, items[i]);
      try {
        Append(out, Block(n.a, scope), n.pos);
      } catch (const ContinueSignal&) {
        continue;
      } catch (const BreakSignal&) {
        break;
      }
      no_iteration = false;
    }
    if (no_iteration) Append(out, Block(n.b, scope), n.pos);
    return String(std::move(out));
  }

  // Identifiers named kwargs/varargs anywhere in `body` make a macro collect extra arguments
  // (a simplification of the reference's "read before declared" analysis).
  static void FindSpecial(const std::vector<NodePtr>& body, bool& kwargs, bool& varargs) {
    std::vector<const Node*> pending;
    for (const auto& n : body) pending.push_back(n.get());
    while (!pending.empty()) {
      const Node& n = *pending.back();
      pending.pop_back();
      if (n.kind == Kind::kIdentifier) {
        kwargs |= n.str == "kwargs";
        varargs |= n.str == "varargs";
      }
      for (const NodePtr* p : {&n.x, &n.y, &n.z}) {
        if (*p) pending.push_back(p->get());
      }
      for (const auto& c : n.a) pending.push_back(c.get());
      for (const auto& c : n.b) pending.push_back(c.get());
      for (const auto& block : n.blocks) {
        for (const auto& c : block) pending.push_back(c.get());
      }
    }
  }

  void BindArguments(const std::string& display, const std::vector<NodePtr>& params,
                     const std::vector<NodePtr>& body, Array args, const EnvPtr& scope,
                     size_t pos) {
    std::shared_ptr<Object> keywords = std::make_shared<Object>();
    if (!args.empty() && args.back().type == Type::kKwargs) {
      keywords->entries = args.back().object->entries;
      args.pop_back();
    }
    bool want_kwargs = false, want_varargs = false;
    FindSpecial(body, want_kwargs, want_varargs);
    for (const auto& p : params) {
      if (p->str == "kwargs") want_kwargs = false;
      if (p->str == "varargs") want_varargs = false;
    }
    std::vector<std::pair<std::string, const Node*>> pending_defaults;
    for (size_t i = 0; i < params.size(); ++i) {
      const Node& p = *params[i];
      std::optional<Value> value;
      if (i < args.size()) value = args[i];
      if (!value) {
        for (auto it = keywords->entries.begin(); it != keywords->entries.end(); ++it) {
          if (it->first == p.str) {
            value = it->second;
            keywords->entries.erase(it);
            break;
          }
        }
      }
      if (!value && p.kind == Kind::kKeywordArg) pending_defaults.emplace_back(p.str, p.x.get());
      scope->Set(p.str, value.value_or(Undefined()));
    }
    if (want_kwargs) {
      scope->Set("kwargs", MakeObject(keywords));
    } else if (!keywords->entries.empty()) {
      Fail(pos, fmt::format("macro {} takes no keyword argument '{}'", display,
                            keywords->entries.front().first));
    }
    if (want_varargs) {
      Array rest;
      for (size_t i = params.size(); i < args.size(); ++i) rest.push_back(args[i]);
      scope->Set("varargs", NewArray(std::move(rest), pos));
    } else if (args.size() > params.size()) {
      Fail(pos, fmt::format("macro {} takes not more than {} argument(s)", display, params.size()));
    }
    for (const auto& [name, default_node] : pending_defaults) {
      scope->Set(name, Eval(*default_node, scope));
    }
  }

  Value EvalCallBlock(const Node& n, const EnvPtr& env) {
    Function caller{FnKind::kCaller, "caller", {}, &n, env};
    const Node& call = *n.x;
    auto [args, kwargs] = EvalArguments(call.a, env);
    args.push_back(MakeObject(kwargs, Type::kKwargs));
    const Value fn = Eval(*call.x, env);
    if (fn.type != Type::kFunction) {
      Fail(call,
           fmt::format("cannot call something that is not a function: got {}", TypeName(fn.type)));
    }
    EnvPtr inner = Child(env);
    inner->Set("caller", MakeFunction(std::move(caller)));
    return CallFunction(*fn.function, std::move(args), inner, call);
  }

  std::pair<Array, std::shared_ptr<Object>> EvalArguments(const std::vector<NodePtr>& nodes,
                                                          const EnvPtr& env) {
    Array positional;
    auto keywords = std::make_shared<Object>();
    for (const auto& arg : nodes) {
      if (arg->kind == Kind::kSpread) {
        const Value v = Eval(*arg->x, env);
        if (!v.IsArray()) {
          Fail(*arg, fmt::format("cannot unpack non-iterable type: {}", TypeName(v.type)));
        }
        Spend(v.array->size(), arg->pos);
        positional.insert(positional.end(), v.array->begin(), v.array->end());
      } else if (arg->kind != Kind::kKeywordArg && arg->kind != Kind::kKeywordSpread) {
        positional.push_back(Eval(*arg, env));
      }
    }
    auto add = [&](const std::string& key, Value value, const Node& at) {
      if (keywords->Find(key) != nullptr) {
        Fail(at, fmt::format("got multiple values for keyword argument '{}'", key));
      }
      keywords->entries.emplace_back(key, std::move(value));
    };
    for (const auto& arg : nodes) {
      if (arg->kind == Kind::kKeywordArg) {
        add(arg->str, Eval(*arg->x, env), *arg);
      } else if (arg->kind == Kind::kKeywordSpread) {
        const Value v = Eval(*arg->x, env);
        if (!v.IsObject()) {
          Fail(*arg, fmt::format("argument after ** must be a mapping, not {}", TypeName(v.type)));
        }
        for (const auto& [k, val] : v.object->entries) add(k, val, *arg);
      }
    }
    return {std::move(positional), std::move(keywords)};
  }

  Value EvalCall(const Node& n, const EnvPtr& env) {
    auto [args, kwargs] = EvalArguments(n.a, env);
    if (!kwargs->entries.empty()) args.push_back(MakeObject(kwargs, Type::kKwargs));
    const Value fn = Eval(*n.x, env);
    if (fn.type != Type::kFunction) {
      Fail(n,
           fmt::format("cannot call something that is not a function: got {}", TypeName(fn.type)));
    }
    return CallFunction(*fn.function, std::move(args), env, n);
  }

  Value CallFunction(const Function& f, Array args, const EnvPtr& env, const Node& at) {
    DepthGuard guard(*this, at.pos);
    switch (f.kind) {
      case FnKind::kMacro: {
        EnvPtr scope = Child(env);  // the reference scopes macros dynamically, at the call site
        BindArguments("'" + f.node->str + "'", f.node->a, f.node->b, std::move(args), scope,
                      at.pos);
        return String(Block(f.node->b, scope));
      }
      case FnKind::kCaller: {
        EnvPtr scope = Child(f.closure);
        BindArguments("None", f.node->a, f.node->b, std::move(args), scope, at.pos);
        return String(Block(f.node->b, scope));
      }
      case FnKind::kRaiseException: {
        const std::string message = args.empty() ? "" : RawString(args[0], at.pos);
        program_.Fail(at.pos, "raise_exception: " + message,
                      "the template rejected its input: " + message);
      }
      case FnKind::kRange:
        return Range(args, at);
      case FnKind::kStrftimeNow:
        return StrftimeNow(args, at);
      case FnKind::kNamespace:
        return MakeNamespace(std::move(args), at);
      case FnKind::kStringMethod:
        return StringMethod(f.method, f.self.Str(), args, at);
      case FnKind::kObjectMethod:
        return ObjectMethod(f.method, f.self, args, at);
    }
    Fail(at, "unknown function");
  }

  Value Range(const Array& args, const Node& at) {
    for (const Value& a : args) {
      if (!a.IsNumber() && a.type != Type::kUndefined) {
        Fail(at, fmt::format("range() takes numbers: got {}", TypeName(a.type)));
      }
    }
    auto arg = [&](size_t i) -> std::optional<double> {
      if (i >= args.size() || args[i].type == Type::kUndefined) return std::nullopt;
      return args[i].number;
    };
    std::optional<double> start = arg(0), stop = arg(1);
    const double step = arg(2).value_or(1);
    if (!stop) {
      stop = start;
      start = 0;
    }
    if (step == 0) Fail(at, "range() step must not be zero");
    Array out;
    if (!start || !stop) return NewArray(std::move(out), at.pos);  // NaN comparisons: empty
    for (double i = *start; step > 0 ? i < *stop : i > *stop; i += step) {
      Spend(1, at.pos);
      out.push_back(Number(i));
    }
    return MakeArray(std::move(out));
  }

  Value StrftimeNow(const Array& args, const Node& at) {
    if (args.empty() || args[0].type != Type::kString) {
      Fail(at, "strftime_now() takes a format string");
    }
    std::tm tm{};
    if (options_.now) {
      tm = *options_.now;
    } else {
      const std::time_t t = std::time(nullptr);
      localtime_r(&t, &tm);
    }
    const int month = std::clamp(tm.tm_mon, 0, 11);
    auto pad2 = [](int v) { return v < 10 && v >= 0 ? fmt::format("0{}", v) : std::to_string(v); };
    const std::string& format = args[0].Str();
    std::string out;
    for (size_t i = 0; i < format.size(); ++i) {
      if (format[i] == '%' && i + 1 < format.size()) {
        const char c = format[i + 1];
        std::string rep;
        switch (c) {
          case 'Y':
            rep = std::to_string(static_cast<long long>(tm.tm_year) + 1900);
            break;
          case 'm':
            rep = pad2(month + 1);
            break;
          case 'd':
            rep = pad2(tm.tm_mday);
            break;
          case 'b':
            rep = kMonthsShort[month];
            break;
          case 'B':
            rep = kMonthsLong[month];
            break;
          case 'H':
            rep = pad2(tm.tm_hour);
            break;
          case 'M':
            rep = pad2(tm.tm_min);
            break;
          case '%':
            rep = "%";
            break;
          default:
            break;
        }
        if (!rep.empty()) {
          Append(out, rep, at.pos);
          ++i;
          continue;
        }
      }
      Append(out, std::string_view(&format[i], 1), at.pos);
    }
    return String(std::move(out));
  }

  Value MakeNamespace(Array args, const Node& at) {
    std::shared_ptr<Object> kwargs;
    if (!args.empty() && args.back().type == Type::kKwargs) {
      kwargs = args.back().object;
      args.pop_back();
    }
    if (args.size() > 1) {
      Fail(at, fmt::format("namespace expected at most 1 argument, got {}", args.size()));
    }
    auto ns = std::make_shared<Object>();
    if (args.size() == 1) {
      const Value& source = args[0];
      if (source.IsObject()) {
        for (const auto& [k, v] : source.object->entries) ns->Set(k, v);
      } else if (source.IsArray()) {
        for (const Value& pair : *source.array) {
          Array parts;
          if (pair.IsArray()) {
            parts = *pair.array;
          } else if (pair.type == Type::kString) {
            for (uint32_t cp : CodePoints(pair.Str())) {
              std::string ch;
              AppendUtf8(cp, ch);
              parts.push_back(String(ch));
            }
          }
          if (parts.size() != 2) {
            Fail(at, "namespace expected an object or an iterable of [key, value] pairs");
          }
          if (parts[0].type != Type::kString) Fail(at, "namespace keys must be strings");
          ns->Set(parts[0].Str(), parts[1]);
        }
      } else {
        Fail(at, fmt::format("'{}' object is not iterable", TypeName(source.type)));
      }
    }
    if (kwargs) {
      for (const auto& [k, v] : kwargs->entries) ns->Set(k, v);
    }
    Spend(ns->entries.size(), at.pos);
    namespaces_.push_back(ns);
    return MakeObject(std::move(ns), Type::kNamespace);
  }

  // ---- member access ----

  Value BoundMethod(FnKind kind, std::string name, const Value& self) {
    return MakeFunction(Function{kind, std::move(name), self, nullptr, nullptr});
  }

  static bool IsStringMethod(std::string_view name) {
    static const char* const kNames[] = {"upper",      "lower",  "strip",  "title",
                                         "capitalize", "rstrip", "lstrip", "startswith",
                                         "endswith",   "split",  "replace"};
    return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
  }
  static bool IsObjectMethod(std::string_view name) {
    return name == "get" || name == "items" || name == "keys" || name == "values" ||
           name == "dictsort";
  }

  // Builtin properties: string methods and length, array length, object methods.
  Value Builtin(const Value& object, const std::string& name) {
    if (object.type == Type::kString) {
      if (name == "length") return Integer(static_cast<double>(Utf16Length(object.Str())));
      if (IsStringMethod(name)) return BoundMethod(FnKind::kStringMethod, name, object);
    } else if (object.IsArray()) {
      if (name == "length") return Integer(static_cast<double>(object.array->size()));
    } else if (object.IsObject()) {
      if (IsObjectMethod(name)) return BoundMethod(FnKind::kObjectMethod, name, object);
    }
    return Undefined();
  }

  // String.prototype.at() on UTF-16 units; half of a surrogate pair reads as U+FFFD.
  static Value StringAt(const std::string& s, double index) {
    const double len = static_cast<double>(Utf16Length(s));
    if (index < 0) index += len;
    if (!(index >= 0 && index < len)) return Undefined();
    const auto target = static_cast<size_t>(index);
    size_t unit = 0;
    for (size_t i = 0; i < s.size();) {
      const uint32_t cp = DecodeUtf8(s, i);
      const size_t width = cp >= 0x10000 ? 2 : 1;
      if (target < unit + width) {
        std::string out;
        AppendUtf8(width == 2 ? 0xFFFD : cp, out);
        return String(out);
      }
      unit += width;
    }
    return Undefined();
  }

  Value EvalMember(const Node& n, const EnvPtr& env) {
    const Value object = Eval(*n.x, env);
    Value property;
    if (n.flag) {
      if (n.y->kind == Kind::kSlice) return EvalSlice(object, *n.y, env);
      property = Eval(*n.y, env);
    } else if (n.y->kind == Kind::kInteger) {
      property = Integer(n.y->number);
    } else {
      property = String(n.y->str);
    }
    if (object.IsContainer()) {
      if (property.type != Type::kString) {
        Fail(n, fmt::format("cannot access a property with a non-string: got {}",
                            TypeName(property.type)));
      }
      if (const Value* v = object.object->Find(property.Str())) return *v;
      return object.type == Type::kNamespace ? Undefined() : Builtin(object, property.Str());
    }
    if (object.IsArray() || object.type == Type::kString) {
      if (property.type == Type::kInteger) {
        if (object.type == Type::kString) return StringAt(object.Str(), property.number);
        const double len = static_cast<double>(object.array->size());
        double index = property.number;
        if (index < 0) index += len;
        if (!(index >= 0 && index < len)) return Undefined();
        return (*object.array)[static_cast<size_t>(index)];
      }
      if (property.type == Type::kString) return Builtin(object, property.Str());
      Fail(n, fmt::format("cannot access a property with a non-string/non-number: got {}",
                          TypeName(property.type)));
    }
    if (property.type != Type::kString) {
      Fail(n, fmt::format("cannot access a property with a non-string: got {}",
                          TypeName(property.type)));
    }
    return Undefined();
  }

  // utils.slice(): Python slicing; strings slice by code point.
  template <typename T>
  std::vector<T> Slice(const std::vector<T>& items, std::optional<double> start,
                       std::optional<double> stop, double step, size_t pos) {
    const double len = static_cast<double>(items.size());
    // Clamping first keeps every bound within +-(len + 1) without changing the result.
    auto clamp = [&](double v) { return std::clamp(v, -len - 1, len + 1); };
    step = clamp(step);
    const int direction = step > 0 ? 1 : step < 0 ? -1 : 0;
    double lo, hi;
    if (direction >= 0) {
      const double s = clamp(start.value_or(0)), e = clamp(stop.value_or(len));
      lo = s < 0 ? std::max(len + s, 0.0) : std::min(s, len);
      hi = e < 0 ? std::max(len + e, 0.0) : std::min(e, len);
    } else {
      const double s = clamp(start.value_or(len - 1)), e = clamp(stop.value_or(-1));
      lo = s < 0 ? std::max(len + s, -1.0) : std::min(s, len - 1);
      hi = e < -1 ? std::max(len + e, -1.0) : std::min(e, len - 1);
    }
    std::vector<T> out;
    for (double i = lo; direction * i < direction * hi; i += step) {
      Spend(1, pos);
      out.push_back(items[static_cast<size_t>(i)]);
    }
    return out;
  }

  Value EvalSlice(const Value& object, const Node& n, const EnvPtr& env) {
    if (!object.IsArray() && object.type != Type::kString) {
      Fail(n, "slice object must be an array or string");
    }
    auto part = [&](const NodePtr& p, const char* what) -> std::optional<double> {
      if (!p) return std::nullopt;
      const Value v = Eval(*p, env);
      if (v.type == Type::kUndefined) return std::nullopt;
      if (v.type != Type::kInteger)
        Fail(n, fmt::format("slice {} must be numeric or undefined", what));
      return v.number;
    };
    Charge(Weight(object), n.pos);
    const auto start = part(n.x, "start");
    const auto stop = part(n.y, "stop");
    const double step = part(n.z, "step").value_or(1);
    if (object.IsArray()) return MakeArray(Slice(*object.array, start, stop, step, n.pos));
    std::string out;
    for (uint32_t cp : Slice(CodePoints(object.Str()), start, stop, step, n.pos)) {
      AppendUtf8(cp, out);
    }
    return String(std::move(out));
  }

  // ---- operators ----

  Value EvalUnary(const Node& n, const EnvPtr& env) {
    const Value arg = Eval(*n.x, env);
    if (n.str == "not") return Bool(!Truthy(arg));
    const double sign = n.str == "-" ? -1 : 1;
    if (arg.IsNumber() || arg.type == Type::kBool) {
      const double result = sign * RawNumber(arg);
      return arg.type == Type::kFloat ? Float(result) : Integer(result);
    }
    Fail(n, fmt::format("unknown operator \"{}\" for {}", n.str, TypeName(arg.type)));
  }

  Value EvalBinary(const Node& n, const EnvPtr& env) {
    const std::string& op = n.str;
    const Value left = Eval(*n.x, env);
    if (op == "and") return Truthy(left) ? Eval(*n.y, env) : left;
    if (op == "or") return Truthy(left) ? left : Eval(*n.y, env);
    const Value right = Eval(*n.y, env);
    Charge(Weight(left) + Weight(right), n.pos);
    if (op == "==") return Bool(LooseEquals(left, right, n.pos));
    if (op == "!=") return Bool(!LooseEquals(left, right, n.pos));
    if (left.type == Type::kUndefined || right.type == Type::kUndefined) {
      if (right.type == Type::kUndefined && (op == "in" || op == "not in")) {
        return Bool(op == "not in");
      }
      Fail(n, fmt::format("cannot perform operation {} on undefined values", op));
    }
    if (left.type == Type::kNull || right.type == Type::kNull) {
      Fail(n, fmt::format("cannot perform operation {} on null values", op));
    }
    if (op == "~") {
      std::string out = RawString(left, n.pos);
      Append(out, RawString(right, n.pos), n.pos);
      return String(std::move(out));
    }
    const bool left_numeric = left.IsNumber() || left.type == Type::kBool;
    const bool right_numeric = right.IsNumber() || right.type == Type::kBool;
    if (op == "**" && left_numeric && right_numeric) {
      const double a = RawNumber(left), b = RawNumber(right);
      if (a == 0 && b < 0) Fail(n, "0.0 cannot be raised to a negative power");
      const double result = std::pow(a, b);
      if (!std::isfinite(result)) Fail(n, "exponentiation result is not a finite real number");
      const bool is_float = left.type == Type::kFloat || right.type == Type::kFloat || b < 0;
      return is_float ? Float(result) : Integer(result);
    }
    if (left.IsNumber() && right.IsNumber()) {
      const double a = left.number, b = right.number;
      const bool is_float = left.type == Type::kFloat || right.type == Type::kFloat;
      auto typed = [&](double r) { return is_float ? Float(r) : Integer(r); };
      if (op == "+") return typed(a + b);
      if (op == "-") return typed(a - b);
      if (op == "*") return typed(a * b);
      if ((op == "/" || op == "//" || op == "%") && b == 0)
        Fail(n, fmt::format("division by zero ({} {} {})", ToString(left, n.pos), op,
                            ToString(right, n.pos)));
      if (op == "/") return Float(a / b);
      if (op == "//") return typed(std::floor(a / b));
      if (op == "%") {  // Python's: the result takes the divisor's sign
        double r = std::fmod(a, b);
        if (r != 0 && (r < 0) != (b < 0)) r += b;
        return typed(r);
      }
      if (op == "<") return Bool(a < b);
      if (op == ">") return Bool(a > b);
      if (op == "<=") return Bool(a <= b);
      if (op == ">=") return Bool(a >= b);
    } else if (left.IsArray() && right.IsArray()) {
      if (op == "+") {
        Array items = *left.array;
        items.insert(items.end(), right.array->begin(), right.array->end());
        return NewArray(std::move(items), n.pos);
      }
    } else if (right.IsArray()) {
      bool member = false;
      for (const Value& item : *right.array) {
        if (StrictEquals(item, left)) {
          member = true;
          break;
        }
      }
      if (op == "in") return Bool(member);
      if (op == "not in") return Bool(!member);
    }
    if ((left.type == Type::kString || right.type == Type::kString) && op == "+") {
      // Python's str + str only (transformers/jinja2 is the reference; `~` converts).
      if (left.type != right.type)
        Fail(n, fmt::format("can only concatenate str (not \"{}\") to str",
                            TypeName(left.type == Type::kString ? right.type : left.type)));
      std::string out = left.Str();
      Append(out, right.Str(), n.pos);
      return String(std::move(out));
    }
    if (left.type == Type::kString && right.type == Type::kString) {
      const bool found = right.Str().find(left.Str()) != std::string::npos;
      if (op == "in") return Bool(found);
      if (op == "not in") return Bool(!found);
    }
    if (left.type == Type::kString && right.IsObject()) {
      const bool found = right.object->Find(left.Str()) != nullptr;
      if (op == "in") return Bool(found);
      if (op == "not in") return Bool(!found);
    }
    Fail(n, fmt::format("unknown operator \"{}\" between {} and {}", op, TypeName(left.type),
                        TypeName(right.type)));
  }

  // ---- tests ----

  bool RunTest(const std::string& name, const Value& v, const Value* arg, const Node& at) {
    if (name == "boolean") return v.type == Type::kBool;
    if (name == "callable") return v.type == Type::kFunction;
    if (name == "odd" || name == "even") {
      if (v.type != Type::kInteger)
        Fail(at, fmt::format("cannot {} on {}", name, TypeName(v.type)));
      const bool odd = std::fmod(v.number, 2) != 0;
      return name == "odd" ? odd : !odd;
    }
    if (name == "false") return v.type == Type::kBool && !v.boolean;
    if (name == "true") return v.type == Type::kBool && v.boolean;
    if (name == "none") return v.type == Type::kNull;
    if (name == "string") return v.type == Type::kString;
    if (name == "number") return v.IsNumber();
    if (name == "integer") return v.type == Type::kInteger;
    if (name == "float") return v.type == Type::kFloat;  // extension: not in the reference
    if (name == "iterable") return v.type == Type::kArray || v.type == Type::kString;
    if (name == "mapping") return v.IsObject();
    if (name == "sequence") return v.IsArray() || v.IsObject() || v.type == Type::kString;
    if (name == "lower") return v.type == Type::kString && v.Str() == ChangeCase(v.Str(), false);
    if (name == "upper") return v.type == Type::kString && v.Str() == ChangeCase(v.Str(), true);
    if (name == "defined") return v.type != Type::kUndefined;
    if (name == "undefined") return v.type == Type::kUndefined;
    if (name == "equalto" || name == "eq") {
      if (arg == nullptr)
        Fail(at, fmt::format("the '{}' test needs a value to compare with", name));
      return StrictEquals(v, *arg);
    }
    Fail(at, fmt::format("unknown test '{}'", name));
  }

  // ---- methods ----

  Value StringMethod(const std::string& name, const std::string& s, const Array& args,
                     const Node& at) {
    size_t reads = s.size();
    for (const Value& arg : args) reads += Weight(arg);
    Charge(reads, at.pos);
    if (name == "upper") return String(ChangeCase(s, true));
    if (name == "lower") return String(ChangeCase(s, false));
    if (name == "strip" || name == "lstrip" || name == "rstrip") {
      // Python's: the code points of the argument, or whitespace when it is absent or none.
      const Value* chars = args.empty() ? nullptr : &args[0];
      if (chars && chars->type != Type::kString && chars->type != Type::kNull)
        Fail(at, fmt::format("{} arg must be None or str", name));
      const std::string* set = chars && chars->type == Type::kString ? &chars->Str() : nullptr;
      return String(std::string(PyStrip(s, set, name != "rstrip", name != "lstrip")));
    }
    if (name == "title") return String(TitleCase(s));
    if (name == "capitalize") return String(Capitalize(s));
    if (name == "startswith" || name == "endswith") {
      if (args.empty()) Fail(at, fmt::format("{}() requires at least one argument", name));
      auto test = [&](const std::string& p) {
        return name == "startswith"
                   ? s.compare(0, p.size(), p) == 0 && s.size() >= p.size()
                   : s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
      };
      if (args[0].type == Type::kString) return Bool(test(args[0].Str()));
      if (args[0].IsArray()) {
        for (const Value& p : *args[0].array) {
          if (p.type != Type::kString)
            Fail(at, fmt::format("{}() tuple elements must be strings", name));
          if (test(p.Str())) return Bool(true);
        }
        return Bool(false);
      }
      Fail(at, fmt::format("{}() argument must be a string or tuple of strings", name));
    }
    if (name == "split") return Split(s, args, at);
    if (name == "replace") return Replace(s, args, at);
    Fail(at, fmt::format("unknown string method '{}'", name));
  }

  // str.split(sep=None, maxsplit=-1) as the reference implements it.
  Value Split(const std::string& s, const Array& args, const Node& at) {
    const Value sep = args.size() > 0 ? args[0] : Null();
    if (sep.type != Type::kString && sep.type != Type::kNull) {
      Fail(at, "split() separator must be a string or null");
    }
    const Value maxsplit_value = args.size() > 1 ? args[1] : Integer(-1);
    if (maxsplit_value.type != Type::kInteger) Fail(at, "split() maxsplit must be a number");
    const double maxsplit = maxsplit_value.number;
    std::vector<std::string> parts;
    if (sep.type == Type::kNull) {
      // Python's whitespace (see IsPySpace).
      const std::string_view text = PyStrip(s, nullptr, true, false);
      auto space_at = [&](size_t at) -> size_t {
        size_t next = at;
        return at < text.size() && IsPySpace(DecodeUtf8(text, next)) ? next - at : 0;
      };
      size_t i = 0;
      while (i < text.size()) {
        while (size_t w = space_at(i)) i += w;
        if (i >= text.size()) break;
        size_t j = i;
        while (j < text.size() && space_at(j) == 0) DecodeUtf8(text, j);
        if (maxsplit != -1 && static_cast<double>(parts.size()) >= maxsplit) {
          parts.emplace_back(text.substr(i));
          break;
        }
        parts.emplace_back(text.substr(i, j - i));
        i = j;
      }
    } else {
      const std::string& delim = sep.Str();
      if (delim.empty()) Fail(at, "split(): empty separator");
      size_t start = 0;
      while (true) {
        const size_t found = s.find(delim, start);
        if (found == std::string::npos) break;
        parts.push_back(s.substr(start, found - start));
        start = found + delim.size();
      }
      parts.push_back(s.substr(start));
      const double count = static_cast<double>(parts.size());
      if (maxsplit != -1 && count > maxsplit) {
        // result.push(result.splice(maxsplit).join(sep)), splice's negative index included.
        double cut = maxsplit < 0 ? std::max(count + maxsplit, 0.0) : std::min(maxsplit, count);
        const auto k = static_cast<size_t>(cut);
        std::string rest;
        for (size_t i = k; i < parts.size(); ++i) {
          if (i > k) Append(rest, delim, at.pos);
          Append(rest, parts[i], at.pos);
        }
        parts.resize(k);
        parts.push_back(std::move(rest));
      }
    }
    Array out;
    out.reserve(parts.size());
    for (auto& p : parts) out.push_back(String(std::move(p)));
    return NewArray(std::move(out), at.pos);
  }

  Value Replace(const std::string& s, const Array& args, const Node& at) {
    if (args.size() < 2) Fail(at, "replace() requires at least two arguments");
    if (args[0].type != Type::kString || args[1].type != Type::kString) {
      Fail(at, "replace() arguments must be strings");
    }
    Value count = Null();
    if (args.size() > 2) {
      if (args[2].type == Type::kKwargs) {
        const Value* c = args[2].object->Find("count");
        count = c != nullptr ? *c : Null();
      } else {
        count = args[2];
      }
    }
    if (count.type != Type::kInteger && count.type != Type::kNull) {
      Fail(at, "replace() count argument must be a number or null");
    }
    const std::string& from = args[0].Str();
    const std::string& to = args[1].Str();
    if (count.type == Type::kInteger && count.number == 0) return String(s);
    double remaining = count.type == Type::kNull || count.number < 0
                           ? std::numeric_limits<double>::infinity()
                           : count.number;
    std::string out;
    if (from.empty()) {
      // An empty pattern matches before every code point and at the end.
      for (size_t i = 0; i <= s.size();) {
        if (remaining > 0) {
          Append(out, to, at.pos);
          --remaining;
        }
        if (i == s.size()) break;
        const size_t begin = i;
        DecodeUtf8(s, i);
        Append(out, std::string_view(s).substr(begin, i - begin), at.pos);
      }
      return String(std::move(out));
    }
    size_t start = 0;
    while (remaining > 0) {
      const size_t found = s.find(from, start);
      if (found == std::string::npos) break;
      Append(out, std::string_view(s).substr(start, found - start), at.pos);
      Append(out, to, at.pos);
      start = found + from.size();
      --remaining;
    }
    Append(out, std::string_view(s).substr(start), at.pos);
    return String(std::move(out));
  }

  Value Items(const Value& object) {
    Array out;
    for (const auto& [k, v] : object.object->entries) out.push_back(MakeArray({String(k), v}));
    return MakeArray(std::move(out));
  }

  Value ObjectMethod(const std::string& name, const Value& self, Array args, const Node& at) {
    const Object& object = *self.object;
    if (name == "get") {
      if (args.empty() || args[0].type != Type::kString) {
        Fail(at, fmt::format("object key must be a string: got {}",
                             TypeName(args.empty() ? Type::kUndefined : args[0].type)));
      }
      if (const Value* v = object.Find(args[0].Str())) return *v;
      return args.size() > 1 ? args[1] : Null();
    }
    Spend(object.entries.size(), at.pos);
    if (name == "items") return Items(self);
    if (name == "keys" || name == "values") {
      Array out;
      for (const auto& [k, v] : object.entries) out.push_back(name == "keys" ? String(k) : v);
      return MakeArray(std::move(out));
    }
    if (name == "dictsort") {
      std::shared_ptr<Object> kwargs;
      if (!args.empty() && args.back().type == Type::kKwargs) {
        kwargs = args.back().object;
        args.pop_back();
      }
      auto option = [&](size_t i, const char* key, Value fallback) {
        if (i < args.size()) return args[i];
        if (kwargs) {
          if (const Value* v = kwargs->Find(key)) return *v;
        }
        return fallback;
      };
      const Value case_sensitive = option(0, "case_sensitive", Bool(false));
      const Value by = option(1, "by", String("key"));
      const Value reverse = option(2, "reverse", Bool(false));
      if (case_sensitive.type != Type::kBool) Fail(at, "case_sensitive must be a boolean");
      if (by.type != Type::kString || (by.Str() != "key" && by.Str() != "value")) {
        Fail(at, "by must be either 'key' or 'value'");
      }
      if (reverse.type != Type::kBool) Fail(at, "reverse must be a boolean");
      Array pairs = *Items(self).array;
      const size_t index = by.Str() == "key" ? 0 : 1;
      StableSort(pairs, [&](const Value& a, const Value& b) {
        const int c = Compare((*a.array)[index], (*b.array)[index], case_sensitive.boolean, at.pos);
        return reverse.boolean ? c > 0 : c < 0;
      });
      return MakeArray(std::move(pairs));
    }
    Fail(at, fmt::format("unknown object method '{}'", name));
  }

  // ---- filters ----

  // getAttributeValue(): "a.b.0" through objects and arrays.
  static Value AttributePath(const Value& item, const std::string& path) {
    Value v = item;
    size_t start = 0;
    while (true) {
      const size_t dot = path.find('.', start);
      const std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
      if (v.IsContainer()) {
        const Value* found = v.object->Find(part);
        v = found != nullptr ? *found : Undefined();
      } else if (v.IsArray()) {
        const double index = JsParseInt(part);
        if (!(index >= 0 && index < static_cast<double>(v.array->size()))) return Undefined();
        v = (*v.array)[static_cast<size_t>(index)];
      } else {
        return Undefined();
      }
      if (dot == std::string::npos) return v;
      start = dot + 1;
    }
  }

  std::string Escape(const std::string& s, size_t pos) {
    std::string out;
    for (char c : s) {
      switch (c) {
        case '&':
          Append(out, "&amp;", pos);
          break;
        case '<':
          Append(out, "&lt;", pos);
          break;
        case '>':
          Append(out, "&gt;", pos);
          break;
        case '"':
          Append(out, "&#34;", pos);
          break;
        case '\'':
          Append(out, "&#39;", pos);
          break;
        default:
          Append(out, std::string_view(&c, 1), pos);
      }
    }
    return out;
  }

  std::string Indent(const std::string& s, const std::string& pad, bool first, bool blank,
                     size_t pos) {
    std::string out;
    size_t start = 0;
    for (size_t line = 0;; ++line) {
      const size_t nl = s.find('\n', start);
      const std::string_view text =
          std::string_view(s).substr(start, nl == std::string::npos ? nl : nl - start);
      if (line > 0) Append(out, "\n", pos);
      if (!((!first && line == 0) || (!blank && text.empty()))) Append(out, pad, pos);
      Append(out, text, pos);
      if (nl == std::string::npos) break;
      start = nl + 1;
    }
    return out;
  }

  // Python's round(x, precision) as Jinja's round filter ("common" rounds half to even).
  static double Round(double x, double precision, const std::string& method) {
    const double scale = std::pow(10.0, precision);
    double y = x * scale;
    if (!std::isfinite(y)) return x;
    if (method == "floor") {
      y = std::floor(y);
    } else if (method == "ceil") {
      y = std::ceil(y);
    } else {
      y = std::nearbyint(y);
    }
    return y / scale;
  }

  Value Join(const Value& operand, const std::string& sep, size_t pos) {
    std::string out;
    if (operand.type == Type::kString) {
      bool first = true;
      const std::string& s = operand.Str();
      for (size_t i = 0; i < s.size();) {
        const size_t begin = i;
        DecodeUtf8(s, i);
        if (!first) Append(out, sep, pos);
        first = false;
        Append(out, std::string_view(s).substr(begin, i - begin), pos);
      }
      return String(std::move(out));
    }
    for (size_t i = 0; i < operand.array->size(); ++i) {
      if (i > 0) Append(out, sep, pos);
      Append(out, RawString((*operand.array)[i], pos), pos);
    }
    return String(std::move(out));
  }

  Value Unique(const Value& operand) {
    std::unordered_set<std::string> seen;
    Array out;
    for (const Value& item : *operand.array) {
      std::string key;
      switch (item.type) {
        case Type::kInteger:
        case Type::kFloat:
          key = std::isnan(item.number) ? "nNaN" : "n" + JsNumber(item.number);
          break;
        case Type::kString:
          key = "s" + item.Str();
          break;
        case Type::kBool:
          key = item.boolean ? "bt" : "bf";
          break;
        case Type::kNull:
          key = "null";
          break;
        case Type::kUndefined:
          key = "undefined";
          break;
        case Type::kArray:
        case Type::kTuple:
          key = fmt::format("a{}", static_cast<const void*>(item.array.get()));
          break;
        case Type::kFunction:
          key = fmt::format("f{}", static_cast<const void*>(item.function.get()));
          break;
        default:
          key = fmt::format("o{}", static_cast<const void*>(item.object.get()));
      }
      if (seen.insert(std::move(key)).second) out.push_back(item);
    }
    return MakeArray(std::move(out));
  }

  [[noreturn]] void UnknownFilter(const Node& at, const std::string& name, const Value& v) {
    const char* kind = v.IsArray()               ? "ArrayValue"
                       : v.type == Type::kString ? "StringValue"
                       : v.IsObject()            ? "ObjectValue"
                       : v.IsNumber()            ? "NumericValue"
                       : v.type == Type::kBool   ? "BooleanValue"
                                                 : nullptr;
    if (kind == nullptr) {
      program_.Fail(at.pos,
                    fmt::format("cannot apply filter \"{}\" to type: {}", name, TypeName(v.type)),
                    "guard the value with `is defined` / `is not none`, or give it a default");
    }
    program_.Fail(at.pos, fmt::format("unknown {} filter: {}", kind, name),
                  "supported filters: abs, capitalize, count, default (d), dictsort, e/escape, "
                  "first, float, indent, int, items, join, last, length, list, lower, map, "
                  "reject, rejectattr, replace, reverse, round, safe, select, selectattr, sort, "
                  "string, title, tojson, trim, unique, upper");
  }

  Value ApplyFilter(const Value& operand, const Node& filter, const EnvPtr& env) {
    Charge(Weight(operand), filter.pos);
    if (filter.kind == Kind::kIdentifier) return ApplyNamedFilter(operand, filter.str, filter);
    if (filter.kind != Kind::kCall || filter.x->kind != Kind::kIdentifier) {
      Fail(filter, "a filter must be a name or a call");
    }
    return ApplyCallFilter(operand, filter.x->str, filter, env);
  }

  Value ApplyNamedFilter(const Value& operand, const std::string& name, const Node& at) {
    if (name == "safe") return operand;
    if (name == "tojson") {
      std::string out;
      ToJson(operand, JsonStyle{}, 0, true, at.pos, out);
      return String(std::move(out));
    }
    // Extensions where the reference has no filter: Jinja's meaning.
    if ((name == "default" || name == "d") && operand.type == Type::kUndefined) return String("");
    if (name == "default" || name == "d") return operand;
    if ((name == "escape" || name == "e") &&
        (operand.type == Type::kString || operand.IsNumber() || operand.type == Type::kBool)) {
      return String(Escape(ToString(operand, at.pos), at.pos));
    }
    const std::string& filter = name == "count" ? std::string("length") : name;
    if (operand.IsArray()) {
      const Array& items = *operand.array;
      if (filter == "list") return operand;
      if (filter == "first") return items.empty() ? Undefined() : items.front();
      if (filter == "last") return items.empty() ? Undefined() : items.back();
      if (filter == "length") return Integer(static_cast<double>(items.size()));
      if (filter == "reverse") return MakeArray(Array(items.rbegin(), items.rend()));
      if (filter == "sort") {
        Array sorted = items;
        StableSort(sorted, [&](const Value& a, const Value& b) {
          return Compare(a, b, false, at.pos) < 0;
        });
        return MakeArray(std::move(sorted));
      }
      if (filter == "join") return Join(operand, "", at.pos);
      if (filter == "string") return String(ToString(operand, at.pos));
      if (filter == "unique") return Unique(operand);
      if (filter == "select" || filter == "reject") {
        Array out;
        for (const Value& item : items) {
          if (Truthy(item) == (filter == "select")) out.push_back(item);
        }
        return MakeArray(std::move(out));
      }
    } else if (operand.type == Type::kString) {
      const std::string& s = operand.Str();
      if (filter == "length") return Integer(static_cast<double>(Utf16Length(s)));
      if (filter == "upper") return String(ChangeCase(s, true));
      if (filter == "lower") return String(ChangeCase(s, false));
      if (filter == "title") return String(TitleCase(s));
      if (filter == "capitalize") return String(Capitalize(s));
      if (filter == "trim") return String(std::string(PyStrip(s, nullptr, true, true)));
      if (filter == "indent") return String(Indent(s, "    ", false, false, at.pos));
      if (filter == "join" || filter == "string") return operand;
      if (filter == "int") {
        const double v = JsParseInt(s);
        return Integer(std::isnan(v) ? 0 : v);
      }
      if (filter == "float") {
        const double v = JsParseFloat(s);
        return Float(std::isnan(v) ? 0 : v);
      }
      // Extensions: Jinja's string forms of list filters.
      if (filter == "first" || filter == "last" || filter == "reverse" || filter == "list") {
        std::vector<uint32_t> cps = CodePoints(s);
        if (filter == "list") {
          Array out;
          for (uint32_t cp : cps) {
            std::string ch;
            AppendUtf8(cp, ch);
            out.push_back(String(std::move(ch)));
          }
          return NewArray(std::move(out), at.pos);
        }
        if (filter == "reverse") std::reverse(cps.begin(), cps.end());
        if (filter != "reverse") {
          if (cps.empty()) return Undefined();
          cps = {filter == "first" ? cps.front() : cps.back()};
        }
        std::string out;
        for (uint32_t cp : cps) AppendUtf8(cp, out);
        return String(std::move(out));
      }
    } else if (operand.IsNumber()) {
      if (filter == "abs") {
        return operand.type == Type::kInteger ? Integer(std::fabs(operand.number))
                                              : Float(std::fabs(operand.number));
      }
      if (filter == "int") return Integer(std::floor(operand.number));
      if (filter == "float") return Float(operand.number);
      if (filter == "string") return String(ToString(operand, at.pos));
      if (filter == "round") return Float(Round(operand.number, 0, "common"));  // extension
    } else if (operand.IsObject()) {
      if (filter == "items") return Items(operand);
      if (filter == "length") return Integer(static_cast<double>(operand.object->entries.size()));
      if (IsObjectMethod(filter)) return ObjectMethod(filter, operand, {}, at);
    } else if (operand.type == Type::kBool) {
      if (filter == "bool") return operand;
      if (filter == "int") return Integer(operand.boolean ? 1 : 0);
      if (filter == "float") return Float(operand.boolean ? 1 : 0);
      if (filter == "string") return String(operand.boolean ? "true" : "false");
    }
    UnknownFilter(at, name, operand);
  }

  Value ApplyCallFilter(const Value& operand, const std::string& name, const Node& call,
                        const EnvPtr& env) {
    const Node& at = call;
    // Named references, not a structured binding: clang < 16 cannot capture those in a lambda.
    auto evaluated = EvalArguments(call.a, env);
    Array& args = evaluated.first;
    std::shared_ptr<Object>& kwargs = evaluated.second;
    auto option = [&](size_t i, const char* key) -> const Value* {
      if (i < args.size()) return &args[i];
      return kwargs->Find(key);
    };
    if (name == "tojson") {
      JsonStyle style;
      const Value* indent = kwargs->Find("indent");
      if (indent != nullptr && indent->type != Type::kInteger && indent->type != Type::kNull) {
        Fail(at, "if set, indent must be a number");
      }
      if (indent != nullptr && indent->type == Type::kInteger) {
        if (indent->number < 0) Fail(at, "tojson indent must not be negative");
        CheckIndent(indent->number, at);
        style.indent = static_cast<int>(indent->number);
      }
      if (const Value* v = kwargs->Find("ensure_ascii")) {
        if (v->type != Type::kBool) Fail(at, "if set, ensure_ascii must be a boolean");
        style.ensure_ascii = v->boolean;
      }
      if (const Value* v = kwargs->Find("sort_keys")) {
        if (v->type != Type::kBool) Fail(at, "if set, sort_keys must be a boolean");
        style.sort_keys = v->boolean;
      }
      if (const Value* v = kwargs->Find("separators"); v != nullptr && v->type != Type::kNull) {
        if (!v->IsArray() || v->array->size() != 2 || (*v->array)[0].type != Type::kString ||
            (*v->array)[1].type != Type::kString) {
          Fail(at, "separators must be a tuple of two strings");
        }
        style.custom_separators = true;
        style.item_separator = (*v->array)[0].Str();
        style.key_separator = (*v->array)[1].Str();
      }
      std::string out;
      ToJson(operand, style, 0, true, at.pos, out);
      return String(std::move(out));
    }
    if (name == "join") {
      if (operand.type != Type::kString && !operand.IsArray()) UnknownFilter(at, name, Null());
      const Value* sep = option(0, "separator");
      if (sep != nullptr && sep->type != Type::kString) Fail(at, "separator must be a string");
      return Join(operand, sep != nullptr ? sep->Str() : "", at.pos);
    }
    if (name == "int" || name == "float") {
      const bool is_int = name == "int";
      const Value* fallback = option(0, "default");
      const Value default_value = fallback != nullptr ? *fallback : is_int ? Integer(0) : Float(0);
      if (operand.type == Type::kString) {
        const double v = is_int ? JsParseInt(operand.Str()) : JsParseFloat(operand.Str());
        if (std::isnan(v)) return default_value;
        return is_int ? Integer(v) : Float(v);
      }
      if (operand.IsNumber()) return operand;
      if (operand.type == Type::kBool) {
        return is_int ? Integer(operand.boolean ? 1 : 0) : Float(operand.boolean ? 1 : 0);
      }
      UnknownFilter(at, name, Null());
    }
    if (name == "default" || name == "d") {
      const Value default_value = !args.empty() ? args[0] : String("");
      const Value* boolean = option(1, "boolean");
      if (boolean != nullptr && boolean->type != Type::kBool) {
        Fail(at, "`default` filter flag must be a boolean");
      }
      const bool use_falsy = boolean != nullptr && boolean->boolean;
      if (operand.type == Type::kUndefined || (use_falsy && !Truthy(operand))) {
        return default_value;
      }
      return operand;
    }
    if (operand.IsArray()) {
      const Array& items = *operand.array;
      if (name == "sort") {
        const Value* reverse = option(0, "reverse");
        const Value* case_sensitive = option(1, "case_sensitive");
        const Value* attribute = option(2, "attribute");
        if (reverse != nullptr && reverse->type != Type::kBool)
          Fail(at, "reverse must be a boolean");
        if (case_sensitive != nullptr && case_sensitive->type != Type::kBool) {
          Fail(at, "case_sensitive must be a boolean");
        }
        if (attribute != nullptr && attribute->type != Type::kString &&
            attribute->type != Type::kInteger && attribute->type != Type::kNull) {
          Fail(at, "attribute must be a string, integer, or null");
        }
        const bool rev = reverse != nullptr && reverse->boolean;
        const bool cs = case_sensitive != nullptr && case_sensitive->boolean;
        std::optional<std::string> path;
        if (attribute != nullptr && attribute->type != Type::kNull) {
          path = attribute->type == Type::kString ? attribute->Str() : JsNumber(attribute->number);
        }
        auto key = [&](const Value& v) { return path ? AttributePath(v, *path) : v; };
        Array sorted = items;
        StableSort(sorted, [&](const Value& a, const Value& b) {
          const int c = Compare(key(a), key(b), cs, at.pos);
          return rev ? c > 0 : c < 0;
        });
        return MakeArray(std::move(sorted));
      }
      if (name == "selectattr" || name == "rejectattr") {
        const bool select = name == "selectattr";
        for (const Value& item : items) {
          if (!item.IsContainer()) {
            Fail(at, fmt::format("`{}` can only be applied to an array of objects", name));
          }
        }
        for (const auto& a : call.a) {
          if (a->kind != Kind::kString)
            Fail(at, fmt::format("arguments of `{}` must be strings", name));
        }
        if (args.empty()) Fail(at, fmt::format("`{}` needs an attribute name", name));
        const std::string attr = args[0].Str();
        const std::optional<std::string> test =
            args.size() > 1 ? std::optional<std::string>(args[1].Str()) : std::nullopt;
        const Value* test_arg = args.size() > 2 ? &args[2] : nullptr;
        Array out;
        for (const Value& item : items) {
          const Value* a = item.object->Find(attr);
          bool result = false;
          if (a != nullptr) {
            result = test ? RunTest(*test, *a, test_arg, at) : Truthy(*a);
          }
          if (result == select) out.push_back(item);
        }
        return MakeArray(std::move(out));
      }
      if (name == "map") {
        if (const Value* attr = kwargs->Find("attribute")) {
          if (attr->type != Type::kString) Fail(at, "attribute must be a string");
          const Value* fallback = kwargs->Find("default");
          Array out;
          for (const Value& item : items) {
            if (!item.IsContainer()) Fail(at, "items in map must be objects");
            Value v = AttributePath(item, attr->Str());
            out.push_back(v.type == Type::kUndefined && fallback != nullptr ? *fallback : v);
          }
          return MakeArray(std::move(out));
        }
        // Extension: map('filter') applies a named filter to every item, as in Jinja.
        if (!args.empty() && args[0].type == Type::kString) {
          Array out;
          for (const Value& item : items) {
            out.push_back(ApplyNamedFilter(item, args[0].Str(), at));
          }
          return MakeArray(std::move(out));
        }
        Fail(at, "map needs attribute=... or a filter name");
      }
      // Extension: select/reject(test[, argument]) as in Jinja.
      if (name == "select" || name == "reject") {
        Array out;
        for (const Value& item : items) {
          bool result = Truthy(item);
          if (!args.empty()) {
            if (args[0].type != Type::kString)
              Fail(at, fmt::format("{}() takes a test name", name));
            result = RunTest(args[0].Str(), item, args.size() > 1 ? &args[1] : nullptr, at);
          }
          if (result == (name == "select")) out.push_back(item);
        }
        return MakeArray(std::move(out));
      }
    } else if (operand.type == Type::kString) {
      if (name == "indent") {
        const Value* width = option(0, "width");
        if (width != nullptr && width->type != Type::kInteger) Fail(at, "width must be a number");
        const double w = width != nullptr ? width->number : 4;
        if (w < 0) Fail(at, "indent width must not be negative");
        CheckIndent(w, at);
        const Value* first = option(1, "first");
        const Value* blank = option(2, "blank");
        return String(Indent(operand.Str(), std::string(static_cast<size_t>(w), ' '),
                             first != nullptr && RawTruthy(*first),
                             blank != nullptr && RawTruthy(*blank), at.pos));
      }
      if (name == "replace") {
        Array all = args;
        all.push_back(MakeObject(kwargs, Type::kKwargs));
        return Replace(operand.Str(), all, at);
      }
    } else if (operand.IsObject()) {
      if (IsObjectMethod(name)) {
        if (!kwargs->entries.empty()) args.push_back(MakeObject(kwargs, Type::kKwargs));
        return ObjectMethod(name, operand, std::move(args), at);
      }
    } else if (operand.IsNumber() && name == "round") {  // extension
      const Value* precision = option(0, "precision");
      const Value* method = option(1, "method");
      if (precision != nullptr && precision->type != Type::kInteger) {
        Fail(at, "round precision must be an integer");
      }
      if (method != nullptr && method->type != Type::kString)
        Fail(at, "round method must be a string");
      return Float(Round(operand.number, precision != nullptr ? precision->number : 0,
                         method != nullptr ? method->Str() : "common"));
    }
    UnknownFilter(at, name, operand);
  }

  // An indent wider than the output bound (or than 1 MiB) can only be a runaway.
  void CheckIndent(double width, const Node& at) const {
    const double limit = static_cast<double>(std::min<size_t>(options_.max_output_bytes, 1 << 20));
    if (!(width <= limit)) {
      Fail(at, fmt::format("indent width {} exceeds {}", JsNumber(width), JsNumber(limit)));
    }
  }

  const Program& program_;
  const RenderOptions& options_;
  int depth_ = 0;
  size_t work_ = 0;    // spent of max_loop_iterations
  size_t effort_ = 0;  // spent of max_work
  std::vector<std::shared_ptr<Object>> namespaces_;
};

// The reference declares these before the context, and a context key may not reuse them.
const char* const kGlobalNames[] = {"namespace", "false",        "true", "none",  "raise_exception",
                                    "range",     "strftime_now", "True", "False", "None"};

EnvPtr Globals() {
  auto env = std::make_shared<Env>();
  env->Set("namespace",
           MakeFunction(Function{FnKind::kNamespace, "namespace", {}, nullptr, nullptr}));
  env->Set("false", Bool(false));
  env->Set("true", Bool(true));
  env->Set("none", Null());
  env->Set(
      "raise_exception",
      MakeFunction(Function{FnKind::kRaiseException, "raise_exception", {}, nullptr, nullptr}));
  env->Set("range", MakeFunction(Function{FnKind::kRange, "range", {}, nullptr, nullptr}));
  env->Set("strftime_now",
           MakeFunction(Function{FnKind::kStrftimeNow, "strftime_now", {}, nullptr, nullptr}));
  env->Set("True", Bool(true));
  env->Set("False", Bool(false));
  env->Set("None", Null());
  return env;
}

template <typename Json>
std::string RenderJson(const Program& program, const Json& context, const RenderOptions& options) {
  if (!context.is_object()) {
    throw ConfigError(
        fmt::format("chat template context must be a JSON object, got {}", context.type_name()),
        "pass {\"messages\": [...], ...}");
  }
  Interpreter interpreter(program, options);
  EnvPtr global = Globals();
  for (auto it = context.begin(); it != context.end(); ++it) {
    if (global->vars.count(it.key()) != 0) {
      throw ConfigError(
          fmt::format("chat template context key '{}' reuses a global name", it.key()),
          "rename the key; namespace, range, raise_exception, strftime_now, "
          "true/false/none and True/False/None are reserved");
    }
    global->Set(it.key(), interpreter.FromJson(it.value(), 1));
  }
  return interpreter.Run(global);
}

}  // namespace internal

Template Template::Parse(std::string_view source, std::string name) {
  if (source.size() >= std::numeric_limits<uint32_t>::max()) {
    throw ConfigError("chat template is larger than 4 GiB", "pass a real template");
  }
  auto program = std::make_shared<Program>();
  program->name = std::move(name);
  program->source = std::string(source);
  program->line_starts.push_back(0);
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\n') program->line_starts.push_back(i + 1);
  }
  internal::Mapped mapped;
  mapped.text = program->source;
  mapped.origin.resize(source.size());
  for (size_t i = 0; i < source.size(); ++i) mapped.origin[i] = static_cast<uint32_t>(i);
  if (!mapped.text.empty() && mapped.text.back() == '\n') {  // a single trailing newline goes
    mapped.text.pop_back();
    mapped.origin.pop_back();
  }
  mapped = internal::StripGenerationTags(internal::TrimBlocks(internal::LstripBlocks(mapped)));
  std::vector<internal::Token> tokens = internal::Lexer(mapped, *program).Run();
  program->body = internal::Parser(std::move(tokens), *program).Run();
  return Template(std::move(program));
}

std::string Template::Render(const nlohmann::ordered_json& context,
                             const RenderOptions& options) const {
  return internal::RenderJson(*program_, context, options);
}

std::string Template::Render(const nlohmann::json& context, const RenderOptions& options) const {
  return internal::RenderJson(*program_, context, options);
}

}  // namespace rlid::jinja

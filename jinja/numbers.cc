// JavaScript number formatting and parsing, and Python's float repr (numbers.h): the printing
// rules decide what {{ x }} writes, so each follows its reference to the digit.
#include "jinja/numbers.h"

#include <fmt/format.h>

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "jinja/strings.h"

namespace rlid::jinja::internal {

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

}  // namespace rlid::jinja::internal

// Numbers as the two references write and read them: JavaScript's Number.toString, parseInt,
// parseFloat and ToNumber (the reference's semantics), and Python's repr(float) (what jinja2
// prints). Values stay doubles, as in JavaScript.
#pragma once

#include <string>
#include <string_view>

namespace rlid::jinja::internal {

// Number.prototype.toString(): the shortest round-trip digits, laid out as ECMA-262 says.
std::string JsNumber(double x);
// Python's repr(float): positional for 1e-4 <= |x| < 1e16 (with ".0" when integral).
std::string PyFloatRepr(double x);

bool IsDigit(char c);
// strtod on a decimal literal the lexer or DecimalPrefix has already delimited.
double ParseDecimal(std::string_view s);
// parseFloat() and parseInt(s, 10): NaN when no number leads the string.
double JsParseFloat(std::string_view s);
double JsParseInt(std::string_view s);
// ToNumber(string) as loose equality uses it.
double JsStringToNumber(std::string_view s);

}  // namespace rlid::jinja::internal

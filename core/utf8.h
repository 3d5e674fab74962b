// The one UTF-8 codec of rlid: decoding, encoding and validation.
//
// Well-formedness is Unicode's Table 3-7 exactly: a scalar is one of
//   U+0000..U+007F     00..7F
//   U+0080..U+07FF     C2..DF 80..BF
//   U+0800..U+0FFF     E0     A0..BF 80..BF
//   U+1000..U+CFFF     E1..EC 80..BF 80..BF
//   U+D000..U+D7FF     ED     80..9F 80..BF
//   U+E000..U+FFFF     EE..EF 80..BF 80..BF
//   U+10000..U+3FFFF   F0     90..BF 80..BF 80..BF
//   U+40000..U+FFFFF   F1..F3 80..BF 80..BF 80..BF
//   U+100000..U+10FFFF F4     80..8F 80..BF 80..BF
// so overlong forms (C0, C1, E0 80..9F, F0 80..8F), surrogates (ED A0..BF,
// i.e. U+D800..U+DFFF) and values above U+10FFFF (F4 90.., F5..FF) are all
// ill-formed, as are lone continuation bytes and truncated sequences.
//
// Ill-formed input is reported ONE BYTE AT A TIME, not by maximal ill-formed
// subpart: a decode at a byte that does not start a well-formed scalar
// consumes exactly that byte and reads as U+FFFD. "\xE2\x82" is two ill-formed
// units (two U+FFFD), not one ("substitution of maximal subparts", which
// nlohmann::json's dump does for cli/json_output.h, would give one). The
// byte-level tokenizer turns each such byte into a byte token, the chat
// templates read each as U+FFFD, and the SQL table counts each as a column.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace rlid {

inline constexpr uint32_t kReplacementCharacter = 0xFFFD;  // U+FFFD

// One decoded unit of a UTF-8 string.
struct Utf8Scalar {
  uint32_t code_point = 0;  // the scalar, or U+FFFD where !well_formed
  int length = 0;           // bytes consumed: 1..4 where well_formed, else 1
  bool well_formed = false;
};

// Decodes the unit starting at s[i] (requires i < s.size()). A well-formed
// scalar gives its code point and length 1..4; anything else gives
// {U+FFFD, 1, false} (see the header comment: one byte, never a subpart).
Utf8Scalar DecodeUtf8At(std::string_view s, size_t i);

// Decodes the unit at s[i] and advances i past it (i < s.size()); returns
// its code point (U+FFFD for an ill-formed byte).
inline uint32_t NextUtf8(std::string_view s, size_t& i) {
  const Utf8Scalar u = DecodeUtf8At(s, i);
  i += static_cast<size_t>(u.length);
  return u.code_point;
}

// Appends the UTF-8 form of code_point (1 to 4 bytes). A surrogate
// (U+D800..U+DFFF) or a value above U+10FFFF has no UTF-8 form: U+FFFD
// (EF BF BD) is appended instead, so the output is always well-formed.
void AppendUtf8(uint32_t code_point, std::string& out);

// Whether all of s is well-formed UTF-8 ("" is).
bool IsValidUtf8(std::string_view s);

// The number of units in s: code points, with each ill-formed byte counted
// as one (as if it were U+FFFD).
size_t Utf8Length(std::string_view s);

// The first `units` units of s (all of s if it has fewer), counted as
// Utf8Length counts them; never cuts a well-formed scalar. Reads only as far
// as the prefix reaches.
std::string_view Utf8Prefix(std::string_view s, size_t units);

}  // namespace rlid

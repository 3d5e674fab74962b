// The UTF-8 codec (see utf8.h for the contract).
#include "core/utf8.h"

namespace rlid {

Utf8Scalar DecodeUtf8At(std::string_view s, size_t i) {
  constexpr Utf8Scalar kIllFormed{kReplacementCharacter, 1, false};
  const auto at = [&](size_t k) { return static_cast<uint32_t>(static_cast<unsigned char>(s[k])); };
  const uint32_t b0 = at(i);
  if (b0 < 0x80) return {b0, 1, true};
  // The length and the allowed range of the second byte (Table 3-7); the
  // other continuation bytes are always 80..BF.
  int len = 0;
  uint32_t lo = 0x80, hi = 0xBF;
  if (b0 >= 0xC2 && b0 <= 0xDF) len = 2;
  else if (b0 == 0xE0) len = 3, lo = 0xA0;
  else if (b0 == 0xED) len = 3, hi = 0x9F;
  else if (b0 >= 0xE1 && b0 <= 0xEF) len = 3;
  else if (b0 == 0xF0) len = 4, lo = 0x90;
  else if (b0 == 0xF4) len = 4, hi = 0x8F;
  else if (b0 >= 0xF1 && b0 <= 0xF3) len = 4;
  else return kIllFormed;  // 80..C1 or F5..FF
  if (s.size() - i < static_cast<size_t>(len)) return kIllFormed;
  uint32_t cp = b0 & (0x7F >> len);
  for (int k = 1; k < len; ++k) {
    const uint32_t b = at(i + k);
    if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) return kIllFormed;
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, len, true};
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) cp = kReplacementCharacter;
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

bool IsValidUtf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    if (static_cast<unsigned char>(s[i]) < 0x80) {  // ASCII fast path
      ++i;
      continue;
    }
    const Utf8Scalar u = DecodeUtf8At(s, i);
    if (!u.well_formed) return false;
    i += static_cast<size_t>(u.length);
  }
  return true;
}

size_t Utf8Length(std::string_view s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size(); ++n) i += static_cast<size_t>(DecodeUtf8At(s, i).length);
  return n;
}

std::string_view Utf8Prefix(std::string_view s, size_t units) {
  size_t i = 0;
  for (size_t n = 0; n < units && i < s.size(); ++n)
    i += static_cast<size_t>(DecodeUtf8At(s, i).length);
  return s.substr(0, i);
}

}  // namespace rlid

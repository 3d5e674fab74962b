// Byte-level and Unicode plumbing for the tokenizer: GPT-2's byte<->unicode
// map, strict UTF-8 segmentation (invalid bytes become their own runs so they
// can be encoded as byte tokens), normal forms via utf8proc, and the PCRE2
// regex wrapper used by the Split pre-tokeniser.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <fmt/format.h>
#include <pcre2.h>
#include <utf8proc.h>

#include <cstdlib>

#include "core/error.h"
#include "policy/tokenizer_internal.h"

namespace rlid::policy::internal {
namespace {

std::string EncodeUtf8(uint32_t cp) {
  std::string out;
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
  return out;
}

struct ByteMaps {
  std::array<std::string, 256> to_unicode;
  std::array<int, 512> to_byte;  // mapped code points are all < 324
  ByteMaps() {
    to_byte.fill(-1);
    std::array<uint32_t, 256> cp{};
    std::array<bool, 256> printable{};
    for (int b = 33; b <= 126; ++b) printable[b] = true;
    for (int b = 161; b <= 172; ++b) printable[b] = true;
    for (int b = 174; b <= 255; ++b) printable[b] = true;
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b) cp[b] = printable[b] ? static_cast<uint32_t>(b) : next++;
    for (int b = 0; b < 256; ++b) {
      to_unicode[b] = EncodeUtf8(cp[b]);
      to_byte[cp[b]] = b;
    }
  }
};

const ByteMaps& Maps() {
  static const ByteMaps maps;
  return maps;
}

}  // namespace

const std::array<std::string, 256>& ByteToUnicode() { return Maps().to_unicode; }

int UnicodeToByte(uint32_t code_point) {
  return code_point < Maps().to_byte.size() ? Maps().to_byte[code_point] : -1;
}

std::string ByteLevelEncode(std::string_view bytes) {
  const auto& map = Maps().to_unicode;
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) out += map[c];
  return out;
}

std::optional<std::string> ByteLevelDecode(std::string_view token) {
  std::string out;
  out.reserve(token.size());
  size_t i = 0;
  while (i < token.size()) {
    int len = Utf8ScalarLength(token, i);
    if (len == 0) return std::nullopt;
    int b = UnicodeToByte(Utf8Decode(token, i, len));
    if (b < 0) return std::nullopt;
    out += static_cast<char>(b);
    i += len;
  }
  return out;
}

int Utf8ScalarLength(std::string_view s, size_t i) {
  const auto at = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const auto cont = [&](size_t k, unsigned lo = 0x80, unsigned hi = 0xBF) {
    return i + k < s.size() && at(i + k) >= lo && at(i + k) <= hi;
  };
  const unsigned b0 = at(i);
  if (b0 < 0x80) return 1;
  if (b0 >= 0xC2 && b0 <= 0xDF) return cont(1) ? 2 : 0;
  if (b0 == 0xE0) return cont(1, 0xA0, 0xBF) && cont(2) ? 3 : 0;
  if ((b0 >= 0xE1 && b0 <= 0xEC) || b0 == 0xEE || b0 == 0xEF) return cont(1) && cont(2) ? 3 : 0;
  if (b0 == 0xED) return cont(1, 0x80, 0x9F) && cont(2) ? 3 : 0;
  if (b0 == 0xF0) return cont(1, 0x90, 0xBF) && cont(2) && cont(3) ? 4 : 0;
  if (b0 >= 0xF1 && b0 <= 0xF3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
  if (b0 == 0xF4) return cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? 4 : 0;
  return 0;
}

uint32_t Utf8Decode(std::string_view s, size_t i, int len) {
  const auto at = [&](size_t k) {
    return static_cast<uint32_t>(static_cast<unsigned char>(s[i + k]));
  };
  switch (len) {
    case 1:
      return at(0);
    case 2:
      return ((at(0) & 0x1F) << 6) | (at(1) & 0x3F);
    case 3:
      return ((at(0) & 0x0F) << 12) | ((at(1) & 0x3F) << 6) | (at(2) & 0x3F);
    default:
      return ((at(0) & 0x07) << 18) | ((at(1) & 0x3F) << 12) | ((at(2) & 0x3F) << 6) |
             (at(3) & 0x3F);
  }
}

bool IsUnicodeWhitespace(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

namespace {

std::string NormalizeChunk(std::string_view s, int options) {
  utf8proc_uint8_t* dst = nullptr;
  const utf8proc_ssize_t n = utf8proc_map(reinterpret_cast<const utf8proc_uint8_t*>(s.data()),
                                          static_cast<utf8proc_ssize_t>(s.size()), &dst,
                                          static_cast<utf8proc_option_t>(options));
  if (n < 0)
    throw InternalError(fmt::format("utf8proc could not normalise {} bytes of validated UTF-8: {}",
                                    s.size(), utf8proc_errmsg(n)));
  std::string out(reinterpret_cast<const char*>(dst), static_cast<size_t>(n));
  std::free(dst);
  return out;
}

}  // namespace

std::string Normalize(std::string_view s, NormalForm form) {
  int options = UTF8PROC_STABLE;
  switch (form) {
    case NormalForm::kNfc:
      options |= UTF8PROC_COMPOSE;
      break;
    case NormalForm::kNfd:
      options |= UTF8PROC_DECOMPOSE;
      break;
    case NormalForm::kNfkc:
      options |= UTF8PROC_COMPOSE | UTF8PROC_COMPAT;
      break;
    case NormalForm::kNfkd:
      options |= UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
      break;
  }
  // Every ASCII character is a starter that no normal form changes and that
  // never composes with what precedes it, so the text can be cut before each
  // ASCII character: only "ASCII char + following non-ASCII run" chunks need
  // utf8proc (the ASCII char may be the base of combining marks).
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  const auto ascii = [&](size_t k) { return static_cast<unsigned char>(s[k]) < 0x80; };
  while (i < s.size()) {
    if (ascii(i) && (i + 1 == s.size() || ascii(i + 1))) {
      out += s[i++];
      continue;
    }
    size_t j = ascii(i) ? i + 1 : i;
    while (j < s.size() && !ascii(j)) ++j;
    out += NormalizeChunk(s.substr(i, j - i), options);
    i = j;
  }
  return out;
}

// ---- Regex --------------------------------------------------------------------

Regex::Regex(const std::string& pattern, bool literal, const std::string& what) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  const uint32_t options =
      PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);  // LITERAL rejects UCP
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   options, &error, &offset, nullptr);
  if (code == nullptr) {
    PCRE2_UCHAR msg[256];
    pcre2_get_error_message(error, msg, sizeof(msg));
    throw ConfigError(fmt::format("{}: regex does not compile at offset {}: {} (pattern: {})", what,
                                  offset, reinterpret_cast<const char*>(msg), pattern),
                      "rlid uses PCRE2 with UTF+UCP; Oniguruma-only syntax is not supported");
  }
  jit_ = pcre2_jit_compile(code, PCRE2_JIT_COMPLETE) == 0;  // else interpreted matching
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

namespace {

// A per-thread JIT stack, grown when a pathological input needs more than
// PCRE2's default 32 KiB.
struct JitContext {
  pcre2_match_context* context = nullptr;
  pcre2_jit_stack* stack = nullptr;
  size_t size = 0;
  ~JitContext() {
    if (stack) pcre2_jit_stack_free(stack);
    if (context) pcre2_match_context_free(context);
  }
  pcre2_match_context* Grow() {
    size = size == 0 ? (1u << 20) : size * 4;
    if (stack) pcre2_jit_stack_free(stack);
    stack = pcre2_jit_stack_create(32 * 1024, size, nullptr);
    if (!context) context = pcre2_match_context_create(nullptr);
    pcre2_jit_stack_assign(context, nullptr, stack);
    return context;
  }
};

struct MatchData {
  pcre2_match_data* md;
  explicit MatchData(const pcre2_code* code)
      : md(pcre2_match_data_create_from_pattern(code, nullptr)) {}
  ~MatchData() { pcre2_match_data_free(md); }
};

}  // namespace

void Regex::FindAll(std::string_view s, std::vector<std::pair<size_t, size_t>>& out) const {
  const auto* code = static_cast<const pcre2_code*>(code_);
  thread_local JitContext jit;
  MatchData data(code);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.data());
  size_t offset = 0;
  pcre2_match_context* context = jit.context;
  while (offset <= s.size()) {
    // pcre2_jit_match skips pcre2_match's per-call checks (the subject is valid UTF-8).
    int rc =
        jit_ ? pcre2_jit_match(code, subject, s.size(), offset, 0, data.md, context)
             : pcre2_match(code, subject, s.size(), offset, PCRE2_NO_UTF_CHECK, data.md, context);
    if (rc == PCRE2_ERROR_JIT_STACKLIMIT && jit.size < (256u << 20)) {
      context = jit.Grow();
      continue;
    }
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR msg[256];
      pcre2_get_error_message(rc, msg, sizeof(msg));
      throw ConfigError(fmt::format("pre-tokenizer regex failed on a {}-byte text: {}", s.size(),
                                    reinterpret_cast<const char*>(msg)),
                        "split the input into smaller pieces");
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data.md);
    const size_t begin = ov[0], end = ov[1];
    if (end > begin) {
      out.emplace_back(begin, end);
      offset = end;
    } else {  // empty match: step over one character
      if (end >= s.size()) break;
      int len = Utf8ScalarLength(s, end);
      offset = end + (len > 0 ? len : 1);
    }
  }
}

}  // namespace rlid::policy::internal

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
#include "core/utf8.h"
#include "policy/tokenizer/tokenizer_internal.h"

namespace rlid::policy::internal {
namespace {

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
      AppendUtf8(cp[b], to_unicode[b]);
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
    const Utf8Scalar u = DecodeUtf8At(token, i);
    const int b = u.well_formed ? UnicodeToByte(u.code_point) : -1;
    if (b < 0) return std::nullopt;
    out += static_cast<char>(b);
    i += u.length;
  }
  return out;
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
      offset = end + DecodeUtf8At(s, end).length;
    }
  }
}

}  // namespace rlid::policy::internal

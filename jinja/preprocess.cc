// Preprocessing (preprocess.h): the regular expressions of the reference's lexer.ts preprocess
// step, written out as scans over the text that carry the offset map along.
#include "jinja/preprocess.h"

#include "jinja/strings.h"

namespace rlid::jinja::internal {
namespace {

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

}  // namespace

Mapped Preprocess(std::string_view source) {
  Mapped mapped;
  mapped.text = std::string(source);
  mapped.origin.resize(source.size());
  for (size_t i = 0; i < source.size(); ++i) mapped.origin[i] = static_cast<uint32_t>(i);
  if (!mapped.text.empty() && mapped.text.back() == '\n') {  // a single trailing newline goes
    mapped.text.pop_back();
    mapped.origin.pop_back();
  }
  return StripGenerationTags(TrimBlocks(LstripBlocks(mapped)));
}

}  // namespace rlid::jinja::internal

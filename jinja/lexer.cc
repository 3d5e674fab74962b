// The tokenizer (lexer.h), a port of @huggingface/jinja's lexer.ts: outside tags everything is
// text; inside, strings (with JavaScript escapes), numbers, names and operators.
#include "jinja/lexer.h"

#include <fmt/format.h>

#include <string_view>
#include <utility>

#include "jinja/numbers.h"
#include "jinja/strings.h"

namespace rlid::jinja::internal {
namespace {

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
      AppendUtf8(NextUtf8(s_, next), character);
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

}  // namespace

std::vector<Token> Lex(const Mapped& src, const Program& program) {
  return Lexer(src, program).Run();
}

}  // namespace rlid::jinja::internal

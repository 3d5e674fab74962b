// The second stage of Template::Parse: the reference's tokenizer (lexer.ts). It turns the
// preprocessed text into text, tag and expression tokens, applying the `-` whitespace control
// of {%- -%}, {{- -}} and {#- -#}; every token keeps its offset in the original source.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "jinja/preprocess.h"
#include "jinja/program.h"

namespace rlid::jinja::internal {

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

// Throws ConfigError (through program.Fail) on text it cannot tokenize: an unterminated tag,
// string or comment, an unexpected character or an invalid escape.
std::vector<Token> Lex(const Mapped& src, const Program& program);

}  // namespace rlid::jinja::internal

// The last stage of Template::Parse: the reference's parser (parser.ts), tokens to the syntax
// tree (ast.h) with Jinja's operator precedence. Nesting is capped (kMaxParseDepth) so
// parsing, evaluating and destroying a tree stays within a small stack.
#pragma once

#include <vector>

#include "jinja/ast.h"
#include "jinja/lexer.h"
#include "jinja/program.h"

namespace rlid::jinja::internal {

// Deepest nesting the parser accepts (statements, parentheses, operator chains together); it
// keeps parsing, evaluating and destroying the tree within a small stack.
constexpr int kMaxParseDepth = 200;

// Throws ConfigError (through program.Fail) on a syntax error or a construct outside the
// supported subset, with a hint on what to write instead.
std::vector<NodePtr> Parse(std::vector<Token> tokens, const Program& program);

}  // namespace rlid::jinja::internal

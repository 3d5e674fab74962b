// The recursive-descent parser (parser.h), a port of @huggingface/jinja's parser.ts: statements
// ({% if/for/set/macro/call/filter %}), then expressions from `if-else` down to primaries.
#include "jinja/parser.h"

#include <fmt/format.h>

#include <algorithm>
#include <initializer_list>
#include <string>
#include <string_view>
#include <utility>

#include "jinja/numbers.h"

namespace rlid::jinja::internal {
namespace {

constexpr const char* kSubsetHint =
    "the supported Jinja subset is what @huggingface/jinja implements: if/elif/else, for (with "
    "else, loop.*), set (incl. namespaces and blocks), macro, call, filter blocks, break/continue";

class Parser {
 public:
  Parser(std::vector<Token> tokens, const Program& program)
      : tokens_(std::move(tokens)), program_(program) {
    end_ = Token{Tok::kEnd, "", program.source.size()};
  }

  std::vector<NodePtr> Run() {
    std::vector<NodePtr> body;
    while (current_ < tokens_.size()) Append(body, ParseAny());
    return body;
  }

 private:
  struct Guard {
    Guard(Parser& p, size_t pos) : p(p) {
      if (++p.depth_ > kMaxParseDepth) {
        p.program_.Fail(pos, fmt::format("template nests deeper than {} levels", kMaxParseDepth),
                        "flatten the expression or the blocks");
      }
    }
    ~Guard() { --p.depth_; }
    Parser& p;
  };

  const Token& Peek(size_t ahead = 0) const {
    return current_ + ahead < tokens_.size() ? tokens_[current_ + ahead] : end_;
  }
  bool Is(Tok type) const { return Peek().type == type; }
  bool IsIdent(std::string_view name, size_t ahead = 0) const {
    return Peek(ahead).type == Tok::kIdent && Peek(ahead).value == name;
  }
  bool IsStatement(std::initializer_list<std::string_view> names) const {
    if (Peek().type != Tok::kOpenStatement || Peek(1).type != Tok::kIdent) return false;
    return std::find(names.begin(), names.end(), Peek(1).value) != names.end();
  }
  [[noreturn]] void Fail(const std::string& message, std::string hint = {}) const {
    program_.Fail(Peek().pos, message, std::move(hint));
  }
  static const char* Describe(Tok t) {
    switch (t) {
      case Tok::kText:
        return "text";
      case Tok::kNumber:
        return "a number";
      case Tok::kString:
        return "a string";
      case Tok::kIdent:
        return "a name";
      case Tok::kEquals:
        return "'='";
      case Tok::kOpenParen:
        return "'('";
      case Tok::kCloseParen:
        return "')'";
      case Tok::kOpenStatement:
        return "'{%'";
      case Tok::kCloseStatement:
        return "'%}'";
      case Tok::kOpenExpression:
        return "'{{'";
      case Tok::kCloseExpression:
        return "'}}'";
      case Tok::kOpenBracket:
        return "'['";
      case Tok::kCloseBracket:
        return "']'";
      case Tok::kOpenCurly:
        return "'{'";
      case Tok::kCloseCurly:
        return "'}'";
      case Tok::kComma:
        return "','";
      case Tok::kDot:
        return "'.'";
      case Tok::kColon:
        return "':'";
      case Tok::kPipe:
        return "'|'";
      case Tok::kAdditive:
      case Tok::kMultiplicative:
      case Tok::kPower:
      case Tok::kComparison:
      case Tok::kUnary:
        return "an operator";
      case Tok::kComment:
        return "a comment";
      case Tok::kEnd:
        return "the end of the template";
    }
    return "?";
  }
  const Token& Expect(Tok type, std::string_view what) {
    if (Peek().type != type) {
      Fail(fmt::format("expected {}, found {}{}", what, Describe(Peek().type),
                       Peek().value.empty() || Peek().type == Tok::kText
                           ? ""
                           : fmt::format(" '{}'", Peek().value)));
    }
    return tokens_[current_++];
  }
  void ExpectIdent(std::string_view name) {
    if (!IsIdent(name)) Fail(fmt::format("expected '{}'", name));
    ++current_;
  }
  void ExpectEnd(std::string_view name) {
    if (current_ >= tokens_.size()) {
      Fail(fmt::format("unclosed block: expected {{% {} %}}", name));
    }
    Expect(Tok::kOpenStatement, "'{%'");
    ExpectIdent(name);
    Expect(Tok::kCloseStatement, "'%}'");
  }
  NodePtr Make(Kind kind, size_t pos) {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    n->pos = pos;
    return n;
  }
  static void Append(std::vector<NodePtr>& body, NodePtr n) {
    if (n) body.push_back(std::move(n));
  }
  // Statements up to one of `ends` (not consumed); the end of the tokens is an unclosed block.
  std::vector<NodePtr> ParseBody(std::initializer_list<std::string_view> ends,
                                 std::string_view block) {
    std::vector<NodePtr> body;
    while (!IsStatement(ends)) {
      if (current_ >= tokens_.size()) {
        Fail(fmt::format("unclosed {{% {} %}}: expected {{% end{} %}}", block, block),
             fmt::format("close the {{% {} %}} block", block));
      }
      Append(body, ParseAny());
    }
    return body;
  }

  // A statement, an expression tag or text; comments parse to nothing.
  NodePtr ParseAny() {
    Guard guard(*this, Peek().pos);
    const Token& t = Peek();
    switch (t.type) {
      case Tok::kComment:
        ++current_;
        return nullptr;
      case Tok::kText: {
        auto n = Make(Kind::kText, t.pos);
        n->str = t.value;
        ++current_;
        return n;
      }
      case Tok::kOpenStatement:
        return ParseStatement();
      case Tok::kOpenExpression: {
        ++current_;
        auto n = ParseExpression();
        Expect(Tok::kCloseExpression, "'}}'");
        return n;
      }
      default:
        Fail(fmt::format("unexpected {}", Describe(t.type)));
    }
  }

  NodePtr ParseStatement() {
    Expect(Tok::kOpenStatement, "'{%'");
    if (!Is(Tok::kIdent)) Fail("expected a statement name after '{%'", kSubsetHint);
    const Token& name_token = Peek();
    const std::string name = name_token.value;
    const size_t pos = name_token.pos;
    ++current_;
    if (name == "set") return ParseSet(pos);
    if (name == "if") {
      auto n = ParseIf(pos);
      ExpectEnd("endif");
      return n;
    }
    if (name == "for") {
      auto n = ParseFor(pos);
      ExpectEnd("endfor");
      return n;
    }
    if (name == "macro") {
      auto n = Make(Kind::kMacro, pos);
      NodePtr id = ParsePrimary();
      if (id->kind != Kind::kIdentifier) program_.Fail(id->pos, "expected a macro name");
      n->str = id->str;
      n->a = ParseArgs(/*parameters=*/true);
      Expect(Tok::kCloseStatement, "'%}'");
      n->b = ParseBody({"endmacro"}, "macro");
      ExpectEnd("endmacro");
      return n;
    }
    if (name == "call") {
      auto n = Make(Kind::kCallBlock, pos);
      if (Is(Tok::kOpenParen)) {
        n->flag = true;
        n->a = ParseArgs(/*parameters=*/true);
      }
      NodePtr callee = ParsePrimary();
      if (callee->kind != Kind::kIdentifier) {
        program_.Fail(callee->pos, "expected a macro name after 'call'");
      }
      auto call = Make(Kind::kCall, callee->pos);
      call->a = ParseArgs(/*parameters=*/false);
      call->x = std::move(callee);
      n->x = std::move(call);
      Expect(Tok::kCloseStatement, "'%}'");
      n->b = ParseBody({"endcall"}, "call");
      ExpectEnd("endcall");
      return n;
    }
    if (name == "break" || name == "continue") {
      Expect(Tok::kCloseStatement, "'%}'");
      return Make(name == "break" ? Kind::kBreak : Kind::kContinue, pos);
    }
    if (name == "filter") {
      auto n = Make(Kind::kFilterBlock, pos);
      NodePtr filter = ParsePrimary();
      if (filter->kind == Kind::kIdentifier && Is(Tok::kOpenParen)) {
        filter = ParseCall(std::move(filter));
      }
      n->y = std::move(filter);
      Expect(Tok::kCloseStatement, "'%}'");
      n->a = ParseBody({"endfilter"}, "filter");
      ExpectEnd("endfilter");
      return n;
    }
    program_.Fail(pos, fmt::format("unsupported statement {{% {} %}}", name),
                  name == "include" || name == "extends" || name == "import" || name == "from"
                      ? std::string("templates are self-contained here: inline the other "
                                    "template's text; ") +
                            kSubsetHint
                      : std::string(kSubsetHint));
  }

  NodePtr ParseSet(size_t pos) {
    auto n = Make(Kind::kSet, pos);
    n->x = ParseExpressionSequence(/*primary=*/false);
    if (Is(Tok::kEquals)) {
      ++current_;
      n->y = ParseExpressionSequence(/*primary=*/false);
    } else {
      Expect(Tok::kCloseStatement, "'%}' or '='");
      n->a = ParseBody({"endset"}, "set");
      Expect(Tok::kOpenStatement, "'{%'");
      ExpectIdent("endset");
    }
    Expect(Tok::kCloseStatement, "'%}'");
    return n;
  }

  // if/elif chains become one node with a condition and a body per branch (no recursion per
  // elif); blocks.back() is the else body when blocks has one more entry than conditions.
  NodePtr ParseIf(size_t pos) {
    auto n = Make(Kind::kIf, pos);
    while (true) {
      n->a.push_back(ParseExpression());
      Expect(Tok::kCloseStatement, "'%}'");
      n->blocks.push_back(ParseBody({"elif", "else", "endif"}, "if"));
      if (IsStatement({"elif"})) {
        current_ += 2;
        continue;
      }
      if (IsStatement({"else"})) {
        current_ += 2;
        Expect(Tok::kCloseStatement, "'%}'");
        n->blocks.push_back(ParseBody({"endif"}, "if"));
      }
      return n;
    }
  }

  NodePtr ParseFor(size_t pos) {
    auto n = Make(Kind::kFor, pos);
    n->x = ParseExpressionSequence(/*primary=*/true);
    if (n->x->kind != Kind::kIdentifier && n->x->kind != Kind::kTuple) {
      program_.Fail(n->x->pos, "expected a loop variable name (or names) after 'for'");
    }
    if (!IsIdent("in")) Fail("expected 'in' after the loop variable");
    ++current_;
    n->y = ParseExpression();
    Expect(Tok::kCloseStatement, "'%}'");
    n->a = ParseBody({"endfor", "else"}, "for");
    if (IsStatement({"else"})) {
      current_ += 2;
      Expect(Tok::kCloseStatement, "'%}'");
      n->b = ParseBody({"endfor"}, "for");
    }
    return n;
  }

  NodePtr ParseExpressionSequence(bool primary) {
    const size_t pos = Peek().pos;
    NodePtr first = primary ? ParsePrimary() : ParseExpression();
    if (!Is(Tok::kComma)) return first;
    auto tuple = Make(Kind::kTuple, pos);
    tuple->a.push_back(std::move(first));
    while (true) {
      ++current_;  // the comma
      tuple->a.push_back(primary ? ParsePrimary() : ParseExpression());
      if (!Is(Tok::kComma)) break;
    }
    return tuple;
  }

  NodePtr ParseExpression() {
    Guard guard(*this, Peek().pos);
    NodePtr a = ParseOr();
    if (!IsIdent("if")) return a;
    const size_t pos = Peek().pos;
    ++current_;
    NodePtr test = ParseOr();
    if (IsIdent("else")) {
      ++current_;
      auto n = Make(Kind::kTernary, pos);
      n->x = std::move(test);
      n->y = std::move(a);
      n->z = ParseExpression();
      return n;
    }
    auto n = Make(Kind::kSelect, pos);
    n->x = std::move(a);
    n->y = std::move(test);
    return n;
  }

  // Left-associative chains grow the tree without recursing, so each link counts as a level.
  NodePtr Binary(std::string op, size_t pos, NodePtr left, NodePtr right, int& chain) {
    if (++chain > kMaxParseDepth) {
      program_.Fail(pos, fmt::format("operator chain longer than {} links", kMaxParseDepth),
                    "split the expression with {% set %}");
    }
    auto n = Make(Kind::kBinary, pos);
    n->str = std::move(op);
    n->x = std::move(left);
    n->y = std::move(right);
    return n;
  }

  NodePtr ParseOr() {
    NodePtr left = ParseAnd();
    int chain = 0;
    while (IsIdent("or")) {
      const size_t pos = Peek().pos;
      ++current_;
      left = Binary("or", pos, std::move(left), ParseAnd(), chain);
    }
    return left;
  }
  NodePtr ParseAnd() {
    NodePtr left = ParseNot();
    int chain = 0;
    while (IsIdent("and")) {
      const size_t pos = Peek().pos;
      ++current_;
      left = Binary("and", pos, std::move(left), ParseNot(), chain);
    }
    return left;
  }
  NodePtr ParseNot() {
    if (!IsIdent("not")) return ParseComparison();
    Guard guard(*this, Peek().pos);
    auto n = Make(Kind::kUnary, Peek().pos);
    n->str = "not";
    ++current_;
    n->x = ParseNot();
    return n;
  }
  NodePtr ParseComparison() {
    NodePtr left = ParseAdditive();
    int chain = 0;
    while (true) {
      const size_t pos = Peek().pos;
      std::string op;
      if (IsIdent("not") && IsIdent("in", 1)) {
        op = "not in";
        current_ += 2;
      } else if (IsIdent("in")) {
        op = "in";
        ++current_;
      } else if (Is(Tok::kComparison)) {
        op = tokens_[current_++].value;
      } else {
        break;
      }
      left = Binary(std::move(op), pos, std::move(left), ParseAdditive(), chain);
    }
    return left;
  }
  NodePtr ParseAdditive() {
    NodePtr left = ParseMultiplicative();
    int chain = 0;
    while (Is(Tok::kAdditive)) {
      const Token& t = tokens_[current_++];
      left = Binary(t.value, t.pos, std::move(left), ParseMultiplicative(), chain);
    }
    return left;
  }
  NodePtr ParseMultiplicative() {
    NodePtr left = ParsePower();
    int chain = 0;
    while (Is(Tok::kMultiplicative)) {
      const Token& t = tokens_[current_++];
      left = Binary(t.value, t.pos, std::move(left), ParsePower(), chain);
    }
    return left;
  }
  NodePtr ParsePower() {
    NodePtr left = ParseTest();
    int chain = 0;
    while (Is(Tok::kPower)) {
      const Token& t = tokens_[current_++];
      left = Binary(t.value, t.pos, std::move(left), ParseTest(), chain);
    }
    return left;
  }
  NodePtr ParseTest() {
    NodePtr operand = ParseFilter();
    int chain = 0;
    while (IsIdent("is")) {
      const size_t pos = Peek().pos;
      ++current_;
      const bool negate = IsIdent("not");
      if (negate) ++current_;
      NodePtr test = ParsePrimary();
      if (test->kind != Kind::kIdentifier) program_.Fail(test->pos, "expected a test name");
      if (++chain > kMaxParseDepth) program_.Fail(pos, "too many chained tests");
      auto n = Make(Kind::kTest, pos);
      n->x = std::move(operand);
      n->str = test->str;
      n->flag = negate;
      operand = std::move(n);
    }
    return operand;
  }
  NodePtr ParseFilter() {
    NodePtr operand = ParseSign();
    int chain = 0;
    while (Is(Tok::kPipe)) {
      const size_t pos = Peek().pos;
      ++current_;
      NodePtr filter = ParsePrimary();
      if (filter->kind != Kind::kIdentifier) program_.Fail(filter->pos, "expected a filter name");
      if (Is(Tok::kOpenParen)) filter = ParseCall(std::move(filter));
      if (++chain > kMaxParseDepth) program_.Fail(pos, "too many chained filters");
      auto n = Make(Kind::kFilter, pos);
      n->x = std::move(operand);
      n->y = std::move(filter);
      operand = std::move(n);
    }
    return operand;
  }
  NodePtr ParseSign() {
    const Token& t = Peek();
    if ((t.type == Tok::kUnary || t.type == Tok::kAdditive) && (t.value == "-" || t.value == "+")) {
      Guard guard(*this, t.pos);
      auto n = Make(Kind::kUnary, t.pos);
      n->str = t.value;
      ++current_;
      n->x = ParseSign();
      return n;
    }
    NodePtr member = ParseMember(ParsePrimary());
    if (Is(Tok::kOpenParen)) return ParseCall(std::move(member));
    return member;
  }
  // callee(args) followed by any .x / [i] / (args) suffixes, iteratively.
  NodePtr ParseCall(NodePtr callee) {
    int chain = 0;
    while (true) {
      if (++chain > kMaxParseDepth) program_.Fail(callee->pos, "too many chained calls");
      auto n = Make(Kind::kCall, callee->pos);
      n->a = ParseArgs(/*parameters=*/false);
      n->x = std::move(callee);
      callee = ParseMember(std::move(n));
      if (!Is(Tok::kOpenParen)) return callee;
    }
  }
  std::vector<NodePtr> ParseArgs(bool parameters) {
    Expect(Tok::kOpenParen, "'('");
    std::vector<NodePtr> args;
    std::vector<std::string> names;
    bool saw_keyword = false, saw_spread = false;
    while (!Is(Tok::kCloseParen)) {
      if (Is(Tok::kEnd)) Fail("expected ')'");
      const size_t pos = Peek().pos;
      const bool keyword_spread = Is(Tok::kPower);
      const bool positional_spread = Is(Tok::kMultiplicative) && Peek().value == "*";
      if (parameters && (keyword_spread || positional_spread)) {
        Fail("argument unpacking is not allowed in parameter declarations");
      }
      if (keyword_spread) {
        ++current_;
        auto n = Make(Kind::kKeywordSpread, pos);
        n->x = ParseExpression();
        args.push_back(std::move(n));
        if (Is(Tok::kComma)) ++current_;
        if (!Is(Tok::kCloseParen)) Fail("'**' must be applied to the final argument");
        break;
      }
      NodePtr argument;
      if (positional_spread) {
        if (saw_spread) Fail("only one '*' argument unpacking is allowed");
        saw_spread = true;
        ++current_;
        argument = Make(Kind::kSpread, pos);
        argument->x = ParseExpression();
      } else {
        argument = ParseExpression();
        if (Is(Tok::kEquals)) {
          ++current_;
          if (argument->kind != Kind::kIdentifier) {
            program_.Fail(argument->pos, parameters ? "expected a parameter name"
                                                    : "expected a keyword argument name");
          }
          auto kw = Make(Kind::kKeywordArg, argument->pos);
          kw->str = argument->str;
          kw->x = ParseExpression();
          argument = std::move(kw);
        }
        if (parameters) {
          if (argument->kind != Kind::kIdentifier && argument->kind != Kind::kKeywordArg) {
            program_.Fail(argument->pos, "expected a parameter name");
          }
          if (std::find(names.begin(), names.end(), argument->str) != names.end()) {
            program_.Fail(argument->pos, fmt::format("duplicate parameter '{}'", argument->str));
          }
          names.push_back(argument->str);
        }
        if (argument->kind == Kind::kKeywordArg) {
          saw_keyword = true;
        } else if (saw_keyword) {
          program_.Fail(argument->pos, parameters ? "a parameter without default follows one with"
                                                  : "positional arguments must come before keyword "
                                                    "arguments");
        } else if (saw_spread) {
          program_.Fail(argument->pos, "positional arguments must not follow '*' unpacking");
        }
      }
      args.push_back(std::move(argument));
      if (Is(Tok::kComma)) ++current_;
    }
    Expect(Tok::kCloseParen, "')'");
    return args;
  }
  // [i], [a:b:c] and the like; a slice keeps null for omitted parts.
  NodePtr ParseSubscript(size_t pos) {
    std::vector<NodePtr> parts;
    bool is_slice = false;
    while (!Is(Tok::kCloseBracket)) {
      if (Is(Tok::kEnd)) Fail("expected ']'");
      if (Is(Tok::kColon)) {
        parts.push_back(nullptr);
        ++current_;
        is_slice = true;
      } else {
        parts.push_back(ParseExpression());
        if (Is(Tok::kColon)) {
          ++current_;
          is_slice = true;
        }
      }
    }
    if (parts.empty()) program_.Fail(pos, "expected an index or a slice inside '[]'");
    if (!is_slice) return std::move(parts[0]);
    if (parts.size() > 3) program_.Fail(pos, "a slice takes at most 3 parts");
    auto n = Make(Kind::kSlice, pos);
    parts.resize(3);
    n->x = std::move(parts[0]);
    n->y = std::move(parts[1]);
    n->z = std::move(parts[2]);
    return n;
  }
  NodePtr ParseMember(NodePtr object) {
    int chain = 0;
    while (Is(Tok::kDot) || Is(Tok::kOpenBracket)) {
      const Token& op = tokens_[current_++];
      if (++chain > kMaxParseDepth) program_.Fail(op.pos, "too many chained member accesses");
      auto n = Make(Kind::kMember, op.pos);
      n->flag = op.type == Tok::kOpenBracket;
      if (n->flag) {
        Guard guard(*this, op.pos);
        n->y = ParseSubscript(op.pos);
        Expect(Tok::kCloseBracket, "']'");
      } else {
        n->y = ParsePrimary();
        if (n->y->kind != Kind::kIdentifier && n->y->kind != Kind::kInteger) {
          program_.Fail(n->y->pos, "expected a name or an integer after '.'");
        }
      }
      n->x = std::move(object);
      object = std::move(n);
    }
    return object;
  }
  NodePtr ParsePrimary() {
    Guard guard(*this, Peek().pos);
    if (current_ >= tokens_.size()) Fail("unexpected end of template: expected a value");
    const Token& t = tokens_[current_++];
    switch (t.type) {
      case Tok::kNumber: {
        auto n =
            Make(t.value.find('.') != std::string::npos ? Kind::kFloat : Kind::kInteger, t.pos);
        n->number = ParseDecimal(t.value);
        return n;
      }
      case Tok::kString: {
        auto n = Make(Kind::kString, t.pos);
        n->str = t.value;
        while (Is(Tok::kString)) n->str += tokens_[current_++].value;  // 'a' 'b' -> 'ab'
        return n;
      }
      case Tok::kIdent: {
        auto n = Make(Kind::kIdentifier, t.pos);
        n->str = t.value;
        return n;
      }
      case Tok::kOpenParen: {
        NodePtr n = ParseExpressionSequence(/*primary=*/false);
        Expect(Tok::kCloseParen, "')'");
        return n;
      }
      case Tok::kOpenBracket: {
        auto n = Make(Kind::kArray, t.pos);
        while (!Is(Tok::kCloseBracket)) {
          if (Is(Tok::kEnd)) Fail("expected ']'");
          n->a.push_back(ParseExpression());
          if (Is(Tok::kComma)) ++current_;
        }
        ++current_;
        return n;
      }
      case Tok::kOpenCurly: {
        auto n = Make(Kind::kObject, t.pos);
        while (!Is(Tok::kCloseCurly)) {
          if (Is(Tok::kEnd)) Fail("expected '}'");
          n->a.push_back(ParseExpression());
          Expect(Tok::kColon, "':' between a key and its value");
          n->b.push_back(ParseExpression());
          if (Is(Tok::kComma)) ++current_;
        }
        ++current_;
        return n;
      }
      default:
        program_.Fail(t.pos, fmt::format("unexpected {}", Describe(t.type)));
    }
  }

  std::vector<Token> tokens_;
  const Program& program_;
  Token end_;
  size_t current_ = 0;
  int depth_ = 0;
};

}  // namespace

std::vector<NodePtr> Parse(std::vector<Token> tokens, const Program& program) {
  return Parser(std::move(tokens), program).Run();
}

}  // namespace rlid::jinja::internal

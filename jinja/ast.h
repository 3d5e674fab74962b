// The syntax tree the parser builds and the interpreter walks: one Node type whose fields
// serve each construct (see Kind and the parser), owned through unique_ptr, destroyed
// without recursion so the deepest tree the parser accepts never exhausts the stack.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

namespace rlid::jinja::internal {

enum class Kind {
  kText,
  kInteger,
  kFloat,
  kString,
  kIdentifier,
  kArray,
  kTuple,
  kObject,
  kMember,
  kSlice,
  kCall,
  kKeywordArg,
  kSpread,
  kKeywordSpread,
  kBinary,
  kUnary,
  kFilter,
  kTest,
  kSelect,
  kTernary,
  kSet,
  kIf,
  kFor,
  kMacro,
  kCallBlock,
  kFilterBlock,
  kBreak,
  kContinue
};

struct Node;
using NodePtr = std::unique_ptr<Node>;

// One AST node; which fields are used depends on `kind` (see the parser).
struct Node {
  Kind kind;
  size_t pos = 0;
  std::string str;  // identifier, string literal, operator, test or macro name
  double number = 0;
  bool flag = false;  // member: computed; test: negated; call block: has caller args
  NodePtr x, y, z;
  std::vector<NodePtr> a, b;
  std::vector<std::vector<NodePtr>> blocks;  // if: one body per condition in `a`, then else

  Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;
  // Iterative, so a tree as deep as the parser allows never recurses on destruction.
  ~Node() {
    std::vector<NodePtr> pending;
    MoveChildren(pending);
    while (!pending.empty()) {
      NodePtr n = std::move(pending.back());
      pending.pop_back();
      if (n) n->MoveChildren(pending);
    }
  }
  void MoveChildren(std::vector<NodePtr>& out) {
    for (NodePtr* p : {&x, &y, &z}) {
      if (*p) out.push_back(std::move(*p));
    }
    for (auto* list : {&a, &b}) {
      for (auto& c : *list) out.push_back(std::move(c));
      list->clear();
    }
    for (auto& block : blocks) {
      for (auto& c : block) out.push_back(std::move(c));
    }
    blocks.clear();
  }
};

}  // namespace rlid::jinja::internal

// The core of the interpreter (interpreter.h): the RenderOptions bounds every other part
// charges against, and the evaluation of statements and expressions, which hands operators,
// calls, member access and filters to the files that hold them.
#include "jinja/interpreter.h"

#include <fmt/format.h>

#include "jinja/numbers.h"

namespace rlid::jinja::internal {

std::string Interpreter::Run(const EnvPtr& global) {
  try {
    return Block(program_.body, global);
  } catch (const BreakSignal& s) {
    program_.Fail(s.pos, "{% break %} outside a for loop");
  } catch (const ContinueSignal& s) {
    program_.Fail(s.pos, "{% continue %} outside a for loop");
  }
}

// ---- bounds ----

Interpreter::DepthGuard::DepthGuard(Interpreter& in, size_t pos) : in(in) {
  if (++in.depth_ > in.options_.max_depth) {
    in.program_.Fail(pos,
                     fmt::format("evaluation nests deeper than max_depth={} (runaway "
                                 "recursion?)",
                                 in.options_.max_depth),
                     "check macros that call themselves, or raise RenderOptions::max_depth");
  }
}

void Interpreter::Fail(const Node& n, const std::string& message) const {
  program_.Fail(n.pos, message);
}

void Interpreter::Fail(size_t pos, const std::string& message) const {
  program_.Fail(pos, message);
}

// Every string the template builds stays within max_output_bytes; called before appending.
void Interpreter::CheckSize(size_t size, size_t pos) const {
  if (size > options_.max_output_bytes) {
    program_.Fail(
        pos, fmt::format("a string would exceed max_output_bytes={}", options_.max_output_bytes),
        "the template builds runaway output; raise RenderOptions::max_output_bytes "
        "if it is legitimate");
  }
}

void Interpreter::Append(std::string& out, std::string_view add, size_t pos) {
  CheckSize(out.size() + add.size(), pos);
  Charge(add.size(), pos);
  out += add;
}

// Interpreted operations plus bytes read or written by string operations share max_work;
// charged before the work it pays for, so a runaway stops within one operation's cost.
void Interpreter::Charge(size_t n, size_t pos) {
  if (n > options_.max_work - std::min(effort_, options_.max_work)) {
    program_.Fail(pos,
                  fmt::format("the template exceeded max_work={} (interpreted operations plus "
                              "bytes of strings read and written)",
                              options_.max_work),
                  "real chat templates need a small fraction of this; check for loops over "
                  "large strings, or raise RenderOptions::max_work");
  }
  effort_ += n;
}

// What an operation on `v` reads: a string's bytes, a container's elements.
size_t Interpreter::Weight(const Value& v) {
  if (v.type == Type::kString) return v.string->size();
  if (v.IsArray()) return v.array->size();
  if (v.IsContainer() && v.object) return v.object->entries.size();
  return 0;
}

// For-loop iterations, range() elements and built array elements share one budget.
void Interpreter::Spend(size_t n, size_t pos) {
  if (n > options_.max_loop_iterations - std::min(work_, options_.max_loop_iterations)) {
    program_.Fail(pos,
                  fmt::format("the template exceeded max_loop_iterations={} (loop "
                              "iterations plus range() and built list elements)",
                              options_.max_loop_iterations),
                  "check for runaway loops, or raise RenderOptions::max_loop_iterations");
  }
  work_ += n;
}

Value Interpreter::NewArray(Array items, size_t pos, Type type) {
  Spend(items.size(), pos);
  return MakeArray(std::move(items), type);
}

// ---- evaluation ----

std::string Interpreter::Block(const std::vector<NodePtr>& body, const EnvPtr& env) {
  std::string out;
  if (body.empty()) return out;
  DepthGuard guard(*this, body.front()->pos);
  for (const auto& statement : body) {
    if (statement->kind == Kind::kText) {
      Append(out, statement->str, statement->pos);
      continue;
    }
    const Value v = Eval(*statement, env);
    if (v.IsNullish()) continue;
    if (v.type == Type::kString) {
      Append(out, v.Str(), statement->pos);
    } else {
      Append(out, ToString(v, statement->pos), statement->pos);
    }
  }
  return out;
}

Value Interpreter::Eval(const Node& n, const EnvPtr& env) {
  DepthGuard guard(*this, n.pos);
  Charge(1, n.pos);
  switch (n.kind) {
    case Kind::kText:
    case Kind::kString:
      return String(n.str);
    case Kind::kInteger:
      return Integer(n.number);
    case Kind::kFloat:
      return Float(n.number);
    case Kind::kIdentifier:
      return env->Lookup(n.str);
    case Kind::kArray:
    case Kind::kTuple: {
      Array items;
      items.reserve(n.a.size());
      for (const auto& e : n.a) items.push_back(Eval(*e, env));
      return NewArray(std::move(items), n.pos,
                      n.kind == Kind::kTuple ? Type::kTuple : Type::kArray);
    }
    case Kind::kObject:
      return EvalObject(n, env);
    case Kind::kMember:
      return EvalMember(n, env);
    case Kind::kCall:
      return Charged(EvalCall(n, env), n.pos);
    case Kind::kUnary:
      return EvalUnary(n, env);
    case Kind::kBinary:
      return Charged(EvalBinary(n, env), n.pos);
    case Kind::kFilter:
      return Charged(ApplyFilter(Eval(*n.x, env), *n.y, env), n.pos);
    case Kind::kTest: {
      const Value operand = Eval(*n.x, env);
      const bool result = RunTest(n.str, operand, nullptr, n);
      return Bool(n.flag ? !result : result);
    }
    case Kind::kSelect:
      if (!Truthy(Eval(*n.y, env))) return Undefined();
      return Eval(*n.x, env);
    case Kind::kTernary:
      return Truthy(Eval(*n.x, env)) ? Eval(*n.y, env) : Eval(*n.z, env);
    case Kind::kSet:
      EvalSet(n, env);
      return Null();
    case Kind::kIf:
      return EvalIf(n, env);
    case Kind::kFor:
      return EvalFor(n, env);
    case Kind::kMacro: {
      Function f{FnKind::kMacro, n.str, {}, &n, nullptr};
      env->Set(n.str, MakeFunction(std::move(f)));
      return Null();
    }
    case Kind::kCallBlock:
      return EvalCallBlock(n, env);
    case Kind::kFilterBlock:
      return ApplyFilter(String(Block(n.a, env)), *n.y, env);
    case Kind::kBreak:
      throw BreakSignal{n.pos};
    case Kind::kContinue:
      throw ContinueSignal{n.pos};
    case Kind::kSlice:
    case Kind::kKeywordArg:
    case Kind::kSpread:
    case Kind::kKeywordSpread:
      break;
  }
  Fail(n, "unexpected expression here");
}

// A dict literal {k: v, ...}: string keys, the last of a repeated key wins.
Value Interpreter::EvalObject(const Node& n, const EnvPtr& env) {
  auto object = std::make_shared<Object>();
  for (size_t i = 0; i < n.a.size(); ++i) {
    const Value key = Eval(*n.a[i], env);
    if (key.type != Type::kString) {
      Fail(*n.a[i], fmt::format("object keys must be strings: got {}", TypeName(key.type)));
    }
    object->Set(key.Str(), Eval(*n.b[i], env));
  }
  Spend(object->entries.size(), n.pos);
  return MakeObject(std::move(object));
}

// if/elif/else: the body of the first true condition, else the else body (if any).
Value Interpreter::EvalIf(const Node& n, const EnvPtr& env) {
  for (size_t i = 0; i < n.a.size(); ++i) {
    if (Truthy(Eval(*n.a[i], env))) return String(Block(n.blocks[i], env));
  }
  if (n.blocks.size() > n.a.size()) return String(Block(n.blocks.back(), env));
  return String("");
}

// Charges what a call, operator or filter produced.
Value Interpreter::Charged(Value v, size_t pos) {
  Charge(Weight(v), pos);
  return v;
}

void Interpreter::EvalSet(const Node& n, const EnvPtr& env) {
  const Value rhs = n.y ? Eval(*n.y, env) : String(Block(n.a, env));
  const Node& target = *n.x;
  if (target.kind == Kind::kIdentifier) {
    env->Set(target.str, rhs);
  } else if (target.kind == Kind::kTuple) {
    if (!rhs.IsArray()) {
      Fail(n, fmt::format("cannot unpack non-iterable type in set: {}", TypeName(rhs.type)));
    }
    if (rhs.array->size() != target.a.size()) {
      Fail(n, fmt::format("too {} items to unpack in set",
                          target.a.size() > rhs.array->size() ? "few" : "many"));
    }
    for (size_t i = 0; i < target.a.size(); ++i) {
      if (target.a[i]->kind != Kind::kIdentifier) Fail(n, "can only unpack into names in set");
      env->Set(target.a[i]->str, (*rhs.array)[i]);
    }
  } else if (target.kind == Kind::kMember) {
    const Value object = Eval(*target.x, env);
    if (object.type != Type::kNamespace) {
      Fail(n, "cannot assign an attribute on a non-namespace object");
    }
    if (target.flag || target.y->kind != Kind::kIdentifier) {
      Fail(n, "can only assign a namespace attribute by name (ns.name = ...)");
    }
    object.object->Set(target.y->str, rhs);
  } else {
    Fail(n, "invalid target of set");
  }
}

Value Interpreter::EvalFor(const Node& n, const EnvPtr& env) {
  EnvPtr scope = Child(env);
  const Node* test = nullptr;
  Value iterable;
  if (n.y->kind == Kind::kSelect) {
    iterable = Eval(*n.y->x, scope);
    test = n.y->y.get();
  } else {
    iterable = Eval(*n.y, scope);
  }
  if (iterable.IsObject()) {
    Array keys;
    for (const auto& [k, v] : iterable.object->entries) keys.push_back(String(k));
    iterable = MakeArray(std::move(keys));
  } else if (!iterable.IsArray()) {
    Fail(*n.y,
         fmt::format("expected an array or object to loop over: got {}", TypeName(iterable.type)));
  }
  const Node& var = *n.x;
  auto bind = [&](const EnvPtr& target, const Value& item) {
    if (var.kind == Kind::kIdentifier) {
      target->Set(var.str, item);
      return;
    }
    if (item.type != Type::kArray) {
      Fail(var, fmt::format("cannot unpack non-iterable type: {}", TypeName(item.type)));
    }
    if (item.array->size() != var.a.size()) {
      Fail(var, fmt::format("too {} items to unpack",
                            var.a.size() > item.array->size() ? "few" : "many"));
    }
    for (size_t j = 0; j < var.a.size(); ++j) {
      if (var.a[j]->kind != Kind::kIdentifier) Fail(var, "can only unpack into names");
      target->Set(var.a[j]->str, (*item.array)[j]);
    }
  };
  Array items;
  for (const Value& item : *iterable.array) {
    Spend(1, n.pos);
    if (test != nullptr) {
      EnvPtr loop_scope = Child(scope);
      bind(loop_scope, item);
      if (!Truthy(Eval(*test, loop_scope))) continue;
    } else if (var.kind == Kind::kTuple) {
      bind(Child(scope), item);  // the reference checks unpacking before the first iteration
    }
    items.push_back(item);
  }
  std::string out;
  bool no_iteration = true;
  const size_t count = items.size();
  for (size_t i = 0; i < count; ++i) {
    auto loop = std::make_shared<Object>();
    loop->entries = {{"index", Integer(static_cast<double>(i + 1))},
                     {"index0", Integer(static_cast<double>(i))},
                     {"revindex", Integer(static_cast<double>(count - i))},
                     {"revindex0", Integer(static_cast<double>(count - i - 1))},
                     {"first", Bool(i == 0)},
                     {"last", Bool(i + 1 == count)},
                     {"length", Integer(static_cast<double>(count))},
                     {"previtem", i > 0 ? items[i - 1] : Undefined()},
                     {"nextitem", i + 1 < count ? items[i + 1] : Undefined()}};
    scope->Set("loop", MakeObject(std::move(loop)));
    bind(scope, items[i]);
    try {
      Append(out, Block(n.a, scope), n.pos);
    } catch (const ContinueSignal&) {
      continue;
    } catch (const BreakSignal&) {
      break;
    }
    no_iteration = false;
  }
  if (no_iteration) Append(out, Block(n.b, scope), n.pos);
  return String(std::move(out));
}

}  // namespace rlid::jinja::internal

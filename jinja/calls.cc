// Calls (interpreter.h): argument evaluation (positional, keyword, * and ** unpacking),
// macros and {% call %} blocks with the reference's argument binding (defaults, kwargs,
// varargs, caller()), and the dispatch of every function value to what implements it.
#include <fmt/format.h>

#include <optional>

#include "jinja/interpreter.h"

namespace rlid::jinja::internal {

// Identifiers named kwargs/varargs anywhere in `body` make a macro collect extra arguments
// (a simplification of the reference's "read before declared" analysis).
void Interpreter::FindSpecial(const std::vector<NodePtr>& body, bool& kwargs, bool& varargs) {
  std::vector<const Node*> pending;
  for (const auto& n : body) pending.push_back(n.get());
  while (!pending.empty()) {
    const Node& n = *pending.back();
    pending.pop_back();
    if (n.kind == Kind::kIdentifier) {
      kwargs |= n.str == "kwargs";
      varargs |= n.str == "varargs";
    }
    for (const NodePtr* p : {&n.x, &n.y, &n.z}) {
      if (*p) pending.push_back(p->get());
    }
    for (const auto& c : n.a) pending.push_back(c.get());
    for (const auto& c : n.b) pending.push_back(c.get());
    for (const auto& block : n.blocks) {
      for (const auto& c : block) pending.push_back(c.get());
    }
  }
}

void Interpreter::BindArguments(const std::string& display, const std::vector<NodePtr>& params,
                                const std::vector<NodePtr>& body, Array args, const EnvPtr& scope,
                                size_t pos) {
  std::shared_ptr<Object> keywords = std::make_shared<Object>();
  if (!args.empty() && args.back().type == Type::kKwargs) {
    keywords->entries = args.back().object->entries;
    args.pop_back();
  }
  bool want_kwargs = false, want_varargs = false;
  FindSpecial(body, want_kwargs, want_varargs);
  for (const auto& p : params) {
    if (p->str == "kwargs") want_kwargs = false;
    if (p->str == "varargs") want_varargs = false;
  }
  std::vector<std::pair<std::string, const Node*>> pending_defaults;
  for (size_t i = 0; i < params.size(); ++i) {
    const Node& p = *params[i];
    std::optional<Value> value;
    if (i < args.size()) value = args[i];
    if (!value) {
      for (auto it = keywords->entries.begin(); it != keywords->entries.end(); ++it) {
        if (it->first == p.str) {
          value = it->second;
          keywords->entries.erase(it);
          break;
        }
      }
    }
    if (!value && p.kind == Kind::kKeywordArg) pending_defaults.emplace_back(p.str, p.x.get());
    scope->Set(p.str, value.value_or(Undefined()));
  }
  if (want_kwargs) {
    scope->Set("kwargs", MakeObject(keywords));
  } else if (!keywords->entries.empty()) {
    Fail(pos, fmt::format("macro {} takes no keyword argument '{}'", display,
                          keywords->entries.front().first));
  }
  if (want_varargs) {
    Array rest;
    for (size_t i = params.size(); i < args.size(); ++i) rest.push_back(args[i]);
    scope->Set("varargs", NewArray(std::move(rest), pos));
  } else if (args.size() > params.size()) {
    Fail(pos, fmt::format("macro {} takes not more than {} argument(s)", display, params.size()));
  }
  for (const auto& [name, default_node] : pending_defaults) {
    scope->Set(name, Eval(*default_node, scope));
  }
}

Value Interpreter::EvalCallBlock(const Node& n, const EnvPtr& env) {
  Function caller{FnKind::kCaller, "caller", {}, &n, env};
  const Node& call = *n.x;
  auto [args, kwargs] = EvalArguments(call.a, env);
  args.push_back(MakeObject(kwargs, Type::kKwargs));
  const Value fn = Eval(*call.x, env);
  if (fn.type != Type::kFunction) {
    Fail(call,
         fmt::format("cannot call something that is not a function: got {}", TypeName(fn.type)));
  }
  EnvPtr inner = Child(env);
  inner->Set("caller", MakeFunction(std::move(caller)));
  return CallFunction(*fn.function, std::move(args), inner, call);
}

std::pair<Array, std::shared_ptr<Object>> Interpreter::EvalArguments(
    const std::vector<NodePtr>& nodes, const EnvPtr& env) {
  Array positional;
  auto keywords = std::make_shared<Object>();
  for (const auto& arg : nodes) {
    if (arg->kind == Kind::kSpread) {
      const Value v = Eval(*arg->x, env);
      if (!v.IsArray()) {
        Fail(*arg, fmt::format("cannot unpack non-iterable type: {}", TypeName(v.type)));
      }
      Spend(v.array->size(), arg->pos);
      positional.insert(positional.end(), v.array->begin(), v.array->end());
    } else if (arg->kind != Kind::kKeywordArg && arg->kind != Kind::kKeywordSpread) {
      positional.push_back(Eval(*arg, env));
    }
  }
  auto add = [&](const std::string& key, Value value, const Node& at) {
    if (keywords->Find(key) != nullptr) {
      Fail(at, fmt::format("got multiple values for keyword argument '{}'", key));
    }
    keywords->entries.emplace_back(key, std::move(value));
  };
  for (const auto& arg : nodes) {
    if (arg->kind == Kind::kKeywordArg) {
      add(arg->str, Eval(*arg->x, env), *arg);
    } else if (arg->kind == Kind::kKeywordSpread) {
      const Value v = Eval(*arg->x, env);
      if (!v.IsObject()) {
        Fail(*arg, fmt::format("argument after ** must be a mapping, not {}", TypeName(v.type)));
      }
      for (const auto& [k, val] : v.object->entries) add(k, val, *arg);
    }
  }
  return {std::move(positional), std::move(keywords)};
}

Value Interpreter::EvalCall(const Node& n, const EnvPtr& env) {
  auto [args, kwargs] = EvalArguments(n.a, env);
  if (!kwargs->entries.empty()) args.push_back(MakeObject(kwargs, Type::kKwargs));
  const Value fn = Eval(*n.x, env);
  if (fn.type != Type::kFunction) {
    Fail(n, fmt::format("cannot call something that is not a function: got {}", TypeName(fn.type)));
  }
  return CallFunction(*fn.function, std::move(args), env, n);
}

Value Interpreter::CallFunction(const Function& f, Array args, const EnvPtr& env, const Node& at) {
  DepthGuard guard(*this, at.pos);
  switch (f.kind) {
    case FnKind::kMacro: {
      EnvPtr scope = Child(env);  // the reference scopes macros dynamically, at the call site
      BindArguments("'" + f.node->str + "'", f.node->a, f.node->b, std::move(args), scope, at.pos);
      return String(Block(f.node->b, scope));
    }
    case FnKind::kCaller: {
      EnvPtr scope = Child(f.closure);
      BindArguments("None", f.node->a, f.node->b, std::move(args), scope, at.pos);
      return String(Block(f.node->b, scope));
    }
    case FnKind::kRaiseException: {
      const std::string message = args.empty() ? "" : RawString(args[0], at.pos);
      program_.Fail(at.pos, "raise_exception: " + message,
                    "the template rejected its input: " + message);
    }
    case FnKind::kRange:
      return Range(args, at);
    case FnKind::kStrftimeNow:
      return StrftimeNow(args, at);
    case FnKind::kNamespace:
      return MakeNamespace(std::move(args), at);
    case FnKind::kStringMethod:
      return StringMethod(f.method, f.self.Str(), args, at);
    case FnKind::kObjectMethod:
      return ObjectMethod(f.method, f.self, args, at);
  }
  Fail(at, "unknown function");
}

}  // namespace rlid::jinja::internal

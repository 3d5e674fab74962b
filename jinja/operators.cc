// Operators (interpreter.h): JavaScript's loose `==` and strict `===` on the raw values, the
// reference's ordering (compareRuntimeValues), and the unary and binary operators with
// Python's arithmetic where transformers' jinja2 differs (%, //, str + str only).
#include <fmt/format.h>

#include <cmath>
#include <optional>

#include "jinja/interpreter.h"
#include "jinja/numbers.h"
#include "jinja/strings.h"

namespace rlid::jinja::internal {

double Interpreter::RawNumber(const Value& v) {
  return v.type == Type::kBool ? (v.boolean ? 1 : 0) : v.number;
}

// JavaScript `==` on the raw values, as the reference compares.
bool Interpreter::LooseEquals(const Value& a, const Value& b, size_t pos) {
  if (a.IsNullish() || b.IsNullish()) return a.IsNullish() && b.IsNullish();
  if (a.type == Type::kBool) return LooseEquals(Integer(a.boolean ? 1 : 0), b, pos);
  if (b.type == Type::kBool) return LooseEquals(a, Integer(b.boolean ? 1 : 0), pos);
  const bool a_prim = a.IsNumber() || a.type == Type::kString;
  const bool b_prim = b.IsNumber() || b.type == Type::kString;
  if (a_prim && b_prim) {
    if (a.type == Type::kString && b.type == Type::kString) return a.Str() == b.Str();
    const double x = a.type == Type::kString ? JsStringToNumber(a.Str()) : a.number;
    const double y = b.type == Type::kString ? JsStringToNumber(b.Str()) : b.number;
    return x == y;
  }
  if (!a_prim && !b_prim) return SameReference(a, b);
  // An object against a primitive compares its primitive (string) form.
  const Value& obj = a_prim ? b : a;
  const Value& prim = a_prim ? a : b;
  if (obj.type == Type::kFunction) return false;
  return LooseEquals(String(RawString(obj, pos)), prim, pos);
}

bool Interpreter::SameReference(const Value& a, const Value& b) {
  if (a.IsArray() && b.IsArray()) return a.array == b.array;
  if (a.IsContainer() && b.IsContainer()) return a.object == b.object;
  if (a.type == Type::kFunction && b.type == Type::kFunction) return a.function == b.function;
  return false;
}

// `===` on the raw values (the `in` operator, equalto): no coercion, containers by identity.
bool Interpreter::StrictEquals(const Value& a, const Value& b) {
  if (a.IsNumber() && b.IsNumber()) return a.number == b.number;
  if (a.type != b.type) {
    return SameReference(a, b);  // array vs tuple or object vs kwargs sharing storage
  }
  switch (a.type) {
    case Type::kUndefined:
    case Type::kNull:
      return true;
    case Type::kBool:
      return a.boolean == b.boolean;
    case Type::kString:
      return a.Str() == b.Str();
    default:
      return SameReference(a, b);
  }
}

// compareRuntimeValues(): numbers (and booleans) with each other, strings with strings.
int Interpreter::Compare(const Value& a, const Value& b, bool case_sensitive, size_t pos) {
  if (a.type == Type::kNull && b.type == Type::kNull) return 0;
  if (a.type == Type::kUndefined && b.type == Type::kUndefined) return 0;
  if (a.IsNullish() || b.IsNullish()) {
    Fail(pos, fmt::format("cannot compare {} with {}", TypeName(a.type), TypeName(b.type)));
  }
  const bool a_num = a.IsNumber() || a.type == Type::kBool;
  const bool b_num = b.IsNumber() || b.type == Type::kBool;
  if (a_num && b_num) {
    const double x = RawNumber(a), y = RawNumber(b);
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.type != b.type) {
    Fail(pos, fmt::format("cannot compare different types: {} and {}", TypeName(a.type),
                          TypeName(b.type)));
  }
  if (a.type != Type::kString) Fail(pos, fmt::format("cannot compare {}", TypeName(a.type)));
  if (case_sensitive) return a.Str() < b.Str() ? -1 : a.Str() > b.Str() ? 1 : 0;
  const std::string x = ChangeCase(a.Str(), false), y = ChangeCase(b.Str(), false);
  return x < y ? -1 : x > y ? 1 : 0;
}

// ---- operators ----

Value Interpreter::EvalUnary(const Node& n, const EnvPtr& env) {
  const Value arg = Eval(*n.x, env);
  if (n.str == "not") return Bool(!Truthy(arg));
  const double sign = n.str == "-" ? -1 : 1;
  if (arg.IsNumber() || arg.type == Type::kBool) {
    const double result = sign * RawNumber(arg);
    return arg.type == Type::kFloat ? Float(result) : Integer(result);
  }
  Fail(n, fmt::format("unknown operator \"{}\" for {}", n.str, TypeName(arg.type)));
}

Value Interpreter::EvalBinary(const Node& n, const EnvPtr& env) {
  const std::string& op = n.str;
  const Value left = Eval(*n.x, env);
  if (op == "and") return Truthy(left) ? Eval(*n.y, env) : left;
  if (op == "or") return Truthy(left) ? left : Eval(*n.y, env);
  const Value right = Eval(*n.y, env);
  Charge(Weight(left) + Weight(right), n.pos);
  if (op == "==") return Bool(LooseEquals(left, right, n.pos));
  if (op == "!=") return Bool(!LooseEquals(left, right, n.pos));
  if (left.type == Type::kUndefined || right.type == Type::kUndefined) {
    if (right.type == Type::kUndefined && (op == "in" || op == "not in")) {
      return Bool(op == "not in");
    }
    Fail(n, fmt::format("cannot perform operation {} on undefined values", op));
  }
  if (left.type == Type::kNull || right.type == Type::kNull) {
    Fail(n, fmt::format("cannot perform operation {} on null values", op));
  }
  if (op == "~") {
    std::string out = RawString(left, n.pos);
    Append(out, RawString(right, n.pos), n.pos);
    return String(std::move(out));
  }
  const bool left_numeric = left.IsNumber() || left.type == Type::kBool;
  const bool right_numeric = right.IsNumber() || right.type == Type::kBool;
  if (op == "**" && left_numeric && right_numeric) {
    const double a = RawNumber(left), b = RawNumber(right);
    if (a == 0 && b < 0) Fail(n, "0.0 cannot be raised to a negative power");
    const double result = std::pow(a, b);
    if (!std::isfinite(result)) Fail(n, "exponentiation result is not a finite real number");
    const bool is_float = left.type == Type::kFloat || right.type == Type::kFloat || b < 0;
    return is_float ? Float(result) : Integer(result);
  }
  if (left.IsNumber() && right.IsNumber()) {
    if (std::optional<Value> v = Arithmetic(op, left, right, n)) return *v;
  } else if (left.IsArray() && right.IsArray()) {
    if (op == "+") {
      Array items = *left.array;
      items.insert(items.end(), right.array->begin(), right.array->end());
      return NewArray(std::move(items), n.pos);
    }
  } else if (right.IsArray()) {
    bool member = false;
    for (const Value& item : *right.array) {
      if (StrictEquals(item, left)) {
        member = true;
        break;
      }
    }
    if (op == "in") return Bool(member);
    if (op == "not in") return Bool(!member);
  }
  if ((left.type == Type::kString || right.type == Type::kString) && op == "+") {
    // Python's str + str only (transformers/jinja2 is the reference; `~` converts).
    if (left.type != right.type)
      Fail(n, fmt::format("can only concatenate str (not \"{}\") to str",
                          TypeName(left.type == Type::kString ? right.type : left.type)));
    std::string out = left.Str();
    Append(out, right.Str(), n.pos);
    return String(std::move(out));
  }
  if (left.type == Type::kString && right.type == Type::kString) {
    const bool found = right.Str().find(left.Str()) != std::string::npos;
    if (op == "in") return Bool(found);
    if (op == "not in") return Bool(!found);
  }
  if (left.type == Type::kString && right.IsObject()) {
    const bool found = right.object->Find(left.Str()) != nullptr;
    if (op == "in") return Bool(found);
    if (op == "not in") return Bool(!found);
  }
  Fail(n, fmt::format("unknown operator \"{}\" between {} and {}", op, TypeName(left.type),
                      TypeName(right.type)));
}

// `op` on two numbers: arithmetic (Python's / // %), or a comparison; nullopt for any other
// operator, which EvalBinary then reports.
std::optional<Value> Interpreter::Arithmetic(const std::string& op, const Value& left,
                                             const Value& right, const Node& n) {
  const double a = left.number, b = right.number;
  const bool is_float = left.type == Type::kFloat || right.type == Type::kFloat;
  auto typed = [&](double r) { return is_float ? Float(r) : Integer(r); };
  if (op == "+") return typed(a + b);
  if (op == "-") return typed(a - b);
  if (op == "*") return typed(a * b);
  if ((op == "/" || op == "//" || op == "%") && b == 0)
    Fail(n, fmt::format("division by zero ({} {} {})", ToString(left, n.pos), op,
                        ToString(right, n.pos)));
  if (op == "/") return Float(a / b);
  if (op == "//") return typed(std::floor(a / b));
  if (op == "%") {  // Python's: the result takes the divisor's sign
    double r = std::fmod(a, b);
    if (r != 0 && (r < 0) != (b < 0)) r += b;
    return typed(r);
  }
  if (op == "<") return Bool(a < b);
  if (op == ">") return Bool(a > b);
  if (op == "<=") return Bool(a <= b);
  if (op == ">=") return Bool(a >= b);
  return std::nullopt;
}

}  // namespace rlid::jinja::internal

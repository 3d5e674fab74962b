// The interpreter's runtime values, modelled on the reference's RuntimeValue classes
// (runtime.ts): JavaScript numbers, shared immutable strings and arrays, insertion-ordered
// objects, functions (builtins, macros, call blocks), and the variable scopes (Env) they live in.
#pragma once

#include <cmath>
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "jinja/ast.h"

namespace rlid::jinja::internal {

// The reference's runtime types; the names appear in error messages as the reference spells
// them. kTuple is an array to every check except those on the exact type name (the reference
// cannot serialize or unpack tuples); kKwargs is an object the same way.
enum class Type {
  kUndefined,
  kNull,
  kBool,
  kInteger,
  kFloat,
  kString,
  kArray,
  kTuple,
  kObject,
  kKwargs,
  kNamespace,
  kFunction
};

const char* TypeName(Type t);

struct Value;
struct Object;
struct Function;
struct Env;
using EnvPtr = std::shared_ptr<Env>;
using Array = std::vector<Value>;

// A runtime value. Numbers are doubles as in JavaScript (kInteger marks Number.isInteger
// values); strings and arrays are immutable and shared; objects are mutable only as namespaces.
struct Value {
  Type type = Type::kUndefined;
  bool boolean = false;
  double number = 0;
  std::shared_ptr<const std::string> string;
  // A context integer beyond 2^53: its exact digits (Python ints are exact; `number` rounds).
  std::shared_ptr<const std::string> digits;
  std::shared_ptr<const Array> array;
  std::shared_ptr<Object> object;
  std::shared_ptr<const Function> function;

  bool IsNumber() const { return type == Type::kInteger || type == Type::kFloat; }
  bool IsArray() const { return type == Type::kArray || type == Type::kTuple; }
  bool IsObject() const { return type == Type::kObject || type == Type::kKwargs; }
  bool IsContainer() const { return IsObject() || type == Type::kNamespace; }
  bool IsNullish() const { return type == Type::kUndefined || type == Type::kNull; }
  const std::string& Str() const { return *string; }
};

struct Object {
  std::vector<std::pair<std::string, Value>> entries;  // insertion order, unique keys

  const Value* Find(std::string_view key) const {
    for (const auto& [k, v] : entries) {
      if (k == key) return &v;
    }
    return nullptr;
  }
  void Set(std::string_view key, Value value) {
    for (auto& [k, v] : entries) {
      if (k == key) {
        v = std::move(value);
        return;
      }
    }
    entries.emplace_back(std::string(key), std::move(value));
  }
};

enum class FnKind {
  kRaiseException,
  kRange,
  kStrftimeNow,
  kNamespace,
  kStringMethod,
  kObjectMethod,
  kMacro,
  kCaller
};

struct Function {
  FnKind kind;
  std::string method;          // string/object method name
  Value self;                  // the string/object a method is bound to
  const Node* node = nullptr;  // macro or call block
  EnvPtr closure;              // call block: where the {% call %} stands
};

inline Value Undefined() { return Value{}; }
inline Value Null() {
  Value v;
  v.type = Type::kNull;
  return v;
}
inline Value Bool(bool b) {
  Value v;
  v.type = Type::kBool;
  v.boolean = b;
  return v;
}
inline Value Integer(double x) {
  Value v;
  v.type = Type::kInteger;
  v.number = x;
  return v;
}
inline Value Float(double x) {
  Value v;
  v.type = Type::kFloat;
  v.number = x;
  return v;
}
// convertToRuntimeValues on a JS number: integral values are integers.
inline Value Number(double x) {
  return std::isfinite(x) && std::floor(x) == x ? Integer(x) : Float(x);
}
inline Value String(std::string s) {
  Value v;
  v.type = Type::kString;
  v.string = std::make_shared<const std::string>(std::move(s));
  return v;
}
inline Value MakeArray(Array items, Type type = Type::kArray) {
  Value v;
  v.type = type;
  v.array = std::make_shared<const Array>(std::move(items));
  return v;
}
inline Value MakeObject(std::shared_ptr<Object> object, Type type = Type::kObject) {
  Value v;
  v.type = type;
  v.object = std::move(object);
  return v;
}
inline Value MakeFunction(Function f) {
  Value v;
  v.type = Type::kFunction;
  v.function = std::make_shared<const Function>(std::move(f));
  return v;
}

// RuntimeValue.__bool__().
bool Truthy(const Value& v);
// JavaScript truthiness of the raw value (`!!value.value`): containers are always truthy.
bool RawTruthy(const Value& v);

struct Env {
  EnvPtr parent;
  std::map<std::string, Value, std::less<>> vars;

  Value Lookup(std::string_view name) const {
    for (const Env* e = this; e != nullptr; e = e->parent.get()) {
      if (auto it = e->vars.find(name); it != e->vars.end()) return it->second;
    }
    return Undefined();
  }
  void Set(std::string_view name, Value value) {
    if (auto it = vars.find(name); it != vars.end()) {
      it->second = std::move(value);
    } else {
      vars.emplace(std::string(name), std::move(value));
    }
  }
};

// A new scope whose lookups fall back to `parent`.
EnvPtr Child(const EnvPtr& parent);

}  // namespace rlid::jinja::internal

// Runtime values (value.h): type names as the reference spells them in errors, and the two
// truthiness rules (the reference's __bool__ and JavaScript's `!!` on the raw value).
#include "jinja/value.h"

namespace rlid::jinja::internal {

const char* TypeName(Type t) {
  switch (t) {
    case Type::kUndefined:
      return "UndefinedValue";
    case Type::kNull:
      return "NullValue";
    case Type::kBool:
      return "BooleanValue";
    case Type::kInteger:
      return "IntegerValue";
    case Type::kFloat:
      return "FloatValue";
    case Type::kString:
      return "StringValue";
    case Type::kArray:
      return "ArrayValue";
    case Type::kTuple:
      return "TupleValue";
    case Type::kObject:
      return "ObjectValue";
    case Type::kKwargs:
      return "KeywordArgumentsValue";
    case Type::kNamespace:
      return "NamespaceValue";
    case Type::kFunction:
      return "FunctionValue";
  }
  return "?";
}

// RuntimeValue.__bool__().
bool Truthy(const Value& v) {
  switch (v.type) {
    case Type::kUndefined:
    case Type::kNull:
      return false;
    case Type::kBool:
      return v.boolean;
    case Type::kInteger:
    case Type::kFloat:
      return v.number != 0 && !std::isnan(v.number);
    case Type::kString:
      return !v.Str().empty();
    case Type::kArray:
    case Type::kTuple:
      return !v.array->empty();
    case Type::kObject:
    case Type::kKwargs:
      return !v.object->entries.empty();
    case Type::kNamespace:
    case Type::kFunction:
      return true;
  }
  return false;
}

// JavaScript truthiness of the raw value (`!!value.value`): containers are always truthy.
bool RawTruthy(const Value& v) {
  switch (v.type) {
    case Type::kArray:
    case Type::kTuple:
    case Type::kObject:
    case Type::kKwargs:
      return true;
    default:
      return Truthy(v);
  }
}

EnvPtr Child(const EnvPtr& parent) {
  auto e = std::make_shared<Env>();
  e->parent = parent;
  return e;
}

}  // namespace rlid::jinja::internal

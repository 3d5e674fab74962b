// Filters and tests (interpreter.h): `x | name(args)` and `x is name`, the reference's set
// plus the standard Jinja ones it lacks (default, escape, map('filter'), select/reject, round,
// ...), with jinja2's meaning where transformers renders differently.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <unordered_set>

#include "jinja/interpreter.h"
#include "jinja/numbers.h"
#include "jinja/strings.h"

namespace rlid::jinja::internal {

bool Interpreter::RunTest(const std::string& name, const Value& v, const Value* arg,
                          const Node& at) {
  if (name == "boolean") return v.type == Type::kBool;
  if (name == "callable") return v.type == Type::kFunction;
  if (name == "odd" || name == "even") {
    if (v.type != Type::kInteger) Fail(at, fmt::format("cannot {} on {}", name, TypeName(v.type)));
    const bool odd = std::fmod(v.number, 2) != 0;
    return name == "odd" ? odd : !odd;
  }
  if (name == "false") return v.type == Type::kBool && !v.boolean;
  if (name == "true") return v.type == Type::kBool && v.boolean;
  if (name == "none") return v.type == Type::kNull;
  if (name == "string") return v.type == Type::kString;
  if (name == "number") return v.IsNumber();
  if (name == "integer") return v.type == Type::kInteger;
  if (name == "float") return v.type == Type::kFloat;  // extension: not in the reference
  if (name == "iterable") return v.type == Type::kArray || v.type == Type::kString;
  if (name == "mapping") return v.IsObject();
  if (name == "sequence") return v.IsArray() || v.IsObject() || v.type == Type::kString;
  if (name == "lower") return v.type == Type::kString && v.Str() == ChangeCase(v.Str(), false);
  if (name == "upper") return v.type == Type::kString && v.Str() == ChangeCase(v.Str(), true);
  if (name == "defined") return v.type != Type::kUndefined;
  if (name == "undefined") return v.type == Type::kUndefined;
  if (name == "equalto" || name == "eq") {
    if (arg == nullptr) Fail(at, fmt::format("the '{}' test needs a value to compare with", name));
    return StrictEquals(v, *arg);
  }
  Fail(at, fmt::format("unknown test '{}'", name));
}

// ---- filters ----

// getAttributeValue(): "a.b.0" through objects and arrays.
Value Interpreter::AttributePath(const Value& item, const std::string& path) {
  Value v = item;
  size_t start = 0;
  while (true) {
    const size_t dot = path.find('.', start);
    const std::string part = path.substr(start, dot == std::string::npos ? dot : dot - start);
    if (v.IsContainer()) {
      const Value* found = v.object->Find(part);
      v = found != nullptr ? *found : Undefined();
    } else if (v.IsArray()) {
      const double index = JsParseInt(part);
      if (!(index >= 0 && index < static_cast<double>(v.array->size()))) return Undefined();
      v = (*v.array)[static_cast<size_t>(index)];
    } else {
      return Undefined();
    }
    if (dot == std::string::npos) return v;
    start = dot + 1;
  }
}

std::string Interpreter::Escape(const std::string& s, size_t pos) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&':
        Append(out, "&amp;", pos);
        break;
      case '<':
        Append(out, "&lt;", pos);
        break;
      case '>':
        Append(out, "&gt;", pos);
        break;
      case '"':
        Append(out, "&#34;", pos);
        break;
      case '\'':
        Append(out, "&#39;", pos);
        break;
      default:
        Append(out, std::string_view(&c, 1), pos);
    }
  }
  return out;
}

std::string Interpreter::Indent(const std::string& s, const std::string& pad, bool first,
                                bool blank, size_t pos) {
  std::string out;
  size_t start = 0;
  for (size_t line = 0;; ++line) {
    const size_t nl = s.find('\n', start);
    const std::string_view text =
        std::string_view(s).substr(start, nl == std::string::npos ? nl : nl - start);
    if (line > 0) Append(out, "\n", pos);
    if (!((!first && line == 0) || (!blank && text.empty()))) Append(out, pad, pos);
    Append(out, text, pos);
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  return out;
}

// Python's round(x, precision) as Jinja's round filter ("common" rounds half to even).
double Interpreter::Round(double x, double precision, const std::string& method) {
  const double scale = std::pow(10.0, precision);
  double y = x * scale;
  if (!std::isfinite(y)) return x;
  if (method == "floor") {
    y = std::floor(y);
  } else if (method == "ceil") {
    y = std::ceil(y);
  } else {
    y = std::nearbyint(y);
  }
  return y / scale;
}

Value Interpreter::Join(const Value& operand, const std::string& sep, size_t pos) {
  std::string out;
  if (operand.type == Type::kString) {
    bool first = true;
    const std::string& s = operand.Str();
    for (size_t i = 0; i < s.size();) {
      const size_t begin = i;
      NextUtf8(s, i);
      if (!first) Append(out, sep, pos);
      first = false;
      Append(out, std::string_view(s).substr(begin, i - begin), pos);
    }
    return String(std::move(out));
  }
  for (size_t i = 0; i < operand.array->size(); ++i) {
    if (i > 0) Append(out, sep, pos);
    Append(out, RawString((*operand.array)[i], pos), pos);
  }
  return String(std::move(out));
}

Value Interpreter::Unique(const Value& operand) {
  std::unordered_set<std::string> seen;
  Array out;
  for (const Value& item : *operand.array) {
    std::string key;
    switch (item.type) {
      case Type::kInteger:
      case Type::kFloat:
        key = std::isnan(item.number) ? "nNaN" : "n" + JsNumber(item.number);
        break;
      case Type::kString:
        key = "s" + item.Str();
        break;
      case Type::kBool:
        key = item.boolean ? "bt" : "bf";
        break;
      case Type::kNull:
        key = "null";
        break;
      case Type::kUndefined:
        key = "undefined";
        break;
      case Type::kArray:
      case Type::kTuple:
        key = fmt::format("a{}", static_cast<const void*>(item.array.get()));
        break;
      case Type::kFunction:
        key = fmt::format("f{}", static_cast<const void*>(item.function.get()));
        break;
      default:
        key = fmt::format("o{}", static_cast<const void*>(item.object.get()));
    }
    if (seen.insert(std::move(key)).second) out.push_back(item);
  }
  return MakeArray(std::move(out));
}

void Interpreter::UnknownFilter(const Node& at, const std::string& name, const Value& v) {
  const char* kind = v.IsArray()               ? "ArrayValue"
                     : v.type == Type::kString ? "StringValue"
                     : v.IsObject()            ? "ObjectValue"
                     : v.IsNumber()            ? "NumericValue"
                     : v.type == Type::kBool   ? "BooleanValue"
                                               : nullptr;
  if (kind == nullptr) {
    program_.Fail(at.pos,
                  fmt::format("cannot apply filter \"{}\" to type: {}", name, TypeName(v.type)),
                  "guard the value with `is defined` / `is not none`, or give it a default");
  }
  program_.Fail(at.pos, fmt::format("unknown {} filter: {}", kind, name),
                "supported filters: abs, capitalize, count, default (d), dictsort, e/escape, "
                "first, float, indent, int, items, join, last, length, list, lower, map, "
                "reject, rejectattr, replace, reverse, round, safe, select, selectattr, sort, "
                "string, title, tojson, trim, unique, upper");
}

Value Interpreter::ApplyFilter(const Value& operand, const Node& filter, const EnvPtr& env) {
  Charge(Weight(operand), filter.pos);
  if (filter.kind == Kind::kIdentifier) return ApplyNamedFilter(operand, filter.str, filter);
  if (filter.kind != Kind::kCall || filter.x->kind != Kind::kIdentifier) {
    Fail(filter, "a filter must be a name or a call");
  }
  return ApplyCallFilter(operand, filter.x->str, filter, env);
}

Value Interpreter::ApplyNamedFilter(const Value& operand, const std::string& name, const Node& at) {
  if (name == "safe") return operand;
  if (name == "tojson") {
    std::string out;
    ToJson(operand, JsonStyle{}, 0, true, at.pos, out);
    return String(std::move(out));
  }
  // Extensions where the reference has no filter: Jinja's meaning.
  if ((name == "default" || name == "d") && operand.type == Type::kUndefined) return String("");
  if (name == "default" || name == "d") return operand;
  if ((name == "escape" || name == "e") &&
      (operand.type == Type::kString || operand.IsNumber() || operand.type == Type::kBool)) {
    return String(Escape(ToString(operand, at.pos), at.pos));
  }
  const std::string& filter = name == "count" ? std::string("length") : name;
  if (operand.IsArray()) {
    if (std::optional<Value> v = NamedArrayFilter(operand, filter, at)) return *v;
  } else if (operand.type == Type::kString) {
    if (std::optional<Value> v = NamedStringFilter(operand, filter, at)) return *v;
  } else if (operand.IsNumber()) {
    if (filter == "abs") {
      return operand.type == Type::kInteger ? Integer(std::fabs(operand.number))
                                            : Float(std::fabs(operand.number));
    }
    if (filter == "int") return Integer(std::floor(operand.number));
    if (filter == "float") return Float(operand.number);
    if (filter == "string") return String(ToString(operand, at.pos));
    if (filter == "round") return Float(Round(operand.number, 0, "common"));  // extension
  } else if (operand.IsObject()) {
    if (filter == "items") return Items(operand);
    if (filter == "length") return Integer(static_cast<double>(operand.object->entries.size()));
    if (IsObjectMethod(filter)) return ObjectMethod(filter, operand, {}, at);
  } else if (operand.type == Type::kBool) {
    if (filter == "bool") return operand;
    if (filter == "int") return Integer(operand.boolean ? 1 : 0);
    if (filter == "float") return Float(operand.boolean ? 1 : 0);
    if (filter == "string") return String(operand.boolean ? "true" : "false");
  }
  UnknownFilter(at, name, operand);
}

// `items | filter` without arguments; nullopt when arrays have no such filter.
std::optional<Value> Interpreter::NamedArrayFilter(const Value& operand, const std::string& filter,
                                                   const Node& at) {
  const Array& items = *operand.array;
  if (filter == "list") return operand;
  if (filter == "first") return items.empty() ? Undefined() : items.front();
  if (filter == "last") return items.empty() ? Undefined() : items.back();
  if (filter == "length") return Integer(static_cast<double>(items.size()));
  if (filter == "reverse") return MakeArray(Array(items.rbegin(), items.rend()));
  if (filter == "sort") {
    Array sorted = items;
    StableSort(sorted,
               [&](const Value& a, const Value& b) { return Compare(a, b, false, at.pos) < 0; });
    return MakeArray(std::move(sorted));
  }
  if (filter == "join") return Join(operand, "", at.pos);
  if (filter == "string") return String(ToString(operand, at.pos));
  if (filter == "unique") return Unique(operand);
  if (filter == "select" || filter == "reject") {
    Array out;
    for (const Value& item : items) {
      if (Truthy(item) == (filter == "select")) out.push_back(item);
    }
    return MakeArray(std::move(out));
  }
  return std::nullopt;
}

// `string | filter` without arguments; nullopt when strings have no such filter.
std::optional<Value> Interpreter::NamedStringFilter(const Value& operand, const std::string& filter,
                                                    const Node& at) {
  const std::string& s = operand.Str();
  if (filter == "length") return Integer(static_cast<double>(Utf16Length(s)));
  if (filter == "upper") return String(ChangeCase(s, true));
  if (filter == "lower") return String(ChangeCase(s, false));
  if (filter == "title") return String(TitleCase(s));
  if (filter == "capitalize") return String(Capitalize(s));
  if (filter == "trim") return String(std::string(PyStrip(s, nullptr, true, true)));
  if (filter == "indent") return String(Indent(s, "    ", false, false, at.pos));
  if (filter == "join" || filter == "string") return operand;
  if (filter == "int") {
    const double v = JsParseInt(s);
    return Integer(std::isnan(v) ? 0 : v);
  }
  if (filter == "float") {
    const double v = JsParseFloat(s);
    return Float(std::isnan(v) ? 0 : v);
  }
  // Extensions: Jinja's string forms of list filters.
  if (filter == "first" || filter == "last" || filter == "reverse" || filter == "list") {
    std::vector<uint32_t> cps = CodePoints(s);
    if (filter == "list") {
      Array out;
      for (uint32_t cp : cps) {
        std::string ch;
        AppendUtf8(cp, ch);
        out.push_back(String(std::move(ch)));
      }
      return NewArray(std::move(out), at.pos);
    }
    if (filter == "reverse") std::reverse(cps.begin(), cps.end());
    if (filter != "reverse") {
      if (cps.empty()) return Undefined();
      cps = {filter == "first" ? cps.front() : cps.back()};
    }
    std::string out;
    for (uint32_t cp : cps) AppendUtf8(cp, out);
    return String(std::move(out));
  }
  return std::nullopt;
}

Value Interpreter::ApplyCallFilter(const Value& operand, const std::string& name, const Node& call,
                                   const EnvPtr& env) {
  const Node& at = call;
  auto evaluated = EvalArguments(call.a, env);
  FilterArgs f{std::move(evaluated.first), std::move(evaluated.second)};
  Array& args = f.args;
  std::shared_ptr<Object>& kwargs = f.kwargs;
  if (name == "tojson") return ToJsonFilter(operand, f, at);
  if (name == "join") {
    if (operand.type != Type::kString && !operand.IsArray()) UnknownFilter(at, name, Null());
    const Value* sep = f.Option(0, "separator");
    if (sep != nullptr && sep->type != Type::kString) Fail(at, "separator must be a string");
    return Join(operand, sep != nullptr ? sep->Str() : "", at.pos);
  }
  if (name == "int" || name == "float") return IntFloatFilter(operand, name, f, at);
  if (name == "default" || name == "d") {
    const Value default_value = !args.empty() ? args[0] : String("");
    const Value* boolean = f.Option(1, "boolean");
    if (boolean != nullptr && boolean->type != Type::kBool) {
      Fail(at, "`default` filter flag must be a boolean");
    }
    const bool use_falsy = boolean != nullptr && boolean->boolean;
    if (operand.type == Type::kUndefined || (use_falsy && !Truthy(operand))) {
      return default_value;
    }
    return operand;
  }
  if (operand.IsArray()) {
    const Array& items = *operand.array;
    if (name == "sort") return SortFilter(items, f, at);
    if (name == "selectattr" || name == "rejectattr") return SelectAttrFilter(items, name, f, call);
    if (name == "map") return MapFilter(items, f, at);
    // Extension: select/reject(test[, argument]) as in Jinja.
    if (name == "select" || name == "reject") {
      Array out;
      for (const Value& item : items) {
        bool result = Truthy(item);
        if (!args.empty()) {
          if (args[0].type != Type::kString) Fail(at, fmt::format("{}() takes a test name", name));
          result = RunTest(args[0].Str(), item, args.size() > 1 ? &args[1] : nullptr, at);
        }
        if (result == (name == "select")) out.push_back(item);
      }
      return MakeArray(std::move(out));
    }
  } else if (operand.type == Type::kString) {
    if (name == "indent") return IndentFilter(operand, f, at);
    if (name == "replace") {
      Array all = args;
      all.push_back(MakeObject(kwargs, Type::kKwargs));
      return Replace(operand.Str(), all, at);
    }
  } else if (operand.IsObject()) {
    if (IsObjectMethod(name)) {
      if (!kwargs->entries.empty()) args.push_back(MakeObject(kwargs, Type::kKwargs));
      return ObjectMethod(name, operand, std::move(args), at);
    }
  } else if (operand.IsNumber() && name == "round") {  // extension
    const Value* precision = f.Option(0, "precision");
    const Value* method = f.Option(1, "method");
    if (precision != nullptr && precision->type != Type::kInteger) {
      Fail(at, "round precision must be an integer");
    }
    if (method != nullptr && method->type != Type::kString)
      Fail(at, "round method must be a string");
    return Float(Round(operand.number, precision != nullptr ? precision->number : 0,
                       method != nullptr ? method->Str() : "common"));
  }
  UnknownFilter(at, name, operand);
}

// tojson(indent=, ensure_ascii=, sort_keys=, separators=): Python's json.dumps options.
Value Interpreter::ToJsonFilter(const Value& operand, const FilterArgs& f, const Node& at) {
  const std::shared_ptr<Object>& kwargs = f.kwargs;
  JsonStyle style;
  const Value* indent = kwargs->Find("indent");
  if (indent != nullptr && indent->type != Type::kInteger && indent->type != Type::kNull) {
    Fail(at, "if set, indent must be a number");
  }
  if (indent != nullptr && indent->type == Type::kInteger) {
    if (indent->number < 0) Fail(at, "tojson indent must not be negative");
    CheckIndent(indent->number, at);
    style.indent = static_cast<int>(indent->number);
  }
  if (const Value* v = kwargs->Find("ensure_ascii")) {
    if (v->type != Type::kBool) Fail(at, "if set, ensure_ascii must be a boolean");
    style.ensure_ascii = v->boolean;
  }
  if (const Value* v = kwargs->Find("sort_keys")) {
    if (v->type != Type::kBool) Fail(at, "if set, sort_keys must be a boolean");
    style.sort_keys = v->boolean;
  }
  if (const Value* v = kwargs->Find("separators"); v != nullptr && v->type != Type::kNull) {
    if (!v->IsArray() || v->array->size() != 2 || (*v->array)[0].type != Type::kString ||
        (*v->array)[1].type != Type::kString) {
      Fail(at, "separators must be a tuple of two strings");
    }
    style.custom_separators = true;
    style.item_separator = (*v->array)[0].Str();
    style.key_separator = (*v->array)[1].Str();
  }
  std::string out;
  ToJson(operand, style, 0, true, at.pos, out);
  return String(std::move(out));
}

// int(default=0) and float(default=0.0).
Value Interpreter::IntFloatFilter(const Value& operand, const std::string& name,
                                  const FilterArgs& f, const Node& at) {
  const bool is_int = name == "int";
  const Value* fallback = f.Option(0, "default");
  const Value default_value = fallback != nullptr ? *fallback : is_int ? Integer(0) : Float(0);
  if (operand.type == Type::kString) {
    const double v = is_int ? JsParseInt(operand.Str()) : JsParseFloat(operand.Str());
    if (std::isnan(v)) return default_value;
    return is_int ? Integer(v) : Float(v);
  }
  if (operand.IsNumber()) return operand;
  if (operand.type == Type::kBool) {
    return is_int ? Integer(operand.boolean ? 1 : 0) : Float(operand.boolean ? 1 : 0);
  }
  UnknownFilter(at, name, Null());
}

// sort(reverse=false, case_sensitive=false, attribute=none).
Value Interpreter::SortFilter(const Array& items, const FilterArgs& f, const Node& at) {
  const Value* reverse = f.Option(0, "reverse");
  const Value* case_sensitive = f.Option(1, "case_sensitive");
  const Value* attribute = f.Option(2, "attribute");
  if (reverse != nullptr && reverse->type != Type::kBool) Fail(at, "reverse must be a boolean");
  if (case_sensitive != nullptr && case_sensitive->type != Type::kBool) {
    Fail(at, "case_sensitive must be a boolean");
  }
  if (attribute != nullptr && attribute->type != Type::kString &&
      attribute->type != Type::kInteger && attribute->type != Type::kNull) {
    Fail(at, "attribute must be a string, integer, or null");
  }
  const bool rev = reverse != nullptr && reverse->boolean;
  const bool cs = case_sensitive != nullptr && case_sensitive->boolean;
  std::optional<std::string> path;
  if (attribute != nullptr && attribute->type != Type::kNull) {
    path = attribute->type == Type::kString ? attribute->Str() : JsNumber(attribute->number);
  }
  auto key = [&](const Value& v) { return path ? AttributePath(v, *path) : v; };
  Array sorted = items;
  StableSort(sorted, [&](const Value& a, const Value& b) {
    const int c = Compare(key(a), key(b), cs, at.pos);
    return rev ? c > 0 : c < 0;
  });
  return MakeArray(std::move(sorted));
}

// selectattr/rejectattr(attribute[, test[, argument]]).
Value Interpreter::SelectAttrFilter(const Array& items, const std::string& name,
                                    const FilterArgs& f, const Node& call) {
  const Node& at = call;
  const Array& args = f.args;
  const bool select = name == "selectattr";
  for (const Value& item : items) {
    if (!item.IsContainer()) {
      Fail(at, fmt::format("`{}` can only be applied to an array of objects", name));
    }
  }
  for (const auto& a : call.a) {
    if (a->kind != Kind::kString) Fail(at, fmt::format("arguments of `{}` must be strings", name));
  }
  if (args.empty()) Fail(at, fmt::format("`{}` needs an attribute name", name));
  const std::string attr = args[0].Str();
  const std::optional<std::string> test =
      args.size() > 1 ? std::optional<std::string>(args[1].Str()) : std::nullopt;
  const Value* test_arg = args.size() > 2 ? &args[2] : nullptr;
  Array out;
  for (const Value& item : items) {
    const Value* a = item.object->Find(attr);
    bool result = false;
    if (a != nullptr) {
      result = test ? RunTest(*test, *a, test_arg, at) : Truthy(*a);
    }
    if (result == select) out.push_back(item);
  }
  return MakeArray(std::move(out));
}

// map(attribute=..., default=...), or map('filter') as in Jinja.
Value Interpreter::MapFilter(const Array& items, const FilterArgs& f, const Node& at) {
  const Array& args = f.args;
  if (const Value* attr = f.kwargs->Find("attribute")) {
    if (attr->type != Type::kString) Fail(at, "attribute must be a string");
    const Value* fallback = f.kwargs->Find("default");
    Array out;
    for (const Value& item : items) {
      if (!item.IsContainer()) Fail(at, "items in map must be objects");
      Value v = AttributePath(item, attr->Str());
      out.push_back(v.type == Type::kUndefined && fallback != nullptr ? *fallback : v);
    }
    return MakeArray(std::move(out));
  }
  // Extension: map('filter') applies a named filter to every item, as in Jinja.
  if (!args.empty() && args[0].type == Type::kString) {
    Array out;
    for (const Value& item : items) {
      out.push_back(ApplyNamedFilter(item, args[0].Str(), at));
    }
    return MakeArray(std::move(out));
  }
  Fail(at, "map needs attribute=... or a filter name");
}

// indent(width=4, first=false, blank=false).
Value Interpreter::IndentFilter(const Value& operand, const FilterArgs& f, const Node& at) {
  const Value* width = f.Option(0, "width");
  if (width != nullptr && width->type != Type::kInteger) Fail(at, "width must be a number");
  const double w = width != nullptr ? width->number : 4;
  if (w < 0) Fail(at, "indent width must not be negative");
  CheckIndent(w, at);
  const Value* first = f.Option(1, "first");
  const Value* blank = f.Option(2, "blank");
  return String(Indent(operand.Str(), std::string(static_cast<size_t>(w), ' '),
                       first != nullptr && RawTruthy(*first), blank != nullptr && RawTruthy(*blank),
                       at.pos));
}

// An indent wider than the output bound (or than 1 MiB) can only be a runaway.
void Interpreter::CheckIndent(double width, const Node& at) const {
  const double limit = static_cast<double>(std::min<size_t>(options_.max_output_bytes, 1 << 20));
  if (!(width <= limit)) {
    Fail(at, fmt::format("indent width {} exceeds {}", JsNumber(width), JsNumber(limit)));
  }
}

}  // namespace rlid::jinja::internal

// Member access (interpreter.h): obj.name and obj[i] on objects, arrays and strings (UTF-16
// indexing as JavaScript's at()), Python slicing, and the builtin string and object methods
// (upper, strip, split, replace, items, get, dictsort, ...) with the reference's semantics.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "jinja/interpreter.h"
#include "jinja/strings.h"

namespace rlid::jinja::internal {

Value Interpreter::BoundMethod(FnKind kind, std::string name, const Value& self) {
  return MakeFunction(Function{kind, std::move(name), self, nullptr, nullptr});
}

bool Interpreter::IsStringMethod(std::string_view name) {
  static const char* const kNames[] = {"upper",      "lower",  "strip",  "title",
                                       "capitalize", "rstrip", "lstrip", "startswith",
                                       "endswith",   "split",  "replace"};
  return std::find(std::begin(kNames), std::end(kNames), name) != std::end(kNames);
}

bool Interpreter::IsObjectMethod(std::string_view name) {
  return name == "get" || name == "items" || name == "keys" || name == "values" ||
         name == "dictsort";
}

// Builtin properties: string methods and length, array length, object methods.
Value Interpreter::Builtin(const Value& object, const std::string& name) {
  if (object.type == Type::kString) {
    if (name == "length") return Integer(static_cast<double>(Utf16Length(object.Str())));
    if (IsStringMethod(name)) return BoundMethod(FnKind::kStringMethod, name, object);
  } else if (object.IsArray()) {
    if (name == "length") return Integer(static_cast<double>(object.array->size()));
  } else if (object.IsObject()) {
    if (IsObjectMethod(name)) return BoundMethod(FnKind::kObjectMethod, name, object);
  }
  return Undefined();
}

// String.prototype.at() on UTF-16 units; half of a surrogate pair reads as U+FFFD.
Value Interpreter::StringAt(const std::string& s, double index) {
  const double len = static_cast<double>(Utf16Length(s));
  if (index < 0) index += len;
  if (!(index >= 0 && index < len)) return Undefined();
  const auto target = static_cast<size_t>(index);
  size_t unit = 0;
  for (size_t i = 0; i < s.size();) {
    const uint32_t cp = NextUtf8(s, i);
    const size_t width = cp >= 0x10000 ? 2 : 1;
    if (target < unit + width) {
      std::string out;
      AppendUtf8(width == 2 ? 0xFFFD : cp, out);
      return String(out);
    }
    unit += width;
  }
  return Undefined();
}

Value Interpreter::EvalMember(const Node& n, const EnvPtr& env) {
  const Value object = Eval(*n.x, env);
  Value property;
  if (n.flag) {
    if (n.y->kind == Kind::kSlice) return EvalSlice(object, *n.y, env);
    property = Eval(*n.y, env);
  } else if (n.y->kind == Kind::kInteger) {
    property = Integer(n.y->number);
  } else {
    property = String(n.y->str);
  }
  if (object.IsContainer()) {
    if (property.type != Type::kString) {
      Fail(n, fmt::format("cannot access a property with a non-string: got {}",
                          TypeName(property.type)));
    }
    if (const Value* v = object.object->Find(property.Str())) return *v;
    return object.type == Type::kNamespace ? Undefined() : Builtin(object, property.Str());
  }
  if (object.IsArray() || object.type == Type::kString) {
    if (property.type == Type::kInteger) {
      if (object.type == Type::kString) return StringAt(object.Str(), property.number);
      const double len = static_cast<double>(object.array->size());
      double index = property.number;
      if (index < 0) index += len;
      if (!(index >= 0 && index < len)) return Undefined();
      return (*object.array)[static_cast<size_t>(index)];
    }
    if (property.type == Type::kString) return Builtin(object, property.Str());
    Fail(n, fmt::format("cannot access a property with a non-string/non-number: got {}",
                        TypeName(property.type)));
  }
  if (property.type != Type::kString) {
    Fail(n, fmt::format("cannot access a property with a non-string: got {}",
                        TypeName(property.type)));
  }
  return Undefined();
}

// utils.slice(): Python slicing; strings slice by code point.
template <typename T>
std::vector<T> Interpreter::Slice(const std::vector<T>& items, std::optional<double> start,
                                  std::optional<double> stop, double step, size_t pos) {
  const double len = static_cast<double>(items.size());
  // Clamping first keeps every bound within +-(len + 1) without changing the result.
  auto clamp = [&](double v) { return std::clamp(v, -len - 1, len + 1); };
  step = clamp(step);
  const int direction = step > 0 ? 1 : step < 0 ? -1 : 0;
  double lo, hi;
  if (direction >= 0) {
    const double s = clamp(start.value_or(0)), e = clamp(stop.value_or(len));
    lo = s < 0 ? std::max(len + s, 0.0) : std::min(s, len);
    hi = e < 0 ? std::max(len + e, 0.0) : std::min(e, len);
  } else {
    const double s = clamp(start.value_or(len - 1)), e = clamp(stop.value_or(-1));
    lo = s < 0 ? std::max(len + s, -1.0) : std::min(s, len - 1);
    hi = e < -1 ? std::max(len + e, -1.0) : std::min(e, len - 1);
  }
  std::vector<T> out;
  for (double i = lo; direction * i < direction * hi; i += step) {
    Spend(1, pos);
    out.push_back(items[static_cast<size_t>(i)]);
  }
  return out;
}

Value Interpreter::EvalSlice(const Value& object, const Node& n, const EnvPtr& env) {
  if (!object.IsArray() && object.type != Type::kString) {
    Fail(n, "slice object must be an array or string");
  }
  auto part = [&](const NodePtr& p, const char* what) -> std::optional<double> {
    if (!p) return std::nullopt;
    const Value v = Eval(*p, env);
    if (v.type == Type::kUndefined) return std::nullopt;
    if (v.type != Type::kInteger)
      Fail(n, fmt::format("slice {} must be numeric or undefined", what));
    return v.number;
  };
  Charge(Weight(object), n.pos);
  const auto start = part(n.x, "start");
  const auto stop = part(n.y, "stop");
  const double step = part(n.z, "step").value_or(1);
  if (object.IsArray()) return MakeArray(Slice(*object.array, start, stop, step, n.pos));
  std::string out;
  for (uint32_t cp : Slice(CodePoints(object.Str()), start, stop, step, n.pos)) {
    AppendUtf8(cp, out);
  }
  return String(std::move(out));
}

// ---- methods ----

Value Interpreter::StringMethod(const std::string& name, const std::string& s, const Array& args,
                                const Node& at) {
  size_t reads = s.size();
  for (const Value& arg : args) reads += Weight(arg);
  Charge(reads, at.pos);
  if (name == "upper") return String(ChangeCase(s, true));
  if (name == "lower") return String(ChangeCase(s, false));
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    // Python's: the code points of the argument, or whitespace when it is absent or none.
    const Value* chars = args.empty() ? nullptr : &args[0];
    if (chars && chars->type != Type::kString && chars->type != Type::kNull)
      Fail(at, fmt::format("{} arg must be None or str", name));
    const std::string* set = chars && chars->type == Type::kString ? &chars->Str() : nullptr;
    return String(std::string(PyStrip(s, set, name != "rstrip", name != "lstrip")));
  }
  if (name == "title") return String(TitleCase(s));
  if (name == "capitalize") return String(Capitalize(s));
  if (name == "startswith" || name == "endswith") {
    if (args.empty()) Fail(at, fmt::format("{}() requires at least one argument", name));
    auto test = [&](const std::string& p) {
      return name == "startswith"
                 ? s.compare(0, p.size(), p) == 0 && s.size() >= p.size()
                 : s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
    };
    if (args[0].type == Type::kString) return Bool(test(args[0].Str()));
    if (args[0].IsArray()) {
      for (const Value& p : *args[0].array) {
        if (p.type != Type::kString)
          Fail(at, fmt::format("{}() tuple elements must be strings", name));
        if (test(p.Str())) return Bool(true);
      }
      return Bool(false);
    }
    Fail(at, fmt::format("{}() argument must be a string or tuple of strings", name));
  }
  if (name == "split") return Split(s, args, at);
  if (name == "replace") return Replace(s, args, at);
  Fail(at, fmt::format("unknown string method '{}'", name));
}

// str.split(sep=None, maxsplit=-1) as the reference implements it.
Value Interpreter::Split(const std::string& s, const Array& args, const Node& at) {
  const Value sep = args.size() > 0 ? args[0] : Null();
  if (sep.type != Type::kString && sep.type != Type::kNull) {
    Fail(at, "split() separator must be a string or null");
  }
  const Value maxsplit_value = args.size() > 1 ? args[1] : Integer(-1);
  if (maxsplit_value.type != Type::kInteger) Fail(at, "split() maxsplit must be a number");
  const double maxsplit = maxsplit_value.number;
  std::vector<std::string> parts;
  if (sep.type == Type::kNull) {
    // Python's whitespace (see IsPySpace).
    const std::string_view text = PyStrip(s, nullptr, true, false);
    auto space_at = [&](size_t at) -> size_t {
      size_t next = at;
      return at < text.size() && IsPySpace(NextUtf8(text, next)) ? next - at : 0;
    };
    size_t i = 0;
    while (i < text.size()) {
      while (size_t w = space_at(i)) i += w;
      if (i >= text.size()) break;
      size_t j = i;
      while (j < text.size() && space_at(j) == 0) NextUtf8(text, j);
      if (maxsplit != -1 && static_cast<double>(parts.size()) >= maxsplit) {
        parts.emplace_back(text.substr(i));
        break;
      }
      parts.emplace_back(text.substr(i, j - i));
      i = j;
    }
  } else {
    const std::string& delim = sep.Str();
    if (delim.empty()) Fail(at, "split(): empty separator");
    size_t start = 0;
    while (true) {
      const size_t found = s.find(delim, start);
      if (found == std::string::npos) break;
      parts.push_back(s.substr(start, found - start));
      start = found + delim.size();
    }
    parts.push_back(s.substr(start));
    const double count = static_cast<double>(parts.size());
    if (maxsplit != -1 && count > maxsplit) {
      // result.push(result.splice(maxsplit).join(sep)), splice's negative index included.
      double cut = maxsplit < 0 ? std::max(count + maxsplit, 0.0) : std::min(maxsplit, count);
      const auto k = static_cast<size_t>(cut);
      std::string rest;
      for (size_t i = k; i < parts.size(); ++i) {
        if (i > k) Append(rest, delim, at.pos);
        Append(rest, parts[i], at.pos);
      }
      parts.resize(k);
      parts.push_back(std::move(rest));
    }
  }
  Array out;
  out.reserve(parts.size());
  for (auto& p : parts) out.push_back(String(std::move(p)));
  return NewArray(std::move(out), at.pos);
}

Value Interpreter::Replace(const std::string& s, const Array& args, const Node& at) {
  if (args.size() < 2) Fail(at, "replace() requires at least two arguments");
  if (args[0].type != Type::kString || args[1].type != Type::kString) {
    Fail(at, "replace() arguments must be strings");
  }
  Value count = Null();
  if (args.size() > 2) {
    if (args[2].type == Type::kKwargs) {
      const Value* c = args[2].object->Find("count");
      count = c != nullptr ? *c : Null();
    } else {
      count = args[2];
    }
  }
  if (count.type != Type::kInteger && count.type != Type::kNull) {
    Fail(at, "replace() count argument must be a number or null");
  }
  const std::string& from = args[0].Str();
  const std::string& to = args[1].Str();
  if (count.type == Type::kInteger && count.number == 0) return String(s);
  double remaining = count.type == Type::kNull || count.number < 0
                         ? std::numeric_limits<double>::infinity()
                         : count.number;
  std::string out;
  if (from.empty()) {
    // An empty pattern matches before every code point and at the end.
    for (size_t i = 0; i <= s.size();) {
      if (remaining > 0) {
        Append(out, to, at.pos);
        --remaining;
      }
      if (i == s.size()) break;
      const size_t begin = i;
      NextUtf8(s, i);
      Append(out, std::string_view(s).substr(begin, i - begin), at.pos);
    }
    return String(std::move(out));
  }
  size_t start = 0;
  while (remaining > 0) {
    const size_t found = s.find(from, start);
    if (found == std::string::npos) break;
    Append(out, std::string_view(s).substr(start, found - start), at.pos);
    Append(out, to, at.pos);
    start = found + from.size();
    --remaining;
  }
  Append(out, std::string_view(s).substr(start), at.pos);
  return String(std::move(out));
}

Value Interpreter::Items(const Value& object) {
  Array out;
  for (const auto& [k, v] : object.object->entries) out.push_back(MakeArray({String(k), v}));
  return MakeArray(std::move(out));
}

Value Interpreter::ObjectMethod(const std::string& name, const Value& self, Array args,
                                const Node& at) {
  const Object& object = *self.object;
  if (name == "get") {
    if (args.empty() || args[0].type != Type::kString) {
      Fail(at, fmt::format("object key must be a string: got {}",
                           TypeName(args.empty() ? Type::kUndefined : args[0].type)));
    }
    if (const Value* v = object.Find(args[0].Str())) return *v;
    return args.size() > 1 ? args[1] : Null();
  }
  Spend(object.entries.size(), at.pos);
  if (name == "items") return Items(self);
  if (name == "keys" || name == "values") {
    Array out;
    for (const auto& [k, v] : object.entries) out.push_back(name == "keys" ? String(k) : v);
    return MakeArray(std::move(out));
  }
  if (name == "dictsort") {
    std::shared_ptr<Object> kwargs;
    if (!args.empty() && args.back().type == Type::kKwargs) {
      kwargs = args.back().object;
      args.pop_back();
    }
    auto option = [&](size_t i, const char* key, Value fallback) {
      if (i < args.size()) return args[i];
      if (kwargs) {
        if (const Value* v = kwargs->Find(key)) return *v;
      }
      return fallback;
    };
    const Value case_sensitive = option(0, "case_sensitive", Bool(false));
    const Value by = option(1, "by", String("key"));
    const Value reverse = option(2, "reverse", Bool(false));
    if (case_sensitive.type != Type::kBool) Fail(at, "case_sensitive must be a boolean");
    if (by.type != Type::kString || (by.Str() != "key" && by.Str() != "value")) {
      Fail(at, "by must be either 'key' or 'value'");
    }
    if (reverse.type != Type::kBool) Fail(at, "reverse must be a boolean");
    Array pairs = *Items(self).array;
    const size_t index = by.Str() == "key" ? 0 : 1;
    StableSort(pairs, [&](const Value& a, const Value& b) {
      const int c = Compare((*a.array)[index], (*b.array)[index], case_sensitive.boolean, at.pos);
      return reverse.boolean ? c > 0 : c < 0;
    });
    return MakeArray(std::move(pairs));
  }
  Fail(at, fmt::format("unknown object method '{}'", name));
}

}  // namespace rlid::jinja::internal

// How values become text (interpreter.h): what {{ }} prints (ToString), the raw JavaScript
// string form `~`, `+` and join use (RawString), and the tojson filter (ToJson) with the
// json.dumps spacing and Python float repr transformers' jinja2 writes.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "jinja/interpreter.h"
#include "jinja/numbers.h"
#include "jinja/strings.h"

namespace rlid::jinja::internal {
namespace {

// JSON.stringify(string); with ensure_ascii, every UTF-16 unit >= 0x7f becomes \uXXXX.
void AppendJsonString(std::string_view s, bool ensure_ascii, std::string& out) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    if (c < 0x80) {
      ++i;
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\b':
          out += "\\b";
          break;
        case '\f':
          out += "\\f";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        default:
          if (c < 0x20 || (ensure_ascii && c == 0x7F)) {
            out += fmt::format("\\u{:04x}", c);
          } else {
            out += static_cast<char>(c);
          }
      }
      continue;
    }
    const uint32_t cp = NextUtf8(s, i);
    if (!ensure_ascii) {
      AppendUtf8(cp, out);
    } else if (cp >= 0x10000) {
      const uint32_t v = cp - 0x10000;
      out += fmt::format("\\u{:04x}\\u{:04x}", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
    } else {
      out += fmt::format("\\u{:04x}", cp);
    }
  }
  out += '"';
}

}  // namespace

std::string Interpreter::IntegerString(const Value& v) {
  return v.digits ? *v.digits : JsNumber(v.number);
}

// The text of a bool, number or string, the same printed and joined; nothing for other types.
std::optional<std::string> Interpreter::ScalarText(const Value& v) {
  switch (v.type) {
    case Type::kBool:
      return v.boolean ? "true" : "false";
    case Type::kInteger:
      return IntegerString(v);
    case Type::kFloat:
      return PyFloatRepr(v.number);
    case Type::kString:
      return v.Str();
    default:
      return std::nullopt;
  }
}

// RuntimeValue.toString(), what {{ }} prints.
std::string Interpreter::ToString(const Value& v, size_t pos, int depth) {
  if (auto text = ScalarText(v)) return *text;
  switch (v.type) {
    case Type::kUndefined:
      return "undefined";
    case Type::kNull:
      return "null";
    case Type::kFunction:
      Fail(pos, "cannot print a function (did you forget the call parentheses?)");
    default: {
      std::string out;
      ToJson(v, JsonStyle{}, depth, /*undefined_to_null=*/false, pos, out);
      return out;
    }
  }
}

// `value.toString()` on the raw JavaScript value, which `~`, `+` and join use: numbers
// without the float's ".0", arrays comma-joined, objects "[object Map]".
std::string Interpreter::RawString(const Value& v, size_t pos, int depth) {
  if (auto text = ScalarText(v)) return *text;
  switch (v.type) {
    case Type::kUndefined:
    case Type::kNull:
      return "";
    case Type::kArray:
    case Type::kTuple: {
      if (depth > options_.max_depth) Fail(pos, "value nests deeper than max_depth");
      std::string out;
      for (size_t i = 0; i < v.array->size(); ++i) {
        if (i > 0) Append(out, ",", pos);
        Append(out, ToString((*v.array)[i], pos, depth + 1), pos);
      }
      return out;
    }
    case Type::kObject:
    case Type::kKwargs:
    case Type::kNamespace:
      return "[object Map]";
    case Type::kFunction:
      Fail(pos, "cannot turn a function into a string");
  }
  return "";
}

// toJSON() of the reference: Python json.dumps spacing (", " and ": ", or "," plus newlines
// when indenting), insertion-ordered keys, floats as JSON.stringify writes them.
void Interpreter::ToJson(const Value& v, const JsonStyle& style, int depth, bool undefined_to_null,
                         size_t pos, std::string& out) {
  if (depth > options_.max_depth) {
    Fail(pos, fmt::format("value nests deeper than max_depth={} (a namespace holding itself?)",
                          options_.max_depth));
  }
  CheckSize(out.size(), pos);
  std::string item_sep =
      style.custom_separators ? style.item_separator : (style.indent != 0 ? "," : ", ");
  const std::string key_sep = style.custom_separators ? style.key_separator : ": ";
  switch (v.type) {
    case Type::kNull:
      out += "null";
      return;
    case Type::kUndefined:
      out += undefined_to_null ? "null" : "undefined";
      return;
    case Type::kInteger:
      out += std::isfinite(v.number) ? IntegerString(v) : "null";
      return;
    case Type::kFloat:  // json.dumps: repr(float); NaN and Infinity as Python writes them
      out += std::isnan(v.number)   ? "NaN"
             : std::isinf(v.number) ? (v.number < 0 ? "-Infinity" : "Infinity")
                                    : PyFloatRepr(v.number);
      return;
    case Type::kBool:
      out += v.boolean ? "true" : "false";
      return;
    case Type::kString: {
      std::string quoted;
      AppendJsonString(v.Str(), style.ensure_ascii, quoted);
      Append(out, quoted, pos);
      return;
    }
    case Type::kArray:
    case Type::kObject:
    case Type::kNamespace:
      break;
    default:
      Fail(pos, fmt::format("cannot convert {} to JSON", TypeName(v.type)));
  }
  const std::string indent_unit(style.indent > 0 ? style.indent : 0, ' ');
  std::string base_padding = "\n";
  std::string child_padding = "\n";
  if (style.indent != 0) {
    CheckSize(indent_unit.size() * (depth + 1), pos);
    for (int i = 0; i < depth; ++i) base_padding += indent_unit;
    child_padding = base_padding + indent_unit;
  }
  if (v.type == Type::kArray) {
    const Array& items = *v.array;
    out += '[';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) Append(out, item_sep, pos);
      if (style.indent != 0) Append(out, child_padding, pos);
      ToJson(items[i], style, depth + 1, undefined_to_null, pos, out);
    }
    if (style.indent != 0 && !items.empty()) Append(out, base_padding, pos);
    out += ']';
    return;
  }
  std::vector<const std::pair<std::string, Value>*> entries;
  for (const auto& e : v.object->entries) entries.push_back(&e);
  if (style.sort_keys) {
    std::stable_sort(entries.begin(), entries.end(),
                     [](const auto* a, const auto* b) { return LocaleLess(a->first, b->first); });
  }
  out += '{';
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i > 0) Append(out, item_sep, pos);
    if (style.indent != 0) Append(out, child_padding, pos);
    std::string key;
    AppendJsonString(entries[i]->first, style.ensure_ascii, key);
    Append(out, key, pos);
    Append(out, key_sep, pos);
    ToJson(entries[i]->second, style, depth + 1, undefined_to_null, pos, out);
  }
  if (style.indent != 0 && !entries.empty()) Append(out, base_padding, pos);
  out += '}';
}

// An approximation of String.prototype.localeCompare (ICU root collation) for sort_keys:
// punctuation before digits before letters, letters case-insensitively, lowercase first.
bool Interpreter::LocaleLess(const std::string& a, const std::string& b) {
  auto key = [](const std::string& s) {
    std::vector<std::pair<int, uint32_t>> k;
    for (size_t i = 0; i < s.size();) {
      uint32_t cp = NextUtf8(s, i);
      const bool upper = cp >= 'A' && cp <= 'Z';
      const uint32_t lower = upper ? cp + 32 : cp;
      const int cls = (lower >= 'a' && lower <= 'z')                ? 2
                      : IsDigit(static_cast<char>(cp)) && cp < 0x80 ? 1
                      : cp < 0x80                                   ? 0
                                                                    : 3;
      k.emplace_back(cls, lower);
    }
    return k;
  };
  const auto ka = key(a), kb = key(b);
  if (ka != kb) return ka < kb;
  return a > b;  // lowercase (greater in ASCII) first on a case-only difference
}

}  // namespace rlid::jinja::internal

// The global functions a template can call (interpreter.h): range(), strftime_now() and
// namespace(), plus the environment that declares them with true/false/none before the
// context's keys (raise_exception is handled where functions are called, calls.cc).
#include <fmt/format.h>

#include <algorithm>
#include <ctime>

#include "jinja/interpreter.h"
#include "jinja/strings.h"

namespace rlid::jinja::internal {
namespace {

const char* const kMonthsShort[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                    "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
const char* const kMonthsLong[] = {"January",   "February", "March",    "April",
                                   "May",       "June",     "July",     "August",
                                   "September", "October",  "November", "December"};

}  // namespace

Value Interpreter::Range(const Array& args, const Node& at) {
  for (const Value& a : args) {
    if (!a.IsNumber() && a.type != Type::kUndefined) {
      Fail(at, fmt::format("range() takes numbers: got {}", TypeName(a.type)));
    }
  }
  auto arg = [&](size_t i) -> std::optional<double> {
    if (i >= args.size() || args[i].type == Type::kUndefined) return std::nullopt;
    return args[i].number;
  };
  std::optional<double> start = arg(0), stop = arg(1);
  const double step = arg(2).value_or(1);
  if (!stop) {
    stop = start;
    start = 0;
  }
  if (step == 0) Fail(at, "range() step must not be zero");
  Array out;
  if (!start || !stop) return NewArray(std::move(out), at.pos);  // NaN comparisons: empty
  for (double i = *start; step > 0 ? i < *stop : i > *stop; i += step) {
    Spend(1, at.pos);
    out.push_back(Number(i));
  }
  return MakeArray(std::move(out));
}

Value Interpreter::StrftimeNow(const Array& args, const Node& at) {
  if (args.empty() || args[0].type != Type::kString) {
    Fail(at, "strftime_now() takes a format string");
  }
  std::tm tm{};
  if (options_.now) {
    tm = *options_.now;
  } else {
    const std::time_t t = std::time(nullptr);
    localtime_r(&t, &tm);
  }
  const int month = std::clamp(tm.tm_mon, 0, 11);
  auto pad2 = [](int v) { return v < 10 && v >= 0 ? fmt::format("0{}", v) : std::to_string(v); };
  const std::string& format = args[0].Str();
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] == '%' && i + 1 < format.size()) {
      const char c = format[i + 1];
      std::string rep;
      switch (c) {
        case 'Y':
          rep = std::to_string(static_cast<long long>(tm.tm_year) + 1900);
          break;
        case 'm':
          rep = pad2(month + 1);
          break;
        case 'd':
          rep = pad2(tm.tm_mday);
          break;
        case 'b':
          rep = kMonthsShort[month];
          break;
        case 'B':
          rep = kMonthsLong[month];
          break;
        case 'H':
          rep = pad2(tm.tm_hour);
          break;
        case 'M':
          rep = pad2(tm.tm_min);
          break;
        case '%':
          rep = "%";
          break;
        default:
          break;
      }
      if (!rep.empty()) {
        Append(out, rep, at.pos);
        ++i;
        continue;
      }
    }
    Append(out, std::string_view(&format[i], 1), at.pos);
  }
  return String(std::move(out));
}

Value Interpreter::MakeNamespace(Array args, const Node& at) {
  std::shared_ptr<Object> kwargs;
  if (!args.empty() && args.back().type == Type::kKwargs) {
    kwargs = args.back().object;
    args.pop_back();
  }
  if (args.size() > 1) {
    Fail(at, fmt::format("namespace expected at most 1 argument, got {}", args.size()));
  }
  auto ns = std::make_shared<Object>();
  if (args.size() == 1) {
    const Value& source = args[0];
    if (source.IsObject()) {
      for (const auto& [k, v] : source.object->entries) ns->Set(k, v);
    } else if (source.IsArray()) {
      for (const Value& pair : *source.array) {
        Array parts;
        if (pair.IsArray()) {
          parts = *pair.array;
        } else if (pair.type == Type::kString) {
          for (uint32_t cp : CodePoints(pair.Str())) {
            std::string ch;
            AppendUtf8(cp, ch);
            parts.push_back(String(ch));
          }
        }
        if (parts.size() != 2) {
          Fail(at, "namespace expected an object or an iterable of [key, value] pairs");
        }
        if (parts[0].type != Type::kString) Fail(at, "namespace keys must be strings");
        ns->Set(parts[0].Str(), parts[1]);
      }
    } else {
      Fail(at, fmt::format("'{}' object is not iterable", TypeName(source.type)));
    }
  }
  if (kwargs) {
    for (const auto& [k, v] : kwargs->entries) ns->Set(k, v);
  }
  Spend(ns->entries.size(), at.pos);
  namespaces_.push_back(ns);
  return MakeObject(std::move(ns), Type::kNamespace);
}

// The reference declares these before the context, and a context key may not reuse them.
const char* const kGlobalNames[] = {"namespace", "false",        "true", "none",  "raise_exception",
                                    "range",     "strftime_now", "True", "False", "None"};

EnvPtr Globals() {
  auto env = std::make_shared<Env>();
  env->Set("namespace",
           MakeFunction(Function{FnKind::kNamespace, "namespace", {}, nullptr, nullptr}));
  env->Set("false", Bool(false));
  env->Set("true", Bool(true));
  env->Set("none", Null());
  env->Set(
      "raise_exception",
      MakeFunction(Function{FnKind::kRaiseException, "raise_exception", {}, nullptr, nullptr}));
  env->Set("range", MakeFunction(Function{FnKind::kRange, "range", {}, nullptr, nullptr}));
  env->Set("strftime_now",
           MakeFunction(Function{FnKind::kStrftimeNow, "strftime_now", {}, nullptr, nullptr}));
  env->Set("True", Bool(true));
  env->Set("False", Bool(false));
  env->Set("None", Null());
  return env;
}

}  // namespace rlid::jinja::internal

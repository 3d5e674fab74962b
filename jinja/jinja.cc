// The Jinja-subset interpreter behind jinja/jinja.h. It is a port of @huggingface/jinja 0.5.11
// (lexer.ts, parser.ts, runtime.ts): the same preprocessing (lstrip_blocks, trim_blocks, the
// transformers `generation` tag), the same grammar and the same JavaScript value semantics
// (numbers are doubles, `==` is loose equality, strings measure length in UTF-16 units), so a
// chat template renders byte-for-byte as in transformers.js. Extensions only fill in where the
// reference throws (a few standard Jinja filters and tests); every runaway is a ConfigError.
// Where jinja2 through transformers' apply_chat_template differs, it is the reference now
// (tests/live/test_chat_templates.py): numbers print as Python's repr (2.0, 1e+20, exact big
// context integers), strip/trim/split use Python's whitespace and strip's argument, and
// str + non-str is an error.
// @huggingface/jinja is Copyright (c) 2023 Hugging Face, MIT License: see jinja/LICENSE.
//
// This file holds the entry points: Template::Parse runs preprocess.h, lexer.h and parser.h;
// Template::Render turns the context into values (value.h) and runs interpreter.h.
#include "jinja/jinja.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "jinja/interpreter.h"
#include "jinja/lexer.h"
#include "jinja/parser.h"
#include "jinja/preprocess.h"
#include "jinja/program.h"

namespace rlid::jinja::internal {

// Converts a JSON context value (nlohmann::json or ordered_json).
template <typename Json>
Value Interpreter::FromJson(const Json& j, int depth) {
  if (depth > options_.max_depth) {
    throw ConfigError(
        fmt::format("chat template context nests deeper than max_depth={}", options_.max_depth),
        "flatten the context or raise RenderOptions::max_depth");
  }
  switch (j.type()) {
    case nlohmann::json::value_t::null:
      return Null();
    case nlohmann::json::value_t::boolean:
      return Bool(j.template get<bool>());
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned: {
      Value v = Integer(j.is_number_unsigned() ? static_cast<double>(j.template get<uint64_t>())
                                               : static_cast<double>(j.template get<int64_t>()));
      if (std::fabs(v.number) >= 9007199254740992.0)  // 2^53: doubles start rounding
        v.digits = std::make_shared<const std::string>(j.dump());
      return v;
    }
    case nlohmann::json::value_t::number_float:
      return Float(j.template get<double>());  // json.loads keeps 2.0 a float
    case nlohmann::json::value_t::string:
      return String(j.template get<std::string>());
    case nlohmann::json::value_t::array: {
      Array items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(FromJson(item, depth + 1));
      return MakeArray(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      auto object = std::make_shared<Object>();
      object->entries.reserve(j.size());
      for (auto it = j.begin(); it != j.end(); ++it) {
        object->entries.emplace_back(it.key(), FromJson(it.value(), depth + 1));
      }
      return MakeObject(std::move(object));
    }
    default:
      throw ConfigError("chat template context holds a binary or discarded JSON value",
                        "pass plain JSON values");
  }
}

template <typename Json>
std::string RenderJson(const Program& program, const Json& context, const RenderOptions& options) {
  if (!context.is_object()) {
    throw ConfigError(
        fmt::format("chat template context must be a JSON object, got {}", context.type_name()),
        "pass {\"messages\": [...], ...}");
  }
  Interpreter interpreter(program, options);
  EnvPtr global = Globals();
  for (auto it = context.begin(); it != context.end(); ++it) {
    if (global->vars.count(it.key()) != 0) {
      throw ConfigError(
          fmt::format("chat template context key '{}' reuses a global name", it.key()),
          "rename the key; namespace, range, raise_exception, strftime_now, "
          "true/false/none and True/False/None are reserved");
    }
    global->Set(it.key(), interpreter.FromJson(it.value(), 1));
  }
  return interpreter.Run(global);
}

}  // namespace rlid::jinja::internal

namespace rlid::jinja {

Template Template::Parse(std::string_view source, std::string name) {
  if (source.size() >= std::numeric_limits<uint32_t>::max()) {
    throw ConfigError("chat template is larger than 4 GiB", "pass a real template");
  }
  auto program = std::make_shared<Program>();
  program->name = std::move(name);
  program->source = std::string(source);
  program->line_starts.push_back(0);
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\n') program->line_starts.push_back(i + 1);
  }
  const internal::Mapped mapped = internal::Preprocess(program->source);
  std::vector<internal::Token> tokens = internal::Lex(mapped, *program);
  program->body = internal::Parse(std::move(tokens), *program);
  return Template(std::move(program));
}

std::string Template::Render(const nlohmann::ordered_json& context,
                             const RenderOptions& options) const {
  return internal::RenderJson(*program_, context, options);
}

std::string Template::Render(const nlohmann::json& context, const RenderOptions& options) const {
  return internal::RenderJson(*program_, context, options);
}

}  // namespace rlid::jinja

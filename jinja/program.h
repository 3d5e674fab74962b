// Template::Program, the parsed template jinja.h keeps opaque: the source, its line map and the
// syntax tree. Every stage (lexer, parser, interpreter) reports errors through Program::Fail,
// which names the template and the line:column in the author's source.
#pragma once

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "jinja/ast.h"
#include "jinja/jinja.h"

namespace rlid::jinja {

struct Template::Program {
  std::string name;  // says which template in messages; may be empty
  std::string source;
  std::vector<size_t> line_starts;
  std::vector<internal::NodePtr> body;

  std::string Where(size_t pos) const {
    const auto it = std::upper_bound(line_starts.begin(), line_starts.end(), pos);
    const size_t line = static_cast<size_t>(it - line_starts.begin());
    return fmt::format("{}:{}", line, pos - line_starts[line - 1] + 1);
  }
  [[noreturn]] void Fail(size_t pos, const std::string& message, std::string hint = {}) const {
    const std::string which =
        name.empty() ? "chat template" : fmt::format("chat template of {}", name);
    throw ConfigError(fmt::format("{} {}: {}", which, Where(pos), message), std::move(hint));
  }
};

namespace internal {

using Program = Template::Program;

}  // namespace internal
}  // namespace rlid::jinja

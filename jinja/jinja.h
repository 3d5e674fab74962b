// A Jinja-subset interpreter for Hugging Face chat templates (Qwen2.5, Qwen3, Llama 3.x):
// a template is parsed once and rendered against a JSON context ({"messages": [...],
// "add_generation_prompt": true, ...}) into the exact prompt text @huggingface/jinja produces,
// the reference transformers.js uses. Prompt builders sit on top; nothing here knows tokens.
#pragma once

#include <cstddef>
#include <ctime>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <string_view>

namespace rlid::jinja {

// Bounds that turn a runaway template into a ConfigError instead of a hang, a stack
// overflow or an out-of-memory kill. The defaults sit far above what real chat templates need.
struct RenderOptions {
  // Largest string any value (the output included) may reach, in bytes.
  size_t max_output_bytes = size_t{16} << 20;
  // For-loop iterations plus elements of the lists, dicts and namespaces the template builds
  // (range(), slices, list literals, `+` on lists, ...), summed over one render.
  size_t max_loop_iterations = 1'000'000;
  // Nesting of evaluation: expressions, blocks and macro calls together; also bounds the
  // nesting of the context and of printed values. Each level costs a few C++ stack frames,
  // so keep it in the hundreds (the parser separately caps template nesting at 200).
  int max_depth = 400;
  // Interpreted operations (one per expression or statement evaluated) plus the bytes that
  // string operations read and write (output, ~ and +, comparisons, methods, filters,
  // slices), summed over one render. Qwen3's template costs about 12 units per byte of
  // conversation (990k for a 20-turn, 80 KB one: tests/jinja/jinja_test.cc, JinjaLimits), so
  // the default covers some 5 MB of messages, ten times a 128k-token context; a runaway (a
  // loop over a multi-megabyte string) stops within a fraction of a second.
  size_t max_work = size_t{1} << 26;
  // The local time strftime_now() reads; unset means the current local time.
  std::optional<std::tm> now;
};

class Template {
 public:
  // Throws ConfigError naming line:column for a syntax error or a construct outside the
  // supported subset (e.g. {% include %}), with a hint on what to write instead.
  // `name` (e.g. "tokenizer 'models/qwen3'") says in every error which template failed.
  static Template Parse(std::string_view source, std::string name = {});

  // `context` must be a JSON object; its keys become template variables (a key may not reuse
  // a global's name: namespace, range, raise_exception, strftime_now, true/false/none and
  // their title-case forms). Pass ordered_json to keep object key order, which tojson
  // reproduces; plain nlohmann::json sorts keys. A variable the context lacks is Undefined:
  // falsy, renders as "", `is defined` is false, and its attributes are Undefined too.
  // Throws ConfigError with line:column on a render error, a raise_exception() call
  // (carrying the template's own message) or an exceeded RenderOptions bound. Semantics are
  // those of @huggingface/jinja 0.5.11 (JavaScript numbers, loose ==, UTF-16 lengths) except
  // where transformers' jinja2 renders chat templates differently (see jinja.cc's header);
  // Render is const and safe to call from several threads on one Template.
  std::string Render(const nlohmann::ordered_json& context,
                     const RenderOptions& options = {}) const;
  std::string Render(const nlohmann::json& context, const RenderOptions& options = {}) const;

  struct Program;  // the parsed template (jinja/program.h), opaque outside jinja/

 private:
  explicit Template(std::shared_ptr<const Program> program) : program_(std::move(program)) {}
  std::shared_ptr<const Program> program_;
};

}  // namespace rlid::jinja

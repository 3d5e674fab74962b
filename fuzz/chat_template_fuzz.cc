// The Jinja chat-template renderer (jinja/jinja.h). Byte 0 picks the mode:
//   even: the rest is a template, rendered against a fixed chat context;
//   odd:  a real chat template (tests/data/chat_templates, chosen by byte 1's
//         top bits) rendered with messages cut from the rest at NUL bytes
//         (each message's first byte picks its role; byte 1's low bits set
//         add_generation_prompt, enable_thinking, tools and tool calls).
// Parse and render may throw ConfigError; anything else (another exception, a
// crash, a hang past the render bounds) is a bug.
#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.h"
#include "fuzz/fuzz_util.h"
#include "jinja/jinja.h"

namespace rlid::fuzz {
namespace {

using nlohmann::ordered_json;

// Small bounds keep each execution fast; the limits themselves are what is tested.
jinja::RenderOptions Options() {
  jinja::RenderOptions o;
  o.max_output_bytes = size_t{1} << 20;
  o.max_loop_iterations = 100'000;
  o.max_work = size_t{1} << 22;  // a slow input is stopped long before libFuzzer's timeout
  std::tm now{};
  now.tm_year = 126, now.tm_mon = 0, now.tm_mday = 2;  // fixed: no dependence on the clock
  o.now = now;
  return o;
}

ordered_json Tools() {
  return ordered_json::parse(R"([{"type": "function", "function": {"name": "move",
    "description": "Move one cell", "parameters": {"type": "object",
    "properties": {"dir": {"type": "string", "enum": ["north", "south"]}},
    "required": ["dir"]}}}])");
}

const ordered_json& FixedContext() {
  static const ordered_json* ctx = [] {
    auto* c = new ordered_json(ordered_json::parse(R"({
      "messages": [
        {"role": "system", "content": "You play a maze."},
        {"role": "user", "content": "You are at (1, 2). Menu: A) go north B) go east"},
        {"role": "assistant", "content": "<think>\nnorth is closer\n</think>\n\nA",
         "tool_calls": [{"type": "function", "function": {"name": "move", "arguments": {"dir": "north"}}}]},
        {"role": "tool", "content": "moved"},
        {"role": "user", "content": "Action:"}
      ],
      "add_generation_prompt": true, "enable_thinking": false,
      "bos_token": "<|begin_of_text|>", "eos_token": "<|im_end|>",
      "date_string": "02 Jan 2026"})"));
    (*c)["tools"] = Tools();
    return c;
  }();
  return *ctx;
}

const std::vector<jinja::Template>& RealTemplates() {
  static const auto* templates = [] {
    auto* out = new std::vector<jinja::Template>;
    for (const char* name : {"qwen2_5", "qwen3", "llama3", "llama3_1", "llama3_2"}) {
      const std::string path =
          std::string(RLID_SOURCE_DIR) + "/tests/data/chat_templates/" + name + ".jinja";
      std::ifstream in(path, std::ios::binary);
      FUZZ_CHECK(in.good());
      std::stringstream ss;
      ss << in.rdbuf();
      out->push_back(jinja::Template::Parse(ss.str()));
    }
    return out;
  }();
  return *templates;
}

void RenderAllowingErrors(const jinja::Template& t, const ordered_json& ctx) {
  try {
    const std::string out = t.Render(ctx, Options());
    FUZZ_CHECK(out.size() <= Options().max_output_bytes);
  } catch (const ConfigError&) {
  }
}

ordered_json MessagesFrom(std::string_view rest, uint8_t flags) {
  static constexpr const char* kRoles[] = {"system", "user", "assistant", "tool"};
  ordered_json messages = ordered_json::array();
  size_t start = 0;
  while (start <= rest.size() && messages.size() < 16) {
    size_t end = rest.find('\0', start);
    if (end == std::string_view::npos) end = rest.size();
    std::string_view part = rest.substr(start, end - start);
    const uint8_t role = part.empty() ? 1 : static_cast<uint8_t>(part[0]) % 4;
    const std::string content(part.empty() ? part : part.substr(1));
    ordered_json m = {{"role", kRoles[role]}, {"content", content}};
    if (role == 2 && (flags & 8)) {
      // Arguments as the model wrote them: an object when the text is JSON, else the text.
      ordered_json args = ordered_json::parse(content, nullptr, /*allow_exceptions=*/false);
      if (args.is_discarded()) args = content;
      m["tool_calls"] = ordered_json::array(
          {{{"type", "function"}, {"function", {{"name", "move"}, {"arguments", args}}}}});
    }
    messages.push_back(std::move(m));
    start = end + 1;
  }
  return messages;
}

}  // namespace
}  // namespace rlid::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rlid::fuzz;
  Input in(data, size);
  const uint8_t mode = in.TakeByte();
  try {
    if (mode % 2 == 0) {
      std::optional<rlid::jinja::Template> t;
      try {
        t = rlid::jinja::Template::Parse(in.Rest());
      } catch (const rlid::ConfigError&) {
        return 0;
      }
      RenderAllowingErrors(*t, FixedContext());
    } else {
      const uint8_t flags = in.TakeByte();
      const auto& templates = RealTemplates();
      const auto& t = templates[(flags >> 5) % templates.size()];
      ordered_json ctx = {{"messages", MessagesFrom(in.Rest(), flags)},
                          {"add_generation_prompt", (flags & 1) != 0},
                          {"enable_thinking", (flags & 2) != 0}};
      if (flags & 4) ctx["tools"] = Tools();
      RenderAllowingErrors(t, ctx);
    }
  } catch (const rlid::ConfigError&) {
    FUZZ_CHECK(!"ConfigError escaped a guarded call");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    FUZZ_CHECK(!"only ConfigError may be thrown");
  }
  return 0;
}

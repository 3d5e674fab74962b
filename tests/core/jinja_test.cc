// Tests for core/jinja: (a) every case in tests/data/chat_templates/golden.json, rendered by
// @huggingface/jinja 0.5.11 from the real Qwen2.5/Qwen3/Llama-3.x chat templates, must come out
// byte-identical (or fail where the reference failed); (b) hand-written expectations for each
// feature; (c) errors and runaway guards surface as ConfigError with a useful message.
#include "core/jinja.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "core/error.h"

namespace rlid::jinja {
namespace {

using nlohmann::ordered_json;

std::string DataPath(const std::string& name) {
  return std::string(RLID_SOURCE_DIR) + "/tests/data/chat_templates/" + name;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.good()) << "cannot read " << path;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Renders `source` against a JSON context written inline.
std::string Render(std::string_view source, std::string_view context = "{}",
                   const RenderOptions& options = {}) {
  return Template::Parse(source).Render(ordered_json::parse(context), options);
}

// The ConfigError message a failing render (or parse) raises, or "" if none.
std::string ErrorOf(std::string_view source, std::string_view context = "{}",
                    const RenderOptions& options = {}) {
  try {
    Render(source, context, options);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "";
}

std::string Escaped(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      out += c;
    }
  }
  return out;
}

// "" when equal, else where and how they differ, with ~80 bytes of context from each side.
std::string Difference(const std::string& expected, const std::string& actual) {
  if (expected == actual) return "";
  size_t i = 0;
  while (i < expected.size() && i < actual.size() && expected[i] == actual[i]) ++i;
  const size_t from = i > 40 ? i - 40 : 0;
  return fmt::format("first difference at byte {} (expected {} bytes, got {})\n  expected: {}\n"
                     "  actual:   {}",
                     i, expected.size(), actual.size(), Escaped(expected.substr(from, 80)),
                     Escaped(actual.substr(from, 80)));
}

// ---- (a) golden outputs of the JavaScript reference ----------------------------------------

TEST(JinjaGolden, EveryCaseMatchesTheReference) {
  const ordered_json cases = ordered_json::parse(ReadFile(DataPath("golden.json")));
  ASSERT_TRUE(cases.is_array());
  std::map<std::string, Template> templates;
  std::map<std::string, int> passed, total;
  int ran = 0;
  for (size_t i = 0; i < cases.size(); ++i) {
    const ordered_json& c = cases[i];
    const std::string name = c.at("template").get<std::string>();
    if (templates.count(name) == 0) {
      templates.emplace(name, Template::Parse(ReadFile(DataPath(name + ".jinja"))));
    }
    const Template& tmpl = templates.at(name);
    ++ran;
    ++total[name];
    const ordered_json& context = c.at("context");
    if (c.contains("error")) {
      try {
        const std::string out = tmpl.Render(context);
        ADD_FAILURE() << "case " << i << " (" << name << "): the reference failed with '"
                      << c["error"].get<std::string>() << "' but rlid rendered:\n"
                      << Escaped(out.substr(0, 200));
      } catch (const ConfigError&) {
        ++passed[name];
      }
      continue;
    }
    const std::string expected = c.at("expected").get<std::string>();
    try {
      const std::string diff = Difference(expected, tmpl.Render(context));
      if (diff.empty()) {
        ++passed[name];
      } else {
        ADD_FAILURE() << "case " << i << " (" << name << "): " << diff;
      }
    } catch (const ConfigError& e) {
      ADD_FAILURE() << "case " << i << " (" << name << ") threw: " << e.what();
    }
  }
  EXPECT_EQ(ran, 259);
  const std::map<std::string, int> kExpectedCounts = {
      {"llama3", 43}, {"llama3_1", 43}, {"llama3_2", 43}, {"qwen2_5", 43}, {"qwen3", 87}};
  EXPECT_EQ(total, kExpectedCounts);
  for (const auto& [name, n] : total) {
    EXPECT_EQ(passed[name], n) << name;
    std::printf("[golden] %-9s %d/%d\n", name.c_str(), passed[name], n);
  }
}

}  // namespace
}  // namespace rlid::jinja

// cli/json_output.h: every JSON the CLI prints is valid JSON whatever bytes its
// strings hold (invalid UTF-8 becomes U+FFFD, the exact bytes stay in a hex
// field), checked on the helpers and end to end on `rlid policy sample --json`,
// whose sampled answers decode to arbitrary bytes.
#include "cli/json_output.h"

#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "core/rng.h"
#include "tests/agents/fixtures.h"
#include "tests/test_paths.h"

namespace rlid::cli {
namespace {

using nlohmann::json;

const std::string kReplacement = "\xEF\xBF\xBD";  // U+FFFD in UTF-8

TEST(JsonOutput, ReplacesEachInvalidByteAndKeepsValidText) {
  EXPECT_EQ(DumpJson(json{{"t", std::string("a\xff") + "b"}}),
            "{\"t\":\"a" + kReplacement + "b\"}");
  EXPECT_EQ(DumpJson(json{{"t", "caf\xC3\xA9 \xF0\x9F\x98\x80"}}),
            "{\"t\":\"caf\xC3\xA9 \xF0\x9F\x98\x80\"}");  // valid UTF-8 is printed as is
  EXPECT_EQ(DumpJson(json::array({1, "x"}), 2), "[\n  1,\n  \"x\"\n]");
  // nlohmann's own dump throws on the same document.
  EXPECT_THROW(json({{"t", "a\xff"}}).dump(), json::type_error);
}

TEST(JsonOutput, Utf8Validity) {
  for (const char* ok :
       {"", "abc", "\xC3\xA9", "\xE2\x82\xAC", "\xF0\x9F\x98\x80", "\xF4\x8F\xBF\xBF"})
    EXPECT_TRUE(IsValidUtf8(ok)) << HexBytes(ok);
  for (const char* bad :
       {"\xff", "\x80", "\xC3", "a\xE2\x82", "\xC0\xAF" /* overlong '/' */, "\xE0\x80\xAF",
        "\xED\xA0\x80" /* surrogate */, "\xF4\x90\x80\x80" /* > U+10FFFF */, "\xC3\x28"})
    EXPECT_FALSE(IsValidUtf8(bad)) << HexBytes(bad);
}

TEST(JsonOutput, HexBytesAndTextWithBytes) {
  EXPECT_EQ(HexBytes(std::string("A\xff\0z", 4)), "41ff007a");
  EXPECT_EQ(HexBytes(""), "");
  json j;
  TextWithBytes(j, "text", "B\xe2");
  EXPECT_EQ(j["text_hex"], "42e2");
  EXPECT_EQ(json::parse(DumpJson(j))["text"], "B" + kReplacement);
}

// Decodes HexBytes output.
std::string FromHex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

TEST(JsonOutput, AnyBytesGiveParseableJsonAndTheHexKeepsThem) {
  Rng rng(3);
  for (int k = 0; k < 2000; ++k) {
    std::string s(rng.UniformInt(12), '\0');
    for (char& c : s) c = static_cast<char>(rng.UniformInt(256));
    json j;
    TextWithBytes(j, "text", s);
    json back = json::parse(DumpJson(j));  // throws (fails the test) on invalid JSON
    EXPECT_EQ(FromHex(back["text_hex"]), s);
    EXPECT_EQ(back["text"] == s, IsValidUtf8(s)) << HexBytes(s);
  }
}

struct Process {
  int exit_code;
  std::string out;
};

Process RunRlid(const std::string& args) {
  const char* bin = std::getenv("RLID_BIN");
  const std::string cmd = (bin ? bin : std::string(RLID_BINARY_DIR) + "/rlid") + " " + args;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  std::string out;
  char buf[4096];
  while (size_t n = std::fread(buf, 1, sizeof buf, pipe)) out.append(buf, n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// A fresh model samples arbitrary tokens, and the byte tokens 0x80..0xff of a
// byte-level BPE decode to invalid UTF-8: with this model and sample seed 0,
// every one of the 4 answers holds such bytes.
TEST(JsonOutput, PolicySampleJsonIsValidWithInvalidUtf8Answers) {
  testing::TempDir dir("json_sample");
  const std::string ckpt = dir.str() + "/ckpt";
  Process init = RunRlid("policy init --env bandit --out " + ckpt + " 2>&1");
  ASSERT_EQ(init.exit_code, 0) << init.out;
  Process p =
      RunRlid("policy sample --checkpoint " + ckpt + " --env bandit --json -n 4 --sample-seed 0");
  ASSERT_EQ(p.exit_code, 0) << p.out;
  json out = json::parse(p.out);  // the whole stdout is one JSON document
  ASSERT_TRUE(out.is_array());
  int invalid_utf8 = 0;
  for (const auto& s : out) {
    const std::string bytes = FromHex(s["text_hex"]);
    EXPECT_EQ(s["text_is_utf8"].get<bool>(), IsValidUtf8(bytes)) << s.dump();
    if (IsValidUtf8(bytes)) {
      EXPECT_EQ(s["text"], bytes);
    } else {
      ++invalid_utf8;
      EXPECT_NE(s["text"].get<std::string>().find(kReplacement), std::string::npos) << s.dump();
    }
  }
  EXPECT_GT(invalid_utf8, 0) << "no sample exercised invalid UTF-8:\n" << p.out;
}

}  // namespace
}  // namespace rlid::cli

// `rlid tokenizer encode|decode|chat|train` end to end through RunCli: ids as JSON,
// exact decoded bytes, --batch files, chat templates, a trained file that loads,
// and usage errors as exit codes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "policy/tokenizer/tokenizer.h"
#include "tests/cli/run_cli.h"
#include "tests/test_paths.h"

namespace rlid::cli {
namespace {

std::string SourceDir() {
  if (const char* env = std::getenv("RLID_SOURCE_DIR")) return env;
  return RLID_SOURCE_DIR;
}

std::string HandMadePath() {
  return SourceDir() + "/tests/data/tokenizer/llama3_style_tokenizer.json";
}

// Runs the CLI and returns (exit code, stdout).
std::pair<int, std::string> RunCapture(const std::vector<std::string>& args) {
  auto o = testing::RunRlid(args);
  return {o.code, o.out};
}

TEST(TokenizerCommand, EncodeAndDecode) {
  auto [rc, out] =
      RunCapture({"tokenizer", "encode", "--tokenizer", HandMadePath(), "The cat's 12345"});
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, "[84,257,262,267,32,264,52,53]\n");
  std::tie(rc, out) =
      RunCapture({"tokenizer", "decode", "--tokenizer", HandMadePath(), "[84,257,262,267,271]"});
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, "The cat's<|endoftext|>");
  std::tie(rc, out) = RunCapture(
      {"tokenizer", "decode", "--skip-special", "--tokenizer", HandMadePath(), "[262,271]"});
  EXPECT_EQ(out, " cat");
  std::tie(rc, out) = RunCapture(
      {"tokenizer", "encode", "--no-special", "--tokenizer", HandMadePath(), "<|endoftext|>"});
  EXPECT_EQ(out, "[60,124,101,110,100,111,102,116,101,120,116,124,62]\n");
}

TEST(TokenizerCommand, BadInputIsAConfigErrorExitCode) {
  EXPECT_EQ(RunCapture({"tokenizer", "decode", "--tokenizer", HandMadePath(), "[1, \"x\"]"}).first,
            2);
  EXPECT_EQ(RunCapture({"tokenizer", "decode", "--tokenizer", HandMadePath(), "[99999]"}).first, 2);
  EXPECT_EQ(RunCapture({"tokenizer", "encode", "--tokenizer", "/nonexistent.json", "x"}).first, 3);
  EXPECT_EQ(RunCapture({"tokenizer", "train", "--out", "/tmp/unused.json"}).first,
            2);  // no --env / --corpus
}

// Writes `text` to a file in the test's temp dir and returns its path.
std::string TempFile(const std::string& name, const std::string& text) {
  const auto path = std::filesystem::path(::testing::TempDir()) / name;
  std::ofstream(path) << text;
  return path.string();
}

TEST(TokenizerCommand, BatchFormsGiveWhatOneCallPerInputGives) {
  const std::string texts = TempFile("rlid_batch_texts.json", R"(["The cat's 12345", ""])");
  auto [rc, out] = RunCapture({"tokenizer", "encode", "--tokenizer", HandMadePath(), "--batch", texts});
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, "[[84,257,262,267,32,264,52,53],[]]\n");
  // 0xC3 alone is half of a two-byte character: text shows U+FFFD, text_hex the byte.
  const std::string ids = TempFile("rlid_batch_ids.json", "[[262,271], [195]]");
  std::tie(rc, out) = RunCapture({"tokenizer", "decode", "--tokenizer", HandMadePath(), "--batch", ids});
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, R"([{"text":" cat<|endoftext|>","text_hex":"206361743c7c656e646f66746578747c3e"},)"
                 "{\"text\":\"\xef\xbf\xbd\",\"text_hex\":\"c3\"}]\n");
  for (const char* bad : {R"({"not": "an array"})", R"(["x", 3])", "[1,"}) {
    const std::string file = TempFile("rlid_batch_bad.json", bad);
    EXPECT_EQ(RunCapture({"tokenizer", "encode", "--tokenizer", HandMadePath(), "--batch", file}).first, 2)
        << bad;
  }
}

TEST(TokenizerCommand, ChatRendersATemplateAndReportsItsErrors) {
  const std::string tmpl = SourceDir() + "/tests/data/chat_templates/qwen3.jinja";
  const std::string ctx = TempFile("rlid_chat_ctx.json",
                                   R"({"messages": [{"role": "user", "content": "hi"}], )"
                                   R"("add_generation_prompt": true, "enable_thinking": false})");
  auto [rc, out] = RunCapture({"tokenizer", "chat", "--template", tmpl, ctx});
  EXPECT_EQ(rc, 0);
  EXPECT_EQ(out, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n");
  // In a batch, a context the template raises on is an error entry, not a failed command.
  const std::string batch = TempFile(
      "rlid_chat_batch.json", R"([{"messages": [{"role": "user", "content": "hi"}]}, {"messages": 5}, 7])");
  std::tie(rc, out) = RunCapture({"tokenizer", "chat", "--template", tmpl, "--batch", batch});
  EXPECT_EQ(rc, 0);
  const auto results = nlohmann::json::parse(out);
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[0]["text"], "<|im_start|>user\nhi<|im_end|>\n");
  EXPECT_TRUE(results[1].contains("error")) << results[1];
  EXPECT_TRUE(results[2].contains("error")) << results[2];
  EXPECT_EQ(RunCapture({"tokenizer", "chat", "--template", tmpl, TempFile("rlid_chat_bad.json", "[")}).first, 2);
  EXPECT_EQ(RunCapture({"tokenizer", "chat", "--template", "/nonexistent.jinja", ctx}).first, 3);
}

TEST(TokenizerCommand, TrainWritesALoadableTokenizer) {
  const auto dir = std::filesystem::path(::testing::TempDir()) / "rlid_tokenizer_cli_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "tok.json").string();
  auto [rc, out] = RunCapture({"tokenizer", "train", "--out", path, "--vocab-size", "300", "--env",
                               "bandit", "--episodes", "10"});
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("vocab 300 ids"), std::string::npos) << out;
  const auto tok = policy::Tokenizer::FromFile(path);
  EXPECT_EQ(tok.VocabSize(), 300);
  EXPECT_TRUE(tok.SingleTokenId(" C").has_value());
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace rlid::cli

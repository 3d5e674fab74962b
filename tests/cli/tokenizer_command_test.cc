// `rlid tokenizer encode|decode|train` end to end through RunCli: ids as JSON,
// exact decoded bytes, a trained file that loads, and usage errors as exit codes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "policy/tokenizer.h"
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

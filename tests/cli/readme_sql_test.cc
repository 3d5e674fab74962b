// The README's SQL examples run against a run directory produced by the CLI
// (`rlid train configs/keys_memory.toml`, shortened), and return rows.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <sstream>

#include "tests/agents/fixtures.h"

namespace rlid {
namespace {

std::string Bin() {
  const char* env = std::getenv("RLID_BIN");
  return env ? env : std::string(RLID_BINARY_DIR) + "/rlid";
}

// Runs a shell command, returns (exit code, stdout).
std::pair<int, std::string> Shell(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  int status = ::pclose(p);
  return {WEXITSTATUS(status), out};
}

std::string Quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

TEST(ReadmeSql, ExamplesRunAgainstACliRunDirectory) {
  std::ifstream in(std::string(RLID_SOURCE_DIR) + "/README.md");
  ASSERT_TRUE(in) << "README.md not found";
  std::stringstream ss;
  ss << in.rdbuf();
  std::string readme = ss.str();
  std::vector<std::string> queries;
  std::regex block("```sql\\n([\\s\\S]*?)```");
  for (auto it = std::sregex_iterator(readme.begin(), readme.end(), block); it != std::sregex_iterator(); ++it)
    queries.push_back((*it)[1]);
  ASSERT_GE(queries.size(), 5u) << "the README should show five SQL examples";

  testing::TempDir dir("readme_sql");
  std::string cmd = Bin() + " train " + std::string(RLID_SOURCE_DIR) +
                    "/configs/keys_memory.toml --threads 1 --log-level warn --out " + dir.str() +
                    " --set trainer.iterations=1 --set trainer.episodes_per_iteration=4 --set trainer.num_envs=4"
                    " --set trainer.eval_episodes=4 --set env.step_limit=12 2>&1";
  auto [rc, out] = Shell(cmd);
  ASSERT_EQ(rc, 0) << out;
  for (size_t i = 0; i < queries.size(); ++i) {
    auto [qrc, text] = Shell(Bin() + " sql " + dir.str() + " " + Quote(queries[i]) + " 2>&1");
    EXPECT_EQ(qrc, 0) << "README query " << i + 1 << " failed:\n" << queries[i] << "\n" << text;
    EXPECT_NE(text.find("row"), std::string::npos) << text;
    // Every example except the leak check (which must be empty) returns rows.
    bool leak_check = queries[i].find("v_split_leaks") != std::string::npos;
    if (leak_check)
      EXPECT_NE(text.find("(0 rows)"), std::string::npos) << "split leak found:\n" << text;
    else
      EXPECT_EQ(text.find("(0 rows)"), std::string::npos) << "README query " << i + 1 << " returned nothing:\n" << text;
  }
}

}  // namespace
}  // namespace rlid

// The README's SQL examples run against run directories produced by the CLI
// (the quickstart's compare and `rlid train configs/keys_memory.toml`, both
// shortened) and return rows exactly where the README says they do.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

#include "tests/agents/fixtures.h"
#include "tests/test_paths.h"

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

// Rows a query printed by `rlid sql` ("(N rows)" at the end), -1 if it failed.
int64_t Rows(const std::string& dir, const std::string& query) {
  auto [rc, text] = Shell(Bin() + " sql " + dir + " " + Quote(query) + " 2>&1");
  EXPECT_EQ(rc, 0) << query << "\n" << text;
  std::smatch m;
  if (rc != 0 || !std::regex_search(text, m, std::regex("\\((\\d+) rows?\\)"))) return -1;
  return std::stoll(m[1]);
}

// Each block's first line says where it runs ("-- runs on: quickstart", "--
// runs on: keys_memory; none on the quickstart: <why>", or "-- runs on: both;
// no rows unless ..."); the test holds every block to what it says, against
// a quickstart-shaped compare and a keys_memory train run made by the CLI.
TEST(ReadmeSql, ExamplesReturnRowsWhereTheySayTheyDo) {
  std::ifstream in(std::string(RLID_SOURCE_DIR) + "/README.md");
  ASSERT_TRUE(in) << "README.md not found";
  std::stringstream ss;
  ss << in.rdbuf();
  std::string readme = ss.str();
  std::vector<std::string> queries;
  std::regex block("```sql\\n([\\s\\S]*?)```");
  for (auto it = std::sregex_iterator(readme.begin(), readme.end(), block);
       it != std::sregex_iterator(); ++it)
    queries.push_back((*it)[1]);
  ASSERT_GE(queries.size(), 8u) << "the README should show eight SQL examples";

  testing::TempDir dir("readme_sql");
  const std::string src = RLID_SOURCE_DIR;
  const std::string keys = dir.str() + "/keys", quick = dir.str() + "/quickstart";
  auto [krc, kout] = Shell(Bin() + " train " + src +
                           "/configs/keys_memory.toml --threads 1 --log-level warn --out " + keys +
                           " --set trainer.iterations=1 --set trainer.episodes_per_iteration=4"
                           " --set trainer.num_envs=4 --set trainer.eval_episodes=4"
                           " --set env.step_limit=12 2>&1");
  ASSERT_EQ(krc, 0) << kout;
  // The quickstart's config, one seed and a small budget.
  auto [qrc, qout] =
      Shell(Bin() + " compare " + src +
            "/configs/quickstart.toml --threads 1 --log-level warn --out " + quick +
            " --set compare.seeds=[1] --set compare.budget_value=16"
            " --set trainer.episodes_per_iteration=16 --set trainer.num_envs=16"
            " --set trainer.epochs=1 --set trainer.minibatch_size=16"
            " --set trainer.grad_snr_every=0 --set sft.episodes=32 --set sft.epochs=1"
            " --set trainer.eval_episodes=8 --set compare.chance_episodes=0"
            " --set compare.plots=false 2>&1");
  ASSERT_EQ(qrc, 0) << qout;
  for (size_t i = 0; i < queries.size(); ++i) {
    const std::string& q = queries[i];
    const std::string first = q.substr(0, q.find('\n'));
    SCOPED_TRACE("README query " + std::to_string(i + 1) + ": " + first);
    ASSERT_EQ(first.rfind("-- runs on: ", 0), 0u) << "the first line must say where it runs";
    if (first.find("runs on: quickstart") != std::string::npos) {
      EXPECT_GT(Rows(quick, q), 0);
    } else if (first.find("runs on: keys_memory") != std::string::npos) {
      EXPECT_NE(first.find("none on the quickstart: "), std::string::npos) << "say why";
      EXPECT_GT(Rows(keys, q), 0);
      EXPECT_EQ(Rows(quick, q), 0);
    } else {
      ASSERT_NE(first.find("runs on: both; no rows unless"), std::string::npos);
      EXPECT_EQ(Rows(quick, q), 0);
      EXPECT_EQ(Rows(keys, q), 0);
    }
  }
  // Query 5 means what the summary table means: per arm (one seed here), its
  // env_steps is the table's env steps and its final_sampled the table's test
  // (sampled) success.
  const std::string& q5 = queries.at(4);
  ASSERT_NE(q5.find("final_sampled"), std::string::npos) << q5;
  auto [rc5, csv] = Shell(Bin() + " sql " + quick + " --csv " + Quote(q5) + " 2>&1");
  ASSERT_EQ(rc5, 0) << csv;
  std::ifstream summary_in(quick + "/summary.txt");
  std::stringstream summary;
  summary << summary_in.rdbuf();
  const std::regex table_row(R"(^(\S+)\s+(?:decision|token)\s+([0-9.]+) ± [0-9.]+.*?\s(\d+) \([-+][0-9.]+%\))");
  std::map<std::string, std::pair<std::string, std::string>> table;  // arm -> (success, env steps)
  std::string line;
  for (std::istringstream lines(summary.str()); std::getline(lines, line);) {
    std::smatch m;
    if (std::regex_search(line, m, table_row)) table[m[1]] = {m[2], m[3]};
  }
  ASSERT_EQ(table.size(), 3u) << summary.str();
  std::istringstream rows(csv);
  std::getline(rows, line);
  ASSERT_EQ(line, "arm,seed,env_steps,eval_env_steps,generated_tokens,flops,final_sampled,final_greedy");
  int checked = 0;
  while (std::getline(rows, line)) {
    std::vector<std::string> f;
    for (std::istringstream cells(line); std::getline(cells, f.emplace_back(), ',');) {}
    f.pop_back();
    ASSERT_EQ(f.size(), 8u) << line;
    ASSERT_TRUE(table.count(f[0])) << line;
    EXPECT_EQ(f[2], table[f[0]].second) << "env steps of " << f[0];
    EXPECT_GT(std::stoll(f[3]), 0) << "the evaluations' steps are counted apart";
    EXPECT_NEAR(std::stod(f[6]), std::stod(table[f[0]].first), 5e-4) << "success of " << f[0];
    ++checked;
  }
  EXPECT_EQ(checked, 3);
}

}  // namespace
}  // namespace rlid

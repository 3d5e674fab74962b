// `rlid sql`: table/CSV/JSON output of a real run database, and clear errors
// with non-zero exit codes for writes, missing runs and non-database files.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "memory/store.h"
#include "tests/cli/run_cli.h"
#include "tests/memory/fixtures.h"

namespace rlid::cli {
namespace {

using Output = testing::CliOutput;
Output RunSql(const std::vector<std::string>& args) { return testing::RunRlid(args); }

std::string MakeRun() {
  const std::string dir = memory::testing::ScratchDir("sqlcli");
  auto store = memory::Store::Open(dir + "/rlid.db", memory::Store::Mode::kReadWrite);
  memory::RunRecord r;
  r.name = "demo";
  r.kind = "train";
  const int64_t run = store->BeginRun(r);
  for (int i = 0; i < 2; ++i)
    store->WriteEpisode(memory::testing::CanonicalEpisode(store->NewEpisodeId(), run));
  return dir;
}

TEST(SqlCommand, PrintsTableCsvAndJson) {
  const std::string dir = MakeRun();
  const std::string q = "SELECT id, env, length, ret FROM episodes ORDER BY id";
  Output t = RunSql({"sql", dir, q});
  EXPECT_EQ(t.code, 0) << t.err;
  EXPECT_EQ(t.out,
            "id  env     length  ret\n"
            "--  ------  ------  ---\n"
            " 1  bandit       2    0\n"
            " 2  bandit       3    1\n"
            "(2 rows)\n");
  Output c = RunSql({"sql", dir + "/rlid.db", q, "--csv"});
  EXPECT_EQ(c.code, 0) << c.err;
  EXPECT_EQ(c.out, "id,env,length,ret\n1,bandit,2,0\n2,bandit,3,1\n");
  Output j = RunSql({"sql", dir, "SELECT name, episodes, env_steps FROM v_run_budget", "--json"});
  EXPECT_EQ(j.code, 0) << j.err;
  auto parsed = nlohmann::json::parse(j.out);
  ASSERT_EQ(parsed.size(), 1u);
  EXPECT_EQ(parsed[0]["name"], "demo");
  EXPECT_EQ(parsed[0]["episodes"], 2);
  EXPECT_EQ(parsed[0]["env_steps"], 5);
}

TEST(SqlCommand, WritesAreRefusedAndChangeNothing) {
  const std::string dir = MakeRun();
  for (const char* sql :
       {"DELETE FROM episodes", "UPDATE runs SET name = 'x'",
        "INSERT INTO metrics VALUES (1, 0, 'k', 1, 0)", "DROP VIEW v_run_budget"}) {
    Output o = RunSql({"sql", dir, sql});
    EXPECT_EQ(o.code, 2) << sql;
    EXPECT_NE(o.err.find("config error: the database is opened read-only; this statement would "
                         "modify it"),
              std::string::npos)
        << o.err;
    EXPECT_TRUE(o.out.empty());
  }
  Output n = RunSql({"sql", dir, "SELECT COUNT(*) AS n FROM episodes", "--csv"});
  EXPECT_EQ(n.out, "n\n2\n");
}

TEST(SqlCommand, BadTargetsAndSqlGiveClearErrors) {
  const std::string dir = memory::testing::ScratchDir("sqlcli_bad");
  Output missing = RunSql({"sql", dir + "/nope", "SELECT 1"});
  EXPECT_EQ(missing.code, 3);
  EXPECT_NE(missing.err.find("no such run directory or database file"), std::string::npos)
      << missing.err;
  Output empty_dir = RunSql({"sql", dir, "SELECT 1"});
  EXPECT_EQ(empty_dir.code, 3);
  EXPECT_NE(empty_dir.err.find("has no rlid.db"), std::string::npos) << empty_dir.err;
  std::ofstream(dir + "/notes.txt") << std::string(2048, '#') << "\n";
  Output text = RunSql({"sql", dir + "/notes.txt", "SELECT 1"});
  EXPECT_EQ(text.code, 3);
  EXPECT_NE(text.err.find("is not an SQLite database"), std::string::npos) << text.err;
  const std::string run = MakeRun();
  Output syntax = RunSql({"sql", run, "SELEC * FROM runs"});
  EXPECT_EQ(syntax.code, 2);
  EXPECT_NE(syntax.err.find("SQL error: near \"SELEC\": syntax error"), std::string::npos)
      << syntax.err;
  EXPECT_NE(syntax.err.find("hint: list tables and views"), std::string::npos) << syntax.err;
  Output both = RunSql({"sql", run, "SELECT 1", "--csv", "--json"});
  EXPECT_NE(both.code, 0);
}

}  // namespace
}  // namespace rlid::cli

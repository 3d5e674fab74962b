// `rlid sql`: table/CSV/JSON output of a real run database; clear errors with
// non-zero exit codes for writes, settings, missing runs, non-database files
// and FIFOs; limits that stop an unbounded query with well-formed output.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

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

// Yields one row per million steps of an endless recursion: a few rows a second.
constexpr const char* kEndless =
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) "
    "SELECT x FROM c WHERE x % 1000000 = 0";

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

TEST(SqlCommand, EndlessQueryStopsAtTheTimeLimitWithWellFormedOutput) {
  const std::string dir = MakeRun();
  const auto start = std::chrono::steady_clock::now();
  Output csv = RunSql({"sql", dir, kEndless, "--csv", "--timeout-s", "1"});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(csv.code, 2);
  EXPECT_LT(seconds, 5.0);
  EXPECT_NE(csv.err.find("config error: query stopped at its time limit of 1 s (--timeout-s); "),
            std::string::npos)
      << csv.err;
  EXPECT_NE(csv.err.find("(every printed line is a complete row)"), std::string::npos) << csv.err;
  EXPECT_NE(csv.err.find("hint: raise --timeout-s (0 = no limit)"), std::string::npos) << csv.err;
  const std::vector<std::string> lines = Lines(csv.out);
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines[0], "x");
  for (size_t i = 1; i < lines.size(); ++i) EXPECT_EQ(lines[i], std::to_string(i * 1000000));
  EXPECT_TRUE(csv.out.ends_with("\n"));

  Output json = RunSql({"sql", dir, kEndless, "--json", "--timeout-s", "0.5"});
  EXPECT_EQ(json.code, 2);
  EXPECT_NE(json.err.find("(the JSON array is closed, so the output parses)"), std::string::npos)
      << json.err;
  const auto parsed = nlohmann::json::parse(json.out);  // throws if cut mid-way
  ASSERT_TRUE(parsed.is_array());
  for (size_t i = 0; i < parsed.size(); ++i) EXPECT_EQ(parsed[i]["x"], (i + 1) * 1000000);

  Output table = RunSql({"sql", dir, kEndless, "--timeout-s", "0.5"});
  EXPECT_EQ(table.code, 2);
  const std::vector<std::string> rows = Lines(table.out);
  ASSERT_GE(rows.size(), 3u) << table.out;
  EXPECT_EQ(rows[0].substr(rows[0].find_first_not_of(' ')), "x");  // numeric: right-aligned
  EXPECT_TRUE(table.out.ends_with(" before the query stopped)\n")) << table.out;
}

TEST(SqlCommand, MemoryAndRowLimitsNameTheirFlags) {
  const std::string dir = MakeRun();
  const std::string sort =
      "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c ORDER BY "
      "x DESC";
  Output mem = RunSql({"sql", dir, sort, "--csv", "--max-memory-mb", "16"});
  EXPECT_EQ(mem.code, 2);
  EXPECT_NE(mem.err.find("query stopped: SQLite needed more than its memory limit of 16 MB "
                         "(--max-memory-mb); 0 rows were printed"),
            std::string::npos)
      << mem.err;
  EXPECT_NE(mem.err.find("hint: raise --max-memory-mb"), std::string::npos) << mem.err;
  EXPECT_EQ(mem.out, "x\n");
  Output rows = RunSql({"sql", dir,
                        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x "
                        "FROM c",
                        "--csv", "--max-rows", "3"});
  EXPECT_EQ(rows.code, 2);
  EXPECT_EQ(rows.out, "x\n1\n2\n3\n");
  EXPECT_NE(rows.err.find("query stopped at its row limit of 3 (--max-rows) with more rows to "
                          "come; 3 rows were printed"),
            std::string::npos)
      << rows.err;
  // Exactly N rows is no cut.
  Output exact = RunSql({"sql", dir, "SELECT id FROM episodes", "--csv", "--max-rows", "2"});
  EXPECT_EQ(exact.code, 0) << exact.err;
  EXPECT_EQ(exact.out, "id\n1\n2\n");
  EXPECT_NE(RunSql({"sql", dir, "SELECT 1", "--timeout-s", "-1"}).code, 0);
}

TEST(SqlCommand, SettingsAttachAndTokenizerAreRefused) {
  const std::string dir = MakeRun();
  for (const char* sql : {"PRAGMA query_only = 0", "PRAGMA journal_mode = DELETE",
                          "ATTACH 'x.db' AS x", "SELECT fts3_tokenizer('simple')", "BEGIN"}) {
    Output o = RunSql({"sql", dir, sql});
    EXPECT_EQ(o.code, 2) << sql;
    EXPECT_NE(o.err.find("config error: the database is opened read-only; this statement would "),
              std::string::npos)
        << o.err;
    EXPECT_NE(o.err.find("so rlid sql refuses it"), std::string::npos) << o.err;
    EXPECT_TRUE(o.out.empty()) << o.out;
  }
  Output ok = RunSql({"sql", dir, "PRAGMA query_only", "--csv"});
  EXPECT_EQ(ok.code, 0) << ok.err;
  EXPECT_EQ(ok.out, "query_only\n1\n");
}

TEST(SqlCommand, FifosAndDevicesAreRefusedWithoutBlocking) {
  const std::string dir = memory::testing::ScratchDir("sqlcli_fifo");
  const std::string fifo = dir + "/rlid.db";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  // A broken check would block in open(); a writer after 3 s ends that wait.
  std::atomic<bool> done{false};
  std::thread unblock([&] {
    for (int i = 0; i < 300 && !done; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  });
  const auto start = std::chrono::steady_clock::now();
  Output o = RunSql({"sql", dir, "SELECT 1"});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  done = true;
  unblock.join();
  EXPECT_EQ(o.code, 3);
  EXPECT_NE(o.err.find("is a FIFO (named pipe), not a database file"), std::string::npos) << o.err;
  EXPECT_LT(seconds, 1.0);
  Output dev = RunSql({"sql", "/dev/zero", "SELECT 1"});
  EXPECT_EQ(dev.code, 3);
  EXPECT_NE(dev.err.find("'/dev/zero' is a character device"), std::string::npos) << dev.err;
}

TEST(SqlCommand, LeavesNoWalOrShmNextToAFinishedRun) {
  const std::string dir = MakeRun();
  ASSERT_FALSE(std::filesystem::exists(dir + "/rlid.db-wal"));
  Output o = RunSql({"sql", dir, "SELECT COUNT(*) AS n FROM episodes", "--csv"});
  EXPECT_EQ(o.out, "n\n2\n") << o.err;
  EXPECT_FALSE(std::filesystem::exists(dir + "/rlid.db-wal"));
  EXPECT_FALSE(std::filesystem::exists(dir + "/rlid.db-shm"));
}

}  // namespace
}  // namespace rlid::cli

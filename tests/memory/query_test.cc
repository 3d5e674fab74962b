// `rlid sql` below the CLI: golden table, CSV and JSON texts; streaming with
// time, row and memory limits; the authorizer that keeps a query read-only.
#include "memory/query.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "memory/sqlite.h"
#include "memory/store.h"
#include "tests/memory/fixtures.h"

// AddressSanitizer, as gcc (__SANITIZE_ADDRESS__) and clang (__has_feature) say it.
#if defined(__SANITIZE_ADDRESS__)
#define RLID_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RLID_TEST_ASAN 1
#endif
#endif
#ifdef RLID_TEST_ASAN
#include <sanitizer/allocator_interface.h>
#endif

namespace rlid::memory {
namespace {

QueryResult Sample() {
  QueryResult r;
  r.columns = {"id", "label", "p", "note"};
  r.rows.push_back({int64_t{1}, std::string("A"), 0.123456789, std::monostate{}});
  r.rows.push_back({int64_t{12}, std::string("BB"), 1.0, std::string("two\nlines, \"quoted\"")});
  r.rows.push_back({int64_t{-3}, std::string("é"), -2.5e-7, Blob{std::string("\x01\xff", 2)}});
  return r;
}

TEST(QueryFormat, Table) {
  EXPECT_EQ(FormatTable(Sample()),
            "id  label         p  note\n"
            "--  -----  --------  --------------------\n"
            " 1  A      0.123457  NULL\n"
            "12  BB            1  two\\nlines, \"quoted\"\n"
            "-3  é      -2.5e-07  x'01ff'\n"
            "(3 rows)\n");
  // Long cells are cut to max_width characters (UTF-8 aware).
  QueryResult w;
  w.columns = {"text"};
  w.rows.push_back({std::string("ééééééééééé")});
  EXPECT_EQ(FormatTable(w, 8), "text\n--------\nééééé...\n(1 row)\n");
  EXPECT_EQ(FormatTable(w, 0), "text\n-----------\nééééééééééé\n(1 row)\n");
}

// Text need not be UTF-8 (a sampled answer is whatever bytes its tokens spell):
// each invalid byte is one column, as a terminal shows it (one U+FFFD).
TEST(QueryFormat, InvalidUtf8BytesAreOneColumnEach) {
  QueryResult w;
  w.columns = {"t"};
  w.rows.push_back({std::string("a\x80\x80\x80\x80\x80\x80\x80\x80")});
  w.rows.push_back({std::string("\xE2\x82" "b")});
  EXPECT_EQ(FormatTable(w, 8), "t\n--------\na\x80\x80\x80\x80...\n\xE2\x82" "b\n(2 rows)\n");
}

// Found by fuzz/sql_fuzz (SELECT randomblob(17999998) timed out): a table cell
// was formatted whole (a blob byte by byte in hex) before being cut to max_width.
TEST(QueryFormat, HugeCellsCostOnlyWhatTheCutCellShows) {
  QueryResult r;
  r.columns = {"b", "t"};
  r.rows.push_back({Blob{std::string(size_t{32} << 20, '\xab')}, std::string(size_t{32} << 20, 'x')});
  r.rows.push_back({Blob{std::string("\x01\xff", 2)}, std::string("a\nb")});
  const auto start = std::chrono::steady_clock::now();
  const std::string table = FormatTable(r, 12);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(seconds, 2.0);  // formatting whole cells took 4 s (Release build)
  EXPECT_EQ(table,
            "b             t\n"
            "------------  ------------\n"
            "x'abababa...  xxxxxxxxx...\n"
            "x'01ff'       a\\nb\n"
            "(2 rows)\n");
}

TEST(QueryFormat, Csv) {
  EXPECT_EQ(FormatCsv(Sample()),
            "id,label,p,note\n"
            "1,A,0.123456789,\n"
            "12,BB,1,\"two\nlines, \"\"quoted\"\"\"\n"
            "-3,é,-2.5e-07,x'01ff'\n");
}

TEST(QueryFormat, Json) {
  EXPECT_EQ(FormatJson(Sample()),
            "[\n"
            "  {\n    \"id\": 1,\n    \"label\": \"A\",\n    \"p\": 0.123456789,\n    \"note\": "
            "null\n  },\n"
            "  {\n    \"id\": 12,\n    \"label\": \"BB\",\n    \"p\": 1.0,\n"
            "    \"note\": \"two\\nlines, \\\"quoted\\\"\"\n  },\n"
            "  {\n    \"id\": -3,\n    \"label\": \"é\",\n    \"p\": -2.5e-07,\n    \"note\": "
            "\"01ff\"\n  }\n"
            "]\n");
  QueryResult empty;
  empty.columns = {"x"};
  EXPECT_EQ(FormatJson(empty), "[]\n");
  EXPECT_EQ(FormatCsv(empty), "x\n");
  EXPECT_EQ(FormatTable(empty), "x\n-\n(0 rows)\n");
}

constexpr const char* kUnbounded =
    "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT x FROM c";

// What the process holds: its RSS, or under AddressSanitizer the live heap
// bytes (its quarantine keeps up to 256 MB of freed memory resident, so RSS
// there grows with how fast memory is recycled, not with what is held).
int64_t MemoryBytes() {
#ifdef RLID_TEST_ASAN
  return static_cast<int64_t>(__sanitizer_get_current_allocated_bytes());
#else
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  statm >> pages >> resident;
  return resident * ::sysconf(_SC_PAGESIZE);
#endif
}

// Counts rows, checks they are 1, 2, 3, ... and samples the process RSS.
class CountingSink : public RowSink {
 public:
  void Begin(const std::vector<std::string>& columns) override { columns_ = columns; }
  void Row(const std::vector<Value>& row) override {
    ASSERT_EQ(std::get<int64_t>(row.at(0)), ++rows_);
    if (rows_ % 100000 == 0) max_rss_ = std::max(max_rss_, MemoryBytes());
  }
  void End(bool cut) override { cut_ = cut; }
  std::vector<std::string> columns_;
  int64_t rows_ = 0, max_rss_ = 0;
  bool cut_ = false;
};

TEST(QueryStream, UnboundedResultStopsAtTimeLimitWithBoundedMemory) {
  Db db(":memory:", SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  CountingSink sink;
  const int64_t rss_before = MemoryBytes();
  const QueryOutcome o = StreamReadOnlyQuery(db, kUnbounded, sink, {.timeout_s = 1.0});
  EXPECT_EQ(o.stop, QueryStop::kTimeout);
  EXPECT_GE(o.seconds, 1.0);
  EXPECT_LT(o.seconds, 3.0);
  EXPECT_EQ(o.rows, sink.rows_);
  EXPECT_GT(o.rows, 100000);  // millions per second on one core
  EXPECT_TRUE(sink.cut_);
  EXPECT_EQ(sink.columns_, std::vector<std::string>{"x"});
  // Buffering the rows grew by ~80 MB/s; streaming keeps the process flat
  // (RSS, or the live heap under AddressSanitizer: MemoryBytes()).
  constexpr int64_t kAllowance = int64_t{16} << 20;
  EXPECT_LT(sink.max_rss_ - rss_before, kAllowance)
      << o.rows << " rows, memory " << rss_before << " -> " << sink.max_rss_;
  std::cout << "streamed " << o.rows << " rows in " << o.seconds << " s, memory grew "
            << (sink.max_rss_ - rss_before) / 1024 << " KiB\n";
}

TEST(QueryStream, MemoryLimitStopsAGrowingSortAndIsRestored) {
  Db db(":memory:", SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  const int64_t before = sqlite3_hard_heap_limit64(-1);
  CountingSink sink;
  // The sort holds every row before the first comes out; temp_store = MEMORY
  // keeps it on the heap, where the limit sees it.
  const QueryOutcome o =
      StreamReadOnlyQuery(db, std::string(kUnbounded) + " ORDER BY x DESC", sink,
                          {.timeout_s = 60, .max_memory_bytes = int64_t{16} << 20});
  EXPECT_EQ(o.stop, QueryStop::kMemory);
  EXPECT_LT(o.seconds, 30.0);
  EXPECT_EQ(o.rows, 0);
  EXPECT_TRUE(sink.cut_);
  EXPECT_EQ(sqlite3_hard_heap_limit64(-1), before);
  // The connection still works afterwards.
  EXPECT_EQ(std::get<int64_t>(RunReadOnlyQuery(db, "SELECT 41 + 1").rows.at(0).at(0)), 42);
}

TEST(QueryStream, MaxRowsCutsOnlyWhenMoreRowsFollow) {
  Db db(":memory:", SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  CountingSink exact;
  const std::string ten = std::string(kUnbounded) + " LIMIT 10";
  QueryOutcome o = StreamReadOnlyQuery(db, ten, exact, {.max_rows = 10});
  EXPECT_EQ(o.stop, QueryStop::kDone);
  EXPECT_EQ(o.rows, 10);
  EXPECT_FALSE(exact.cut_);
  CountingSink cut;
  o = StreamReadOnlyQuery(db, kUnbounded, cut, {.max_rows = 5});
  EXPECT_EQ(o.stop, QueryStop::kMaxRows);
  EXPECT_EQ(cut.rows_, 5);
  EXPECT_TRUE(cut.cut_);
}

TEST(QueryStream, CutOutputStaysWellFormed) {
  Db db(":memory:", SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  const std::string sql = std::string(kUnbounded)
                              .replace(std::string(kUnbounded).find("SELECT x FROM c"), 15,
                                       "SELECT x, 'r' || x AS s FROM c");
  std::ostringstream json, csv, table;
  EXPECT_EQ(StreamReadOnlyQuery(db, sql, *MakeJsonWriter(json), {.max_rows = 2}).stop,
            QueryStop::kMaxRows);
  EXPECT_EQ(nlohmann::json::parse(json.str()),
            nlohmann::json::parse(R"([{"x": 1, "s": "r1"}, {"x": 2, "s": "r2"}])"));
  StreamReadOnlyQuery(db, sql, *MakeCsvWriter(csv), {.max_rows = 2});
  EXPECT_EQ(csv.str(), "x,s\n1,r1\n2,r2\n");
  StreamReadOnlyQuery(db, sql, *MakeTableWriter(table), {.max_rows = 2});
  EXPECT_EQ(table.str(), "x  s\n-  --\n1  r1\n2  r2\n(2 rows before the query stopped)\n");
  // An SQL error after rows were written still closes the JSON array.
  std::ostringstream failed;
  EXPECT_THROW(StreamReadOnlyQuery(db,
                                   "SELECT json_extract(j, '$.a') FROM (SELECT '{\"a\":1}' AS j "
                                   "UNION ALL SELECT 'not json')",
                                   *MakeJsonWriter(failed)),
               ConfigError);
  EXPECT_EQ(nlohmann::json::parse(failed.str()).size(), 1u) << failed.str();
}

TEST(QueryStream, TableWidthsComeFromTheFirstRows) {
  Db db(":memory:", SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  std::ostringstream table;
  StreamReadOnlyQuery(db,
                      "SELECT 'a' AS s, 1 AS n UNION ALL SELECT 'bb', 22 UNION ALL SELECT "
                      "'cccc', 4444",
                      *MakeTableWriter(table, 60, 2));
  EXPECT_EQ(table.str(),
            "s    n\n"
            "--  --\n"
            "a    1\n"
            "bb  22\n"
            "cccc  4444\n"
            "(3 rows)\n");
}

// A file database with one table, opened read-write so that only the
// authorizer (not the connection) stands between a statement and the file.
std::string MakeDb(const std::string& name) {
  const std::string path = testing::ScratchDir(name) + "/t.db";
  Db db(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
  db.Exec("CREATE TABLE t(a); INSERT INTO t VALUES (1), (2); CREATE VIEW v AS SELECT a FROM t");
  return path;
}

TEST(ReadOnlyQuery, AuthorizerRefusesEveryWriteAndSetting) {
  const std::string path = MakeDb("query_auth");
  Db db(path, SQLITE_OPEN_READWRITE);
  for (const char* sql : {"PRAGMA query_only = 0",
                          "PRAGMA query_only=OFF",
                          "PRAGMA main.journal_mode = DELETE",
                          "PRAGMA writable_schema = 1",
                          "PRAGMA user_version = 7",
                          "PRAGMA wal_checkpoint",
                          "PRAGMA optimize",
                          "ATTACH ':memory:' AS x",
                          "DETACH main",
                          "BEGIN",
                          "SAVEPOINT s",
                          "SELECT fts3_tokenizer('simple')",
                          "SELECT load_extension('/tmp/x.so')",
                          "DELETE FROM t",
                          "INSERT INTO t VALUES (3)",
                          "UPDATE t SET a = 0",
                          "DROP VIEW v",
                          "CREATE TABLE u(b)",
                          "CREATE TEMP TABLE u(b)",
                          "ALTER TABLE t ADD COLUMN b",
                          "ANALYZE"}) {
    try {
      RunReadOnlyQuery(db, sql);
      ADD_FAILURE() << "not refused: " << sql;
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("the database is opened read-only; this statement "
                                           "would "),
                std::string::npos)
          << sql << " -> " << e.what();
      EXPECT_NE(std::string(e.what()).find("rlid sql refuses it"), std::string::npos) << e.what();
    }
  }
  EXPECT_EQ(std::get<int64_t>(RunReadOnlyQuery(db, "PRAGMA query_only").rows.at(0).at(0)), 0);
  EXPECT_EQ(std::get<int64_t>(RunReadOnlyQuery(db, "PRAGMA user_version").rows.at(0).at(0)), 0);
  EXPECT_EQ(std::get<int64_t>(RunReadOnlyQuery(db, "SELECT count(*) FROM t").rows.at(0).at(0)), 2);
}

TEST(ReadOnlyQuery, AuthorizerAllowsReads) {
  const std::string path = MakeDb("query_reads");
  Db db(path, SQLITE_OPEN_READONLY);
  for (const char* sql :
       {"SELECT * FROM v", "PRAGMA table_info(t)", "PRAGMA main.table_info('v')",
        "SELECT name FROM pragma_table_info('t')", "PRAGMA integrity_check",
        "PRAGMA quick_check(10)", "PRAGMA page_count", "PRAGMA index_list(t)",
        "PRAGMA foreign_key_check", "PRAGMA compile_options", "SELECT * FROM sqlite_master",
        "SELECT key, value FROM json_each('[1, 2]')", "SELECT count(*) FROM dbstat",
        "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c LIMIT 3) SELECT x FROM c",
        "SELECT abs(-1), lower('A'), printf('%d', 3), json_object('a', 1)"}) {
    EXPECT_NO_THROW(RunReadOnlyQuery(db, sql)) << sql;
  }
}

// A run database as a finished writer leaves it: WAL mode, no -wal, no -shm.
std::string MakeStore(const std::string& name) {
  const std::string path = testing::ScratchDir(name) + "/rlid.db";
  auto store = Store::Open(path, Store::Mode::kReadWrite);
  RunRecord run;
  run.name = "demo";
  run.kind = "train";
  const int64_t id = store->BeginRun(run);
  store->WriteEpisode(testing::CanonicalEpisode(store->NewEpisodeId(), id));
  return path;
}

std::string OpenError(const std::string& path) {
  try {
    Store::Open(path, Store::Mode::kReadOnly);
    return "no error";
  } catch (const Error& e) {
    return FormatError(e);
  }
}

TEST(ReadOnlyStore, LeavesNoWalOrShmBehind) {
  const std::string path = MakeStore("ro_nowal");
  char header[20] = {};
  std::ifstream(path, std::ios::binary).read(header, sizeof header);
  ASSERT_EQ(header[18], 2);  // WAL mode
  ASSERT_FALSE(std::filesystem::exists(path + "-wal"));
  ASSERT_FALSE(std::filesystem::exists(path + "-shm"));
  {
    auto ro = Store::Open(path, Store::Mode::kReadOnly);
    EXPECT_EQ(std::get<int64_t>(ro->Query("SELECT COUNT(*) FROM episodes").rows.at(0).at(0)), 1);
  }
  EXPECT_FALSE(std::filesystem::exists(path + "-wal"));
  EXPECT_FALSE(std::filesystem::exists(path + "-shm"));
  // While a writer has the file open, readers see its commits (not a stale
  // immutable snapshot).
  auto writer = Store::Open(path, Store::Mode::kReadWrite);
  writer->WriteEpisode(testing::CanonicalEpisode(
      writer->NewEpisodeId(), writer->db().QueryInt("SELECT MAX(id) FROM runs")));
  auto ro = Store::Open(path, Store::Mode::kReadOnly);
  EXPECT_EQ(std::get<int64_t>(ro->Query("SELECT COUNT(*) FROM episodes").rows.at(0).at(0)), 2);
}

TEST(ReadOnlyStore, RefusesFifosSocketsAndDevicesWithoutBlocking) {
  const std::string dir = testing::ScratchDir("ro_special");
  const std::string fifo = dir + "/rlid.db";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  // Opening a FIFO for reading blocks until a writer comes; this one comes
  // after 3 s (and ends the wait of a broken check) unless the test is done.
  std::atomic<bool> done{false};
  std::thread unblock([&] {
    for (int i = 0; i < 300 && !done; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    const int fd = ::open(fifo.c_str(), O_WRONLY | O_NONBLOCK);
    if (fd >= 0) ::close(fd);
  });
  const auto start = std::chrono::steady_clock::now();
  const std::string err = OpenError(ResolveDatabasePath(dir));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  done = true;
  unblock.join();
  EXPECT_NE(err.find("is a FIFO (named pipe), not a database file"), std::string::npos) << err;
  EXPECT_NE(err.find("hint: pass a run directory"), std::string::npos) << err;
  EXPECT_LT(seconds, 2.0);  // formatting whole cells took 4 s (Release build)
  EXPECT_NE(OpenError("/dev/null").find("'/dev/null' is a character device"), std::string::npos)
      << OpenError("/dev/null");
  const std::string sock = dir + "/s.db";
  const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(sock.size(), sizeof addr.sun_path);
  std::strcpy(addr.sun_path, sock.c_str());
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  EXPECT_NE(OpenError(sock).find("is a socket"), std::string::npos) << OpenError(sock);
  ::close(fd);
}

TEST(ReadOnlyStore, ConnectionIsHardened) {
  const std::string path = MakeStore("ro_config");
  Db(path, SQLITE_OPEN_READWRITE).Exec("CREATE VIEW evil AS SELECT fts3_tokenizer('simple') AS p");
  auto ro = Store::Open(path, Store::Mode::kReadOnly);
  auto config = [&](int op) {
    int value = -1;
    sqlite3_db_config(ro->db().handle(), op, -1, &value);
    return value;
  };
  EXPECT_EQ(config(SQLITE_DBCONFIG_ENABLE_FTS3_TOKENIZER), 0);
  EXPECT_EQ(config(SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION), 0);
  EXPECT_EQ(config(SQLITE_DBCONFIG_DEFENSIVE), 1);
  EXPECT_EQ(ro->db().QueryInt("PRAGMA query_only"), 1);
  // Even below the authorizer, the two-argument fts3_tokenizer is off.
  char* msg = nullptr;
  EXPECT_NE(
      sqlite3_exec(ro->db().handle(), "SELECT fts3_tokenizer('evil', fts3_tokenizer('simple'))",
                   nullptr, nullptr, &msg),
      SQLITE_OK);
  sqlite3_free(msg);
  // A view is no way around it (SQLite refuses the direct-only function there).
  EXPECT_THROW(ro->Query("SELECT * FROM evil"), ConfigError);
  EXPECT_NO_THROW(ro->Query("SELECT * FROM v_run_budget"));
}

}  // namespace
}  // namespace rlid::memory

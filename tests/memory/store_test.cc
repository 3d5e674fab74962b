// Store: schema and migrations, round trips, atomic batches, read-only
// enforcement, and clear errors for bad inputs (not a database, another
// application's database, newer schema, missing or read-only directory,
// locked database, full disk).
#include "memory/store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <set>

#include "core/error.h"
#include "memory/schema.h"
#include "memory/sqlite.h"
#include "memory/writer_lock.h"
#include "tests/memory/fixtures.h"

namespace rlid::memory {
namespace {

namespace fs = std::filesystem;
using testing::CanonicalEpisode;
using testing::ScratchDir;

std::string DbPath(const std::string& dir) { return dir + "/rlid.db"; }

int64_t Count(const Store& s, const std::string& table) {
  return s.db().QueryInt("SELECT COUNT(*) FROM " + table);
}

RunRecord TestRun() {
  RunRecord r;
  r.name = "test";
  r.kind = "train";
  r.config_toml = "[memory]\nenabled = true\n";
  r.seed = 7;
  return r;
}

template <class F>
std::string ErrorOf(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return std::string(e.kind()) + ": " + e.what() + " | hint: " + e.hint();
  }
  return "no error";
}

TEST(Store, CreatesSchemaViewsAndPragmas) {
  auto store = Store::Open(DbPath(ScratchDir("schema")), Store::Mode::kReadWrite);
  EXPECT_EQ(store->schema_version(), LatestSchemaVersion());
  EXPECT_EQ(store->db().QueryText("PRAGMA journal_mode"), "wal");
  EXPECT_EQ(store->db().QueryInt("PRAGMA foreign_keys"), 1);
  EXPECT_EQ(store->db().QueryInt("PRAGMA application_id"), kApplicationId);
  EXPECT_EQ(store->db().QueryInt("SELECT COUNT(*) FROM rlid_schema"), LatestSchemaVersion());
  for (const std::string t : {"runs", "episodes", "prompts", "steps", "menu_items", "memory_items",
                              "memory_parents", "memory_reads", "metrics", "checkpoints"})
    EXPECT_EQ(Count(*store, "sqlite_master WHERE type = 'table' AND name = '" + t + "'"), 1) << t;
  for (const auto& v : ViewNames()) {
    EXPECT_EQ(Count(*store, "sqlite_master WHERE type = 'view' AND name = '" + v + "'"), 1) << v;
    EXPECT_NO_THROW(store->Query("SELECT * FROM " + v)) << v;  // views compile
  }
}

// Every table rlid inserts into names each of its columns once: written
// (bound by name) or left to the schema. A column added by a migration and not
// carried through to TableWrites fails here, not as a shifted value.
TEST(Store, EveryInsertNamesEveryColumnOfItsTable) {
  auto store = Store::Open(DbPath(ScratchDir("columns")), Store::Mode::kReadWrite);
  std::set<std::string> covered;
  for (const TableWrite& t : TableWrites()) {
    std::set<std::string> schema, listed;
    Statement info = store->db().Prepare("SELECT name FROM pragma_table_info(:table)");
    info.Bind(":table", t.table);
    while (info.Step()) schema.insert(info.Text(0));
    for (const auto& c : t.written) EXPECT_TRUE(listed.insert(c).second) << t.table << "." << c;
    for (const auto& c : t.defaulted) EXPECT_TRUE(listed.insert(c).second) << t.table << "." << c;
    EXPECT_EQ(listed, schema) << t.table;
    // Each written column has its own named parameter in the insert.
    Statement insert = store->db().Prepare(InsertSql(t.table));
    for (const auto& c : t.written) EXPECT_GT(insert.ParameterIndex((":" + c).c_str()), 0);
    covered.insert(t.table);
  }
  // ... and every table of the schema is one of them.
  Statement tables = store->db().Prepare(
      "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'");
  while (tables.Step()) EXPECT_TRUE(covered.count(tables.Text(0))) << tables.Text(0);
  EXPECT_THROW(InsertSql("no_such_table"), InternalError);
}

// A parameter name that is not in the statement is an error, never a no-op.
TEST(Store, BindingAnUnknownParameterNameIsAnError) {
  auto store = Store::Open(DbPath(ScratchDir("params")), Store::Mode::kReadWrite);
  Statement s = store->db().Prepare("SELECT :a");
  EXPECT_NO_THROW(s.Bind(":a", int64_t{1}));
  EXPECT_THROW(s.Bind(":b", int64_t{1}), InternalError);
  EXPECT_THROW(s.BindNull(":b"), InternalError);
}

TEST(Store, EpisodeRoundTripWithDedupedPrompts) {
  const std::string dir = ScratchDir("roundtrip");
  auto store = Store::Open(DbPath(dir), Store::Mode::kReadWrite);
  const int64_t run = store->BeginRun(TestRun());
  EXPECT_EQ(run, 1);
  EpisodeRecord e = CanonicalEpisode(store->NewEpisodeId(), run);  // id 1: 2 steps
  ASSERT_EQ(e.length, 2);
  e.steps[1].prompt = e.steps[0].prompt;  // a repeated prompt is stored once
  e.steps[1].logp_train = -0.25;
  store->WriteEpisode(e);
  EXPECT_EQ(Count(*store, "episodes"), 1);
  EXPECT_EQ(Count(*store, "steps"), 2);
  EXPECT_EQ(Count(*store, "prompts"), 1);
  EXPECT_EQ(Count(*store, "menu_items"), 6);
  auto r = store->Query(
      "SELECT t, logp_rollout, logp_train, generated_text, prompt_hash = (SELECT hash FROM "
      "prompts) FROM steps ORDER BY t");
  ASSERT_EQ(r.rows.size(), 2u);
  EXPECT_DOUBLE_EQ(std::get<double>(r.rows[0][1]), -0.5);
  EXPECT_TRUE(std::holds_alternative<std::monostate>(r.rows[0][2]));  // NaN -> NULL
  EXPECT_DOUBLE_EQ(std::get<double>(r.rows[1][2]), -0.25);
  EXPECT_TRUE(std::holds_alternative<std::monostate>(r.rows[0][3]));  // decision plane
  EXPECT_EQ(std::get<int64_t>(r.rows[1][4]), 1);
  // Realisation probabilities are JSON that SQL can open.
  auto j = store->Query(
      "SELECT SUM(json_extract(value, '$.probability')) FROM menu_items, "
      "json_each(menu_items.realisations) WHERE t = 0 AND position = 0");
  EXPECT_NEAR(std::get<double>(j.rows[0][0]), 0.5, 1e-12);
  store->EndRun(run, "completed");
  EXPECT_EQ(store->db().QueryText("SELECT status FROM runs"), "completed");
  EXPECT_THROW(store->EndRun(run, "finished"), InternalError);
}

TEST(Store, IdsContinueAfterReopen) {
  const std::string path = DbPath(ScratchDir("ids"));
  {
    auto store = Store::Open(path, Store::Mode::kReadWrite);
    const int64_t run = store->BeginRun(TestRun());
    const int64_t e1 = store->NewEpisodeId(), item = store->item_ids().Next();
    store->WriteEpisode(CanonicalEpisode(e1, run, item));
    EXPECT_EQ(store->NewEpisodeId(), 2);  // allocated, never written
  }
  auto store = Store::Open(path, Store::Mode::kReadWrite);
  EXPECT_EQ(store->NewEpisodeId(), 2);  // MAX(id) + 1 of what was committed
  EXPECT_EQ(store->item_ids().Next(), 2);
}

TEST(Store, BatchIsAllOrNothing) {
  auto store = Store::Open(DbPath(ScratchDir("atomic")), Store::Mode::kReadWrite);
  const int64_t run = store->BeginRun(TestRun());
  store->WriteEpisode(CanonicalEpisode(store->NewEpisodeId(), run));  // committed before
  std::vector<WriteJob> batch;
  batch.push_back(CanonicalEpisode(store->NewEpisodeId(), run));
  // Reads an item that does not exist: the deferred foreign key fails at COMMIT,
  // after every row of both episodes was inserted.
  batch.push_back(CanonicalEpisode(store->NewEpisodeId(), run, 0, /*read_item=*/999));
  const std::string err = ErrorOf([&] { store->Write(batch); });
  EXPECT_NE(err.find("FOREIGN KEY constraint failed"), std::string::npos) << err;
  EXPECT_EQ(Count(*store, "episodes"), 1);
  EXPECT_EQ(Count(*store, "steps"), testing::CanonicalLength(1));
  EXPECT_EQ(Count(*store, "prompts"), testing::CanonicalLength(1));  // distinct per step
  // The prompt cache forgot the rolled-back prompts: writing again works.
  batch.pop_back();
  store->Write(batch);
  EXPECT_EQ(Count(*store, "episodes"), 2);
  std::string report;
  EXPECT_TRUE(store->CheckIntegrity(&report)) << report;
}

TEST(Store, ContractViolationsAreCaughtBeforeWriting) {
  auto store = Store::Open(DbPath(ScratchDir("contract")), Store::Mode::kReadWrite);
  const int64_t run = store->BeginRun(TestRun());
  EpisodeRecord e = CanonicalEpisode(store->NewEpisodeId(), run);
  e.steps[0].t = e.steps.size() > 1 ? e.steps[1].t : 0;
  e.steps.push_back(e.steps[0]);
  EXPECT_THROW(store->WriteEpisode(e), InternalError);  // duplicate t
  EpisodeRecord bad_split = CanonicalEpisode(store->NewEpisodeId(), run);
  bad_split.split = "validation";
  EXPECT_THROW(store->WriteEpisode(bad_split), InternalError);
  // Step provenance: what an invalid step cannot have, and hashes that go together.
  auto broken = [&](auto&& edit) {
    EpisodeRecord b = CanonicalEpisode(store->NewEpisodeId(), run);
    edit(b.steps[0]);
    return ErrorOf([&] { store->WriteEpisode(b); });
  };
  auto invalid = [](StepRecord& s) {
    s.invalid = true;
    s.action = -1;
  };
  EXPECT_NE(broken([](StepRecord& s) { s.optimal = 2; }).find("optimal = 2"), std::string::npos);
  EXPECT_NE(broken([&](StepRecord& s) {
              invalid(s);
              s.optimal = 1;
            }).find("never optimal"),
            std::string::npos);
  EXPECT_NE(broken([&](StepRecord& s) {
              invalid(s);
              s.realisation = "A";
            }).find("no realisation"),
            std::string::npos);
  EXPECT_NE(broken([&](StepRecord& s) {
              invalid(s);
              s.state_hash = 1;
              s.afterstate_hash = 2;
            }).find("no afterstate"),
            std::string::npos);
  EXPECT_NE(broken([](StepRecord& s) { s.afterstate_hash = 2; }).find("without the state hash"),
            std::string::npos);
  EpisodeRecord bad_pass = CanonicalEpisode(store->NewEpisodeId(), run, store->item_ids().Next());
  bad_pass.new_items[0].pass = -1;
  EXPECT_THROW(store->WriteEpisode(bad_pass), InternalError);
  EXPECT_EQ(Count(*store, "episodes"), 0);
  // The same step, valid: an invalid step that the oracle scores 0 is fine.
  EpisodeRecord ok = CanonicalEpisode(store->NewEpisodeId(), run);
  invalid(ok.steps[0]);
  ok.steps[0].optimal = 0;
  ok.steps[0].state_hash = 7;
  EXPECT_NO_THROW(store->WriteEpisode(ok));
}

TEST(Store, MigratesAnOlderDatabaseForward) {
  const std::string path = DbPath(ScratchDir("migrate"));
  {
    Db db(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    Migrate(db, 1);  // tables only, as an rlid with schema 1 wrote it
    db.Exec(
        "INSERT INTO runs(name, kind, config_toml, seed, code_version, started_at) "
        "VALUES ('old', 'train', '', 3, 'v0', '2024-01-01T00:00:00.000Z')");
    EXPECT_EQ(SchemaVersionOf(db), 1);
  }
  {  // A read-only open works on the old file without changing it.
    auto ro = Store::Open(path, Store::Mode::kReadOnly);
    EXPECT_EQ(ro->schema_version(), 1);
    EXPECT_EQ(Count(*ro, "sqlite_master WHERE type = 'view'"), 0);
  }
  auto store = Store::Open(path, Store::Mode::kReadWrite);
  EXPECT_EQ(store->schema_version(), LatestSchemaVersion());
  EXPECT_EQ(store->db().QueryText("SELECT name FROM runs"), "old");
  EXPECT_EQ(Count(*store, "sqlite_master WHERE type = 'view'"),
            static_cast<int64_t>(ViewNames().size()));
  auto budget = store->Query("SELECT name, episodes FROM v_run_budget");
  ASSERT_EQ(budget.rows.size(), 1u);
  EXPECT_EQ(std::get<int64_t>(budget.rows[0][1]), 0);
}

// A run whose process died while it was "running" shows as "crashed" once a
// writer opens the store (the one-writer lock proves that process is gone);
// readers change nothing. A schema-3 file gains the status by migration 4.
TEST(Store, RunsLeftRunningByADeadProcessAreMarkedCrashed) {
  const std::string path = DbPath(ScratchDir("crashed"));
  {
    Db db(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    Migrate(db, 3);
    db.Exec(
        "INSERT INTO runs(name, kind, config_toml, seed, code_version, started_at) "
        "VALUES ('old', 'train', '', 3, 'v0', '2024-01-01T00:00:00.000Z')");
    EXPECT_THROW(db.Exec("UPDATE runs SET status = 'crashed'"), IoError);  // schema 3 refuses it
  }
  int64_t done = 0, live = 0;
  {
    auto store = Store::Open(path, Store::Mode::kReadWrite);
    EXPECT_EQ(store->schema_version(), LatestSchemaVersion());
    EXPECT_EQ(store->db().QueryText("SELECT status FROM runs WHERE name = 'old'"), "crashed");
    done = store->BeginRun(TestRun());
    store->EndRun(done, "completed");
    live = store->BeginRun(TestRun());  // the process "dies" with this run running
    std::string report;
    EXPECT_TRUE(store->CheckIntegrity(&report)) << report;
  }
  auto status = [&](Store& s, int64_t id) {
    return s.db().QueryText(fmt::format("SELECT status FROM runs WHERE id = {}", id));
  };
  {
    auto ro = Store::Open(path, Store::Mode::kReadOnly);
    EXPECT_EQ(status(*ro, live), "running");
  }
  auto store = Store::Open(path, Store::Mode::kReadWrite);
  EXPECT_EQ(status(*store, live), "crashed");
  EXPECT_EQ(status(*store, done), "completed");
  EXPECT_EQ(store->db().QueryText(fmt::format("SELECT ended_at IS NOT NULL FROM runs WHERE id = {}", live)), "1");
  EXPECT_THROW(store->db().Exec("UPDATE runs SET status = 'exploded'"), IoError);  // still checked
}

TEST(Store, ItemsOfASchema2FileReadAsInstanceZeroPassZero) {
  const std::string path = DbPath(ScratchDir("migrate_items"));
  {
    Db db(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    Migrate(db, 2);
    db.Exec(
        "INSERT INTO runs(name, kind, config_toml, seed, code_version, started_at) "
        "VALUES ('old', 'train', '', 3, 'v0', '2024-01-01T00:00:00.000Z');"
        "INSERT INTO episodes VALUES (1, 1, 'keys', 9, 'train', 'decision', 0, 0, 0, 0, 1, 0, "
        "'2024-01-01T00:00:00.000Z');"
        "INSERT INTO prompts VALUES ('00000000000000aa', 'p', 1);"
        "INSERT INTO steps(episode_id, t, observation, prompt_hash, prompt_tokens, action, "
        "label, command, generated_tokens, reward, invalid, invalid_reason) "
        "VALUES (1, 0, 'o', '00000000000000aa', 1, 0, 'A', 'look', 0, 0, 0, '');"
        "INSERT INTO memory_items VALUES (1, 1, 'old fact', 'observation', 1, 0, 'train', 0, "
        "'2024-01-01T00:00:00.000Z');"
        "INSERT INTO memory_items VALUES (2, 1, 'old summary', 'summary', 1, NULL, 'train', 0, "
        "'2024-01-01T00:00:00.000Z');"
        "INSERT INTO memory_parents VALUES (2, 1);");
  }
  for (auto mode : {Store::Mode::kReadOnly, Store::Mode::kReadWrite}) {
    auto store = Store::Open(path, mode);
    const auto items = store->MemoryItems(1);
    ASSERT_EQ(items.size(), 2u);
    EXPECT_EQ(items[0].content, "old fact");
    EXPECT_EQ(items[0].source.t, 0);
    EXPECT_EQ(items[1].source.t, -1);
    EXPECT_EQ(items[1].parents, (std::vector<int64_t>{1}));
    for (const auto& it : items) {
      EXPECT_EQ(it.instance, 0u);
      EXPECT_EQ(it.pass, 0);
      EXPECT_EQ(it.source.run_id, 1);
    }
  }
}

TEST(Store, NewerSchemaIsRefusedWithoutTouchingTheFile) {
  const std::string path = DbPath(ScratchDir("newer"));
  {
    auto store = Store::Open(path, Store::Mode::kReadWrite);
    store->db().Exec(
        "INSERT INTO rlid_schema VALUES (99, 'from the future', '2030-01-01T00:00:00.000Z', "
        "'9.9.9')");
  }
  const auto size = fs::file_size(path);
  for (auto mode : {Store::Mode::kReadWrite, Store::Mode::kReadOnly}) {
    const std::string err = ErrorOf([&] { Store::Open(path, mode); });
    EXPECT_NE(err.find("i/o error"), std::string::npos) << err;
    EXPECT_NE(err.find("schema version 99 (written by rlid 9.9.9)"), std::string::npos) << err;
    EXPECT_NE(err.find(fmt::format("understands versions up to {}", LatestSchemaVersion())),
              std::string::npos)
        << err;
    EXPECT_NE(err.find("use a newer rlid"), std::string::npos) << err;
  }
  EXPECT_EQ(fs::file_size(path), size);
}

TEST(Store, ReadOnlyRejectsEveryWrite) {
  const std::string path = DbPath(ScratchDir("readonly"));
  {
    auto store = Store::Open(path, Store::Mode::kReadWrite);
    store->BeginRun(TestRun());
  }
  auto ro = Store::Open(path, Store::Mode::kReadOnly);
  EXPECT_EQ(ro->db().QueryInt("PRAGMA query_only"), 1);
  for (const char* sql :
       {"DELETE FROM runs", "INSERT INTO runs(name) VALUES ('x')", "UPDATE runs SET name = 'y'",
        "DROP TABLE runs", "CREATE TABLE x(a)", "PRAGMA user_version = 3"}) {
    const std::string err = ErrorOf([&] { ro->Query(sql); });
    EXPECT_NE(err.find("config error: the database is opened read-only"), std::string::npos)
        << sql << " -> " << err;
  }
  // The connection itself is read-only too, below the statement check.
  char* msg = nullptr;
  EXPECT_NE(sqlite3_exec(ro->db().handle(), "DELETE FROM runs", nullptr, nullptr, &msg), SQLITE_OK);
  sqlite3_free(msg);
  EXPECT_NE(ErrorOf([&] { ro->Query("ATTACH 'other.db' AS o"); }), "no error");
  EXPECT_THROW(ro->BeginRun(TestRun()), InternalError);
  EXPECT_EQ(Count(*ro, "runs"), 1);
}

TEST(Store, QueryErrorsAreClear) {
  auto store = Store::Open(DbPath(ScratchDir("queryerr")), Store::Mode::kReadWrite);
  EXPECT_NE(ErrorOf([&] { store->Query("SELEC 1"); }).find("config error: SQL error: near"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { store->Query("SELECT * FROM nope"); }).find("no such table: nope"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { store->Query("SELECT 1; SELECT 2"); }).find("expected one SQL"),
            std::string::npos);
  EXPECT_NE(ErrorOf([&] { store->Query("  -- nothing\n"); }).find("no SQL statement"),
            std::string::npos);
  EXPECT_EQ(store->Query("SELECT 1;  ").rows.size(), 1u);  // a trailing ';' is fine
}

TEST(Store, NotADatabaseIsReportedAndLeftAlone) {
  const std::string dir = ScratchDir("notadb");
  const std::string path = dir + "/notes.txt";
  std::ofstream(path) << std::string(4096, 'x') << "\nthis is a text file, not a database\n";
  const auto size = fs::file_size(path);
  for (auto mode : {Store::Mode::kReadOnly, Store::Mode::kReadWrite}) {
    const std::string err = ErrorOf([&] { Store::Open(path, mode); });
    EXPECT_NE(err.find("is not an SQLite database"), std::string::npos) << err;
    EXPECT_NE(err.find("hint: pass a run directory"), std::string::npos) << err;
  }
  EXPECT_EQ(fs::file_size(path), size);
}

TEST(Store, AnotherApplicationsDatabaseIsRefused) {
  const std::string path = ScratchDir("foreign") + "/other.db";
  {
    Db db(path, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE);
    db.Exec("CREATE TABLE customers(id INTEGER PRIMARY KEY, name TEXT)");
  }
  for (auto mode : {Store::Mode::kReadOnly, Store::Mode::kReadWrite}) {
    const std::string err = ErrorOf([&] { Store::Open(path, mode); });
    EXPECT_NE(err.find("not an rlid database"), std::string::npos) << err;
  }
}

// A run killed between creating rlid.db (the writer lock creates the file)
// and committing its schema leaves an empty file: readers name that case, and
// the next writer (a resume, say) writes the schema into it.
TEST(Store, AStoreKilledBeforeItsSchemaIsNamedAndCompletedByTheNextWriter) {
  const std::string path = DbPath(ScratchDir("killed_at_birth"));
  std::ofstream(path).flush();
  ASSERT_EQ(fs::file_size(path), 0u);
  const std::string err = ErrorOf([&] { Store::Open(path, Store::Mode::kReadOnly); });
  EXPECT_NE(err.find("a run stopped before it wrote its schema"), std::string::npos) << err;
  EXPECT_NE(err.find("start it again"), std::string::npos) << err;
  EXPECT_EQ(fs::file_size(path), 0u);  // a reader leaves it alone
  Store::Open(path, Store::Mode::kReadWrite);
  EXPECT_EQ(Store::Open(path, Store::Mode::kReadOnly)->Query("SELECT count(*) FROM runs").rows.size(),
            1u);
}

TEST(Store, MissingPathsAreClear) {
  const std::string dir = ScratchDir("missing");
  std::string err =
      ErrorOf([&] { Store::Open(dir + "/no/such/dir/rlid.db", Store::Mode::kReadWrite); });
  EXPECT_NE(err.find("does not exist"), std::string::npos) << err;
  err = ErrorOf([&] { Store::Open(dir + "/absent.db", Store::Mode::kReadOnly); });
  EXPECT_NE(err.find("no such database file"), std::string::npos) << err;
  err = ErrorOf([&] { ResolveDatabasePath(dir + "/no_run"); });
  EXPECT_NE(err.find("no such run directory or database file"), std::string::npos) << err;
  err = ErrorOf([&] { ResolveDatabasePath(dir); });
  EXPECT_NE(err.find("has no rlid.db"), std::string::npos) << err;
  err = ErrorOf([&] { Store::Open(dir, Store::Mode::kReadWrite); });
  EXPECT_NE(err.find("is a directory"), std::string::npos) << err;
  Store::Open(DbPath(dir), Store::Mode::kReadWrite);
  EXPECT_EQ(ResolveDatabasePath(dir), DbPath(dir));
}

TEST(Store, SecondWriterIsRefused) {
  const std::string path = DbPath(ScratchDir("twowriters"));
  auto first = Store::Open(path, Store::Mode::kReadWrite);
  const std::string err = ErrorOf([&] { Store::Open(path, Store::Mode::kReadWrite); });
  EXPECT_NE(err.find("is locked: another rlid process (pid"), std::string::npos) << err;
  EXPECT_NO_THROW(Store::Open(path, Store::Mode::kReadOnly));  // readers are welcome
  first.reset();
  EXPECT_NO_THROW(Store::Open(path, Store::Mode::kReadWrite));  // the lock went with it
}

// rlid compare writes files into its run directory before its arms' stores
// open: it holds a WriterLock that those stores join, while another process
// is refused for the whole time.
TEST(Store, StoresJoinThisProcesssWriterLock) {
  const std::string path = DbPath(ScratchDir("joinlock"));
  auto refused_in_child = [&] {
    // A forked child shares this process's lock table, so it asks the kernel
    // itself, with a descriptor of its own, as another rlid process would.
    const pid_t pid = ::fork();
    if (pid == 0) {
      const int fd = ::open(path.c_str(), O_RDWR);
      if (fd < 0) ::_exit(4);
      ::_exit(::flock(fd, LOCK_EX | LOCK_NB) == 0 ? 0 : errno == EWOULDBLOCK ? 3 : 5);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  };
  {
    WriterLock lock(path);
    EXPECT_EQ(refused_in_child(), 3);
    for (int arm = 0; arm < 2; ++arm) {
      auto store = Store::Open(path, Store::Mode::kReadWrite);  // joins
      store->BeginRun(TestRun());
      EXPECT_EQ(refused_in_child(), 3);
    }
    // The arms' runs were left running by this live process: a joining store
    // must not mark them crashed.
    EXPECT_EQ(Count(*Store::Open(path, Store::Mode::kReadWrite), "runs WHERE status = 'crashed'"), 0);
    EXPECT_EQ(refused_in_child(), 3);  // still held after the stores closed
    auto store = Store::Open(path, Store::Mode::kReadWrite);
    // Under the WriterLock a second store at the same time joins too.
    EXPECT_NO_THROW(Store::Open(path, Store::Mode::kReadWrite));
  }
  EXPECT_EQ(refused_in_child(), 0);  // released with the last reference
  EXPECT_EQ(Count(*Store::Open(path, Store::Mode::kReadOnly), "runs"), 2);
}

// The lock belongs to the database file, not to a path: a symlinked or
// hard-linked rlid.db in another run directory meets the same lock (two WALs
// on one file corrupt it), and a FIFO is refused without blocking.
TEST(Store, SecondWriterThroughALinkIsRefused) {
  const std::string dir = ScratchDir("linkedwriters");
  const std::string path = DbPath(dir);
  fs::create_directories(dir + "/a");
  fs::create_directories(dir + "/b");
  auto first = Store::Open(path, Store::Mode::kReadWrite);
  fs::create_hard_link(path, dir + "/a/rlid.db");
  fs::create_symlink(path, dir + "/b/rlid.db");
  for (const char* other : {"/a/rlid.db", "/b/rlid.db"}) {
    const std::string err = ErrorOf([&] { Store::Open(dir + other, Store::Mode::kReadWrite); });
    EXPECT_NE(err.find("is locked: another rlid process"), std::string::npos) << other << ": " << err;
  }
  EXPECT_FALSE(fs::exists(dir + "/a/rlid.db-wal"));  // the refused writer opened nothing
  first.reset();
  EXPECT_NO_THROW(Store::Open(dir + "/a/rlid.db", Store::Mode::kReadWrite));
  ASSERT_EQ(::mkfifo((dir + "/fifo.db").c_str(), 0644), 0);
  const std::string err = ErrorOf([&] { Store::Open(dir + "/fifo.db", Store::Mode::kReadWrite); });
  EXPECT_NE(err.find("not a regular file"), std::string::npos) << err;
}

TEST(Store, LockHeldByAnotherConnectionIsClear) {
  const std::string path = DbPath(ScratchDir("locked"));
  Store::Open(path, Store::Mode::kReadWrite)->BeginRun(TestRun());
  Db other(path, SQLITE_OPEN_READWRITE);
  // A pending write transaction blocks writers (WAL readers still proceed).
  other.Exec("BEGIN EXCLUSIVE");
  {
    auto store = Store::Open(path, Store::Mode::kReadWrite, StoreOptions{.busy_timeout_ms = 20});
    const std::string err = ErrorOf([&] { store->BeginRun(TestRun()); });
    EXPECT_NE(err.find("is locked by another connection"), std::string::npos) << err;
    EXPECT_NO_THROW(Store::Open(path, Store::Mode::kReadOnly)->Query("SELECT * FROM runs"));
  }
  other.Exec("COMMIT");
  // An exclusive locking mode blocks readers too.
  other.Exec(
      "PRAGMA locking_mode = EXCLUSIVE; BEGIN EXCLUSIVE; "
      "UPDATE runs SET name = 'held'; COMMIT;");
  const std::string err = ErrorOf(
      [&] { Store::Open(path, Store::Mode::kReadOnly, StoreOptions{.busy_timeout_ms = 20}); });
  EXPECT_NE(err.find("is locked by another connection"), std::string::npos) << err;
  EXPECT_NE(err.find("hint: another process holds"), std::string::npos) << err;
}

// Runs f in a child process as an unprivileged user when we are root (root
// ignores directory permissions); returns the child's error text.
template <class F>
std::string ErrorAsUnprivileged(F&& f) {
  int fds[2];
  EXPECT_EQ(::pipe(fds), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(fds[0]);
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) _exit(2);
    const std::string err = ErrorOf(f);
    [[maybe_unused]] auto n = ::write(fds[1], err.data(), err.size());
    _exit(0);
  }
  ::close(fds[1]);
  std::string out;
  char buf[512];
  for (ssize_t n; (n = ::read(fds[0], buf, sizeof(buf))) > 0;) out.append(buf, n);
  ::close(fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child status " << status;
  return out;
}

TEST(Store, ReadOnlyDirectoryIsClear) {
  const std::string dir = ScratchDir("rodir");
  fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                           fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
  const std::string err =
      ErrorAsUnprivileged([&] { Store::Open(DbPath(dir), Store::Mode::kReadWrite); });
  fs::permissions(dir, fs::perms::owner_all);
  EXPECT_NE(err.find("Permission denied"), std::string::npos) << err;
  EXPECT_NE(err.find("the directory is not writable"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(DbPath(dir)));
}

TEST(Store, RunInAReadOnlyDirectoryCanStillBeQueried) {
  const std::string dir = ScratchDir("rodir_query");
  {
    auto store = Store::Open(DbPath(dir), Store::Mode::kReadWrite);
    store->WriteEpisode(CanonicalEpisode(store->NewEpisodeId(), store->BeginRun(TestRun())));
  }
  ASSERT_FALSE(fs::exists(DbPath(dir) + "-shm"));  // the writer cleaned up on close
  fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec | fs::perms::group_read |
                           fs::perms::group_exec | fs::perms::others_read | fs::perms::others_exec);
  fs::permissions(DbPath(dir), fs::perms::others_read, fs::perm_options::add);
  const std::string err = ErrorAsUnprivileged([&] {
    auto ro = Store::Open(DbPath(dir), Store::Mode::kReadOnly);
    if (ro->db().QueryInt("SELECT COUNT(*) FROM episodes") != 1) throw IoError("wrong count");
  });
  fs::permissions(dir, fs::perms::owner_all);
  EXPECT_EQ(err, "no error");
}

TEST(Store, FullDiskIsClearAndKeepsCommittedEpisodes) {
  const std::string path = DbPath(ScratchDir("fulldisk"));
  auto store = Store::Open(path, Store::Mode::kReadWrite);
  const int64_t run = store->BeginRun(TestRun());
  // Simulate a full disk: the process may not grow any file past 256 KiB.
  rlimit old{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old;
  small.rlim_cur = 256 * 1024;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  int64_t committed = 0;
  std::string err;
  for (int i = 0; i < 2000 && err.empty(); ++i) {
    EpisodeRecord e = CanonicalEpisode(store->NewEpisodeId(), run);
    for (auto& s : e.steps) s.observation += std::string(2000, 'o');
    err = ErrorOf([&] { store->WriteEpisode(e); });
    if (err == "no error") {
      err.clear();
      ++committed;
    }
  }
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &old), 0);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_GT(committed, 0);
  EXPECT_TRUE(err.find("disk full or file size limit") != std::string::npos ||
              err.find("write/read failure") != std::string::npos)
      << err;
  store.reset();
  auto again = Store::Open(path, Store::Mode::kReadOnly);
  std::string report;
  EXPECT_TRUE(again->CheckIntegrity(&report)) << report;
  EXPECT_EQ(Count(*again, "episodes"), committed);
}

}  // namespace
}  // namespace rlid::memory

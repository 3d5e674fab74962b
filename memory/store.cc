// Store: opening (locks, pragmas, migrations, version checks), synchronous
// writes of runs/episodes/metrics/checkpoints with prepared statements.
#include "memory/store.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sqlite3.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/check.h"
#include "core/error.h"
#include "core/hash.h"
#include "core/log.h"
#include "memory/schema.h"
#include "memory/writer_lock.h"

namespace rlid::memory {
namespace fs = std::filesystem;

namespace {

constexpr size_t kMaxKnownPrompts = size_t{1} << 20;

std::string HashHex(uint64_t h) { return fmt::format("{:016x}", h); }

// "file:/a/b.db?immutable=1" with the path percent-encoded for SQLite's URI parser.
// "file:<absolute path, percent-encoded>?<query>".
std::string FileUri(const std::string& path, std::string_view query) {
  std::string out = "file:";
  for (unsigned char c : fs::absolute(path).string()) {
    if (std::isalnum(c) || c == '/' || c == '.' || c == '_' || c == '-' || c == '~')
      out += static_cast<char>(c);
    else
      out += fmt::format("%{:02X}", c);
  }
  return out + "?" + std::string(query);
}

std::string ImmutableUri(const std::string& path) { return FileUri(path, "immutable=1"); }

// True when the file's header says WAL mode (bytes 18 and 19 are 2).
bool IsWalFile(const std::string& path) {
  char header[20] = {};
  std::ifstream in(path, std::ios::binary);
  return in.read(header, sizeof header) && header[18] == 2 && header[19] == 2;
}

// A WAL database needs "<db>-shm" next to it even for reading, and a read-only
// connection cannot checkpoint at close, so a plain read-only open creates
// "<db>-wal" and "<db>-shm" and leaves them behind. Without "<db>-shm" no
// connection has the file open in WAL mode; with the log absent or empty the
// main file then holds every commit, and it is read as immutable: exact, and
// nothing is created (a writer that starts during such a read is not seen by
// it). Otherwise the file is opened normally, which needs "<db>-shm": in a
// directory that is not writable a log that holds commits cannot be read.
std::string ReadOnlyUriFor(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  if (fs::exists(path + "-shm", ec)) return "";
  const bool wal_empty = !fs::exists(path + "-wal", ec) || fs::file_size(path + "-wal", ec) == 0;
  const bool dir_writable = ::access(dir.c_str(), W_OK) == 0;
  if (wal_empty && (IsWalFile(path) || !dir_writable)) return ImmutableUri(path);
  if (dir_writable) return "";
  throw IoError(fmt::format("cannot read '{}': its write-ahead log holds commits, and the "
                            "directory '{}' is not writable (SQLite must create '{}-shm')",
                            path, dir.string(), path),
                "copy the run directory somewhere writable and query the copy");
}

// Only a regular file is opened: reading a FIFO blocks until someone writes
// it, and a device or socket is no database.
void RequireRegularFile(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    const int err = errno;
    throw IoError(fmt::format("cannot stat database '{}' ({})", path, std::strerror(err)),
                  "pass a run directory (containing rlid.db) or a database file");
  }
  if (S_ISREG(st.st_mode)) return;
  const char* kind = S_ISFIFO(st.st_mode)   ? "a FIFO (named pipe)"
                     : S_ISSOCK(st.st_mode) ? "a socket"
                     : S_ISCHR(st.st_mode)  ? "a character device"
                     : S_ISBLK(st.st_mode)  ? "a block device"
                                            : "not a regular file";
  throw IoError(fmt::format("database path '{}' is {}, not a database file", path, kind),
                "pass a run directory (containing rlid.db) or a regular database file; to query "
                "a database from a pipe, save it to a file first");
}

void CheckParentDirectory(const std::string& path) {
  fs::path p(path);
  fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    throw IoError(fmt::format("cannot create database '{}': directory '{}' does not exist", path,
                              dir.string()),
                  "create the run directory first (rlid train --out DIR creates it)");
  if (fs::is_directory(p, ec))
    throw IoError(fmt::format("database path '{}' is a directory", path),
                  fmt::format("for a run directory use '{}/{}'", path, kDatabaseFileName));
}

}  // namespace

namespace {

// An insert whose named parameters are looked up once per name: a row's binds
// repeat with the same literals, so a name is found by its address (and
// confirmed by one comparison with the parameter's own name) instead of a
// search through the statement's parameters on every row.
class Insert {
 public:
  Insert() = default;
  explicit Insert(Statement st) : st_(std::move(st)) {}
  template <class T>
  Insert& Bind(const char* name, const T& value) {
    st_.Bind(Index(name), value);
    return *this;
  }
  Insert& BindNull(const char* name) {
    st_.BindNull(Index(name));
    return *this;
  }
  void Run() { st_.Run(); }

 private:
  int Index(const char* name) {
    for (const auto& [known, index] : named_)
      if (known == name && std::strcmp(name, sqlite3_bind_parameter_name(st_.handle(), index)) == 0)
        return index;
    const int index = st_.ParameterIndex(name);  // InternalError for an unknown name
    named_.emplace_back(name, index);
    return index;
  }
  Statement st_;
  std::vector<std::pair<const char*, int>> named_;
};

}  // namespace

struct Store::Statements {
  Insert begin_run, episode, prompt, step, menu, item, parent, read, metric, checkpoint;
  Statement end_run, has_item;
};

std::string ShardFileName(int rank) { return fmt::format("rlid.rank{}.db", rank); }

std::string ResolveDatabasePath(const std::string& run_dir_or_file) {
  std::error_code ec;
  const fs::path p(run_dir_or_file);
  if (fs::is_directory(p, ec)) {
    const fs::path db = p / kDatabaseFileName;
    if (!fs::exists(db, ec))
      throw IoError(fmt::format("run directory '{}' has no {}", run_dir_or_file, kDatabaseFileName),
                    "pass the directory of a run that has started (it creates rlid.db), or "
                    "the path of a database file");
    return db.string();
  }
  if (!fs::exists(p, ec))
    throw IoError(fmt::format("no such run directory or database file: '{}'", run_dir_or_file),
                  "pass a run directory (containing rlid.db) or a database file");
  return run_dir_or_file;
}

std::unique_ptr<Store> Store::Open(const std::string& path, Mode mode, StoreOptions options) {
  int lock_fd = -1;
  std::string immutable_uri;
  if (mode == Mode::kReadWrite) {
    CheckParentDirectory(path);
    lock_fd = AcquireWriterLock(path);
  } else {
    std::error_code ec;
    if (!fs::exists(path, ec))
      throw IoError(fmt::format("no such database file: '{}'", path),
                    "pass a run directory (containing rlid.db) or a database file");
    if (fs::is_directory(path, ec))
      throw IoError(fmt::format("database path '{}' is a directory", path),
                    "use ResolveDatabasePath / pass the run directory to `rlid sql`");
    RequireRegularFile(path);
    immutable_uri = ReadOnlyUriFor(path);
  }
  // The Store owns lock_fd from its first member on (closed if construction fails).
  return std::unique_ptr<Store>(new Store(path, mode, options, lock_fd, immutable_uri));
}

Store::Store(const std::string& path, Mode mode, StoreOptions options, int lock_fd,
             const std::string& immutable_uri)
    : lock_(lock_fd),
      db_(path,
          mode == Mode::kReadWrite ? SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE
                                   : SQLITE_OPEN_READONLY | SQLITE_OPEN_URI,
          immutable_uri),
      mode_(mode),
      options_(options) {
  db_.SetBusyTimeout(options_.busy_timeout_ms);
  if (mode_ == Mode::kReadWrite)
    OpenReadWrite();
  else
    OpenReadOnly();
}

Store::LockFd::~LockFd() {
  if (fd >= 0) ReleaseWriterLock(fd);
}

Store::~Store() {
  st_.reset();  // finalise statements before the connection closes
  // lock_ closes after db_ (declared before it): see AcquireWriterLock.
}

void Store::CheckVersion(int version) const {
  if (version < 0)
    throw IoError(fmt::format("'{}' is an SQLite database but not an rlid database (no "
                              "rlid_schema table)",
                              path()),
                  "pass a run directory or the rlid.db file written by rlid");
  if (version > LatestSchemaVersion()) {
    std::string writer = db_.QueryText(
        "SELECT rlid_version FROM rlid_schema ORDER BY version "
        "DESC LIMIT 1");
    throw IoError(fmt::format("'{}' has schema version {} (written by rlid {}), but this rlid "
                              "({}) understands versions up to {}",
                              path(), version, writer, VersionString(), LatestSchemaVersion()),
                  "use a newer rlid to open it; the file was not modified");
  }
}

void Store::OpenReadWrite() {
  // The first read of the header: a non-database file fails here (SQLITE_NOTADB).
  const int64_t app_id = db_.QueryInt("PRAGMA application_id");
  if (app_id != 0 && app_id != kApplicationId)
    throw IoError(fmt::format("'{}' is an SQLite database of another application "
                              "(application_id {:#x})",
                              path(), app_id),
                  "rlid writes its own rlid.db; pick another file name");
  const std::string journal = db_.QueryText("PRAGMA journal_mode = WAL");
  if (journal != "wal")
    spdlog::warn("{}: journal mode is '{}' (WAL unavailable on this file system)", path(), journal);
  db_.Exec(options_.durable ? "PRAGMA synchronous = FULL" : "PRAGMA synchronous = NORMAL");
  db_.Exec("PRAGMA foreign_keys = ON");
  const int version = SchemaVersionOf(db_);
  CheckVersion(version);
  if (version < LatestSchemaVersion()) {
    if (version > 0)
      spdlog::info("{}: migrating schema {} -> {}", path(), version, LatestSchemaVersion());
    Migrate(db_, LatestSchemaVersion());
  }
  schema_version_ = LatestSchemaVersion();
  // This process holds the one-writer lock, so no run can still be running:
  // rows left "running" belong to processes that died (SIGKILL, power loss).
  // Only the first store under one acquisition looks (the others joined a
  // WriterLock, and the earlier store's run may still be running).
  // Best effort: a foreign connection holding a write transaction (sqlite3, a
  // browser) makes it wait for the next writer instead of failing the open.
  if (ClaimCrashSweep(lock_.fd)) try {
      Statement crashed = db_.Prepare(
          "UPDATE runs SET status = 'crashed', ended_at = COALESCE(ended_at, :now) "
          "WHERE status = 'running'");
      crashed.Bind(":now", NowIso8601());
      crashed.Run();
      if (const int64_t n = sqlite3_changes(db_.handle()); n > 0)
        spdlog::info(
            "{}: {} run(s) left 'running' by a process that no longer exists are marked 'crashed'",
            path(), n);
  } catch (const IoError& e) {
    spdlog::warn("{}: could not mark runs of dead processes as crashed: {}", path(), e.what());
  }
  ResetIdAllocators();
  Prepare();
}

void Store::ResetIdAllocators() {
  episode_ids_.Reset(db_.QueryInt("SELECT COALESCE(MAX(id), 0) FROM episodes") + 1);
  item_ids_.Reset(db_.QueryInt("SELECT COALESCE(MAX(id), 0) FROM memory_items") + 1);
}

// The tables every rank writes (rank 0 alone writes runs, metrics, checkpoints).
constexpr const char* kShardedTables[] = {"episodes", "steps", "menu_items", "memory_items",
                                          "memory_parents", "memory_reads"};

// The shards of a data-parallel run beside its rlid.db, in rank order.
std::vector<std::pair<int, fs::path>> ShardsBeside(const std::string& path) {
  std::vector<std::pair<int, fs::path>> out;
  const fs::path p(path);
  if (p.filename() != kDatabaseFileName) return out;
  std::error_code ec;
  const fs::path dir = p.has_parent_path() ? p.parent_path() : fs::path(".");
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    int rank = 0;
    char tail = 0;
    if (std::sscanf(name.c_str(), "rlid.rank%d.d%c", &rank, &tail) == 2 && tail == 'b' &&
        name == ShardFileName(rank) && rank > 0)
      out.emplace_back(rank, e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

void Store::AttachShards() {
  const auto shards = ShardsBeside(path());
  if (shards.empty()) return;
  std::vector<std::string> schemas = {"main"};
  for (const auto& [rank, file] : shards) {
    const std::string schema = fmt::format("rank{}", rank);
    std::string uri = ReadOnlyUriFor(file.string());
    if (uri.empty()) uri = FileUri(file.string(), "mode=ro");
    Statement attach = db_.Prepare(fmt::format("ATTACH DATABASE :uri AS {}", schema));
    attach.Bind(":uri", uri);
    attach.Run();
    const int64_t v = db_.QueryInt(fmt::format("SELECT COALESCE(MAX(version), 0) FROM {}.rlid_schema", schema));
    if (v != SchemaVersionOf(db_))
      throw IoError(fmt::format("'{}' (rank {}'s episodes) has schema version {}, '{}' has {}",
                                file.string(), rank, v, path(), SchemaVersionOf(db_)),
                    "open both with the same rlid once for writing (rlid train --resume), or "
                    "query each file on its own");
    schemas.push_back(schema);
  }
  // Temporary views named like the tables shadow them (SQLite resolves names in
  // temp first), and temporary copies of rlid's views read those: every query
  // and view sees the rows of all ranks as one table. temp_store is set first
  // and for good (changing it later would drop the views): temporary b-trees of
  // queries on a sharded run live in memory, where --max-memory-mb counts them.
  db_.Exec("PRAGMA temp_store = MEMORY");
  auto union_of = [&](const std::string& table, const char* op) {
    std::vector<std::string> parts;
    for (const auto& s : schemas) parts.push_back(fmt::format("SELECT * FROM {}.{}", s, table));
    return fmt::format("CREATE TEMP VIEW {} AS {}", table, fmt::join(parts, op));
  };
  for (const char* t : kShardedTables) db_.Exec(union_of(t, " UNION ALL "));
  db_.Exec(union_of("prompts", " UNION "));  // shared by hash: the same row in several files
  std::vector<std::string> views;
  {
    Statement q = db_.Prepare("SELECT sql FROM main.sqlite_master WHERE type = 'view' ORDER BY rowid");
    while (q.Step()) views.push_back(q.Text(0));
  }
  for (const auto& sql : views) {
    const auto at = sql.find("CREATE VIEW");
    RLID_CHECK(at == 0, "unexpected view definition: {}", sql.substr(0, 60));
    db_.Exec("CREATE TEMP VIEW" + sql.substr(std::string("CREATE VIEW").size()));
  }
  attached_shards_ = static_cast<int>(shards.size());
}

void Store::OpenReadOnly() {
  AttachShards();
  db_.Exec("PRAGMA query_only = 1");
  // Below the statement checks of RunReadOnlyQuery: no schema tricks, no
  // extensions, no fts3_tokenizer (its two-argument form installs a C
  // pointer), no ATTACH. trusted_schema stays on: rlid's views call
  // json_group_object, which SQLite does not mark innocuous; the functions a
  // view calls pass RunReadOnlyQuery's authorizer like the query's own.
  sqlite3* h = db_.handle();
  sqlite3_db_config(h, SQLITE_DBCONFIG_DEFENSIVE, 1, nullptr);
  sqlite3_db_config(h, SQLITE_DBCONFIG_ENABLE_FTS3_TOKENIZER, 0, nullptr);
  sqlite3_db_config(h, SQLITE_DBCONFIG_ENABLE_LOAD_EXTENSION, 0, nullptr);
  sqlite3_limit(h, SQLITE_LIMIT_ATTACHED, 0);
  const int version = SchemaVersionOf(db_);
  CheckVersion(version);
  if (version == 0)
    throw IoError(fmt::format("'{}' is an empty database (no tables): not an rlid database, or "
                              "the store of a run stopped before it wrote its schema",
                              path()),
                  "pass a run directory or the rlid.db file written by rlid; a run stopped "
                  "that early recorded nothing: start it again");
  if (version < LatestSchemaVersion())
    spdlog::warn(
        "{}: schema version {} is older than {}; views added later are missing until "
        "a writing rlid command opens it",
        path(), version, LatestSchemaVersion());
  schema_version_ = version;
}

void Store::Prepare() {
  st_ = std::make_unique<Statements>();
  // Inserts name their columns once (TableWrites) and bind them by name.
  st_->begin_run = Insert(db_.Prepare(InsertSql("runs")));
  st_->end_run =
      db_.Prepare("UPDATE runs SET status = :status, ended_at = :ended_at WHERE id = :id");
  st_->episode = Insert(db_.Prepare(InsertSql("episodes")));
  st_->prompt = Insert(db_.Prepare(InsertSql("prompts", /*or_ignore=*/true)));
  st_->step = Insert(db_.Prepare(InsertSql("steps")));
  st_->menu = Insert(db_.Prepare(InsertSql("menu_items")));
  st_->item = Insert(db_.Prepare(InsertSql("memory_items")));
  st_->parent = Insert(db_.Prepare(InsertSql("memory_parents")));
  st_->read = Insert(db_.Prepare(InsertSql("memory_reads")));
  st_->metric = Insert(db_.Prepare(InsertSql("metrics")));
  st_->checkpoint = Insert(db_.Prepare(InsertSql("checkpoints")));
  st_->has_item = db_.Prepare("SELECT 1 FROM memory_items WHERE id = :id");
}

namespace {

void RequireWritable(Store::Mode mode, const std::string& path) {
  if (mode != Store::Mode::kReadWrite)
    throw InternalError(fmt::format("write to '{}', which was opened read-only", path));
}

}  // namespace

int64_t Store::BeginRun(const RunRecord& run) {
  RequireWritable(mode_, path());
  RLID_CHECK(!run.name.empty(), "a run needs a name");
  RLID_CHECK(!run.kind.empty(), "run '{}' needs a kind (train/eval/compare/sft)", run.name);
  RLID_CHECK(run.id >= 0, "run id {} (expected 0 = next free, or a positive id)", run.id);
  st_->begin_run.Bind(":id", run.id > 0 ? std::optional<int64_t>(run.id) : std::nullopt)
      .Bind(":name", run.name)
      .Bind(":arm", run.arm)
      .Bind(":kind", run.kind)
      .Bind(":config_toml", run.config_toml)
      .Bind(":seed", static_cast<int64_t>(run.seed))
      .Bind(":code_version", run.code_version.empty() ? VersionString() : run.code_version)
      .Bind(":allow_cross_split", run.allow_cross_split)
      .Bind(":started_at", NowIso8601())
      .Bind(":env_metadata",
            run.env_metadata.empty() ? std::nullopt : std::optional(run.env_metadata))
      .Bind(":status", "running");
  st_->begin_run.Run();
  return db_.LastInsertRowid();
}

void Store::EndRun(int64_t run_id, std::string_view status) {
  RequireWritable(mode_, path());
  bool known = false;
  for (const char* s : kRunStatuses) known = known || status == s;
  RLID_CHECK(known, "run status '{}' (expected completed, failed, interrupted or crashed)", status);
  st_->end_run.Bind(":status", status).Bind(":ended_at", NowIso8601()).Bind(":id", run_id);
  st_->end_run.Run();
  RLID_CHECK_EQ(db_.Changes(), 1, "EndRun: no run with id {}", run_id);
}

bool Store::HasRun(int64_t run_id) const {
  Statement s = db_.Prepare("SELECT 1 FROM runs WHERE id = :id");
  s.Bind(":id", run_id);
  return s.Step();
}

void Store::RequireRun(int64_t run_id, std::string_view doing) const {
  if (!HasRun(run_id))
    throw ConfigError(
        fmt::format("cannot {} run {}: '{}' has no run with that id", doing, run_id, path()),
        fmt::format("resume from the run directory the checkpoint was written in; "
                    "`rlid sql {} \"SELECT id, name, status FROM runs\"` lists its "
                    "runs",
                    path()));
}

void Store::ResumeRun(int64_t run_id) {
  RequireWritable(mode_, path());
  RequireRun(run_id, "resume");
  Statement s = db_.Prepare("UPDATE runs SET status = 'running', ended_at = NULL WHERE id = :id");
  s.Bind(":id", run_id);
  s.Run();
}

TruncateResult Store::TruncateRun(int64_t run_id, int64_t last_iteration, int64_t last_episode_id) {
  RequireWritable(mode_, path());
  RequireRun(run_id, "truncate");
  // The run's episodes after the last one kept. An episode played ahead
  // (asynchronous rollouts) took its id before the checkpoint but belongs to a
  // later iteration: it goes too.
  constexpr const char* kGoneEpisodes =
      "(SELECT id FROM episodes WHERE run_id = :run AND (id > :last_episode OR iteration > "
      ":last_iteration))";
  const std::string gone_items =
      fmt::format("(SELECT id FROM memory_items WHERE source_episode_id IN {})", kGoneEpisodes);
  auto run = [&](const std::string& sql, int64_t bound) {
    Statement s = db_.Prepare(sql);
    s.Bind(":run", run_id).Bind(":last_iteration", bound);
    s.Run();
    return static_cast<int64_t>(db_.Changes());
  };
  auto gone = [&](const std::string& sql) {
    Statement s = db_.Prepare(sql);
    s.Bind(":run", run_id)
        .Bind(":last_episode", last_episode_id)
        .Bind(":last_iteration", last_iteration);
    s.Run();
    return static_cast<int64_t>(db_.Changes());
  };
  TruncateResult r;
  try {
    db_.Exec("BEGIN IMMEDIATE", "starting to truncate a run");
    Statement dangling = db_.Prepare(fmt::format(
        "SELECT (SELECT COUNT(*) FROM memory_reads WHERE item_id IN {1} "
        "AND episode_id NOT IN {0}), "
        "(SELECT COUNT(*) FROM memory_parents WHERE parent_id IN {1} AND item_id NOT IN {1})",
        kGoneEpisodes, gone_items));
    dangling.Bind(":run", run_id)
        .Bind(":last_episode", last_episode_id)
        .Bind(":last_iteration", last_iteration);
    dangling.Step();
    const int64_t reads = dangling.Int(0), derived = dangling.Int(1);
    dangling.Reset();
    if (reads > 0 || derived > 0)
      throw InternalError(
          fmt::format("cannot truncate run {} after episode {}: {} kept memory read(s) and {} "
                      "kept derivation(s) reference items of episodes that would be deleted",
                      run_id, last_episode_id, reads, derived),
          "truncate at a checkpoint boundary: pass the largest episode id committed when the "
          "checkpoint was written");
    gone(fmt::format("DELETE FROM memory_reads WHERE episode_id IN {}", kGoneEpisodes));
    gone(fmt::format("DELETE FROM memory_parents WHERE item_id IN {}", gone_items));
    r.memory_items =
        gone(fmt::format("DELETE FROM memory_items WHERE source_episode_id IN {}", kGoneEpisodes));
    gone(fmt::format("DELETE FROM menu_items WHERE episode_id IN {}", kGoneEpisodes));
    gone(fmt::format("DELETE FROM steps WHERE episode_id IN {}", kGoneEpisodes));
    r.episodes = gone(fmt::format("DELETE FROM episodes WHERE id IN {}", kGoneEpisodes));
    r.metrics = run("DELETE FROM metrics WHERE run_id = :run AND iteration > :last_iteration",
                    last_iteration);
    r.checkpoints =
        run("DELETE FROM checkpoints WHERE run_id = :run AND iteration > :last_iteration",
            last_iteration);
    db_.Exec("COMMIT", "committing the truncation of a run");
  } catch (...) {
    db_.RollbackQuietly();
    throw;
  }
  ResetIdAllocators();
  return r;
}

std::vector<MemoryItem> Store::MemoryItems(int64_t run_id) const {
  const char* scope_columns = schema_version_ >= 3 ? "instance, pass" : "0, 0";
  Statement s = db_.Prepare(fmt::format(
      "SELECT id, content, kind, source_episode_id, source_t, split, {}, policy_version, "
      "created_at FROM memory_items WHERE run_id = :run ORDER BY id",
      scope_columns));
  s.Bind(":run", run_id);
  std::vector<MemoryItem> items;
  while (s.Step()) {
    MemoryItem it;
    it.id = s.Int(0);
    it.content = s.Text(1);
    it.kind = ParseMemoryKind(s.Text(2));
    it.source = {run_id, s.Int(3), s.IsNull(4) ? -1 : static_cast<int>(s.Int(4))};
    it.split = s.Text(5);
    it.instance = static_cast<uint64_t>(s.Int(6));
    it.pass = s.Int(7);
    it.policy_version = s.Int(8);
    it.created_at = s.Text(9);
    items.push_back(std::move(it));
  }
  Statement p = db_.Prepare(
      "SELECT p.item_id, p.parent_id FROM memory_parents p JOIN memory_items m ON m.id = "
      "p.item_id WHERE m.run_id = :run ORDER BY p.item_id, p.parent_id");
  p.Bind(":run", run_id);
  size_t k = 0;  // both lists are in item id order
  while (p.Step()) {
    const int64_t item = p.Int(0);
    while (k < items.size() && items[k].id < item) ++k;
    RLID_CHECK(k < items.size() && items[k].id == item, "memory_parents row of unknown item {}",
               item);
    items[k].parents.push_back(p.Int(1));
  }
  return items;
}

void Store::Write(std::span<const WriteJob> jobs, Batching batching) {
  RequireWritable(mode_, path());
  for (const auto& job : jobs)
    if (const auto* e = std::get_if<EpisodeRecord>(&job)) ValidateEpisode(*e);
  const bool txn = batching == Batching::kTransaction;
  txn_prompts_.clear();
  try {
    if (txn) db_.Exec("BEGIN IMMEDIATE", "starting a write transaction");
    for (const auto& job : jobs) WriteJobRows(job);
    if (txn) db_.Exec("COMMIT", "committing a write transaction");
  } catch (...) {
    // Forget prompts this call inserted: they may have been rolled back.
    db_.RollbackQuietly();
    for (uint64_t h : txn_prompts_) known_prompts_.erase(h);
    txn_prompts_.clear();
    throw;
  }
  txn_prompts_.clear();
}

void Store::WriteEpisode(const EpisodeRecord& episode) {
  WriteJob job = episode;
  Write(std::span<const WriteJob>(&job, 1));
}

void Store::WriteMetric(const MetricRecord& metric) {
  WriteJob job = metric;
  Write(std::span<const WriteJob>(&job, 1));
}

void Store::WriteCheckpoint(const CheckpointRecord& checkpoint) {
  WriteJob job = checkpoint;
  Write(std::span<const WriteJob>(&job, 1));
}

void Store::WriteJobRows(const WriteJob& job) {
  std::visit(
      [this](const auto& j) {
        using T = std::decay_t<decltype(j)>;
        if constexpr (std::is_same_v<T, EpisodeRecord>)
          WriteEpisodeRows(j);
        else if constexpr (std::is_same_v<T, MetricRecord>)
          WriteMetricRow(j);
        else
          WriteCheckpointRow(j);
      },
      job);
}

namespace {

// One `steps` row of episode `episode` (its prompt row is written by the caller).
void WriteStepRow(Insert& step, int64_t episode, const StepRecord& s, const std::string& prompt_hex) {
  // Empty text, a zero hash and optimal < 0 mean "not recorded": NULL.
  auto text_or_null = [&step](const char* name, const std::string& v) -> Insert& {
    return v.empty() ? step.BindNull(name) : step.Bind(name, v);
  };
  step.Bind(":episode_id", episode)
      .Bind(":t", s.t)
      .Bind(":observation", s.observation)
      .Bind(":prompt_hash", prompt_hex)
      .Bind(":prompt_tokens", s.prompt_tokens)
      .Bind(":action", s.action)
      .Bind(":label", s.label)
      .Bind(":command", s.command)
      .Bind(":generated_tokens", s.generated_tokens)
      .Bind(":logp_rollout", s.logp_rollout)
      .Bind(":logp_train", s.logp_train)
      .Bind(":value", s.value)
      .Bind(":reward", s.reward)
      .Bind(":invalid", s.invalid)
      .Bind(":invalid_reason", s.invalid_reason)
      .Bind(":state_hash",
            s.state_hash == 0 ? std::nullopt : std::optional(HashHex(s.state_hash)))
      .Bind(":afterstate_hash",
            s.afterstate_hash ? std::optional(HashHex(*s.afterstate_hash)) : std::nullopt)
      .Bind(":optimal", s.optimal < 0 ? std::nullopt : std::optional<int64_t>(s.optimal))
      .Bind(":history_steps", s.history_steps);
  text_or_null(":generated_text", s.generated_text);
  text_or_null(":realisation", s.realisation);
  step.Run();
}

// The `menus` rows of one step: every item with its realisations' probabilities as
// JSON (a non-finite probability as null).
void WriteMenuRows(Insert& menu, int64_t episode, const StepRecord& s) {
  for (const MenuItemRecord& m : s.menu) {
    nlohmann::json real = nlohmann::json::array();
    for (const auto& r : m.realisations) {
      nlohmann::json p =
          std::isfinite(r.probability) ? nlohmann::json(r.probability) : nlohmann::json(nullptr);
      real.push_back({{"text", r.text}, {"probability", p}});
    }
    menu.Bind(":episode_id", episode)
        .Bind(":t", s.t)
        .Bind(":position", m.position)
        .Bind(":action", m.action)
        .Bind(":label", m.label)
        .Bind(":command", m.command)
        .Bind(":afterstate", m.afterstate)
        .Bind(":probability", m.probability)
        .Bind(":realisations", real.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    menu.Run();
  }
}

// The episode's new memory items and their parents.
void WriteMemoryItemRows(Insert& item, Insert& parent, const EpisodeRecord& e) {
  for (const MemoryItem& it : e.new_items) {
    item.Bind(":id", it.id)
        .Bind(":run_id", it.source.run_id != 0 ? it.source.run_id : e.run_id)
        .Bind(":content", it.content)
        .Bind(":kind", MemoryKindName(it.kind))
        .Bind(":source_episode_id", e.id)
        .Bind(":source_t", it.source.t < 0 ? std::nullopt : std::optional<int64_t>(it.source.t))
        .Bind(":split", it.split)
        .Bind(":policy_version", it.policy_version)
        .Bind(":created_at", it.created_at.empty() ? NowIso8601() : it.created_at)
        .Bind(":instance", static_cast<int64_t>(it.instance))  // same 64 bits
        .Bind(":pass", it.pass);
    item.Run();
    for (int64_t p : it.parents) {
      parent.Bind(":item_id", it.id).Bind(":parent_id", p);
      parent.Run();
    }
  }
}

}  // namespace

void Store::WriteEpisodeRows(const EpisodeRecord& e) {
  st_->episode.Bind(":id", e.id)
      .Bind(":run_id", e.run_id)
      .Bind(":env", e.env)
      .Bind(":seed", static_cast<int64_t>(e.seed))
      .Bind(":split", e.split)
      .Bind(":plane", e.plane)
      .Bind(":policy_version", e.policy_version)
      .Bind(":iteration", e.iteration)
      .Bind(":ret", e.ret)
      .Bind(":success", e.success)
      .Bind(":length", e.length)
      .Bind(":truncated", e.truncated)
      .Bind(":committed_at", NowIso8601())
      .Bind(":mode", e.mode)
      .Bind(":attempts", e.attempts);
  st_->episode.Run();
  for (const StepRecord& s : e.steps) {
    const uint64_t hash = s.prompt_hash != 0 ? s.prompt_hash : HashBytes(s.prompt);
    const std::string hex = HashHex(hash);
    if (known_prompts_.insert(hash).second) {
      if (known_prompts_.size() > kMaxKnownPrompts) {
        known_prompts_.clear();  // bounded memory; INSERT OR IGNORE keeps it correct
        txn_prompts_.clear();
      } else {
        txn_prompts_.push_back(hash);
      }
      st_->prompt.Bind(":hash", hex).Bind(":text", s.prompt).Bind(":tokens", s.prompt_tokens);
      st_->prompt.Run();
    }
    WriteStepRow(st_->step, e.id, s, hex);
    WriteMenuRows(st_->menu, e.id, s);
  }
  WriteMemoryItemRows(st_->item, st_->parent, e);
  for (const StepRecord& s : e.steps) {
    for (const MemoryRead& r : s.reads) {
      st_->read.Bind(":episode_id", e.id)
          .Bind(":t", s.t)
          .Bind(":rank", r.rank)
          .Bind(":item_id", r.item_id)
          .Bind(":score", r.score);
      st_->read.Run();
    }
  }
}

void Store::WriteMetricRow(const MetricRecord& m) {
  RLID_CHECK(!m.key.empty(), "metric without a key (run {}, iteration {})", m.run_id, m.iteration);
  st_->metric.Bind(":run_id", m.run_id)
      .Bind(":iteration", m.iteration)
      .Bind(":key", m.key)
      .Bind(":value", m.value)
      .Bind(":wall_time", m.wall_time != 0 ? m.wall_time : NowUnixSeconds());
  st_->metric.Run();
}

void Store::WriteCheckpointRow(const CheckpointRecord& c) {
  st_->checkpoint.Bind(":run_id", c.run_id)
      .Bind(":iteration", c.iteration)
      .Bind(":path", c.path)
      .Bind(":created_at", NowIso8601());
  st_->checkpoint.Run();
}

bool Store::HasMemoryItem(int64_t id) const {
  RLID_CHECK(st_ != nullptr, "HasMemoryItem on a read-only store");
  Statement& s = st_->has_item;
  s.Bind(":id", id);
  const bool found = s.Step();
  s.Reset();
  return found;
}

bool Store::CheckIntegrity(std::string* report) const {
  std::string out;
  Statement ic = db_.Prepare("PRAGMA integrity_check");
  while (ic.Step()) out += ic.Text(0) + "\n";
  const bool ok = out == "ok\n";
  Statement fk = db_.Prepare("PRAGMA foreign_key_check");
  int violations = 0;
  while (fk.Step()) {
    ++violations;
    out += fmt::format("foreign key violation: {} rowid {} -> {}\n", fk.Text(0), fk.Int(1),
                       fk.Text(2));
  }
  if (report) *report = out;
  return ok && violations == 0;
}

}  // namespace rlid::memory

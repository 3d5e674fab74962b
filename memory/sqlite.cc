// SQLite connection/statement wrappers and the mapping from SQLite result
// codes to rlid IoErrors with hints.
#include "memory/sqlite.h"

#include <fmt/format.h>
#include <sqlite3.h>

#include <cmath>
#include <limits>
#include <string>
#include <utility>

#include "core/file_io.h"

namespace rlid::memory {

IoError SqliteError(const std::string& path, int rc, std::string_view message,
                    std::string_view doing) {
  const int primary = rc & 0xff;
  switch (primary) {
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
      return IoError(fmt::format("database '{}' is locked by another connection ({}) while {}",
                                 path, message, doing),
                     "another process holds a write transaction or an exclusive lock (an rlid "
                     "run, or sqlite3 / a database browser with uncommitted changes); wait for "
                     "it to finish or close it, then retry");
    case SQLITE_NOTADB:
      return IoError(
          fmt::format("'{}' is not an SQLite database ({}) while {}", path, message, doing),
          "pass a run directory that contains rlid.db, or an rlid database file");
    case SQLITE_FULL:
      return IoError(fmt::format("disk full or file size limit reached while {} '{}' ({})", doing,
                                 path, message),
                     "free disk space (or raise `ulimit -f`); transactions committed before "
                     "this error are intact");
    case SQLITE_IOERR:
      return IoError(fmt::format("write/read failure on '{}' while {} ({}, code {})", path, doing,
                                 message, rc),
                     "the disk may be full, the file size limit (`ulimit -f`) reached, or the "
                     "device failing; committed transactions are intact");
    case SQLITE_READONLY:
      return IoError(fmt::format("'{}' cannot be written ({}) while {}", path, message, doing),
                     "check the permissions of the file and of its directory (SQLite creates "
                     "-wal and -shm files next to the database)");
    case SQLITE_CANTOPEN:
      return IoError(fmt::format("cannot open '{}' ({}) while {}", path, message, doing),
                     "check that the directory exists and is writable, and that the path is "
                     "not a directory");
    case SQLITE_CORRUPT:
      return IoError(fmt::format("database '{}' is corrupt ({}) while {}", path, message, doing),
                     fmt::format("inspect it with: sqlite3 '{}' 'PRAGMA integrity_check'", path));
    case SQLITE_PERM:
    case SQLITE_AUTH:
      return IoError(fmt::format("permission denied on '{}' ({}) while {}", path, message, doing),
                     "check file permissions");
    default:
      return IoError(
          fmt::format("SQLite error on '{}' while {}: {} (code {})", path, doing, message, rc));
  }
}

// ---- Statement -------------------------------------------------------------------

Statement::~Statement() {
  if (stmt_) sqlite3_finalize(stmt_);
}

Statement::Statement(Statement&& o) noexcept
    : db_(std::exchange(o.db_, nullptr)), stmt_(std::exchange(o.stmt_, nullptr)) {}

Statement& Statement::operator=(Statement&& o) noexcept {
  if (this != &o) {
    if (stmt_) sqlite3_finalize(stmt_);
    db_ = std::exchange(o.db_, nullptr);
    stmt_ = std::exchange(o.stmt_, nullptr);
  }
  return *this;
}

void Statement::CheckBind(int rc, int index) {
  if (rc != SQLITE_OK) db_->Fail(rc, fmt::format("binding parameter {} of '{}'", index, Sql()));
}

Statement& Statement::Bind(int index, int64_t value) {
  CheckBind(sqlite3_bind_int64(stmt_, index, value), index);
  return *this;
}

Statement& Statement::Bind(int index, double value) {
  if (!std::isfinite(value)) return BindNull(index);
  CheckBind(sqlite3_bind_double(stmt_, index, value), index);
  return *this;
}

Statement& Statement::Bind(int index, std::string_view value) {
  CheckBind(
      sqlite3_bind_text64(stmt_, index, value.data(), value.size(), SQLITE_TRANSIENT, SQLITE_UTF8),
      index);
  return *this;
}

int Statement::ParameterIndex(const char* name) const {
  const int index = sqlite3_bind_parameter_index(stmt_, name);
  if (index == 0)
    throw InternalError(fmt::format("SQL statement has no parameter {}: {}", name, Sql()));
  return index;
}

Statement& Statement::BindNull(int index) {
  CheckBind(sqlite3_bind_null(stmt_, index), index);
  return *this;
}

bool Statement::Step() {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc == SQLITE_DONE) return false;
  // The statement must be reset before reuse; sqlite3_reset returns the same error.
  sqlite3_reset(stmt_);
  db_->Fail(rc, fmt::format("executing '{}'", Sql()));
}

void Statement::Run() {
  while (Step()) {
  }
  Reset();
}

void Statement::Reset() {
  sqlite3_reset(stmt_);
  sqlite3_clear_bindings(stmt_);
}

int Statement::ColumnCount() const { return sqlite3_column_count(stmt_); }
std::string Statement::ColumnName(int col) const {
  const char* n = sqlite3_column_name(stmt_, col);
  return n ? n : "";
}
int Statement::ColumnType(int col) const { return sqlite3_column_type(stmt_, col); }
bool Statement::IsNull(int col) const { return ColumnType(col) == SQLITE_NULL; }
int64_t Statement::Int(int col) const { return sqlite3_column_int64(stmt_, col); }
double Statement::Double(int col) const {
  return IsNull(col) ? std::numeric_limits<double>::quiet_NaN() : sqlite3_column_double(stmt_, col);
}
std::string Statement::Text(int col) const {
  const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, col));
  const int n = sqlite3_column_bytes(stmt_, col);
  return p ? std::string(p, static_cast<size_t>(n)) : std::string();
}
std::string Statement::Blob(int col) const {
  const auto* p = static_cast<const char*>(sqlite3_column_blob(stmt_, col));
  const int n = sqlite3_column_bytes(stmt_, col);
  return p ? std::string(p, static_cast<size_t>(n)) : std::string();
}
bool Statement::ReadOnly() const { return sqlite3_stmt_readonly(stmt_) != 0; }
std::string Statement::Sql() const {
  const char* s = stmt_ ? sqlite3_sql(stmt_) : nullptr;
  std::string sql = s ? s : "";
  if (sql.size() > 120) sql = sql.substr(0, 117) + "...";
  return sql;
}

// ---- Db --------------------------------------------------------------------------

Db::Db(std::string path, int flags, const std::string& uri) : path_(std::move(path)) {
  const int rc = sqlite3_open_v2(uri.empty() ? path_.c_str() : uri.c_str(), &db_, flags, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close_v2(db_);
    db_ = nullptr;
    throw SqliteError(path_, rc, msg, "opening the database");
  }
  sqlite3_extended_result_codes(db_, 1);
}

Db::~Db() {
  if (db_) sqlite3_close_v2(db_);
}

namespace {
// SQLite's message, and for a failed read or write the system's cause in
// words ("disk full (No space left on device)").
std::string WithSystemError(sqlite3* db, int rc, std::string msg) {
  const int primary = rc & 0xff;
  const int err =
      db && (primary == SQLITE_IOERR || primary == SQLITE_FULL) ? sqlite3_system_errno(db) : 0;
  return err != 0 ? msg + "; " + WriteFailure(err) : msg;
}
}  // namespace

void Db::Fail(int rc, std::string_view doing) const {
  std::string msg = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
  throw SqliteError(path_, rc, WithSystemError(db_, rc, msg), doing);
}

void Db::Exec(std::string_view sql, std::string_view doing) {
  std::string text(sql);
  char* err = nullptr;
  const int rc = sqlite3_exec(db_, text.c_str(), nullptr, nullptr, &err);
  if (rc != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errstr(rc);
    sqlite3_free(err);
    throw SqliteError(path_, rc, WithSystemError(db_, rc, msg), doing);
  }
}

Statement Db::Prepare(std::string_view sql, std::string_view* tail) const {
  sqlite3_stmt* stmt = nullptr;
  const char* rest = nullptr;
  const int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()),
                                    SQLITE_PREPARE_PERSISTENT, &stmt, &rest);
  if (rc != SQLITE_OK) {
    std::string shown(sql.substr(0, 120));
    Fail(rc, fmt::format("preparing '{}'", shown));
  }
  if (tail) *tail = rest ? sql.substr(static_cast<size_t>(rest - sql.data())) : std::string_view();
  return Statement(this, stmt);
}

int64_t Db::QueryInt(std::string_view sql) const {
  Statement s = Prepare(sql);
  if (!s.Step()) return 0;
  return s.Int(0);
}

std::string Db::QueryText(std::string_view sql) const {
  Statement s = Prepare(sql);
  if (!s.Step()) return "";
  return s.Text(0);
}

int64_t Db::LastInsertRowid() const { return sqlite3_last_insert_rowid(db_); }
int Db::Changes() const { return sqlite3_changes(db_); }
void Db::SetBusyTimeout(int ms) { sqlite3_busy_timeout(db_, ms); }
bool Db::InTransaction() const { return sqlite3_get_autocommit(db_) == 0; }
void Db::RollbackQuietly() noexcept {
  if (db_ && InTransaction()) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
}

}  // namespace rlid::memory

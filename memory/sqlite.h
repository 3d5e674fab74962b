// A thin RAII layer over the SQLite C API: a connection (Db) and prepared
// statements (Statement) with typed binding. Every SQLite failure becomes an
// IoError that names the database file, says what rlid was doing, and hints at
// the usual cause (locked, not a database, disk full, read-only). User data is
// always bound as a parameter, never spliced into SQL text.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/error.h"

struct sqlite3;
struct sqlite3_stmt;

namespace rlid::memory {

class Db;

// A prepared statement. Parameters bind by name (":name", preferred: no
// column can shift) or by 1-based index; column indices are 0-based.
class Statement {
 public:
  Statement() = default;
  Statement(const Db* db, sqlite3_stmt* stmt) : db_(db), stmt_(stmt) {}
  ~Statement();
  Statement(Statement&& o) noexcept;
  Statement& operator=(Statement&& o) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  Statement& Bind(int index, int64_t value);
  Statement& Bind(int index, int value) { return Bind(index, static_cast<int64_t>(value)); }
  Statement& Bind(int index, bool value) { return Bind(index, static_cast<int64_t>(value)); }
  // Non-finite values (NaN = "not applicable") are stored as NULL.
  Statement& Bind(int index, double value);
  Statement& Bind(int index, std::string_view value);
  Statement& Bind(int index, const char* value) { return Bind(index, std::string_view(value)); }
  Statement& Bind(int index, const std::string& value) {
    return Bind(index, std::string_view(value));
  }
  Statement& BindNull(int index);
  template <class T>
  Statement& Bind(int index, const std::optional<T>& value) {
    return value ? Bind(index, *value) : BindNull(index);
  }
  // The same by parameter name (":column", "?1"): InternalError when the
  // statement has no such parameter, so a renamed column fails loudly.
  template <class T>
  Statement& Bind(const char* name, const T& value) {
    return Bind(ParameterIndex(name), value);
  }
  Statement& BindNull(const char* name) { return BindNull(ParameterIndex(name)); }
  int ParameterIndex(const char* name) const;

  // Advances; true when a row is available, false when done. Throws IoError.
  bool Step();
  // Steps to completion (for statements without result rows) and resets.
  void Run();
  // Resets for re-execution and clears bindings.
  void Reset();

  int ColumnCount() const;
  std::string ColumnName(int col) const;
  // SQLITE_INTEGER, SQLITE_FLOAT, SQLITE_TEXT, SQLITE_BLOB or SQLITE_NULL.
  int ColumnType(int col) const;
  bool IsNull(int col) const;
  int64_t Int(int col) const;
  double Double(int col) const;  // NaN for NULL
  std::string Text(int col) const;
  std::string Blob(int col) const;
  // True when the statement cannot change the database (sqlite3_stmt_readonly).
  bool ReadOnly() const;
  std::string Sql() const;
  sqlite3_stmt* handle() const { return stmt_; }

 private:
  void CheckBind(int rc, int index);
  const Db* db_ = nullptr;
  sqlite3_stmt* stmt_ = nullptr;
};

// One connection. Neither copyable nor movable (statements point at it).
// Thread-safety: callers serialise use.
class Db {
 public:
  // flags: SQLITE_OPEN_* (READONLY or READWRITE|CREATE). Throws IoError.
  // `uri` (with SQLITE_OPEN_URI) is opened instead of `path` when given;
  // messages always name `path`.
  Db(std::string path, int flags, const std::string& uri = {});
  ~Db();
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  // Runs static SQL (one or more statements, no parameters, no result rows used).
  void Exec(std::string_view sql, std::string_view doing = "running SQL");
  // Compiles the first statement of `sql`; `tail` (if given) receives the rest.
  Statement Prepare(std::string_view sql, std::string_view* tail = nullptr) const;
  // Runs a statement that returns one integer (e.g. "SELECT COUNT(*) ...").
  int64_t QueryInt(std::string_view sql) const;
  std::string QueryText(std::string_view sql) const;
  int64_t LastInsertRowid() const;
  int Changes() const;
  void SetBusyTimeout(int ms);
  // True inside an open transaction.
  bool InTransaction() const;
  // Rolls back the open transaction, if any; never throws (for error paths).
  void RollbackQuietly() noexcept;

  // Throws the IoError that describes SQLite result code `rc` while `doing`.
  [[noreturn]] void Fail(int rc, std::string_view doing) const;
  const std::string& path() const { return path_; }
  sqlite3* handle() const { return db_; }

 private:
  std::string path_;
  sqlite3* db_ = nullptr;
};

// The IoError for an SQLite failure (exposed for messages built elsewhere).
IoError SqliteError(const std::string& path, int rc, std::string_view message,
                    std::string_view doing);

}  // namespace rlid::memory

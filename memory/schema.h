// The rlid database schema as an ordered list of forward migrations. Each
// migration runs once, in its own transaction, and records itself in
// `rlid_schema`; the schema version of a database is MAX(rlid_schema.version).
// A database whose version is newer than kSchemaVersion is refused (an older
// rlid must not write tables it does not understand).
#pragma once

#include <string>
#include <vector>

namespace rlid::memory {

class Db;

struct Migration {
  int version;
  const char* description;
  const char* sql;
  // Runs after `sql` inside the migration's transaction (schema edits SQL alone cannot do).
  void (*after)(Db& db) = nullptr;
};

// 'rlid' in ASCII: PRAGMA application_id of every rlid database.
inline constexpr int kApplicationId = 0x726c6964;

// All migrations in order; versions are 1, 2, ... without gaps.
const std::vector<Migration>& Migrations();
// The version this build writes (the last migration's).
int LatestSchemaVersion();

// Version of an open database: 0 for an empty database, -1 when the file has
// tables but no rlid_schema (not an rlid database).
int SchemaVersionOf(const Db& db);
// Applies migrations (current, target] each in an IMMEDIATE transaction.
// target <= LatestSchemaVersion(); tests use a lower target to build old files.
void Migrate(Db& db, int target);

// Names of the documented views (v_step_provenance, ...), for tests and docs.
std::vector<std::string> ViewNames();

// A table rlid inserts rows into: the columns it writes, each bound by name
// (":column"), and those it leaves to the schema (defaults, auto ids, later
// UPDATEs). A test checks that together they are exactly the table's columns
// in the latest schema, so a column added there and not carried through here
// fails a test instead of shifting values.
struct TableWrite {
  std::string table;
  std::vector<std::string> written, defaulted;
};
// Every table rlid inserts rows into.
const std::vector<TableWrite>& TableWrites();
// "INSERT [OR IGNORE] INTO table(c, ...) VALUES (:c, ...)" over TableWrites()'
// written columns of `table`.
std::string InsertSql(const std::string& table, bool or_ignore = false);

}  // namespace rlid::memory

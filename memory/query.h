// Read-only SQL over an rlid database and the three ways `rlid sql` prints a
// result: an aligned text table, CSV (RFC 4180) and JSON (an array of row
// objects). Kept here, free of CLI code, so it is tested without LibTorch.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace rlid::memory {

class Db;

struct Blob {
  std::string bytes;
};
// NULL, INTEGER, REAL, TEXT, BLOB.
using Value = std::variant<std::monostate, int64_t, double, std::string, Blob>;

struct QueryResult {
  std::vector<std::string> columns;
  std::vector<std::vector<Value>> rows;
};

// Runs exactly one statement that does not modify the database. A statement
// that would write, more than one statement, or an empty string is a
// ConfigError saying so; SQL errors (syntax, unknown table) are ConfigErrors
// with SQLite's message; lock/IO failures are IoErrors.
QueryResult RunReadOnlyQuery(const Db& db, std::string_view sql);

// Aligned table with a header rule and "(N rows)". Cells longer than
// max_width characters (0 = unlimited) are cut with "..."; newlines and tabs
// are shown as "\n" and "\t"; NULL prints as NULL.
std::string FormatTable(const QueryResult& r, size_t max_width = 60);
// Header row, then rows; NULL is an empty field; reals in shortest round-trip form.
std::string FormatCsv(const QueryResult& r);
// [{"col": value, ...}, ...]; NULL -> null, BLOB -> hex string.
std::string FormatJson(const QueryResult& r);

}  // namespace rlid::memory

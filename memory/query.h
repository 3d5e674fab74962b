// Read-only SQL over an rlid database and the three ways `rlid sql` prints a
// result: an aligned text table, CSV (RFC 4180) and JSON (an array of row
// objects). Rows stream from sqlite3_step to a RowSink, so memory stays
// bounded however many rows a query yields; limits stop a query on time, row
// count or SQLite heap. Kept here, free of CLI code, so it is tested without
// LibTorch.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <limits>
#include <memory>
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
// An INTEGER or REAL value as a double; NaN for NULL, text and blobs.
double NumericValue(const Value& v);

struct QueryResult {
  std::vector<std::string> columns;
  std::vector<std::vector<Value>> rows;
};

// Receives a result as it is stepped: Begin once (after the first step, so a
// statement that fails at once prints nothing), Row per row, End once.
class RowSink {
 public:
  virtual ~RowSink() = default;
  virtual void Begin(const std::vector<std::string>& columns) = 0;
  virtual void Row(const std::vector<Value>& row) = 0;
  // `cut`: the query stopped before its last row (a limit or an SQL error);
  // what was written stays well-formed.
  virtual void End(bool cut) = 0;
};

// Each limit is off at 0.
struct QueryLimits {
  // Wall-clock seconds from the first step, checked by an SQLite progress
  // handler (every 1000 VM instructions) and after each row.
  double timeout_s = 0;
  int64_t max_rows = 0;
  // sqlite3_hard_heap_limit64 while stepping. The limit is process-wide (all
  // connections); the previous one is restored afterwards. Also sets
  // temp_store = MEMORY on the connection, so sorts and temporary tables count
  // against it instead of growing temporary files without bound.
  int64_t max_memory_bytes = 0;
};

// Why a query ended. A stop is an outcome, not an error: the caller names the
// limit (and its flag) in its message.
enum class QueryStop { kDone, kTimeout, kMaxRows, kMemory };

struct QueryOutcome {
  QueryStop stop = QueryStop::kDone;
  int64_t rows = 0;  // rows handed to the sink
  double seconds = 0;
};

// Runs exactly one statement that only reads. Allowed: SELECT / WITH (also
// recursive) over tables and views, functions other than fts3_tokenizer and
// load_extension, and PRAGMAs that report (table_info(t), integrity_check,
// user_version, ... without "= value"). Refused with a ConfigError saying rlid
// sql is read-only (enforced by an SQLite authorizer while the statement is
// prepared and stepped): writes, schema changes, ATTACH/DETACH, transactions,
// and any PRAGMA that sets something (PRAGMA query_only = 0). More than one
// statement or an empty string is a ConfigError saying so; SQL errors (syntax,
// unknown table) are ConfigErrors with SQLite's message; lock/IO failures are
// IoErrors. After an error in a later step the sink is ended with cut = true
// before the error is thrown.
QueryOutcome StreamReadOnlyQuery(const Db& db, std::string_view sql, RowSink& sink,
                                 const QueryLimits& limits = {});
// StreamReadOnlyQuery without limits, collecting every row (for results known
// to be small).
QueryResult RunReadOnlyQuery(const Db& db, std::string_view sql);

// Aligned table with a header rule and "(N rows)". Column widths and
// alignment (right for numeric columns) come from the first `width_rows` rows
// (or fewer when they reach 16 MB of text), which are buffered; later rows are
// printed as they come, wider cells shifting the line. Widths count code
// points, each byte of invalid UTF-8 as one (core/utf8.h). Cells longer than
// max_width characters (0 = unlimited) are cut with "..."; newlines and tabs
// are shown as "\n" and "\t"; NULL prints as NULL. A cut result ends with
// "(N rows before the query stopped)".
std::unique_ptr<RowSink> MakeTableWriter(std::ostream& out, size_t max_width = 60,
                                         size_t width_rows = 1000);
// Header row, then rows; NULL is an empty field; reals in shortest round-trip
// form. Every row written is complete, cut or not.
std::unique_ptr<RowSink> MakeCsvWriter(std::ostream& out);
// [{"col": value, ...}, ...]; NULL -> null, BLOB -> hex string. The array is
// closed when cut, so the output is always valid JSON (once Begin was called).
std::unique_ptr<RowSink> MakeJsonWriter(std::ostream& out);

// The writers above applied to a whole result (the table sizes every column
// over all rows).
std::string FormatTable(const QueryResult& r, size_t max_width = 60);
std::string FormatCsv(const QueryResult& r);
std::string FormatJson(const QueryResult& r);

}  // namespace rlid::memory

// Read-only query execution (authorizer, limits, streaming) and result
// formatting for `rlid sql`.
#include "memory/query.h"

#include <fmt/format.h>

#include <cmath>
#include <sqlite3.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <nlohmann/json.hpp>
#include <ostream>
#include <sstream>

#include "core/error.h"
#include "core/utf8.h"
#include "memory/sqlite.h"

namespace rlid::memory {
namespace {

constexpr const char* kSchemaHint =
    "list tables and views with: SELECT type, name FROM sqlite_master ORDER BY type, name";

std::string Shorten(std::string_view sql) {
  std::string s(sql.substr(0, std::min<size_t>(sql.size(), 80)));
  std::replace(s.begin(), s.end(), '\n', ' ');
  return sql.size() > 80 ? s + "..." : s;
}

constexpr const char* kReadOnlyHint =
    "rlid sql only runs queries (SELECT, WITH, PRAGMAs that report without '= value'); to "
    "change data, copy the file and use sqlite3 on the copy";

// PRAGMAs that only report, with no argument (an argument would set them).
// journal_mode is missing: even without an argument SQLite counts it as a write.
constexpr std::array<std::string_view, 39> kReportingPragmas = {
    "application_id",     "auto_vacuum",      "busy_timeout",       "cache_size",
    "cache_spill",        "cell_size_check",  "collation_list",     "compile_options",
    "data_version",       "database_list",    "defer_foreign_keys", "encoding",
    "foreign_key_check",  "foreign_key_list", "foreign_keys",       "freelist_count",
    "function_list",      "hard_heap_limit",  "integrity_check",    "journal_size_limit",
    "legacy_alter_table", "locking_mode",     "max_page_count",     "mmap_size",
    "module_list",        "page_count",       "page_size",          "pragma_list",
    "query_only",         "quick_check",      "read_uncommitted",   "recursive_triggers",
    "schema_version",     "secure_delete",    "soft_heap_limit",    "synchronous",
    "table_list",         "temp_store",       "user_version"};
// PRAGMAs whose argument names what to report on (a table, an index, a count).
constexpr std::array<std::string_view, 10> kObjectPragmas = {
    "foreign_key_check", "foreign_key_list", "index_info", "index_list", "index_xinfo",
    "integrity_check",   "quick_check",      "table_info", "table_list", "table_xinfo"};

bool Contains(const auto& list, std::string_view name) {
  return std::find(list.begin(), list.end(), name) != list.end();
}

std::string Lower(const char* s) {
  std::string out = s ? s : "";
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

bool IsSchemaTable(std::string_view t) {
  return t == "sqlite_master" || t == "sqlite_schema" || t == "sqlite_temp_master" ||
         t == "sqlite_temp_schema";
}

// What a denied action would have done, for the message ("" = allowed).
std::string Refusal(int action, const char* a1, const char* a2) {
  const std::string x = a1 ? a1 : "", y = a2 ? a2 : "";
  switch (action) {
    case SQLITE_SELECT:
    case SQLITE_READ:
    case SQLITE_RECURSIVE:
      return "";
    case SQLITE_FUNCTION: {
      const std::string f = Lower(a2);
      if (f == "fts3_tokenizer") return "call fts3_tokenizer (it reads and sets C pointers)";
      if (f == "load_extension") return "load an extension";
      return "";
    }
    case SQLITE_PRAGMA: {
      const std::string name = Lower(a1);
      if (a2 == nullptr ? Contains(kReportingPragmas, name) : Contains(kObjectPragmas, name))
        return "";
      return a2 ? fmt::format("set PRAGMA {} = {}", name, y)
                : fmt::format("run PRAGMA {} (not a reporting PRAGMA)", name);
    }
    case SQLITE_UPDATE:
      // SQLite reports an UPDATE of sqlite_master's columns while it declares
      // an eponymous virtual table (json_each, pragma_table_info, dbstat) for a
      // SELECT. A real UPDATE of sqlite_master is still refused: it is not a
      // read-only statement, and the connection is read-only and defensive.
      if (IsSchemaTable(x)) return "";
      return fmt::format("modify it (update {}.{})", x, y);
    case SQLITE_INSERT:
      return IsSchemaTable(x) ? "modify it (change the schema)"
                              : "modify it (insert into " + x + ")";
    case SQLITE_DELETE:
      return IsSchemaTable(x) ? "modify it (change the schema)"
                              : "modify it (delete from " + x + ")";
    case SQLITE_CREATE_INDEX:
    case SQLITE_CREATE_TABLE:
    case SQLITE_CREATE_TEMP_INDEX:
    case SQLITE_CREATE_TEMP_TABLE:
    case SQLITE_CREATE_TEMP_TRIGGER:
    case SQLITE_CREATE_TEMP_VIEW:
    case SQLITE_CREATE_TRIGGER:
    case SQLITE_CREATE_VIEW:
    case SQLITE_CREATE_VTABLE:
      return "modify it (create " + x + ")";
    case SQLITE_DROP_INDEX:
    case SQLITE_DROP_TABLE:
    case SQLITE_DROP_TEMP_INDEX:
    case SQLITE_DROP_TEMP_TABLE:
    case SQLITE_DROP_TEMP_TRIGGER:
    case SQLITE_DROP_TEMP_VIEW:
    case SQLITE_DROP_TRIGGER:
    case SQLITE_DROP_VIEW:
    case SQLITE_DROP_VTABLE:
      return "modify it (drop " + x + ")";
    case SQLITE_ALTER_TABLE:
      return "modify it (alter table " + y + ")";
    case SQLITE_REINDEX:
      return "modify it (reindex)";
    case SQLITE_ANALYZE:
      return "modify it (analyze writes sqlite_stat tables)";
    case SQLITE_ATTACH:
      return "attach a database";
    case SQLITE_DETACH:
      return "detach a database";
    case SQLITE_TRANSACTION:
      return "control a transaction";
    case SQLITE_SAVEPOINT:
      return "control a savepoint";
    default:
      return fmt::format("perform SQLite action {}", action);
  }
}

// Installed for one statement's prepare and steps; records the first refusal.
struct Authorizer {
  std::string refused;
  static int Callback(void* self, int action, const char* a1, const char* a2, const char*,
                      const char*) {
    std::string why = Refusal(action, a1, a2);
    if (why.empty()) return SQLITE_OK;
    auto* a = static_cast<Authorizer*>(self);
    if (a->refused.empty()) a->refused = std::move(why);
    return SQLITE_DENY;
  }
};

[[noreturn]] void ThrowRefused(std::string_view what, std::string_view sql) {
  throw ConfigError(fmt::format("the database is opened read-only; this statement would {}, so "
                                "rlid sql refuses it: '{}'",
                                what, Shorten(sql)),
                    kReadOnlyHint);
}

// Prepares the first statement of `sql` (nullptr stmt when only comments/space).
sqlite3_stmt* PrepareUser(const Db& db, std::string_view sql, std::string_view* tail,
                          const Authorizer& auth) {
  sqlite3_stmt* stmt = nullptr;
  const char* rest = nullptr;
  const int rc =
      sqlite3_prepare_v2(db.handle(), sql.data(), static_cast<int>(sql.size()), &stmt, &rest);
  if (rc != SQLITE_OK) {
    const int primary = rc & 0xff;
    std::string msg = sqlite3_errmsg(db.handle());
    if (!auth.refused.empty()) ThrowRefused(auth.refused, sql);
    if (primary == SQLITE_ERROR)
      throw ConfigError(fmt::format("SQL error: {} in '{}'", msg, Shorten(sql)), kSchemaHint);
    throw SqliteError(db.path(), rc, msg, "preparing the query");
  }
  *tail = rest ? sql.substr(static_cast<size_t>(rest - sql.data())) : std::string_view();
  return stmt;
}

Value ColumnValue(sqlite3_stmt* s, int col) {
  switch (sqlite3_column_type(s, col)) {
    case SQLITE_INTEGER:
      return sqlite3_column_int64(s, col);
    case SQLITE_FLOAT:
      return sqlite3_column_double(s, col);
    case SQLITE_TEXT: {
      const auto* p = reinterpret_cast<const char*>(sqlite3_column_text(s, col));
      return std::string(p, static_cast<size_t>(sqlite3_column_bytes(s, col)));
    }
    case SQLITE_BLOB: {
      const auto* p = static_cast<const char*>(sqlite3_column_blob(s, col));
      return Blob{std::string(p ? p : "", static_cast<size_t>(sqlite3_column_bytes(s, col)))};
    }
    default:
      return std::monostate{};
  }
}

// Lowercase hex of the first `limit` bytes (all by default).
std::string Hex(std::string_view bytes, size_t limit = std::string_view::npos) {
  static constexpr char kDigits[] = "0123456789abcdef";
  bytes = bytes.substr(0, limit);
  std::string out(2 * bytes.size(), '\0');
  for (size_t i = 0; i < bytes.size(); ++i) {
    const auto c = static_cast<unsigned char>(bytes[i]);
    out[2 * i] = kDigits[c >> 4];
    out[2 * i + 1] = kDigits[c & 15];
  }
  return out;
}

// Text of a value; `table` selects the short real format (6 significant digits).
std::string ValueText(const Value& v, bool table) {
  return std::visit(
      [&](const auto& x) -> std::string {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>) {
          return table ? "NULL" : "";
        } else if constexpr (std::is_same_v<T, int64_t>) {
          return fmt::format("{}", x);
        } else if constexpr (std::is_same_v<T, double>) {
          return table ? fmt::format("{:.6g}", x) : fmt::format("{}", x);
        } else if constexpr (std::is_same_v<T, std::string>) {
          return x;
        } else {
          return "x'" + Hex(x.bytes) + "'";
        }
      },
      v);
}

std::string TableCell(const Value& v, size_t max_width) {
  const bool cut = max_width > 3;
  // Only what the cut cell can show is formatted: a 100 MB blob or text costs
  // as much as a short one (a whole blob in hex took seconds; found by fuzz/sql_fuzz).
  std::string raw;
  if (const auto* b = std::get_if<Blob>(&v); b && cut) {
    raw = "x'" + Hex(b->bytes, max_width / 2 + 1) + (2 * b->bytes.size() + 3 > max_width ? "..." : "'");
  } else if (const auto* text = std::get_if<std::string>(&v); text && cut) {
    raw = std::string(Utf8Prefix(*text, max_width + 1));
  } else {
    raw = ValueText(v, true);
  }
  std::string out;
  for (char c : raw) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\r')
      out += "\\r";
    else
      out += c;
  }
  if (cut && Utf8Length(out) > max_width) out = std::string(Utf8Prefix(out, max_width - 3)) + "...";
  return out;
}

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

// Buffers the first rows to size the columns, then streams.
class TableWriter : public RowSink {
 public:
  TableWriter(std::ostream& out, size_t max_width, size_t width_rows, size_t width_bytes)
      : out_(out), max_width_(max_width), width_rows_(width_rows), width_bytes_(width_bytes) {}

  void Begin(const std::vector<std::string>& columns) override {
    columns_ = columns;
    numeric_.assign(columns.size(), true);
    for (const auto& c : columns) width_.push_back(Utf8Length(c));
  }

  void Row(const std::vector<Value>& row) override {
    ++rows_;
    std::vector<std::string> line;
    line.reserve(row.size());
    for (const Value& v : row) line.push_back(TableCell(v, max_width_));
    if (flushed_) {
      out_ << LineOf(line);
      return;
    }
    for (size_t c = 0; c < line.size(); ++c) {
      width_[c] = std::max(width_[c], Utf8Length(line[c]));
      buffered_bytes_ += line[c].size();
      numeric_[c] = numeric_[c] && (std::holds_alternative<int64_t>(row[c]) ||
                                    std::holds_alternative<double>(row[c]) ||
                                    std::holds_alternative<std::monostate>(row[c]));
    }
    buffered_.push_back(std::move(line));
    if (buffered_.size() >= width_rows_ || buffered_bytes_ >= width_bytes_) Flush();
  }

  void End(bool cut) override {
    Flush();
    out_ << fmt::format("({} row{}{})\n", rows_, rows_ == 1 ? "" : "s",
                        cut ? " before the query stopped" : "");
  }

 private:
  std::string LineOf(const std::vector<std::string>& fields) const {
    std::string text;
    for (size_t c = 0; c < fields.size(); ++c) {
      const size_t len = Utf8Length(fields[c]);
      const std::string fill(width_[c] > len ? width_[c] - len : 0, ' ');
      text += (c ? "  " : "") + (numeric_[c] ? fill + fields[c] : fields[c] + fill);
    }
    while (!text.empty() && text.back() == ' ') text.pop_back();
    return text + "\n";
  }

  void Flush() {
    if (flushed_) return;
    flushed_ = true;
    out_ << LineOf(columns_);
    std::string rule;
    for (size_t c = 0; c < width_.size(); ++c)
      rule += (c ? "  " : "") + std::string(width_[c], '-');
    out_ << rule << "\n";
    for (const auto& line : buffered_) out_ << LineOf(line);
    buffered_ = {};
  }

  std::ostream& out_;
  const size_t max_width_, width_rows_, width_bytes_;
  std::vector<std::string> columns_;
  std::vector<size_t> width_;
  std::vector<bool> numeric_;
  std::vector<std::vector<std::string>> buffered_;
  size_t buffered_bytes_ = 0;
  bool flushed_ = false;
  int64_t rows_ = 0;
};

class CsvWriter : public RowSink {
 public:
  explicit CsvWriter(std::ostream& out) : out_(out) {}
  void Begin(const std::vector<std::string>& columns) override {
    std::string line;
    for (size_t c = 0; c < columns.size(); ++c) line += (c ? "," : "") + CsvField(columns[c]);
    out_ << line << "\n";
  }
  void Row(const std::vector<Value>& row) override {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c)
      line += (c ? "," : "") + CsvField(ValueText(row[c], false));
    out_ << line << "\n";
  }
  void End(bool) override {}

 private:
  std::ostream& out_;
};

// Writes the array element by element in nlohmann's dump(2) layout.
class JsonWriter : public RowSink {
 public:
  explicit JsonWriter(std::ostream& out) : out_(out) {}
  void Begin(const std::vector<std::string>& columns) override { columns_ = columns; }
  void Row(const std::vector<Value>& row) override {
    nlohmann::ordered_json obj = nlohmann::ordered_json::object();
    for (size_t c = 0; c < row.size(); ++c) {
      nlohmann::ordered_json v;
      std::visit(
          [&](const auto& x) {
            using T = std::decay_t<decltype(x)>;
            if constexpr (std::is_same_v<T, std::monostate>)
              v = nullptr;
            else if constexpr (std::is_same_v<T, Blob>)
              v = Hex(x.bytes);
            else
              v = x;
          },
          row[c]);
      obj[columns_[c]] = std::move(v);
    }
    // Invalid UTF-8 in stored text is replaced rather than aborting the dump.
    // The dump has no raw newline inside strings, so indenting every line is safe.
    const std::string text =
        obj.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
    std::string indented = rows_++ ? ",\n  " : "[\n  ";
    for (char ch : text) indented += ch == '\n' ? std::string("\n  ") : std::string(1, ch);
    out_ << indented;
  }
  void End(bool) override { out_ << (rows_ ? "\n]\n" : "[]\n"); }

 private:
  std::ostream& out_;
  std::vector<std::string> columns_;
  int64_t rows_ = 0;
};

class Collector : public RowSink {
 public:
  explicit Collector(QueryResult* out) : out_(out) {}
  void Begin(const std::vector<std::string>& columns) override { out_->columns = columns; }
  void Row(const std::vector<Value>& row) override { out_->rows.push_back(row); }
  void End(bool) override {}

 private:
  QueryResult* out_;
};

using Clock = std::chrono::steady_clock;

// The connection state one query changes (authorizer, progress handler, heap
// limit), restored on every exit path.
class QueryScope {
 public:
  QueryScope(const Db& db, Authorizer* auth) : db_(db.handle()) {
    sqlite3_set_authorizer(db_, &Authorizer::Callback, auth);
  }
  ~QueryScope() {
    sqlite3_set_authorizer(db_, nullptr, nullptr);
    sqlite3_progress_handler(db_, 0, nullptr, nullptr);
    if (heap_limited_) sqlite3_hard_heap_limit64(previous_heap_limit_);
  }
  QueryScope(const QueryScope&) = delete;
  QueryScope& operator=(const QueryScope&) = delete;

  void SetDeadline(Clock::time_point deadline) {
    deadline_ = deadline;
    sqlite3_progress_handler(db_, 1000, &QueryScope::Progress, this);
  }
  void SetHeapLimit(int64_t bytes) {
    previous_heap_limit_ = sqlite3_hard_heap_limit64(bytes);
    heap_limited_ = true;
  }
  bool Expired() {
    timed_out_ = timed_out_ || Clock::now() >= deadline_;
    return timed_out_;
  }
  bool timed_out() const { return timed_out_; }
  bool heap_limited() const { return heap_limited_; }

 private:
  static int Progress(void* self) { return static_cast<QueryScope*>(self)->Expired() ? 1 : 0; }
  sqlite3* db_;
  Clock::time_point deadline_ = Clock::time_point::max();
  bool timed_out_ = false, heap_limited_ = false;
  int64_t previous_heap_limit_ = 0;
};

}  // namespace

double NumericValue(const Value& v) {
  if (auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  if (auto* d = std::get_if<double>(&v)) return *d;
  return std::nan("");
}

QueryOutcome StreamReadOnlyQuery(const Db& db, std::string_view sql, RowSink& sink,
                                 const QueryLimits& limits) {
  // (Changing temp_store drops every temporary object, the views that join a
  // sharded run's files included: set it only when it differs.)
  if (limits.max_memory_bytes > 0 && db.QueryInt("PRAGMA temp_store") != 2)
    sqlite3_exec(db.handle(), "PRAGMA temp_store = MEMORY", nullptr, nullptr, nullptr);
  Authorizer auth;
  QueryScope scope(db, &auth);  // outlives the statement
  std::string_view tail;
  sqlite3_stmt* raw = PrepareUser(db, sql, &tail, auth);
  if (!raw)
    throw ConfigError("no SQL statement given", "for example: \"SELECT * FROM v_run_budget\"");
  Statement stmt(&db, raw);  // finalises on every path
  std::string_view rest;
  if (sqlite3_stmt* extra = PrepareUser(db, tail, &rest, auth)) {
    sqlite3_finalize(extra);
    throw ConfigError(
        fmt::format("expected one SQL statement, found another after it: '{}'", Shorten(tail)),
        "run one statement per call (a trailing ';' is fine)");
  }
  if (!stmt.ReadOnly()) ThrowRefused("modify it", sql);
  std::vector<std::string> columns;
  for (int c = 0; c < sqlite3_column_count(raw); ++c) {
    const char* name = sqlite3_column_name(raw, c);
    columns.push_back(name ? name : "");
  }

  const Clock::time_point start = Clock::now();
  if (limits.timeout_s > 0)
    scope.SetDeadline(start + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(limits.timeout_s)));
  if (limits.max_memory_bytes > 0) scope.SetHeapLimit(limits.max_memory_bytes);
  QueryOutcome outcome;
  bool begun = false;
  auto finish = [&](QueryStop stop) {
    if (!begun) sink.Begin(columns);
    sink.End(stop != QueryStop::kDone);
    outcome.stop = stop;
    outcome.seconds = std::chrono::duration<double>(Clock::now() - start).count();
    return outcome;
  };
  std::vector<Value> row(columns.size());
  while (true) {
    const int rc = sqlite3_step(raw);
    if (rc == SQLITE_DONE) return finish(QueryStop::kDone);
    if (rc != SQLITE_ROW) {
      const int primary = rc & 0xff;
      if (primary == SQLITE_INTERRUPT && scope.timed_out()) return finish(QueryStop::kTimeout);
      if (primary == SQLITE_NOMEM && scope.heap_limited()) return finish(QueryStop::kMemory);
      std::string msg = sqlite3_errmsg(db.handle());
      if (begun) sink.End(true);
      if (!auth.refused.empty()) ThrowRefused(auth.refused, sql);
      if (primary == SQLITE_ERROR || primary == SQLITE_READONLY || primary == SQLITE_CONSTRAINT)
        throw ConfigError(fmt::format("SQL error: {} in '{}'", msg, Shorten(sql)), kSchemaHint);
      throw SqliteError(db.path(), rc, msg, "running the query");
    }
    if (limits.max_rows > 0 && outcome.rows == limits.max_rows) return finish(QueryStop::kMaxRows);
    if (limits.timeout_s > 0 && scope.Expired()) return finish(QueryStop::kTimeout);
    if (!begun) {
      sink.Begin(columns);
      begun = true;
    }
    for (size_t c = 0; c < row.size(); ++c) row[c] = ColumnValue(raw, static_cast<int>(c));
    sink.Row(row);
    ++outcome.rows;
  }
}

QueryResult RunReadOnlyQuery(const Db& db, std::string_view sql) {
  QueryResult out;
  Collector sink(&out);
  StreamReadOnlyQuery(db, sql, sink);
  return out;
}

std::unique_ptr<RowSink> MakeTableWriter(std::ostream& out, size_t max_width, size_t width_rows) {
  return std::make_unique<TableWriter>(out, max_width, width_rows, size_t{16} << 20);
}
std::unique_ptr<RowSink> MakeCsvWriter(std::ostream& out) {
  return std::make_unique<CsvWriter>(out);
}
std::unique_ptr<RowSink> MakeJsonWriter(std::ostream& out) {
  return std::make_unique<JsonWriter>(out);
}

namespace {
std::string Write(RowSink&& sink, const std::ostringstream& text, const QueryResult& r) {
  sink.Begin(r.columns);
  for (const auto& row : r.rows) sink.Row(row);
  sink.End(false);
  return text.str();
}
}  // namespace

std::string FormatTable(const QueryResult& r, size_t max_width) {
  std::ostringstream text;
  constexpr size_t kAll = std::numeric_limits<size_t>::max();
  return Write(TableWriter(text, max_width, kAll, kAll), text, r);
}
std::string FormatCsv(const QueryResult& r) {
  std::ostringstream text;
  return Write(CsvWriter(text), text, r);
}
std::string FormatJson(const QueryResult& r) {
  std::ostringstream text;
  return Write(JsonWriter(text), text, r);
}

}  // namespace rlid::memory

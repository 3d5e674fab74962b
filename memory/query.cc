// Read-only query execution and result formatting for `rlid sql`.
#include "memory/query.h"

#include <fmt/format.h>
#include <sqlite3.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/error.h"
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

// Prepares the first statement of `sql` (nullptr stmt when only comments/space).
sqlite3_stmt* PrepareUser(const Db& db, std::string_view sql, std::string_view* tail) {
  sqlite3_stmt* stmt = nullptr;
  const char* rest = nullptr;
  const int rc =
      sqlite3_prepare_v2(db.handle(), sql.data(), static_cast<int>(sql.size()), &stmt, &rest);
  if (rc != SQLITE_OK) {
    const int primary = rc & 0xff;
    std::string msg = sqlite3_errmsg(db.handle());
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

std::string Hex(const std::string& bytes) {
  std::string out;
  for (unsigned char c : bytes) out += fmt::format("{:02x}", c);
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

bool IsUtf8Continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

size_t Utf8Length(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += !IsUtf8Continuation(c);
  return n;
}

// The first `chars` code points of s.
std::string Utf8Prefix(std::string_view s, size_t chars) {
  size_t i = 0, seen = 0;
  for (; i < s.size(); ++i) {
    if (!IsUtf8Continuation(static_cast<unsigned char>(s[i]))) {
      if (seen == chars) break;
      ++seen;
    }
  }
  return std::string(s.substr(0, i));
}

std::string TableCell(const Value& v, size_t max_width) {
  std::string raw = ValueText(v, true), out;
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
  if (max_width > 3 && Utf8Length(out) > max_width) out = Utf8Prefix(out, max_width - 3) + "...";
  return out;
}

std::string CsvField(const std::string& s) {
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string out = "\"";
  for (char c : s) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}

}  // namespace

QueryResult RunReadOnlyQuery(const Db& db, std::string_view sql) {
  std::string_view tail;
  sqlite3_stmt* raw = PrepareUser(db, sql, &tail);
  if (!raw)
    throw ConfigError("no SQL statement given", "for example: \"SELECT * FROM v_run_budget\"");
  Statement stmt(&db, raw);  // finalises on every path
  std::string_view rest;
  if (sqlite3_stmt* extra = PrepareUser(db, tail, &rest)) {
    sqlite3_finalize(extra);
    throw ConfigError(
        fmt::format("expected one SQL statement, found another after it: '{}'", Shorten(tail)),
        "run one statement per call (a trailing ';' is fine)");
  }
  if (!stmt.ReadOnly())
    throw ConfigError(fmt::format("the database is opened read-only; this statement would "
                                  "modify it: '{}'",
                                  Shorten(sql)),
                      "rlid sql only runs queries (SELECT, WITH, read-only PRAGMA); to change "
                      "data, copy the file and use sqlite3 on the copy");
  QueryResult out;
  for (int c = 0; c < sqlite3_column_count(raw); ++c) {
    const char* name = sqlite3_column_name(raw, c);
    out.columns.push_back(name ? name : "");
  }
  while (true) {
    const int rc = sqlite3_step(raw);
    if (rc == SQLITE_DONE) break;
    if (rc != SQLITE_ROW) {
      std::string msg = sqlite3_errmsg(db.handle());
      const int primary = rc & 0xff;
      if (primary == SQLITE_ERROR || primary == SQLITE_READONLY || primary == SQLITE_CONSTRAINT)
        throw ConfigError(fmt::format("SQL error: {} in '{}'", msg, Shorten(sql)), kSchemaHint);
      throw SqliteError(db.path(), rc, msg, "running the query");
    }
    std::vector<Value> row;
    row.reserve(out.columns.size());
    for (size_t c = 0; c < out.columns.size(); ++c)
      row.push_back(ColumnValue(raw, static_cast<int>(c)));
    out.rows.push_back(std::move(row));
  }
  return out;
}

std::string FormatTable(const QueryResult& r, size_t max_width) {
  const size_t n = r.columns.size();
  std::vector<std::vector<std::string>> cells;
  std::vector<size_t> width(n);
  std::vector<bool> numeric(n, true);
  for (size_t c = 0; c < n; ++c) width[c] = Utf8Length(r.columns[c]);
  for (const auto& row : r.rows) {
    std::vector<std::string> line;
    for (size_t c = 0; c < n; ++c) {
      line.push_back(TableCell(row[c], max_width));
      width[c] = std::max(width[c], Utf8Length(line.back()));
      const bool is_num = std::holds_alternative<int64_t>(row[c]) ||
                          std::holds_alternative<double>(row[c]) ||
                          std::holds_alternative<std::monostate>(row[c]);
      numeric[c] = numeric[c] && is_num;
    }
    cells.push_back(std::move(line));
  }
  auto pad = [&](const std::string& s, size_t c) {
    std::string fill(width[c] - Utf8Length(s), ' ');
    return numeric[c] ? fill + s : s + fill;
  };
  auto line_of = [&](const std::vector<std::string>& fields) {
    std::string text;
    for (size_t c = 0; c < n; ++c) text += (c ? "  " : "") + pad(fields[c], c);
    while (!text.empty() && text.back() == ' ') text.pop_back();
    return text + "\n";
  };
  std::string out = line_of(r.columns);
  for (size_t c = 0; c < n; ++c) out += (c ? "  " : "") + std::string(width[c], '-');
  out += "\n";
  for (const auto& line : cells) out += line_of(line);
  out += fmt::format("({} row{})\n", r.rows.size(), r.rows.size() == 1 ? "" : "s");
  return out;
}

std::string FormatCsv(const QueryResult& r) {
  std::string out;
  for (size_t c = 0; c < r.columns.size(); ++c) out += (c ? "," : "") + CsvField(r.columns[c]);
  out += "\n";
  for (const auto& row : r.rows) {
    for (size_t c = 0; c < row.size(); ++c)
      out += (c ? "," : "") + CsvField(ValueText(row[c], false));
    out += "\n";
  }
  return out;
}

std::string FormatJson(const QueryResult& r) {
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  for (const auto& row : r.rows) {
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
      obj[r.columns[c]] = std::move(v);
    }
    rows.push_back(std::move(obj));
  }
  // Invalid UTF-8 in stored text is replaced rather than aborting the dump.
  return rows.dump(2, ' ', false, nlohmann::ordered_json::error_handler_t::replace) + "\n";
}

}  // namespace rlid::memory

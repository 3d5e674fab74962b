// `rlid sql RUN_DIR|DB_FILE "SQL" [--csv|--json] [--max-width N] [--timeout-s S]
// [--max-rows N] [--max-memory-mb MB]`: runs one read-only SQL statement on a
// run's database and prints the rows as they are stepped. The database is
// opened with SQLITE_OPEN_READONLY and PRAGMA query_only, and an authorizer
// refuses every statement that would write or change a setting (exit code 2).
// A query that hits a limit prints what it has, well-formed, then fails
// naming the limit and its flag (exit code 2).
#include <fmt/format.h>

#include <iostream>

#include "cli/command.h"
#include "core/error.h"
#include "memory/query.h"
#include "memory/store.h"

namespace rlid::cli {
namespace {

class SqlCommand : public Command {
 public:
  void Setup(CLI::App& app) override {
    app.add_option("target", target_,
                   "run directory (containing rlid.db; a data-parallel run's rank shards are "
                   "attached, so tables and views cover every rank) or database file")
        ->required();
    app.add_option("sql", sql_,
                   "one read-only statement, e.g. \"SELECT * FROM v_run_budget\"; views: "
                   "v_step_provenance, v_memory_lineage, v_split_leaks, v_label_calibration, "
                   "v_run_budget")
        ->required();
    auto* csv = app.add_flag("--csv", csv_, "print CSV (RFC 4180) instead of a table");
    auto* json = app.add_flag("--json", json_, "print a JSON array of row objects");
    csv->excludes(json);
    app.add_option("--max-width", max_width_, "cut table cells longer than this (0 = never)")
        ->capture_default_str();
    app.add_option("--busy-timeout-ms", busy_timeout_ms_,
                   "wait this long for a writer's exclusive lock")
        ->capture_default_str();
    app.add_option("--timeout-s", timeout_s_, "stop the query after this many seconds (0 = never)")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    app.add_option("--max-rows", max_rows_, "stop after printing this many rows (0 = no limit)")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    app.add_option("--max-memory-mb", max_memory_mb_,
                   "stop the query when SQLite needs more memory than this, sorts and "
                   "temporary tables included (0 = no limit; temporary files then)")
        ->check(CLI::NonNegativeNumber)
        ->capture_default_str();
    app.callback([this] { Run(); });
  }

 private:
  void Run() {
    const std::string path = memory::ResolveDatabasePath(target_);
    auto store = memory::Store::Open(path, memory::Store::Mode::kReadOnly,
                                     memory::StoreOptions{.busy_timeout_ms = busy_timeout_ms_});
    std::unique_ptr<memory::RowSink> sink = csv_ ? memory::MakeCsvWriter(std::cout)
                                            : json_
                                                ? memory::MakeJsonWriter(std::cout)
                                                : memory::MakeTableWriter(std::cout, max_width_);
    const memory::QueryOutcome outcome = memory::StreamReadOnlyQuery(
        store->db(), sql_, *sink,
        {.timeout_s = timeout_s_, .max_rows = max_rows_, .max_memory_bytes = max_memory_mb_ << 20});
    std::cout << std::flush;
    if (outcome.stop != memory::QueryStop::kDone) throw StopError(outcome);
  }

  // The message for a query a limit stopped: which limit, what was printed.
  ConfigError StopError(const memory::QueryOutcome& o) const {
    const std::string printed =
        fmt::format("{} row{} printed before it {}", o.rows, o.rows == 1 ? " was" : "s were",
                    json_  ? "(the JSON array is closed, so the output parses)"
                    : csv_ ? "(every printed line is a complete row)"
                           : "(the table's last line says it was cut)");
    const std::string narrow = "or narrow the query (WHERE, LIMIT, aggregates)";
    switch (o.stop) {
      case memory::QueryStop::kTimeout:
        return ConfigError(fmt::format("query stopped at its time limit of {} s (--timeout-s); {}",
                                       timeout_s_, printed),
                           "raise --timeout-s (0 = no limit), " + narrow);
      case memory::QueryStop::kMaxRows:
        return ConfigError(
            fmt::format("query stopped at its row limit of {} (--max-rows) with more rows to "
                        "come; {}",
                        max_rows_, printed),
            "raise --max-rows (0 = no limit), " + narrow);
      case memory::QueryStop::kMemory:
        return ConfigError(
            fmt::format("query stopped: SQLite needed more than its memory limit of {} MB "
                        "(--max-memory-mb); {}",
                        max_memory_mb_, printed),
            "raise --max-memory-mb (0 = no limit; sorts and temporary tables then spill to "
            "temporary files), " +
                narrow);
      case memory::QueryStop::kDone:
        break;
    }
    return ConfigError("query stopped");
  }

  std::string target_, sql_;
  bool csv_ = false, json_ = false;
  size_t max_width_ = 60;
  int busy_timeout_ms_ = 2000;
  double timeout_s_ = 30;
  int64_t max_rows_ = 0;
  int64_t max_memory_mb_ = 256;
};

const Registrar<CommandRegistry> kRegister(
    "sql", "query a run's database read-only (table, --csv or --json), stopped at limits",
    [] { return std::make_unique<SqlCommand>(); });

}  // namespace
}  // namespace rlid::cli

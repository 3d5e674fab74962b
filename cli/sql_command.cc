// `rlid sql RUN_DIR|DB_FILE "SQL" [--csv|--json] [--max-width N]`: runs one
// read-only SQL statement on a run's database and prints the result. The
// database is opened with SQLITE_OPEN_READONLY and PRAGMA query_only, so a
// statement that would write is refused with a clear error (exit code 2).
#include <iostream>

#include "cli/command.h"
#include "memory/query.h"
#include "memory/store.h"

namespace rlid::cli {
namespace {

class SqlCommand : public Command {
 public:
  void Setup(CLI::App& app) override {
    app.add_option("target", target_, "run directory (containing rlid.db) or database file")
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
    app.callback([this] { Run(); });
  }

 private:
  void Run() {
    const std::string path = memory::ResolveDatabasePath(target_);
    auto store = memory::Store::Open(path, memory::Store::Mode::kReadOnly,
                                     memory::StoreOptions{.busy_timeout_ms = busy_timeout_ms_});
    const memory::QueryResult result = store->Query(sql_);
    if (csv_)
      std::cout << memory::FormatCsv(result);
    else if (json_)
      std::cout << memory::FormatJson(result);
    else
      std::cout << memory::FormatTable(result, max_width_);
    std::cout << std::flush;
  }

  std::string target_, sql_;
  bool csv_ = false, json_ = false;
  size_t max_width_ = 60;
  int busy_timeout_ms_ = 2000;
};

const Registrar<CommandRegistry> kRegister(
    "sql", "query a run's database read-only (table, --csv or --json)",
    [] { return std::make_unique<SqlCommand>(); });

}  // namespace
}  // namespace rlid::cli

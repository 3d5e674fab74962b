// _rlid.Store: a run's database opened read-only (rank shards attached, as
// `rlid sql` does), and query() returning (columns, rows) with Python values
// (None, int, float, str, bytes). The same authorizer and limits as
// `rlid sql`: only reads, stopped by time, rows or SQLite memory.
#include <fmt/format.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "core/error.h"
#include "memory/query.h"
#include "memory/store.h"
#include "python/src/bindings.h"

namespace py = pybind11;

namespace rlid::python {
namespace {

using memory::Value;

// Collects rows as C++ values; converted to Python once the GIL is back.
class Collect : public memory::RowSink {
 public:
  void Begin(const std::vector<std::string>& columns) override { result.columns = columns; }
  void Row(const std::vector<Value>& row) override { result.rows.push_back(row); }
  void End(bool) override {}
  memory::QueryResult result;
};

py::object ToPython(const Value& v) {
  return std::visit(
      [](const auto& x) -> py::object {
        using T = std::decay_t<decltype(x)>;
        if constexpr (std::is_same_v<T, std::monostate>)
          return py::none();
        else if constexpr (std::is_same_v<T, memory::Blob>)
          return py::bytes(x.bytes);
        else
          return py::cast(x);
      },
      v);
}

ConfigError LimitError(memory::QueryStop stop, const memory::QueryLimits& limits) {
  switch (stop) {
    case memory::QueryStop::kTimeout:
      return ConfigError(fmt::format("query stopped at its time limit of {} s", limits.timeout_s),
                         "pass a larger timeout_s (0 = no limit), or narrow the query");
    case memory::QueryStop::kMaxRows:
      return ConfigError(fmt::format("query stopped at its row limit of {}", limits.max_rows),
                         "pass a larger max_rows (0 = no limit), or narrow the query");
    default:
      return ConfigError(fmt::format("query stopped: SQLite needed more than {} MB",
                                     limits.max_memory_bytes >> 20),
                         "pass a larger max_memory_mb (0 = no limit), or narrow the query");
  }
}

class PyStore {
 public:
  explicit PyStore(const std::string& target)
      : store_(memory::Store::Open(memory::ResolveDatabasePath(target),
                                   memory::Store::Mode::kReadOnly)) {}

  std::string path() const { return store_->path(); }
  int schema_version() const { return store_->schema_version(); }
  int attached_shards() const { return store_->attached_shards(); }

  py::tuple Query(const std::string& sql, double timeout_s, int64_t max_rows,
                  int64_t max_memory_mb) const {
    Collect sink;
    const memory::QueryLimits limits{
        .timeout_s = timeout_s, .max_rows = max_rows, .max_memory_bytes = max_memory_mb << 20};
    memory::QueryOutcome outcome;
    {
      py::gil_scoped_release release;
      outcome = memory::StreamReadOnlyQuery(store_->db(), sql, sink, limits);
    }
    if (outcome.stop != memory::QueryStop::kDone) throw LimitError(outcome.stop, limits);
    py::list rows;
    for (const auto& row : sink.result.rows) {
      py::tuple t(row.size());
      for (size_t i = 0; i < row.size(); ++i) t[i] = ToPython(row[i]);
      rows.append(std::move(t));
    }
    return py::make_tuple(sink.result.columns, rows);
  }

 private:
  std::unique_ptr<memory::Store> store_;
};

}  // namespace

void BindStore(py::module_& m) {
  py::class_<PyStore>(m, "Store")
      .def(py::init<const std::string&>(), py::arg("target"),
           py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("path", &PyStore::path)
      .def_property_readonly("schema_version", &PyStore::schema_version)
      .def_property_readonly("attached_shards", &PyStore::attached_shards)
      .def("query", &PyStore::Query, py::arg("sql"), py::arg("timeout_s"), py::arg("max_rows"),
           py::arg("max_memory_mb"));
}

}  // namespace rlid::python

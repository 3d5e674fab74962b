// `rlid sql` below the CLI: the input is one SQL statement run through
// memory::StreamReadOnlyQuery (the path cli/sql_command.cc uses) on a small run
// database built once per process, with a 1 s time limit, 100 rows and 4 MB
// of SQLite heap. Byte 0 = \x01 or \x02 selects the CSV or JSON writer (and is
// not part of the SQL); anything else uses the table writer. Afterwards the
// database file must be byte-identical and no -wal/-shm file may exist: the
// authorizer keeps every statement read-only. ConfigError/IoError are allowed.
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "core/error.h"
#include "fuzz/fuzz_util.h"
#include "memory/query.h"
#include "memory/store.h"
#include "tests/memory/fixtures.h"

namespace rlid::fuzz {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Fixture {
  std::string path;
  std::string bytes;  // the database file as written
  std::unique_ptr<memory::Store> store;
};

// A run with a few episodes (steps, menus, memory items and reads), as a
// finished writer leaves it; then opened read-only like `rlid sql` does.
Fixture& Db() {
  static Fixture* f = [] {
    auto* fx = new Fixture;
    const auto dir = std::filesystem::temp_directory_path() /
                     ("rlid_sql_fuzz_" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    static std::filesystem::path cleanup_dir;
    cleanup_dir = dir;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(cleanup_dir, ec);
    });
    fx->path = (dir / memory::kDatabaseFileName).string();
    {
      auto w = memory::Store::Open(fx->path, memory::Store::Mode::kReadWrite);
      memory::RunRecord run;
      run.name = "fuzz";
      run.kind = "train";
      run.config_toml = "[env]\nname = \"bandit\"\n";
      const int64_t run_id = w->BeginRun(run);
      int64_t item = 0;
      for (int i = 0; i < 6; ++i) {
        const int64_t id = w->NewEpisodeId();
        const int64_t new_item = i % 2 == 0 ? w->item_ids().Next() : 0;
        w->WriteEpisode(memory::testing::CanonicalEpisode(id, run_id, new_item, item,
                                                          i % 3 == 2 ? "test" : "train"));
        if (new_item) item = new_item;
      }
      w->WriteMetric({run_id, 0, "charts/episodic_return", 0.5});
      w->EndRun(run_id, "completed");
    }
    fx->bytes = ReadAll(fx->path);
    fx->store = memory::Store::Open(fx->path, memory::Store::Mode::kReadOnly);
    return fx;
  }();
  return *f;
}

}  // namespace
}  // namespace rlid::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rlid;
  using namespace rlid::fuzz;
  Fixture& fx = Db();
  std::string_view sql = AsText(data, size);
  int writer = 0;
  if (!sql.empty() && (sql[0] == '\x01' || sql[0] == '\x02')) {
    writer = sql[0];
    sql.remove_prefix(1);
  }
  std::ostringstream out;
  std::unique_ptr<memory::RowSink> sink = writer == 1   ? memory::MakeCsvWriter(out)
                                          : writer == 2 ? memory::MakeJsonWriter(out)
                                                        : memory::MakeTableWriter(out, 60);
  bool began = false;
  try {
    memory::StreamReadOnlyQuery(fx.store->db(), sql, *sink,
                                {.timeout_s = 1.0, .max_rows = 100, .max_memory_bytes = 4 << 20});
    began = true;
  } catch (const InternalError& e) {
    std::fprintf(stderr, "InternalError: %s\n", e.what());
    FUZZ_CHECK(!"InternalError");
  } catch (const Error&) {
    began = !out.str().empty();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    FUZZ_CHECK(!"only rlid::Error may be thrown");
  }
  // The JSON writer's output parses whenever it wrote anything, even when cut.
  // (Checked up to 1 MB: a 4 MB blob is 8 MB of hex, seconds to re-parse under ASan. The 4 MB heap
  // limit itself keeps the JSON writer, linear but slow under ASan, far from the 10 s timeout.)
  if (writer == 2 && began && !out.str().empty() && out.str().size() < (1 << 20))
    FUZZ_CHECK(nlohmann::json::accept(out.str()));
  FUZZ_CHECK(!std::filesystem::exists(fx.path + "-wal"));
  FUZZ_CHECK(!std::filesystem::exists(fx.path + "-shm"));
  FUZZ_CHECK(!std::filesystem::exists(fx.path + "-journal"));
  struct stat st;
  FUZZ_CHECK(::stat(fx.path.c_str(), &st) == 0);
  FUZZ_CHECK(static_cast<size_t>(st.st_size) == fx.bytes.size());
  FUZZ_CHECK(ReadAll(fx.path) == fx.bytes);
  return 0;
}

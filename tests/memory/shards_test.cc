// A data-parallel run's database: rank 0's rlid.db plus a shard per other rank
// (memory::ShardFileName). A read-only open of rlid.db attaches the shards so
// every table and view reads the rows of all ranks; the shard mirrors the run
// row by id; ids are unique across files by construction (kShardIdStride).
#include <gtest/gtest.h>

#include <filesystem>

#include "core/error.h"
#include "memory/store.h"
#include "tests/memory/fixtures.h"

namespace rlid::memory {
namespace {

namespace fs = std::filesystem;

int64_t Count(const Store& s, const std::string& sql) {
  return std::get<int64_t>(s.Query(sql).rows.at(0).at(0));
}

// rlid.db with episodes 1..3 of run `id`, and rank 1's shard with episodes
// kShardIdStride + 1..2 of the same run (mirrored row); rank 1's episode reads
// a memory item rank 1 created.
std::string TwoRankRun() {
  const std::string dir = testing::ScratchDir("shards");
  int64_t run = 0;
  RunRecord r;
  r.name = "dp";
  r.kind = "train";
  r.config_toml = "";
  {
    auto main = Store::Open(dir + "/rlid.db", Store::Mode::kReadWrite);
    run = main->BeginRun(r);
    for (int64_t id = 1; id <= 3; ++id) main->WriteEpisode(testing::CanonicalEpisode(id, run));
  }
  {
    auto shard = Store::Open(dir + "/" + ShardFileName(1), Store::Mode::kReadWrite);
    r.id = run;
    EXPECT_EQ(shard->BeginRun(r), run);
    const int64_t base = kShardIdStride;
    shard->WriteEpisode(testing::CanonicalEpisode(base + 1, run, base + 1));
    shard->WriteEpisode(testing::CanonicalEpisode(base + 2, run, 0, base + 1));
  }
  return dir;
}

TEST(Shards, ReadOnlyOpenSeesEveryRanksRowsInTablesAndViews) {
  const std::string dir = TwoRankRun();
  auto s = Store::Open(dir + "/rlid.db", Store::Mode::kReadOnly);
  EXPECT_EQ(s->attached_shards(), 1);
  EXPECT_EQ(Count(*s, "SELECT COUNT(*) FROM episodes"), 5);
  EXPECT_EQ(Count(*s, "SELECT COUNT(*) FROM runs"), 1);  // the mirror row is not a second run
  int64_t steps = 0;
  for (int64_t id : {int64_t{1}, int64_t{2}, int64_t{3}, kShardIdStride + 1, kShardIdStride + 2})
    steps += testing::CanonicalLength(id);
  EXPECT_EQ(Count(*s, "SELECT COUNT(*) FROM steps"), steps);
  EXPECT_EQ(Count(*s, "SELECT COUNT(*) FROM menu_items"), steps * testing::kCanonicalMenu);
  // rlid's views join across the files: the read in rank 1's shard, with its item.
  EXPECT_EQ(Count(*s, "SELECT COUNT(*) FROM v_step_provenance"), 1);
  EXPECT_EQ(Count(*s, "SELECT SUM(episodes) FROM v_run_budget"), 5);
  // Prompts are shared by hash: a prompt both files hold is one row.
  EXPECT_EQ(Count(*s, "SELECT COUNT(*) FROM prompts"), Count(*s, "SELECT COUNT(DISTINCT hash) FROM prompts"));
  // The files themselves stay apart (rank 0's alone via main.).
  EXPECT_EQ(Count(*s, "SELECT COUNT(*) FROM main.episodes"), 3);
  // A shard opened on its own is just that rank's rows.
  auto shard = Store::Open(dir + "/" + ShardFileName(1), Store::Mode::kReadOnly);
  EXPECT_EQ(shard->attached_shards(), 0);
  EXPECT_EQ(Count(*shard, "SELECT COUNT(*) FROM episodes"), 2);
}

TEST(Shards, AShardOfAnotherSchemaVersionIsRefusedByName) {
  const std::string dir = TwoRankRun();
  {
    auto shard = Store::Open(dir + "/" + ShardFileName(1), Store::Mode::kReadWrite);
    shard->db().Exec("INSERT INTO rlid_schema VALUES (999, 'future', '', '')");
  }
  try {
    Store::Open(dir + "/rlid.db", Store::Mode::kReadOnly);
    FAIL() << "expected IoError";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find(ShardFileName(1)), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace rlid::memory

// Writer: concurrent submission, FIFO batched commits, holding episodes until
// the memory items they read arrive, sticky errors, metrics and checkpoints.
#include "memory/writer.h"

#include <gtest/gtest.h>

#include <thread>

#include "core/error.h"
#include "tests/memory/fixtures.h"

namespace rlid::memory {
namespace {

using testing::CanonicalEpisode;

struct WriterFixture : ::testing::Test {
  void SetUp() override {
    store = Store::Open(testing::ScratchDir("writer") + "/rlid.db", Store::Mode::kReadWrite);
    RunRecord r;
    r.name = "w";
    r.kind = "train";
    run = store->BeginRun(r);
  }
  int64_t Count(const std::string& table) {
    return store->db().QueryInt("SELECT COUNT(*) FROM " + table);
  }
  std::unique_ptr<Store> store;
  int64_t run = 0;
};

TEST_F(WriterFixture, ConcurrentSubmissionsAreAllCommitted) {
  constexpr int kThreads = 4, kPerThread = 25;
  int64_t expected_steps = 0;
  std::vector<std::vector<EpisodeRecord>> work(kThreads);
  for (int t = 0; t < kThreads; ++t)
    for (int i = 0; i < kPerThread; ++i) {
      work[t].push_back(CanonicalEpisode(store->NewEpisodeId(), run));
      expected_steps += work[t].back().length;
    }
  {
    Writer writer(*store, WriterOptions{.max_queue = 8, .max_batch = 16});
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t)
      threads.emplace_back([&, t] {
        for (auto& e : work[t]) writer.Submit(std::move(e));
      });
    for (auto& th : threads) th.join();
    writer.Flush();
    const auto stats = writer.stats();
    EXPECT_EQ(stats.episodes, kThreads * kPerThread);
    EXPECT_GE(stats.transactions, 1);
    EXPECT_LE(stats.transactions, kThreads * kPerThread);
    EXPECT_EQ(stats.held, 0);
  }
  EXPECT_EQ(Count("episodes"), kThreads * kPerThread);
  EXPECT_EQ(Count("steps"), expected_steps);
  EXPECT_EQ(Count("prompts"),
            store->db().QueryInt("SELECT COUNT(DISTINCT prompt_hash) FROM steps"));
}

TEST_F(WriterFixture, EpisodeIsHeldUntilTheItemItReadArrives) {
  const int64_t a = store->NewEpisodeId(), b = store->NewEpisodeId();
  const int64_t item = store->item_ids().Next();
  Writer writer(*store);
  // b read the item a created, but b finished first.
  writer.Submit(CanonicalEpisode(b, run, 0, item));
  try {
    writer.Flush();
    FAIL() << "Flush should report the held episode";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find(fmt::format("episode {} (depends on items {})", b, item)),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(writer.stats().held, 1);
  EXPECT_EQ(Count("episodes"), 0);
  writer.Submit(CanonicalEpisode(a, run, item));
  writer.Flush();
  EXPECT_EQ(writer.stats().held, 0);
  EXPECT_EQ(Count("episodes"), 2);
  EXPECT_EQ(Count("memory_reads"), 1);
  std::string report;
  EXPECT_TRUE(store->CheckIntegrity(&report)) << report;
}

TEST_F(WriterFixture, ItemsCommittedByEarlierProcessesSatisfyDependencies) {
  const int64_t a = store->NewEpisodeId(), item = store->item_ids().Next();
  store->WriteEpisode(CanonicalEpisode(a, run, item));
  Writer writer(*store);
  writer.Submit(CanonicalEpisode(store->NewEpisodeId(), run, 0, item));
  writer.Flush();
  EXPECT_EQ(Count("memory_reads"), 1);
}

TEST_F(WriterFixture, ErrorsAreStickyAndNeverSilent) {
  Writer writer(*store);
  // A run id that does not exist: the batch fails on its foreign key.
  writer.Submit(CanonicalEpisode(store->NewEpisodeId(), run + 100));
  EXPECT_THROW(writer.Flush(), IoError);
  EXPECT_THROW(writer.Submit(CanonicalEpisode(store->NewEpisodeId(), run)), IoError);
  EXPECT_THROW(writer.Flush(), IoError);
  EXPECT_THROW(writer.Submit(MetricRecord{run, 0, "losses/x", 1.0}), IoError);
  EXPECT_EQ(Count("episodes"), 0);
}

TEST_F(WriterFixture, InvalidEpisodeIsRejectedAtSubmitWithoutPoisoningTheWriter) {
  Writer writer(*store);
  EpisodeRecord bad = CanonicalEpisode(store->NewEpisodeId(), run);
  bad.plane = "both";
  EXPECT_THROW(writer.Submit(bad), InternalError);
  writer.Submit(CanonicalEpisode(store->NewEpisodeId(), run));
  EXPECT_NO_THROW(writer.Flush());
  EXPECT_EQ(Count("episodes"), 1);
}

TEST_F(WriterFixture, MetricsCheckpointsAndRunEnd) {
  {
    Writer writer(*store);
    writer.Submit(MetricRecord{run, 0, "budget/generated_tokens", 100.0});
    writer.Submit(MetricRecord{run, 1, "budget/generated_tokens", 250.0});
    writer.Submit(MetricRecord{run, 1, "budget/discarded_samples", 3.0});
    writer.Submit(MetricRecord{run, 1, "losses/clipfrac", 0.1});
    writer.Submit(CheckpointRecord{run, 1, "ckpt/iter_1.pt"});
    writer.EndRun(run, "completed");
    // The destructor flushes what is left (nothing here).
  }
  EXPECT_EQ(Count("metrics"), 4);
  EXPECT_EQ(Count("checkpoints"), 1);
  EXPECT_GT(store->db().QueryInt("SELECT MIN(wall_time) FROM metrics"), 1.6e9);
  EXPECT_EQ(store->db().QueryText("SELECT budget_metrics FROM v_run_budget"),
            R"({"budget/discarded_samples":3.0,"budget/generated_tokens":250.0})");
  EXPECT_EQ(store->db().QueryText("SELECT status FROM runs"), "completed");
}

TEST_F(WriterFixture, DestructorFlushes) {
  {
    Writer writer(*store);
    for (int i = 0; i < 10; ++i) writer.Submit(CanonicalEpisode(store->NewEpisodeId(), run));
  }
  EXPECT_EQ(Count("episodes"), 10);
}

}  // namespace
}  // namespace rlid::memory

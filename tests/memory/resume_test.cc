// What `rlid train --resume` relies on: Store::TruncateRun deletes exactly
// what a run wrote after a checkpoint (and nothing of other runs) with ids
// continuing afterwards, ResumeRun reopens the run, and MemoryBank::Restore
// of Store::MemoryItems rebuilds a bank that retrieves exactly like the original.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "core/error.h"
#include "memory/memory_bank.h"
#include "memory/store.h"
#include "memory/writer.h"
#include "tests/memory/fixtures.h"

namespace rlid::memory {
namespace {

using testing::CanonicalEpisode;
using testing::ScratchDir;

RunRecord NamedRun(const std::string& name) {
  RunRecord r;
  r.name = name;
  r.kind = "train";
  return r;
}

int64_t Count(const Store& s, const std::string& sql) { return s.db().QueryInt(sql); }

// Row counts of everything hanging off one run.
struct RunRows {
  int64_t episodes, steps, menu_items, reads, items, parents, metrics, checkpoints;
  bool operator==(const RunRows&) const = default;
};

RunRows RowsOf(const Store& s, int64_t run) {
  const std::string eps = fmt::format("(SELECT id FROM episodes WHERE run_id = {})", run);
  const std::string items = fmt::format("(SELECT id FROM memory_items WHERE run_id = {})", run);
  return {Count(s, fmt::format("SELECT COUNT(*) FROM episodes WHERE run_id = {}", run)),
          Count(s, "SELECT COUNT(*) FROM steps WHERE episode_id IN " + eps),
          Count(s, "SELECT COUNT(*) FROM menu_items WHERE episode_id IN " + eps),
          Count(s, "SELECT COUNT(*) FROM memory_reads WHERE episode_id IN " + eps),
          Count(s, fmt::format("SELECT COUNT(*) FROM memory_items WHERE run_id = {}", run)),
          Count(s, "SELECT COUNT(*) FROM memory_parents WHERE item_id IN " + items),
          Count(s, fmt::format("SELECT COUNT(*) FROM metrics WHERE run_id = {}", run)),
          Count(s, fmt::format("SELECT COUNT(*) FROM checkpoints WHERE run_id = {}", run))};
}

// Iterations 1..3 of `run`: per iteration episode a creates an item, episode
// b reads it and creates an item derived from it (and, from iteration 2 on,
// from iteration 1's first item too); two metrics and a checkpoint.
// Returns the last episode id of each iteration.
std::vector<int64_t> WriteIterations(Store& store, int64_t run) {
  std::vector<int64_t> last;
  int64_t first_item = 0;
  for (int64_t it = 1; it <= 3; ++it) {
    const int64_t a_id = store.NewEpisodeId(), a_item = store.item_ids().Next();
    EpisodeRecord a = CanonicalEpisode(a_id, run, a_item);
    const int64_t b_id = store.NewEpisodeId(), b_item = store.item_ids().Next();
    EpisodeRecord b = CanonicalEpisode(b_id, run, b_item, /*read_item=*/a_item);
    b.new_items[0].parents = {a_item};
    if (first_item == 0) first_item = a_item;
    if (it > 1) b.new_items[0].parents.insert(b.new_items[0].parents.begin(), first_item);
    a.iteration = b.iteration = it;
    store.WriteEpisode(a);
    store.WriteEpisode(b);
    store.WriteMetric({run, it, "rollout/success", 0.5});
    store.WriteMetric({run, it, "losses/policy", 0.1});
    store.WriteCheckpoint({run, it, fmt::format("ckpt/{}.pt", it)});
    last.push_back(b_id);
  }
  return last;
}

TEST(StoreResume, TruncateRunDeletesWhatFollowsTheCheckpoint) {
  const std::string path = ScratchDir("truncate") + "/rlid.db";
  auto store = Store::Open(path, Store::Mode::kReadWrite);
  const int64_t other = store->BeginRun(NamedRun("other"));
  const int64_t run = store->BeginRun(NamedRun("resumed"));
  // Episodes of the other run before and after the resumed run's: ids on both sides.
  store->WriteEpisode(CanonicalEpisode(store->NewEpisodeId(), other, store->item_ids().Next()));
  const std::vector<int64_t> last = WriteIterations(*store, run);
  const int64_t late = store->NewEpisodeId();
  store->WriteEpisode(CanonicalEpisode(late, other, store->item_ids().Next()));
  store->WriteMetric({other, 3, "rollout/success", 1.0});
  store->WriteCheckpoint({other, 3, "other/3.pt"});
  const RunRows other_before = RowsOf(*store, other);
  const RunRows before = RowsOf(*store, run);
  ASSERT_EQ(before.episodes, 6);
  ASSERT_EQ(before.parents, 5);  // 1 + 2 + 2

  const TruncateResult r = store->TruncateRun(run, /*last_iteration=*/1, last[0]);
  EXPECT_EQ(r.episodes, 4);
  EXPECT_EQ(r.memory_items, 4);
  EXPECT_EQ(r.metrics, 4);
  EXPECT_EQ(r.checkpoints, 2);
  const RunRows after = RowsOf(*store, run);
  EXPECT_EQ(after.episodes, 2);
  EXPECT_EQ(after.items, 2);
  EXPECT_EQ(after.parents, 1);
  EXPECT_EQ(after.reads, 1);
  EXPECT_EQ(after.metrics, 2);
  EXPECT_EQ(after.checkpoints, 1);
  EXPECT_EQ(after.steps, Count(*store, fmt::format("SELECT SUM(length) FROM episodes WHERE "
                                                   "run_id = {}",
                                                   run)));
  EXPECT_EQ(after.menu_items, after.steps * testing::kCanonicalMenu);
  EXPECT_EQ(Count(*store, fmt::format("SELECT MAX(iteration) FROM metrics WHERE run_id = {}", run)),
            1);
  EXPECT_EQ(RowsOf(*store, other), other_before);
  std::string report;
  EXPECT_TRUE(store->CheckIntegrity(&report)) << report;

  // Ids continue after the largest kept one (the other run's late episode).
  EXPECT_EQ(store->episode_ids().PeekNext(), late + 1);
  EXPECT_EQ(store->item_ids().PeekNext(), Count(*store, "SELECT MAX(id) FROM memory_items") + 1);
  // Truncating the other run's tail too frees the ids after the checkpoint.
  store->TruncateRun(other, 3, late - 1);
  EXPECT_EQ(store->episode_ids().PeekNext(), last[0] + 1);
  EXPECT_EQ(store->item_ids().PeekNext(), Count(*store, "SELECT MAX(id) FROM memory_items") + 1);
  // The resumed run writes on; a reopened store agrees on the ids.
  const int64_t next = store->NewEpisodeId();
  EXPECT_EQ(next, last[0] + 1);
  store->WriteEpisode(CanonicalEpisode(next, run, store->item_ids().Next()));
  EXPECT_TRUE(store->CheckIntegrity(&report)) << report;
  store.reset();
  store = Store::Open(path, Store::Mode::kReadWrite);
  EXPECT_EQ(store->episode_ids().PeekNext(), next + 1);
}

TEST(StoreResume, TruncateRefusesToOrphanKeptRowsAndUnknownRuns) {
  auto store = Store::Open(ScratchDir("truncate_refused") + "/rlid.db", Store::Mode::kReadWrite);
  const int64_t run = store->BeginRun(NamedRun("r"));
  const std::vector<int64_t> last = WriteIterations(*store, run);
  // A kept step (iteration 1) that read an item of iteration 2: not a checkpoint boundary.
  const int64_t later_item = store->db().QueryInt(
      fmt::format("SELECT MAX(id) FROM memory_items WHERE source_episode_id = {}", last[1]));
  Statement read = store->db().Prepare(
      "INSERT INTO memory_reads(episode_id, t, rank, item_id, score) VALUES (:episode, 0, 5, "
      ":item, 0)");
  read.Bind(":episode", last[0]).Bind(":item", later_item);
  read.Run();
  const RunRows before = RowsOf(*store, run);
  try {
    store->TruncateRun(run, 1, last[0]);
    FAIL();
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("1 kept memory read(s) and 0 kept derivation(s)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_EQ(RowsOf(*store, run), before);
  try {
    store->TruncateRun(99, 1, 1);
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot truncate run 99"), std::string::npos) << e.what();
  }
  EXPECT_THROW(store->ResumeRun(99), ConfigError);
}

TEST(StoreResume, ResumeRunReopensIt) {
  auto store = Store::Open(ScratchDir("resume_run") + "/rlid.db", Store::Mode::kReadWrite);
  const int64_t run = store->BeginRun(NamedRun("r"));
  store->EndRun(run, "interrupted");
  store->ResumeRun(run);
  auto q = store->Query(fmt::format("SELECT status, ended_at FROM runs WHERE id = {}", run));
  EXPECT_EQ(std::get<std::string>(q.rows[0][0]), "running");
  EXPECT_TRUE(std::holds_alternative<std::monostate>(q.rows[0][1]));
}

// Asynchronous rollouts play a batch ahead: its episodes take their ids before
// the checkpoint of an earlier iteration but belong to a later one. Truncating
// at that checkpoint deletes them by their iteration, whatever their id.
TEST(StoreResume, TruncateRunDeletesEpisodesPlayedAheadOfTheCheckpoint) {
  auto store = Store::Open(ScratchDir("truncate_ahead") + "/rlid.db", Store::Mode::kReadWrite);
  const int64_t run = store->BeginRun(NamedRun("async"));
  EpisodeRecord kept = CanonicalEpisode(store->NewEpisodeId(), run, store->item_ids().Next());
  EpisodeRecord ahead = CanonicalEpisode(store->NewEpisodeId(), run, store->item_ids().Next());
  kept.iteration = 1;
  ahead.iteration = 2;  // played during iteration 1, trained on (and recorded) in iteration 2
  store->WriteEpisode(kept);
  store->WriteEpisode(ahead);
  const TruncateResult r =
      store->TruncateRun(run, /*last_iteration=*/1, /*last_episode_id=*/ahead.id);
  EXPECT_EQ(r.episodes, 1);
  EXPECT_EQ(r.memory_items, 1);
  EXPECT_EQ(Count(*store, "SELECT COUNT(*) FROM episodes"), 1);
  EXPECT_EQ(Count(*store, "SELECT MAX(id) FROM episodes"), kept.id);
  std::string report;
  EXPECT_TRUE(store->CheckIntegrity(&report)) << report;
}

// After a truncation the writer must not trust its cache of committed item
// ids: a freed id is reused by a new item, and an episode reading it waits
// for the episode that creates it.
TEST(StoreResume, WriterTruncateForgetsFreedItemIds) {
  auto store = Store::Open(ScratchDir("writer_truncate") + "/rlid.db", Store::Mode::kReadWrite);
  Writer writer(*store);
  const int64_t run = writer.BeginRun(NamedRun("r"));
  const int64_t kept = store->NewEpisodeId();
  writer.Submit(CanonicalEpisode(kept, run));
  const int64_t gone = store->NewEpisodeId(), item = store->item_ids().Next();
  writer.Submit(CanonicalEpisode(gone, run, item));
  writer.Submit(CanonicalEpisode(store->NewEpisodeId(), run, 0, /*read_item=*/item));
  writer.Flush();
  writer.EndRun(run, "interrupted");
  const TruncateResult r = writer.TruncateRun(run, 0, kept);
  EXPECT_EQ(r.episodes, 2);
  EXPECT_EQ(r.memory_items, 1);
  writer.ResumeRun(run);
  const int64_t creator = store->NewEpisodeId(), reader = store->NewEpisodeId();
  const int64_t reused = store->item_ids().Next();
  EXPECT_EQ(reused, item);
  writer.Submit(CanonicalEpisode(reader, run, 0, /*read_item=*/reused));
  for (int i = 0; i < 500 && writer.stats().held == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_EQ(writer.stats().held, 1);  // not mistaken for the deleted item
  writer.Submit(CanonicalEpisode(creator, run, reused));
  EXPECT_NO_THROW(writer.Flush());
  std::string report;
  EXPECT_TRUE(store->CheckIntegrity(&report)) << report;
  EXPECT_EQ(store->db().QueryText("SELECT status FROM runs"), "running");
}

void ExpectSameItem(const MemoryItem& a, const MemoryItem& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.content, b.content) << a.id;
  EXPECT_EQ(a.kind, b.kind) << a.id;
  EXPECT_EQ(a.source.run_id, b.source.run_id) << a.id;
  EXPECT_EQ(a.source.episode_id, b.source.episode_id) << a.id;
  EXPECT_EQ(a.source.t, b.source.t) << a.id;
  EXPECT_EQ(a.split, b.split) << a.id;
  EXPECT_EQ(a.instance, b.instance) << a.id;
  EXPECT_EQ(a.pass, b.pass) << a.id;
  EXPECT_EQ(a.policy_version, b.policy_version) << a.id;
  EXPECT_EQ(a.created_at, b.created_at) << a.id;
  EXPECT_EQ(a.parents, b.parents) << a.id;
}

TEST(StoreResume, RestoredBankRetrievesLikeTheOriginal) {
  const std::string path = ScratchDir("restore") + "/rlid.db";
  auto store = Store::Open(path, Store::Mode::kReadWrite);
  MemoryConfig cfg;
  cfg.enabled = true;
  cfg.write = MemoryWrite::kFactsAndNotes;
  cfg.summaries = true;
  cfg.retrieval = Retrieval::kKeyword;
  cfg.scope = MemoryScope::kRun;
  cfg.budget_items = 4;
  Writer writer(*store);
  const int64_t run = writer.BeginRun(NamedRun("restore"));
  MemoryBank bank(cfg, run, &store->item_ids());
  const uint64_t houses[] = {42, 42, 44, 42};
  const char* facts[] = {"the red key is in the kitchen", "the kitchen door is locked",
                         "the red key is in the cellar", "a lamp lights the hall"};
  std::vector<MemoryItem> written;
  int64_t eval_pass = 0;
  for (int e = 0; e < 5; ++e) {
    EpisodeRecord ep = CanonicalEpisode(store->NewEpisodeId(), run);
    ep.seed = e < 4 ? houses[e] : 42;
    ep.new_items.clear();
    const int64_t pass = e < 4 ? 0 : (eval_pass = bank.NewPass());
    ep.split = pass == 0 ? "train" : "test";
    bank.BeginEpisode(ep.id, {ep.split, ep.seed, pass});
    ep.steps[0].reads = ToReads(bank.Retrieve(facts[e % 4], ep.id));
    auto item = bank.Write(facts[e % 4], MemoryKind::kObservation, {run, ep.id, 0}, e);
    if (!ep.steps[0].reads.empty())
      bank.Write("go back for the key", MemoryKind::kNote, {run, ep.id, 0}, e,
                 {ep.steps[0].reads[0].item_id});
    ASSERT_TRUE(item);
    ep.new_items = bank.EndEpisode(ep.id);
    written.insert(written.end(), ep.new_items.begin(), ep.new_items.end());
    writer.Submit(std::move(ep));
  }
  writer.Flush();

  // Read back: every item exactly as the bank made it.
  const std::vector<MemoryItem> stored = store->MemoryItems(run);
  ASSERT_EQ(stored.size(), written.size());
  for (size_t i = 0; i < stored.size(); ++i) ExpectSameItem(stored[i], written[i]);
  EXPECT_TRUE(store->MemoryItems(run + 1).empty());

  MemoryBank restored(cfg, run);  // its own id counter: Restore moves it past the items
  restored.Restore(stored);
  size_t training_items = 0;
  for (const auto& it : stored) training_items += it.pass == 0;
  EXPECT_EQ(restored.size(), training_items);  // the evaluation pass is not restored
  EXPECT_EQ(restored.stats().restored, static_cast<int64_t>(training_items));
  EXPECT_LT(training_items, stored.size());
  EXPECT_EQ(restored.NewPass(), eval_pass + 1);

  // Retrieval in each house equals the original bank's.
  int64_t probe = 1000, hits = 0;
  for (uint64_t house : {42, 44}) {
    for (const char* query : {"where is the red key", "lamp hall door", "key"}) {
      ++probe;
      bank.BeginEpisode(probe, {"train", house, 0});
      restored.BeginEpisode(probe, {"train", house, 0});
      const auto want = bank.Retrieve(query, probe), got = restored.Retrieve(query, probe);
      ASSERT_EQ(got.size(), want.size()) << query;
      hits += static_cast<int64_t>(got.size());
      for (size_t i = 0; i < got.size(); ++i) {
        ExpectSameItem(got[i].item, want[i].item);
        EXPECT_EQ(got[i].rank, want[i].rank);
        EXPECT_DOUBLE_EQ(got[i].score, want[i].score);
      }
    }
  }
  EXPECT_GT(hits, 6);
  // Dedupe sees restored items; new ids come after them (the skipped ones too).
  ++probe;
  restored.BeginEpisode(probe, {"train", 42, 0});
  EXPECT_EQ(restored.Write(facts[0], MemoryKind::kObservation, {run, probe, 0}, 9)->id,
            stored.front().id);
  EXPECT_EQ(restored.Write("a new fact", MemoryKind::kObservation, {run, probe, 0}, 9)->id,
            stored.back().id + 1);
  // Restored episodes have ended; restoring twice is refused.
  EXPECT_THROW(restored.BeginEpisode(stored.front().source.episode_id, {}), InternalError);
  EXPECT_THROW(restored.Restore(stored), InternalError);
}

TEST(StoreResume, RestoreRefusesItemsThatDoNotFit) {
  MemoryConfig cfg;
  cfg.enabled = true;
  MemoryItem a;
  a.id = 5;
  a.content = "fact";
  a.source = {1, 3, 0};
  a.split = "train";
  MemoryItem b = a;
  b.id = 6;
  b.parents = {4};  // never restored
  MemoryBank bank(cfg, 1);
  EXPECT_THROW(bank.Restore({a, b}), InternalError);
  EXPECT_EQ(bank.size(), 0u);                         // nothing half-restored
  EXPECT_THROW(bank.Restore({b, a}), InternalError);  // out of id order
  MemoryItem foreign = a;
  foreign.source.run_id = 2;
  EXPECT_THROW(bank.Restore({foreign}), InternalError);
  bank.BeginEpisode(3, {});
  EXPECT_THROW(bank.Restore({a}), InternalError);  // its episode is open
}

}  // namespace
}  // namespace rlid::memory

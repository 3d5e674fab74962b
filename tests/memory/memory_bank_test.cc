// MemoryBank: config, write policies, dedupe, recency and FTS5 keyword
// retrieval (bm25 checked against the formula), budgets, scopes, the split
// guard and episode summaries.
#include "memory/memory_bank.h"

#include <gtest/gtest.h>

#include <cmath>

#include "core/config.h"
#include "core/error.h"

namespace rlid::memory {
namespace {

MemoryConfig Enabled(std::string retrieval = "recency", std::string scope = "episode") {
  MemoryConfig c;
  c.enabled = true;
  c.retrieval = std::move(retrieval);
  c.scope = std::move(scope);
  return c;
}

std::vector<int64_t> Ids(const std::vector<Retrieved>& r) {
  std::vector<int64_t> out;
  for (const auto& x : r) out.push_back(x.item.id);
  return out;
}

int64_t Put(MemoryBank& bank, int64_t episode, const std::string& text,
            const std::string& split = "train", MemoryKind kind = MemoryKind::kObservation) {
  auto item = bank.Write(text, kind, {0, episode, 0}, split, 0);
  return item ? item->id : 0;
}

TEST(MemoryConfig, DefaultsOverridesAndValidation) {
  Config cfg = Config::FromString(
      "[memory]\nenabled = true\nretrieval = \"keyword\"\nscope = \"run\"\nbudget_items = 4\n");
  MemoryConfig m;
  m.Load(cfg.Root().Section("memory"));
  EXPECT_TRUE(m.enabled);
  EXPECT_EQ(m.retrieval, "keyword");
  EXPECT_EQ(m.scope, "run");
  EXPECT_EQ(m.budget_items, 4);
  EXPECT_EQ(m.budget_tokens, 256);  // default
  EXPECT_EQ(m.write, "facts");
  EXPECT_FALSE(m.allow_cross_split);
  EXPECT_NO_THROW(cfg.CheckAllUsed());
  EXPECT_NE(cfg.ResolvedToml().find("allow_cross_split = false"), std::string::npos);

  Config typo = Config::FromString("[memory]\nbudget_item = 4\n");
  MemoryConfig t;
  t.Load(typo.Root().Section("memory"));
  EXPECT_THROW(typo.CheckAllUsed(), ConfigError);
  Config bad_enum = Config::FromString("[memory]\nscope = \"global\"\n");
  EXPECT_THROW(MemoryConfig().Load(bad_enum.Root().Section("memory")), ConfigError);
  Config bad_budget = Config::FromString("[memory]\nbudget_items = 0\n");
  EXPECT_THROW(MemoryConfig().Load(bad_budget.Root().Section("memory")), ConfigError);
}

TEST(MemoryBank, WritePolicies) {
  MemoryConfig off;
  MemoryBank disabled(off, 1);
  EXPECT_FALSE(Put(disabled, 1, "fact"));
  EXPECT_TRUE(disabled.Retrieve("fact", {1, "train"}).empty());

  MemoryBank facts(Enabled(), 1);
  EXPECT_TRUE(Put(facts, 1, "the red key is in the kitchen"));
  EXPECT_FALSE(Put(facts, 1, "I think the key matters", "train", MemoryKind::kNote));
  EXPECT_TRUE(Put(facts, 1, "try the kitchen", "train", MemoryKind::kOracleHint));
  EXPECT_FALSE(facts.Accepts(MemoryKind::kSummary));
  EXPECT_EQ(facts.stats().refused_by_policy, 1);

  MemoryConfig notes = Enabled();
  notes.write = "facts+notes";
  MemoryBank with_notes(notes, 1);
  EXPECT_TRUE(Put(with_notes, 1, "I think the key matters", "train", MemoryKind::kNote));

  MemoryConfig none = Enabled();
  none.write = "none";
  MemoryBank nothing(none, 1);
  EXPECT_FALSE(Put(nothing, 1, "the red key is in the kitchen"));
}

TEST(MemoryBank, ItemsCarryProvenanceAndSharedIds) {
  IdAllocator ids(41);
  MemoryBank bank(Enabled(), /*run_id=*/7, &ids);
  auto item = bank.Write("  the lamp is lit \n", MemoryKind::kObservation, {0, 3, 2}, "test", 5);
  ASSERT_TRUE(item);
  EXPECT_EQ(item->id, 41);
  EXPECT_EQ(ids.PeekNext(), 42);
  EXPECT_EQ(item->content, "the lamp is lit");
  EXPECT_EQ(item->source.run_id, 7);
  EXPECT_EQ(item->source.episode_id, 3);
  EXPECT_EQ(item->source.t, 2);
  EXPECT_EQ(item->split, "test");
  EXPECT_EQ(item->policy_version, 5);
  EXPECT_EQ(item->created_at.size(), 24u);  // 2024-05-01T12:34:56.789Z
  EXPECT_THROW(bank.Write("x", MemoryKind::kObservation, {0, 3, 0}, "dev", 0), ConfigError);
  EXPECT_THROW(bank.Write("x", MemoryKind::kObservation, {0, 3, 0}, "test", 0, {999}),
               InternalError);
}

TEST(MemoryBank, DedupeWithinScope) {
  MemoryBank episode_scope(Enabled(), 1);
  const int64_t a = Put(episode_scope, 1, "the red key is in the kitchen");
  EXPECT_EQ(Put(episode_scope, 1, "the red key is in the kitchen"), a);
  EXPECT_NE(
      Put(episode_scope, 1, "the red key is in the kitchen", "train", MemoryKind::kOracleHint), a);
  episode_scope.EndEpisode(1);
  EXPECT_NE(Put(episode_scope, 2, "the red key is in the kitchen"), a);  // not visible to 2
  EXPECT_EQ(episode_scope.stats().deduplicated, 1);

  MemoryBank run_scope(Enabled("recency", "run"), 1);
  const int64_t b = Put(run_scope, 1, "the red key is in the kitchen");
  EXPECT_NE(Put(run_scope, 2, "the red key is in the kitchen"), b);  // 1 has not ended
  run_scope.EndEpisode(1);
  EXPECT_EQ(Put(run_scope, 3, "the red key is in the kitchen"), b);
  EXPECT_NE(Put(run_scope, 4, "the red key is in the kitchen", "test"), b);  // other split
}

TEST(MemoryBank, RecencyWithItemAndTokenBudgets) {
  MemoryConfig c = Enabled();
  c.budget_items = 3;
  MemoryBank bank(c, 1);
  Put(bank, 1, "a b c d e");                         // id 1, 5 words
  Put(bank, 1, "x y");                               // id 2, 2 words
  Put(bank, 1, "long one two three four five six");  // id 3, 7 words
  Put(bank, 1, "z");                                 // id 4, 1 word
  auto r = bank.Retrieve("anything", {1, "train"});
  EXPECT_EQ(Ids(r), (std::vector<int64_t>{4, 3, 2}));
  EXPECT_EQ(r[0].rank, 0);
  EXPECT_EQ(r[2].rank, 2);
  EXPECT_DOUBLE_EQ(r[0].score, 4.0);  // recency score: the item id

  c.budget_items = 10;
  c.budget_tokens = 8;
  MemoryBank tight(c, 1);
  for (const char* s : {"a b c d e", "x y", "long one two three four five six", "z"})
    Put(tight, 1, s);
  // Newest first: 4 (1 word), 3 (7 -> 8 total), 2 would exceed, 1 would exceed.
  EXPECT_EQ(Ids(tight.Retrieve("", {1, "train"})), (std::vector<int64_t>{4, 3}));
  auto reads = ToReads(tight.Retrieve("", {1, "train"}));
  ASSERT_EQ(reads.size(), 2u);
  EXPECT_EQ(reads[1].item_id, 3);
  EXPECT_EQ(reads[1].rank, 1);
}

// FTS5's bm25 (k1 = 1.2, b = 0.75) for one term, as SQLite documents it.
double Bm25Term(double tf, double dl, double avgdl, double n_docs, double n_hit) {
  double idf = std::log((n_docs - n_hit + 0.5) / (n_hit + 0.5));
  if (idf <= 0) idf = 1e-6;
  const double k1 = 1.2, b = 0.75;
  return idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl));
}

TEST(MemoryBank, KeywordRankingOnAKnownCorpus) {
  MemoryBank bank(Enabled("keyword", "run"), 1);
  Put(bank, 1, "red key kitchen");      // 1
  Put(bank, 1, "blue key hall");        // 2
  Put(bank, 1, "kitchen door locked");  // 3
  Put(bank, 1, "lamp hall");            // 4
  Put(bank, 1, "green box attic");      // 5
  Put(bank, 1, "old map cellar");       // 6
  bank.EndEpisode(1);
  const double avgdl = 17.0 / 6.0;
  // "red" is in 1 document, "key" in 2: item 1 matches both, item 2 only "key".
  auto r = bank.Retrieve("Where is the RED key?", {2, "train"});
  ASSERT_EQ(Ids(r), (std::vector<int64_t>{1, 2}));
  EXPECT_NEAR(r[0].score, Bm25Term(1, 3, avgdl, 6, 1) + Bm25Term(1, 3, avgdl, 6, 2), 1e-6);
  EXPECT_NEAR(r[1].score, Bm25Term(1, 3, avgdl, 6, 2), 1e-6);
  // Equal term statistics: the shorter item ranks first, ties go to the newest.
  auto k = bank.Retrieve("kitchen, hall", {2, "train"});
  EXPECT_EQ(Ids(k), (std::vector<int64_t>{4, 3, 2, 1}));
  EXPECT_GT(k[0].score, k[1].score);
  EXPECT_DOUBLE_EQ(k[1].score, k[3].score);
  // Stemming: "locking" matches "locked"; FTS syntax in the query is inert text.
  EXPECT_EQ(Ids(bank.Retrieve("locking", {2, "train"})), (std::vector<int64_t>{3}));
  EXPECT_EQ(Ids(bank.Retrieve("\"door\" OR NEAR(x y) * ^lamp", {2, "train"})),
            (std::vector<int64_t>{4, 3}));
  EXPECT_TRUE(bank.Retrieve("zebra", {2, "train"}).empty());
  EXPECT_TRUE(bank.Retrieve("?!", {2, "train"}).empty());
}

TEST(MemoryBank, EpisodeScopeSeesOnlyOwnItems) {
  MemoryBank bank(Enabled("keyword", "episode"), 1);
  Put(bank, 1, "red key kitchen");
  Put(bank, 2, "red key hall");
  bank.EndEpisode(1);
  auto r = bank.Retrieve("red key", {2, "train"});
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].item.content, "red key hall");
}

TEST(MemoryBank, RunScopeSeesEndedEpisodes) {
  MemoryBank bank(Enabled("recency", "run"), 1);
  Put(bank, 1, "from one");
  Put(bank, 2, "from two");
  EXPECT_EQ(Ids(bank.Retrieve("", {2, "train"})), (std::vector<int64_t>{2}));
  bank.EndEpisode(1);
  EXPECT_EQ(Ids(bank.Retrieve("", {2, "train"})), (std::vector<int64_t>{2, 1}));
  EXPECT_THROW(bank.EndEpisode(1), InternalError);
  EXPECT_THROW(Put(bank, 1, "late"), InternalError);
}

TEST(MemoryBank, SplitGuard) {
  for (const std::string retrieval : {"recency", "keyword"}) {
    MemoryBank guarded(Enabled(retrieval, "run"), 1);
    const int64_t train_item = Put(guarded, 1, "red key kitchen", "train");
    guarded.EndEpisode(1);
    EXPECT_TRUE(guarded.Retrieve("red key", {2, "test"}).empty()) << retrieval;
    EXPECT_EQ(guarded.Retrieve("red key", {3, "train"}).size(), 1u) << retrieval;
    try {
      guarded.Read(train_item, {2, "test"});
      FAIL();
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("split guard: episode 2 (test split) may not read "
                                           "memory item 1 created in the train split"),
                std::string::npos)
          << e.what();
      EXPECT_NE(e.hint().find("allow_cross_split = true"), std::string::npos);
    }
    EXPECT_THROW(
        guarded.Write("derived", MemoryKind::kObservation, {0, 2, 0}, "test", 0, {train_item}),
        ConfigError);

    MemoryConfig open = Enabled(retrieval, "run");
    open.allow_cross_split = true;
    MemoryBank allowed(open, 1);
    const int64_t item = Put(allowed, 1, "red key kitchen", "train");
    allowed.EndEpisode(1);
    EXPECT_EQ(Ids(allowed.Retrieve("red key", {2, "test"})), (std::vector<int64_t>{item}));
    EXPECT_EQ(allowed.Read(item, {2, "test"}).content, "red key kitchen");
  }
}

TEST(MemoryBank, SummaryIsDerivedFromTheEpisodeItems) {
  MemoryConfig c = Enabled("recency", "run");
  c.summaries = true;
  MemoryBank bank(c, 9);
  const int64_t f1 = Put(bank, 4, "the red key is in the kitchen");
  const int64_t f2 = Put(bank, 4, "the door is locked");
  Put(bank, 4, "the red key is in the kitchen");  // dedupe: no new item
  auto items = bank.EndEpisode(4);
  ASSERT_EQ(items.size(), 3u);
  EXPECT_EQ(items[0].id, f1);
  EXPECT_EQ(items[1].id, f2);
  const MemoryItem& s = items[2];
  EXPECT_EQ(s.kind, MemoryKind::kSummary);
  EXPECT_EQ(s.content, "episode 4: the red key is in the kitchen; the door is locked");
  EXPECT_EQ(s.parents, (std::vector<int64_t>{f1, f2}));
  EXPECT_EQ(s.source.episode_id, 4);
  EXPECT_EQ(s.source.t, -1);
  EXPECT_EQ(s.source.run_id, 9);
  EXPECT_TRUE(bank.EndEpisode(5).empty());  // nothing written, nothing to summarise
}

}  // namespace
}  // namespace rlid::memory

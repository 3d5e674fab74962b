// The documented views on constructed data with hand-computed answers:
// provenance and lineage through the whole pipeline (MemoryBank -> Writer ->
// SQL), the split-leak report (including a violating row written directly),
// label calibration and the run budget.
#include <gtest/gtest.h>

#include "memory/memory_bank.h"
#include "memory/writer.h"
#include "tests/memory/fixtures.h"

namespace rlid::memory {
namespace {

struct ViewsFixture : ::testing::Test {
  void SetUp() override {
    store = Store::Open(testing::ScratchDir("views") + "/rlid.db", Store::Mode::kReadWrite);
    RunRecord r;
    r.name = "views";
    r.kind = "train";
    run = store->BeginRun(r);
  }
  QueryResult Q(const std::string& sql) { return store->Query(sql); }
  static int64_t I(const Value& v) { return std::get<int64_t>(v); }
  static double D(const Value& v) { return std::get<double>(v); }
  static std::string S(const Value& v) { return std::get<std::string>(v); }
  static bool Null(const Value& v) { return std::holds_alternative<std::monostate>(v); }

  StepRecord Step(int t, const std::string& obs) {
    StepRecord s;
    s.t = t;
    s.observation = obs;
    s.prompt = "prompt: " + obs;
    s.action = 0;
    s.label = "A";
    s.command = "look";
    return s;
  }
  EpisodeRecord Episode(int64_t id, const std::string& split = "train") {
    EpisodeRecord e;
    e.id = id;
    e.run_id = run;
    e.env = "keys";
    e.split = split;
    return e;
  }

  std::unique_ptr<Store> store;
  int64_t run = 0;
};

TEST_F(ViewsFixture, ProvenanceAndLineageThroughThePipeline) {
  MemoryConfig cfg;
  cfg.enabled = true;
  cfg.write = "facts+notes";
  cfg.summaries = true;
  cfg.retrieval = "keyword";
  cfg.scope = "run";
  cfg.budget_items = 2;
  MemoryBank bank(cfg, run, &store->item_ids());
  Writer writer(*store);

  // Episode 1 observes two facts and ends with a summary of them.
  EpisodeRecord e1 = Episode(store->NewEpisodeId());
  e1.steps = {Step(0, "you are in the kitchen; a red key lies here"),
              Step(1, "the kitchen door is locked")};
  const auto f1 = bank.Write("the red key is in the kitchen", MemoryKind::kObservation,
                             {run, e1.id, 0}, "train", 3);
  const auto f2 = bank.Write("the kitchen door is locked", MemoryKind::kObservation,
                             {run, e1.id, 1}, "train", 3);
  e1.new_items = bank.EndEpisode(e1.id);
  e1.length = 2;
  ASSERT_EQ(e1.new_items.size(), 3u);
  const int64_t summary1 = e1.new_items[2].id;

  // Episode 2 reads memory at t=0 and writes a note derived from the summary.
  EpisodeRecord e2 = Episode(store->NewEpisodeId());
  e2.steps = {Step(0, "you are in the hall; where is the red key?")};
  auto got = bank.Retrieve(e2.steps[0].observation, {e2.id, "train"});
  // Best two of three visible items: the fact and the summary that mention the red key.
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].item.id, f1->id);
  EXPECT_EQ(got[1].item.id, summary1);
  e2.steps[0].reads = ToReads(got);
  const auto note = bank.Write("fetch the red key before the door", MemoryKind::kNote,
                               {run, e2.id, 0}, "train", 4, {summary1});
  e2.new_items = bank.EndEpisode(e2.id);
  e2.length = 1;
  ASSERT_EQ(e2.new_items.size(), 2u);  // the note and its summary
  const int64_t summary2 = e2.new_items[1].id;
  writer.Submit(e2);  // out of order: held until episode 1's items are committed
  writer.Submit(e1);
  writer.Flush();

  // Which items were in the prompt of episode 2, t = 0, and where they came from.
  auto p = Q(fmt::format(
      "SELECT rank, item_id, item_kind, source_episode_id, source_t, source_observation "
      "FROM v_step_provenance WHERE episode_id = {} AND t = 0 ORDER BY rank",
      e2.id));
  ASSERT_EQ(p.rows.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(I(p.rows[i][0]), static_cast<int64_t>(i));
    EXPECT_EQ(I(p.rows[i][1]), got[i].item.id);
    EXPECT_EQ(I(p.rows[i][3]), e1.id);
  }
  const size_t fact_row = I(p.rows[0][1]) == f1->id ? 0 : 1;
  EXPECT_EQ(S(p.rows[fact_row][2]), "observation");
  EXPECT_EQ(I(p.rows[fact_row][4]), 0);
  EXPECT_EQ(S(p.rows[fact_row][5]), "you are in the kitchen; a red key lies here");
  EXPECT_TRUE(Null(p.rows[1 - fact_row][4]));  // the summary comes from the whole episode

  // The full lineage of episode 2's summary.
  auto l = Q(fmt::format(
      "SELECT ancestor_id, depth, path, kind FROM v_memory_lineage WHERE item_id = {} "
      "ORDER BY depth, ancestor_id",
      summary2));
  ASSERT_EQ(l.rows.size(), 5u);
  const std::vector<std::pair<int64_t, int64_t>> expect = {
      {summary2, 0}, {note->id, 1}, {summary1, 2}, {f1->id, 3}, {f2->id, 3}};
  for (size_t i = 0; i < expect.size(); ++i) {
    EXPECT_EQ(I(l.rows[i][0]), expect[i].first) << i;
    EXPECT_EQ(I(l.rows[i][1]), expect[i].second) << i;
  }
  EXPECT_EQ(S(l.rows[3][2]),
            fmt::format("{} <- {} <- {} <- {}", summary2, note->id, summary1, f1->id));
  EXPECT_EQ(S(l.rows[1][3]), "note");

  // Nothing leaked; then a test episode reading a train item is reported.
  EXPECT_TRUE(Q("SELECT * FROM v_split_leaks").rows.empty());
  EpisodeRecord t3 = Episode(store->NewEpisodeId(), "test");
  t3.steps = {Step(0, "test episode")};
  store->WriteEpisode(t3);
  Statement leak = store->db().Prepare(
      "INSERT INTO memory_reads(episode_id, t, rank, item_id, score) VALUES (?, 0, 0, ?, 1.0)");
  leak.Bind(1, t3.id).Bind(2, f1->id);
  leak.Run();
  auto leaks = Q("SELECT leak, episode_id, t, item_id, from_split, to_split, permitted "
                 "FROM v_split_leaks");
  ASSERT_EQ(leaks.rows.size(), 1u);
  EXPECT_EQ(S(leaks.rows[0][0]), "read");
  EXPECT_EQ(I(leaks.rows[0][1]), t3.id);
  EXPECT_EQ(I(leaks.rows[0][3]), f1->id);
  EXPECT_EQ(S(leaks.rows[0][4]), "train");
  EXPECT_EQ(S(leaks.rows[0][5]), "test");
  EXPECT_EQ(I(leaks.rows[0][6]), 0);
}

TEST_F(ViewsFixture, SplitLeaksReportsDerivedAndMislabelledItems) {
  EpisodeRecord tr = Episode(store->NewEpisodeId(), "train");
  tr.steps = {Step(0, "train obs")};
  MemoryItem a{store->item_ids().Next(), "train fact", MemoryKind::kObservation, {run, tr.id, 0},
               "train", 0, "", {}};
  // Recorded as test although a train episode created it, and derived from a train parent.
  MemoryItem b{store->item_ids().Next(), "odd", MemoryKind::kNote, {run, tr.id, 0}, "test", 0, "",
               {a.id}};
  tr.new_items = {a, b};
  store->WriteEpisode(tr);
  auto leaks = Q("SELECT leak, item_id, parent_id, from_split, to_split FROM v_split_leaks "
                 "ORDER BY leak");
  ASSERT_EQ(leaks.rows.size(), 2u);
  EXPECT_EQ(S(leaks.rows[0][0]), "derived");
  EXPECT_EQ(I(leaks.rows[0][1]), b.id);
  EXPECT_EQ(I(leaks.rows[0][2]), a.id);
  EXPECT_EQ(S(leaks.rows[1][0]), "mislabelled");
  EXPECT_EQ(S(leaks.rows[1][3]), "train");
  EXPECT_EQ(S(leaks.rows[1][4]), "test");
}

TEST_F(ViewsFixture, LabelCalibrationAndRunBudget) {
  // (probability of A, probability of B, chosen action or -1, success)
  struct Case {
    double pa, pb;
    int action;
    bool success;
  };
  const Case cases[] = {{0.7, 0.3, 0, true}, {0.4, 0.6, 1, false}, {0.5, 0.5, -1, false}};
  for (const Case& c : cases) {
    EpisodeRecord e = Episode(store->NewEpisodeId());
    StepRecord s = Step(0, "choose");
    s.action = c.action;
    s.invalid = c.action < 0;
    s.prompt_tokens = 20;
    s.generated_tokens = c.action < 0 ? 7 : 0;
    for (int k = 0; k < 2; ++k) {
      MenuItemRecord m;
      m.position = k;
      m.action = k;
      m.label = k == 0 ? "A" : "B";
      m.probability = k == 0 ? c.pa : c.pb;
      s.menu.push_back(m);
    }
    e.steps = {s};
    e.success = c.success;
    e.length = 1;
    store->WriteEpisode(e);
  }
  auto cal = Q("SELECT position, label, offered, mean_probability, chosen, chosen_rate, "
               "calibration_gap, success_when_chosen FROM v_label_calibration ORDER BY position");
  ASSERT_EQ(cal.rows.size(), 2u);
  // A: offered 3, mean p (0.7 + 0.4 + 0.5) / 3, chosen once (episode 1, a success).
  EXPECT_EQ(S(cal.rows[0][1]), "A");
  EXPECT_EQ(I(cal.rows[0][2]), 3);
  EXPECT_NEAR(D(cal.rows[0][3]), 1.6 / 3, 1e-12);
  EXPECT_EQ(I(cal.rows[0][4]), 1);
  EXPECT_NEAR(D(cal.rows[0][5]), 1.0 / 3, 1e-12);
  EXPECT_NEAR(D(cal.rows[0][6]), 0.6 / 3, 1e-12);
  EXPECT_DOUBLE_EQ(D(cal.rows[0][7]), 1.0);
  // B: mean p (0.3 + 0.6 + 0.5) / 3, chosen once (episode 2, a failure).
  EXPECT_NEAR(D(cal.rows[1][3]), 1.4 / 3, 1e-12);
  EXPECT_NEAR(D(cal.rows[1][6]), 0.4 / 3, 1e-12);
  EXPECT_DOUBLE_EQ(D(cal.rows[1][7]), 0.0);

  auto b = Q("SELECT episodes, env_steps, invalid_steps, prompt_tokens, generated_tokens, "
             "budget_metrics FROM v_run_budget");
  ASSERT_EQ(b.rows.size(), 1u);
  EXPECT_EQ(I(b.rows[0][0]), 3);
  EXPECT_EQ(I(b.rows[0][1]), 3);
  EXPECT_EQ(I(b.rows[0][2]), 1);
  EXPECT_EQ(I(b.rows[0][3]), 60);
  EXPECT_EQ(I(b.rows[0][4]), 7);
  EXPECT_EQ(S(b.rows[0][5]), "{}");
}

}  // namespace
}  // namespace rlid::memory

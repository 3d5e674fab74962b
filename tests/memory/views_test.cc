// The documented views on constructed data with hand-computed answers:
// provenance and lineage through the whole pipeline (MemoryBank -> Writer ->
// SQL), the split-leak report (including a violating row written directly),
// label calibration, the run budget, and the step provenance views
// (realisations, transitions, optimality).
#include <gtest/gtest.h>

#include <fstream>
#include <iterator>

#include "memory/memory_bank.h"
#include "memory/writer.h"
#include "tests/memory/fixtures.h"
#include "tests/test_paths.h"

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

// The demo database of docs/memory.md: episode 1 observes two facts and is
// summarised; episode 2 reads memory (keyword, run scope) and writes a note
// derived from the summary; test episode 3 gets a train item read written
// directly into memory_reads (a leak the guard would have refused).
struct Demo {
  int64_t e1 = 0, e2 = 0, e3 = 0, f1 = 0, f2 = 0, summary1 = 0, note = 0, summary2 = 0;
  std::vector<Retrieved> got;
};

void BuildDemo(Store& store, int64_t run, Demo& d) {
  MemoryConfig cfg;
  cfg.enabled = true;
  cfg.write = MemoryWrite::kFactsAndNotes;
  cfg.summaries = true;
  cfg.retrieval = Retrieval::kKeyword;
  cfg.scope = MemoryScope::kRun;
  cfg.budget_items = 2;
  MemoryBank bank(cfg, run, &store.item_ids());
  Writer writer(store);
  auto step = [](int t, const std::string& obs) {
    StepRecord s;
    s.t = t;
    s.observation = obs;
    s.prompt = "You are looking for the red key.\nMemory: ...\nObservation: " + obs +
               "\nA) look\nB) wait\nAction:";
    s.prompt_tokens = 24;
    s.action = 0;
    s.label = "A";
    s.command = "look";
    s.menu.push_back({0, 0, "A", "look", "you look around", 0.8, {{"A", 0.7}, {"look", 0.1}}});
    s.menu.push_back({1, 1, "B", "wait", "time passes", 0.2, {{"B", 0.15}, {"wait", 0.05}}});
    return s;
  };
  auto episode = [&](const std::string& split) {
    EpisodeRecord e;
    e.id = store.NewEpisodeId();
    e.run_id = run;
    e.env = "keys";
    e.split = split;
    e.seed = split == "test" ? 43 : 42;  // the same house for both train episodes
    bank.BeginEpisode(e.id, {split, e.seed, 0});
    return e;
  };

  EpisodeRecord e1 = episode("train");
  e1.steps = {step(0, "you are in the kitchen; a red key lies here"),
              step(1, "the kitchen door is locked")};
  // Provenance: e1 t = 0 moved to the state its afterstate predicted, t = 1 was
  // the oracle's optimal action worded as the label, t = 0 as the command.
  e1.steps[0].realisation = "look";
  e1.steps[0].state_hash = 0x1001;
  e1.steps[0].afterstate_hash = 0x1002;
  e1.steps[0].optimal = 0;
  e1.steps[1].realisation = "A";
  e1.steps[1].state_hash = 0x1002;
  e1.steps[1].afterstate_hash = 0x1003;
  e1.steps[1].optimal = 1;
  d.f1 =
      bank.Write("the red key is in the kitchen", MemoryKind::kObservation, {run, e1.id, 0}, 3)->id;
  d.f2 = bank.Write("the kitchen door is locked", MemoryKind::kObservation, {run, e1.id, 1}, 3)->id;
  e1.new_items = bank.EndEpisode(e1.id);
  e1.length = 2;
  ASSERT_EQ(e1.new_items.size(), 3u);
  d.summary1 = e1.new_items[2].id;

  EpisodeRecord e2 = episode("train");
  e2.steps = {step(0, "you are in the hall; where is the red key?")};
  e2.steps[0].realisation = "A";
  e2.steps[0].state_hash = 0x2001;
  e2.steps[0].afterstate_hash = 0x2002;
  e2.steps[0].optimal = 1;
  d.got = bank.Retrieve(e2.steps[0].observation, e2.id);
  e2.steps[0].reads = ToReads(d.got);
  d.note = bank.Write("fetch the red key before the door", MemoryKind::kNote, {run, e2.id, 0}, 4,
                      {d.summary1})
               ->id;
  e2.new_items = bank.EndEpisode(e2.id);
  e2.length = 1;
  e2.success = true;
  e2.ret = 1.0;
  ASSERT_EQ(e2.new_items.size(), 2u);  // the note and its summary
  d.summary2 = e2.new_items[1].id;
  d.e1 = e1.id;
  d.e2 = e2.id;
  writer.Submit(e2);  // out of order: held until episode 1's items are committed
  writer.Submit(e1);
  writer.Flush();

  EpisodeRecord e3 = episode("test");
  e3.steps = {step(0, "a test episode")};
  e3.length = 1;
  writer.Submit(e3);
  writer.Submit(MetricRecord{run, 0, "budget/generated_tokens", 0.0});
  writer.Flush();
  d.e3 = e3.id;
  Statement leak = store.db().Prepare(
      "INSERT INTO memory_reads(episode_id, t, rank, item_id, score) VALUES (:episode, 0, 0, "
      ":item, 1.0)");
  leak.Bind(":episode", d.e3).Bind(":item", d.f1);
  leak.Run();
}

TEST_F(ViewsFixture, ProvenanceLineageAndLeaksThroughThePipeline) {
  Demo d;
  BuildDemo(*store, run, d);
  // Best two of three visible items: the fact and the summary that mention the red key.
  ASSERT_EQ(d.got.size(), 2u);
  EXPECT_EQ(d.got[0].item.id, d.f1);
  EXPECT_EQ(d.got[1].item.id, d.summary1);

  // Which items were in the prompt of episode 2, t = 0, and where they came from.
  auto p = Q(fmt::format(
      "SELECT rank, item_id, item_kind, source_episode_id, source_t, source_observation "
      "FROM v_step_provenance WHERE episode_id = {} AND t = 0 ORDER BY rank",
      d.e2));
  ASSERT_EQ(p.rows.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(I(p.rows[i][0]), static_cast<int64_t>(i));
    EXPECT_EQ(I(p.rows[i][1]), d.got[i].item.id);
    EXPECT_EQ(I(p.rows[i][3]), d.e1);
  }
  EXPECT_EQ(S(p.rows[0][2]), "observation");
  EXPECT_EQ(I(p.rows[0][4]), 0);
  EXPECT_EQ(S(p.rows[0][5]), "you are in the kitchen; a red key lies here");
  EXPECT_TRUE(Null(p.rows[1][4]));  // the summary comes from the whole episode

  // The full lineage of episode 2's summary.
  auto l = Q(
      fmt::format("SELECT ancestor_id, depth, path, kind FROM v_memory_lineage WHERE item_id = {} "
                  "ORDER BY depth, ancestor_id",
                  d.summary2));
  ASSERT_EQ(l.rows.size(), 5u);
  const std::vector<std::pair<int64_t, int64_t>> expect = {
      {d.summary2, 0}, {d.note, 1}, {d.summary1, 2}, {d.f1, 3}, {d.f2, 3}};
  for (size_t i = 0; i < expect.size(); ++i) {
    EXPECT_EQ(I(l.rows[i][0]), expect[i].first) << i;
    EXPECT_EQ(I(l.rows[i][1]), expect[i].second) << i;
  }
  EXPECT_EQ(S(l.rows[3][2]),
            fmt::format("{} <- {} <- {} <- {}", d.summary2, d.note, d.summary1, d.f1));
  EXPECT_EQ(S(l.rows[1][3]), "note");

  // The directly written read of a train item by the test episode is reported.
  auto leaks =
      Q("SELECT leak, episode_id, t, item_id, from_split, to_split, permitted "
        "FROM v_split_leaks");
  ASSERT_EQ(leaks.rows.size(), 1u);
  EXPECT_EQ(S(leaks.rows[0][0]), "read");
  EXPECT_EQ(I(leaks.rows[0][1]), d.e3);
  EXPECT_EQ(I(leaks.rows[0][3]), d.f1);
  EXPECT_EQ(S(leaks.rows[0][4]), "train");
  EXPECT_EQ(S(leaks.rows[0][5]), "test");
  EXPECT_EQ(I(leaks.rows[0][6]), 0);
  // Without that row nothing leaked.
  store->db().Exec(fmt::format("DELETE FROM memory_reads WHERE episode_id = {}", d.e3));
  EXPECT_TRUE(Q("SELECT * FROM v_split_leaks").rows.empty());
}

// Every ```sql block in docs/memory.md runs on the demo database, and where the
// page shows the output (a plain ``` block right after), it is exactly what
// `rlid sql` prints.
TEST_F(ViewsFixture, DocumentedQueriesRunAndShowTheirRealOutput) {
  Demo d;
  BuildDemo(*store, run, d);
  std::ifstream in(std::string(RLID_SOURCE_DIR) + "/docs/memory.md");
  ASSERT_TRUE(in) << "docs/memory.md not found";
  const std::string doc((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  int queries = 0, outputs = 0;
  for (size_t pos = 0; (pos = doc.find("```sql\n", pos)) != std::string::npos;) {
    const size_t begin = pos + 7, end = doc.find("```", begin);
    ASSERT_NE(end, std::string::npos);
    const std::string sql = doc.substr(begin, end - begin);
    QueryResult r;
    ASSERT_NO_THROW(r = Q(sql)) << sql;
    ++queries;
    pos = end + 3;
    if (doc.compare(pos, 5, "\n```\n") == 0) {
      const size_t out_begin = pos + 5, out_end = doc.find("```", out_begin);
      EXPECT_EQ(FormatTable(r), doc.substr(out_begin, out_end - out_begin)) << sql;
      ++outputs;
      pos = out_end + 3;
    }
  }
  EXPECT_GE(queries, 5);
  EXPECT_GE(outputs, 3);
}

TEST_F(ViewsFixture, SplitLeaksReportsDerivedAndMislabelledItems) {
  EpisodeRecord tr = Episode(store->NewEpisodeId(), "train");
  tr.steps = {Step(0, "train obs")};
  auto item = [&](std::string content, MemoryKind kind, std::string split,
                  std::vector<int64_t> parents) {
    MemoryItem it;
    it.id = store->item_ids().Next();
    it.content = std::move(content);
    it.kind = kind;
    it.source = {run, tr.id, 0};
    it.split = std::move(split);
    it.parents = std::move(parents);
    return it;
  };
  MemoryItem a = item("train fact", MemoryKind::kObservation, "train", {});
  // Recorded as test although a train episode created it, and derived from a train parent.
  MemoryItem b = item("odd", MemoryKind::kNote, "test", {a.id});
  tr.new_items = {a, b};
  store->WriteEpisode(tr);
  auto leaks =
      Q("SELECT leak, item_id, parent_id, from_split, to_split FROM v_split_leaks "
        "ORDER BY leak");
  ASSERT_EQ(leaks.rows.size(), 2u);
  EXPECT_EQ(S(leaks.rows[0][0]), "derived");
  EXPECT_EQ(I(leaks.rows[0][1]), b.id);
  EXPECT_EQ(I(leaks.rows[0][2]), a.id);
  EXPECT_EQ(S(leaks.rows[1][0]), "mislabelled");
  EXPECT_EQ(S(leaks.rows[1][3]), "train");
  EXPECT_EQ(S(leaks.rows[1][4]), "test");
}

TEST_F(ViewsFixture, StepRealisations) {
  EpisodeRecord dec = Episode(store->NewEpisodeId());
  auto menu_step = [&](int t, int action, std::string realisation) {
    StepRecord s = Step(t, "choose");
    s.action = action;
    s.invalid = action < 0;
    s.realisation = std::move(realisation);
    for (int k = 0; k < 2; ++k) {
      MenuItemRecord m;
      m.position = 1 - k;  // displayed in reverse
      m.action = k;
      m.label = k == 0 ? "A" : "B";
      m.command = k == 0 ? "open door" : "wait";
      m.probability = k == 0 ? 0.6 : 0.4;
      m.realisations = {{m.label, m.probability * 0.75}, {m.command, m.probability * 0.25}};
      if (k == 1) m.realisations.push_back({"open door", kNotApplicable});  // B's odd realisation
      s.menu.push_back(m);
    }
    return s;
  };
  dec.steps = {menu_step(0, 0, "open door"),  // A worded as its command: 0.6 * 0.25
               menu_step(1, 1, "B"),          // B as its label: 0.4 * 0.75
               menu_step(2, 1, "open door"),  // B's non-finite realisation: NULL
               menu_step(3, 0, "shut door"),  // not a recorded realisation: NULL
               menu_step(4, -1, "")};         // invalid: no realisation
  store->WriteEpisode(dec);
  EpisodeRecord tok = Episode(store->NewEpisodeId(), "test");
  tok.plane = "token";
  tok.steps = {menu_step(0, 0, "open door")};
  tok.steps[0].generated_text = "I will open door";
  store->WriteEpisode(tok);

  auto r =
      Q("SELECT episode_id, t, split, plane, label, realisation, generated_text, invalid, "
        "realisation_probability FROM v_step_realisations ORDER BY episode_id, t");
  ASSERT_EQ(r.rows.size(), 6u);
  EXPECT_EQ(S(r.rows[0][5]), "open door");
  EXPECT_DOUBLE_EQ(D(r.rows[0][8]), 0.6 * 0.25);
  EXPECT_EQ(S(r.rows[1][5]), "B");
  EXPECT_DOUBLE_EQ(D(r.rows[1][8]), 0.4 * 0.75);
  EXPECT_TRUE(Null(r.rows[2][8]));
  EXPECT_TRUE(Null(r.rows[3][8]));
  EXPECT_TRUE(Null(r.rows[4][5]));  // empty -> NULL
  EXPECT_EQ(I(r.rows[4][7]), 1);
  EXPECT_TRUE(Null(r.rows[4][8]));
  EXPECT_TRUE(Null(r.rows[0][6]));  // decision plane: no generated text
  EXPECT_EQ(I(r.rows[5][0]), tok.id);
  EXPECT_EQ(S(r.rows[5][2]), "test");
  EXPECT_EQ(S(r.rows[5][3]), "token");
  EXPECT_EQ(S(r.rows[5][6]), "I will open door");
  EXPECT_TRUE(Null(r.rows[5][8]));  // token plane: the realisation was generated, not drawn
}

TEST_F(ViewsFixture, Transitions) {
  EpisodeRecord e = Episode(store->NewEpisodeId());
  for (int t = 0; t < 4; ++t) e.steps.push_back(Step(t, "room " + std::to_string(t)));
  e.steps[0].state_hash = 0xa0;
  e.steps[0].afterstate_hash = 0xa1;  // predicted the next state
  e.steps[1].state_hash = 0xa1;
  e.steps[1].afterstate_hash = 0xbeef;  // did not
  e.steps[2].state_hash = 0xa2;
  e.steps[2].action = -1;
  e.steps[2].invalid = true;  // no afterstate
  e.steps[3].state_hash = 0xa2;
  e.steps[3].afterstate_hash = 0xffffffffffffffffULL;  // last step: no next state
  store->WriteEpisode(e);
  EpisodeRecord bare = Episode(store->NewEpisodeId());  // nothing recorded
  bare.steps = {Step(0, "x"), Step(1, "y")};
  store->WriteEpisode(bare);

  auto r = Q(fmt::format(
      "SELECT t, state_hash, action, afterstate_hash, next_state_hash, afterstate_matches_next "
      "FROM v_transitions WHERE episode_id = {} ORDER BY t",
      e.id));
  ASSERT_EQ(r.rows.size(), 4u);
  EXPECT_EQ(S(r.rows[0][1]), "00000000000000a0");  // as prompt_hash: 16 lowercase hex digits
  EXPECT_EQ(S(r.rows[0][3]), "00000000000000a1");
  EXPECT_EQ(S(r.rows[0][4]), "00000000000000a1");
  EXPECT_EQ(I(r.rows[0][5]), 1);
  EXPECT_EQ(S(r.rows[1][3]), "000000000000beef");
  EXPECT_EQ(I(r.rows[1][5]), 0);
  EXPECT_EQ(I(r.rows[2][2]), -1);
  EXPECT_TRUE(Null(r.rows[2][3]));
  EXPECT_EQ(S(r.rows[2][4]), "00000000000000a2");
  EXPECT_TRUE(Null(r.rows[2][5]));
  EXPECT_EQ(S(r.rows[3][3]), "ffffffffffffffff");
  EXPECT_TRUE(Null(r.rows[3][4]));  // the end of the episode
  EXPECT_TRUE(Null(r.rows[3][5]));
  auto b =
      Q(fmt::format("SELECT state_hash, afterstate_hash, next_state_hash, afterstate_matches_next "
                    "FROM v_transitions WHERE episode_id = {} ORDER BY t",
                    bare.id));
  ASSERT_EQ(b.rows.size(), 2u);
  for (const auto& row : b.rows)
    for (const auto& v : row) EXPECT_TRUE(Null(v));
}

TEST_F(ViewsFixture, StepOptimality) {
  auto episode = [&](const std::string& split, int64_t iteration, std::vector<int> optimal) {
    EpisodeRecord e = Episode(store->NewEpisodeId(), split);
    e.iteration = iteration;
    for (int t = 0; t < static_cast<int>(optimal.size()); ++t) {
      StepRecord s = Step(t, "s");
      s.optimal = optimal[t];
      if (optimal[t] == 0 && t == 0) {  // an invalid step counts as not optimal
        s.action = -1;
        s.invalid = true;
      }
      e.steps.push_back(s);
    }
    store->WriteEpisode(e);
  };
  episode("train", 1, {0, 1, 1});
  episode("train", 1, {1, -1});
  episode("train", 2, {0, 0});
  episode("test", 1, {-1, -1});
  auto r =
      Q("SELECT split, plane, iteration, steps, oracle_steps, optimal_steps, optimal_rate "
        "FROM v_step_optimality ORDER BY split, plane, iteration");
  ASSERT_EQ(r.rows.size(), 3u);
  EXPECT_EQ(S(r.rows[0][0]), "test");
  EXPECT_EQ(I(r.rows[0][3]), 2);
  EXPECT_EQ(I(r.rows[0][4]), 0);
  EXPECT_EQ(I(r.rows[0][5]), 0);
  EXPECT_TRUE(Null(r.rows[0][6]));  // no oracle: no rate
  EXPECT_EQ(S(r.rows[1][0]), "train");
  EXPECT_EQ(S(r.rows[1][1]), "decision");
  EXPECT_EQ(I(r.rows[1][2]), 1);
  EXPECT_EQ(I(r.rows[1][3]), 5);
  EXPECT_EQ(I(r.rows[1][4]), 4);
  EXPECT_EQ(I(r.rows[1][5]), 3);
  EXPECT_DOUBLE_EQ(D(r.rows[1][6]), 0.75);
  EXPECT_EQ(I(r.rows[2][2]), 2);
  EXPECT_EQ(I(r.rows[2][5]), 0);
  EXPECT_DOUBLE_EQ(D(r.rows[2][6]), 0.0);
  EXPECT_EQ(Q("SELECT optimal FROM steps WHERE optimal IS NULL").rows.size(), 3u);
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
  auto cal =
      Q("SELECT position, label, offered, mean_probability, chosen, chosen_rate, "
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

  // An evaluation episode of two steps: counted apart from training's budget.
  EpisodeRecord ev = Episode(store->NewEpisodeId());
  ev.split = "test";
  ev.mode = "greedy";
  ev.steps = {Step(0, "a"), Step(1, "b")};
  ev.length = 2;
  store->WriteEpisode(ev);
  auto b =
      Q("SELECT episodes, env_steps, invalid_steps, step_prompt_tokens, generated_tokens, "
        "budget_metrics, eval_episodes, eval_env_steps FROM v_run_budget");
  ASSERT_EQ(b.rows.size(), 1u);
  EXPECT_EQ(I(b.rows[0][0]), 3);
  EXPECT_EQ(I(b.rows[0][1]), 3);
  EXPECT_EQ(I(b.rows[0][2]), 1);
  EXPECT_EQ(I(b.rows[0][3]), 60);
  EXPECT_EQ(I(b.rows[0][4]), 7);
  EXPECT_EQ(S(b.rows[0][5]), "{}");
  EXPECT_EQ(I(b.rows[0][6]), 1);
  EXPECT_EQ(I(b.rows[0][7]), 2);
  auto modes = Q("SELECT mode, COUNT(*) FROM episodes GROUP BY mode ORDER BY mode");
  EXPECT_EQ(FormatCsv(modes), "mode,COUNT(*)\ngreedy,1\nrollout,3\n");
}

}  // namespace
}  // namespace rlid::memory

// The shared training loop with decision PPO on small bandit runs: --resume
// continues a crashed run to the same weights and metrics as an uninterrupted
// one, the non-finite guard stops with a NumericError naming the tensor and
// iteration and never checkpoints broken weights, reruns record identical
// trajectories, the budget counters agree with the store, the all-action
// estimator logs both gradient variances, and `rlid train` / `rlid eval` run
// from the command line.
#include <gtest/gtest.h>
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <stdexcept>

#include "core/error.h"
#include "envs/api/env.h"
#include "envs/api/simple_env.h"
#include "memory/query.h"
#include "memory/store.h"
#include "policy/model/checkpoint.h"
#include "policy/model/runtime.h"
#include "policy/tokenizer/tokenizer_corpus.h"
#include "tests/agents/fixtures.h"
#include "tests/cli/run_cli.h"
#include "trainers/runtime/trainer.h"
#include "tests/test_paths.h"

namespace rlid::trainers {
namespace {

namespace fs = std::filesystem;
using rlid::testing::Experiment;
using rlid::testing::TempDir;

constexpr const char* kBandit = "name = \"bandit\"\narms = 4";
constexpr const char* kMaze2 = "name = \"maze\"\nsize = 2";

// 4 iterations of 16 episodes; a tokenizer trained on little text keeps the
// setup fast.
std::string LoopToml(const std::string& env = kBandit) {
  return R"(
[run]
name = "loop"
seed = 3
threads = 1

[env]
)" + env +
         R"(

[tokenizer]
vocab_size = 384
corpus_episodes = 60

[policy]
preset = "tiny"
num_layers = 1

[trainer]
algorithm = "ppo_decision"
iterations = 4
episodes_per_iteration = 16
num_envs = 16
epochs = 2
minibatch_size = 8
lr = 1e-3
lr_schedule = "linear"
eval_every = 2
eval_episodes = 8
checkpoint_every = 2
)";
}

std::unique_ptr<Trainer> MakeTrainer(const ExperimentConfig& cfg) {
  return TrainerRegistry::Global().Make(cfg.trainer.algorithm);
}

// Runs a whole training in `dir`; returns the result.
TrainResult RunTraining(const ExperimentConfig& cfg, const std::string& dir, bool resume = false) {
  auto trainer = MakeTrainer(cfg);
  trainers::Run s(cfg, {.out_dir = dir, .resume = resume, .quiet = true});
  auto r = Train(s, *trainer, {.resume = resume, .quiet = true});
  s.End("completed");
  return r;
}

memory::QueryResult Query(const std::string& dir, const std::string& sql) {
  auto store = memory::Store::Open((fs::path(dir) / memory::kDatabaseFileName).string(),
                                   memory::Store::Mode::kReadOnly);
  return store->Query(sql);
}

double AsDouble(const memory::Value& v) {
  if (auto* i = std::get_if<int64_t>(&v)) return static_cast<double>(*i);
  if (auto* d = std::get_if<double>(&v)) return *d;
  return std::nan("");
}

// Metrics by (iteration, key) that must not depend on timing; for a key
// logged more than once (a crashed run's iteration redone after resume) the
// row of the latest run wins.
std::map<std::pair<int64_t, std::string>, double> DeterministicMetrics(const std::string& dir) {
  auto q = Query(dir,
                 "SELECT iteration, key, value FROM metrics WHERE key NOT LIKE 'time/%' "
                 "AND key NOT IN ('budget/wall_seconds', 'budget/engine_sync_seconds') ORDER BY run_id, rowid");
  std::map<std::pair<int64_t, std::string>, double> out;
  for (const auto& row : q.rows)
    out[{std::get<int64_t>(row[0]), std::get<std::string>(row[1])}] = AsDouble(row[2]);
  return out;
}

// A trainer that dies in iteration `crash_at`, after its episodes are recorded (a killed process).
class CrashingTrainer final : public Trainer {
 public:
  CrashingTrainer(std::unique_ptr<Trainer> inner, int64_t crash_at)
      : inner_(std::move(inner)), crash_at_(crash_at) {}
  policy::Plane plane() const override { return inner_->plane(); }
  void Setup(const TrainerConfig& cfg, policy::TransformerLM model) override {
    inner_->Setup(cfg, model);
  }
  RolloutAhead::Play Play(const IterationContext& c) override { return inner_->Play(c); }
  Metrics Complete(IterationContext& c, PlayedBatch& batch) override {
    return inner_->Complete(c, batch);
  }
  // Dies after the iteration's episodes are recorded, before its update.
  Metrics Prepare(IterationContext& c, const PlayedBatch& batch) override {
    if (c.iteration == crash_at_) throw std::runtime_error("killed");
    return inner_->Prepare(c, batch);
  }
  Metrics Learn(IterationContext& c, const PlayedBatch& batch) override {
    return inner_->Learn(c, batch);
  }
  void SaveState(const std::string& dir) const override { inner_->SaveState(dir); }
  void LoadState(const std::string& dir) override { inner_->LoadState(dir); }

 private:
  std::unique_ptr<Trainer> inner_;
  int64_t crash_at_;
};

void ExpectSameWeights(const std::string& ckpt_a, const std::string& ckpt_b) {
  auto a = policy::LoadCheckpoint(ckpt_a), b = policy::LoadCheckpoint(ckpt_b);
  auto pa = a.model->named_parameters(), pb = b.model->named_parameters();
  ASSERT_EQ(pa.size(), pb.size());
  for (const auto& p : pa) EXPECT_TRUE(torch::equal(p.value(), pb[p.key()])) << p.key();
}

// Trains `cfg` to the end in `whole`; in `crashed`, trains until a crash in
// iteration `crash_at` (after the checkpoint of iteration 1, with later
// iterations' episodes and metrics already recorded), then resumes. The two
// directories must then hold the same run: one `runs` row each, the same
// episodes (no duplicates), the same memory, metrics and weights.
void ExpectResumeEqualsUninterrupted(
    const ExperimentConfig& cfg, int64_t crash_at,
    const std::function<void(const std::string&)>& check_whole = {}) {
  TempDir whole("resume_whole"), crashed("resume_crashed");
  TrainResult full = RunTraining(cfg, whole.str());
  ASSERT_EQ(full.iterations, cfg.trainer.iterations);
  {
    CrashingTrainer trainer(MakeTrainer(cfg), crash_at);
    trainers::Run s(cfg, {.out_dir = crashed.str(), .quiet = true});
    EXPECT_THROW(Train(s, trainer, {.quiet = true}), std::runtime_error);
  }
  // checkpoints/latest is a symlink to the newest complete checkpoint.
  EXPECT_EQ(fs::read_symlink(crashed.path() / "checkpoints" / "latest"), fs::path("iter_000001"));
  EXPECT_TRUE(fs::exists(crashed.path() / "checkpoints" / "latest" / "rlid.json"));
  // Before resuming, the crashed directory holds episodes written after the checkpoint.
  const std::string after_ckpt = "SELECT count(*) FROM episodes WHERE iteration > 1";
  EXPECT_GT(AsDouble(Query(crashed.str(), after_ckpt).rows[0][0]), 0);
  TrainResult resumed = RunTraining(cfg, crashed.str(), /*resume=*/true);
  EXPECT_EQ(resumed.iterations, cfg.trainer.iterations);

  ExpectSameWeights(full.final_checkpoint, resumed.final_checkpoint);
  EXPECT_EQ(AsDouble(Query(crashed.str(), "SELECT count(*) FROM runs").rows[0][0]), 1)
      << "the resumed run continues its own row";
  EXPECT_EQ(memory::FormatCsv(Query(crashed.str(), "SELECT status FROM runs")),
            "status\ncompleted\n");
  auto a = DeterministicMetrics(whole.str()), b = DeterministicMetrics(crashed.str());
  EXPECT_GT(a.size(), 4u * 20u);
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [key, value] : a) {
    ASSERT_TRUE(b.count(key)) << key.second << " @" << key.first;
    EXPECT_EQ(value, b[key]) << key.second << " @" << key.first;
  }
  EXPECT_EQ(full.final_greedy.success, resumed.final_greedy.success);
  // Every episode, step and memory row of the uninterrupted run, once, with the same ids.
  for (const char* sql :
       {"SELECT id, iteration, split, seed, ret, length, truncated FROM episodes ORDER BY id",
        "SELECT episode_id, t, action, reward, logp_rollout, prompt_hash, realisation, state_hash, "
        "afterstate_hash, optimal FROM steps ORDER BY episode_id, t",
        "SELECT id, content, kind, source_episode_id, source_t, split, instance, pass FROM "
        "memory_items ORDER BY id",
        "SELECT episode_id, t, rank, item_id, score FROM memory_reads ORDER BY episode_id, t, rank",
        "SELECT iteration FROM checkpoints ORDER BY iteration"}) {
    EXPECT_EQ(memory::FormatCsv(Query(whole.str(), sql)),
              memory::FormatCsv(Query(crashed.str(), sql)))
        << sql;
  }
  if (check_whole) check_whole(whole.str());
}

TEST(TrainLoop, ResumeAfterACrashEqualsAnUninterruptedRun) {
  ExpectResumeEqualsUninterrupted(*Experiment(LoopToml()), /*crash_at=*/3);
}

// Think-then-decide (prompt.reasoning) in decision PPO: a crashed run resumes
// to the uninterrupted one (the scratchpad sampler gets the restored weights),
// the store keeps each scratchpad and the joint log-prob, and the budget
// counts the scratchpad tokens. Options that cannot cover the scratchpad are
// refused when the config loads.
TEST(PpoDecision, ThinkingRunsResumeAndRecordTheScratchpad) {
  const std::vector<std::string> think = {"prompt.reasoning=true", "prompt.max_think_tokens=6"};
  ExpectResumeEqualsUninterrupted(
      *Experiment(LoopToml("name = \"arith\"\ndigits = 2\nchoices = 2"), think), /*crash_at=*/3,
      [](const std::string& dir) {
        auto q = Query(dir,
                       "SELECT count(*), sum(generated_tokens), min(length(generated_text)) FROM steps "
                       "JOIN episodes e ON e.id = steps.episode_id WHERE e.split = 'train'");
        ASSERT_GT(AsDouble(q.rows[0][0]), 0);
        EXPECT_GT(AsDouble(q.rows[0][2]), 0) << "every decision carries its scratchpad";
        auto g = Query(dir,
                       "SELECT value FROM metrics WHERE key = 'budget/generated_tokens' ORDER BY "
                       "iteration DESC LIMIT 1");
        EXPECT_GE(AsDouble(g.rows[0][0]), AsDouble(q.rows[0][1]))
            << "the budget counts the scratchpads (evaluation's too)";
      });
  for (const char* bad :
       {"trainer.gradient_estimator=all_action", "trainer.kl.coef=0.1", "sampler.temperature=0.7"}) {
    EXPECT_THROW(Experiment(LoopToml("name = \"arith\"\ndigits = 2\nchoices = 2"),
                            {"prompt.reasoning=true", bad}),
                 ConfigError)
        << bad;
  }
}

// The same with memory on, on the keys household: the bank is restored from the
// store (facts, summaries, keyword retrieval across episodes of the same house).
TEST(TrainLoop, ResumeWithMemoryEqualsAnUninterruptedRun) {
  auto cfg =
      Experiment(LoopToml("name = \"keys\"\nstep_limit = 6"),
                 {"prompt.show_instructions=false", "trainer.epochs=1", "memory.enabled=true",
                  "memory.summaries=true", "memory.retrieval=keyword", "memory.scope=run",
                  "trainer.train_seed_pool=2", "trainer.episodes_per_iteration=4",
                  "trainer.num_envs=4", "trainer.eval_episodes=4"});
  ExpectResumeEqualsUninterrupted(*cfg, /*crash_at=*/3, [](const std::string& whole) {
    // The memory really was read across episodes (else the test shows nothing).
    EXPECT_GT(AsDouble(Query(whole,
                             "SELECT count(*) FROM memory_reads r JOIN memory_items m ON "
                             "m.id = r.item_id WHERE m.source_episode_id <> r.episode_id")
                           .rows[0][0]),
              0);
    // ... and only ever about the house being played (43% of train reads were
    // facts about another house before items were scoped to their instance).
    EXPECT_EQ(AsDouble(Query(whole,
                             "SELECT count(*) FROM memory_reads r JOIN memory_items m ON "
                             "m.id = r.item_id JOIN episodes e ON e.id = r.episode_id "
                             "WHERE m.instance <> e.seed")
                           .rows[0][0]),
              0);
  });
}

// ---- asynchronous rollouts (trainer.max_staleness) ---------------------------

// Metrics that do not depend on timing (DeterministicMetrics without the
// worker's and the learner's seconds).
std::map<std::pair<int64_t, std::string>, double> TimelessMetrics(const std::string& dir) {
  auto m = DeterministicMetrics(dir);
  for (auto it = m.begin(); it != m.end();)
    it = it->first.second == "async/rollout_s" || it->first.second == "async/wait_s"
             ? m.erase(it)
             : std::next(it);
  return m;
}

// The train episodes and their decisions by (iteration, env seed), without
// store ids: a batch played ahead takes its ids before the evaluation that
// precedes it in the synchronous run.
std::string TrainPlays(const std::string& dir) {
  return memory::FormatCsv(Query(
      dir,
      "SELECT e.iteration, e.seed, e.ret, s.t, s.action, s.reward, s.logp_rollout FROM steps s "
      "JOIN episodes e ON e.id = s.episode_id WHERE e.split = 'train' "
      "ORDER BY e.iteration, e.seed, e.ret, s.t, s.action"));
}

// A learning rate too small to move a float32 weight leaves every version of
// the weights equal, so the worker's copies must play exactly the synchronous
// run's episodes, and every evaluation must agree: the machinery of playing
// ahead (copies, order, budget, records) changes nothing by itself.
TEST(AsyncRollouts, WithWeightsThatNeverMoveTheyPlayTheSynchronousEpisodes) {
  TempDir sync_dir("async_sync"), async_dir("async_ahead");
  RunTraining(*Experiment(LoopToml(), {"trainer.lr=1e-30"}), sync_dir.str());
  RunTraining(*Experiment(LoopToml(), {"trainer.lr=1e-30", "trainer.max_staleness=2"}),
              async_dir.str());
  EXPECT_EQ(TrainPlays(sync_dir.str()), TrainPlays(async_dir.str()));
  auto a = TimelessMetrics(sync_dir.str()), b = TimelessMetrics(async_dir.str());
  for (const auto& [key, value] : a) {
    const std::string& k = key.second;
    if (k.rfind("rollout/", 0) == 0 || k.rfind("eval/", 0) == 0 || k == "budget/env_steps" ||
        k == "budget/rollout_flops") {
      ASSERT_TRUE(b.count(key)) << k << " @" << key.first;
      EXPECT_EQ(value, b[key]) << k << " @" << key.first;
    }
  }
  // Stale batches read pi_prox, equal to pi_behav here: weight 1.
  EXPECT_NEAR(b.at({3, "staleness/weight_mean"}), 1.0, 1e-5);
  EXPECT_EQ(b.at({3, "async/version_lag"}), 2);
  EXPECT_EQ(a.count({3, "async/version_lag"}), 0u) << "a synchronous run reports no async/*";
}

// With weights that learn, a run two updates stale repeats itself exactly,
// iteration i trains on the episodes of version max(0, i - 2) (the store
// records it per episode), and only its stale batches carry staleness/*
// (none at all with staleness.kind = none, which clips around pi_behav).
TEST(AsyncRollouts, StaleRunsRepeatAndRecordTheWeightsTheirEpisodesWerePlayedWith) {
  auto cfg = Experiment(LoopToml(), {"trainer.max_staleness=2"});
  TempDir first("async_first"), second("async_second"), naive("async_naive");
  RunTraining(*cfg, first.str());
  RunTraining(*cfg, second.str());
  const auto a = TimelessMetrics(first.str()), b = TimelessMetrics(second.str());
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [key, value] : a) EXPECT_EQ(value, b.at(key)) << key.second << " @" << key.first;
  EXPECT_EQ(memory::FormatCsv(Query(first.str(),
                                    "SELECT iteration, min(policy_version), max(policy_version) "
                                    "FROM episodes WHERE split = 'train' GROUP BY iteration")),
            "iteration,min(policy_version),max(policy_version)\n0,0,0\n1,0,0\n2,0,0\n3,1,1\n");
  const int64_t lags[] = {0, 1, 2, 2};
  for (int64_t it = 0; it < 4; ++it) {
    EXPECT_EQ(a.at({it, "async/version_lag"}), lags[it]);
    EXPECT_EQ(a.count({it, "staleness/weight_mean"}), it > 0 ? 1u : 0u) << it;
  }
  EXPECT_NE(a.at({3, "staleness/kl"}), 0) << "two updates moved the policy";

  RunTraining(
      *Experiment(LoopToml(), {"trainer.max_staleness=2", "trainer.loss.staleness.kind=none"}),
      naive.str());
  const auto n = TimelessMetrics(naive.str());
  EXPECT_EQ(n.count({3, "staleness/weight_mean"}), 0u);
  EXPECT_EQ(n.at({3, "async/version_lag"}), 2);
  EXPECT_NE(n.at({3, "losses/policy"}), a.at({3, "losses/policy"}))
      << "clipping around pi_behav is not the decoupled loss";
}

// --resume of an asynchronous run: the checkpoint holds the weight versions the
// batches after it are played with, so a crashed run resumes to the same
// weights and metrics as an uninterrupted one.
TEST(AsyncRollouts, ResumeAfterACrashEqualsAnUninterruptedRun) {
  auto cfg = Experiment(LoopToml(), {"trainer.max_staleness=1"});
  TempDir whole("async_whole"), crashed("async_crashed");
  TrainResult full = RunTraining(*cfg, whole.str());
  {
    CrashingTrainer trainer(MakeTrainer(*cfg), /*crash_at=*/3);
    trainers::Run s(*cfg, {.out_dir = crashed.str(), .quiet = true});
    EXPECT_THROW(Train(s, trainer, {.quiet = true}), std::runtime_error);
  }
  EXPECT_TRUE(fs::exists(crashed.path() / "checkpoints" / "iter_000001" / "behaviour_v1.pt"));
  TrainResult resumed = RunTraining(*cfg, crashed.str(), /*resume=*/true);
  ExpectSameWeights(full.final_checkpoint, resumed.final_checkpoint);
  const auto a = TimelessMetrics(whole.str()), b = TimelessMetrics(crashed.str());
  ASSERT_EQ(a.size(), b.size());
  for (const auto& [key, value] : a) EXPECT_EQ(value, b.at(key)) << key.second << " @" << key.first;
  EXPECT_EQ(TrainPlays(whole.str()), TrainPlays(crashed.str()));

  // A run resumed with more staleness than it was started with lacks those weights.
  auto more = Experiment(LoopToml(), {"trainer.max_staleness=3", "trainer.iterations=6"});
  try {
    RunTraining(*more, crashed.str(), /*resume=*/true);
    ADD_FAILURE() << "resumed without the weights of version 1";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("which this run does not hold"), std::string::npos)
        << e.what();
  }
}

// With memory on, an evaluation reads only its own items: greedy-then-sampled
// and sampled-then-greedy give the same results.
TEST(TrainLoop, EvaluationResultsDoNotDependOnTheirOrder) {
  auto cfg = Experiment(LoopToml("name = \"keys\"\nstep_limit = 6"),
                        {"prompt.show_instructions=false", "memory.enabled=true",
                         "memory.summaries=true", "memory.scope=run"});
  TempDir a("eval_order_a"), b("eval_order_b");
  auto eval = [&](trainers::Run& run, bool greedy) {
    return Evaluate(run.Agent(policy::Plane::kDecision, 0), policy::Plane::kDecision, 6, greedy,
                    run.budget, &run.recorder());
  };
  trainers::Run ra(*cfg, {.out_dir = a.str(), .quiet = true});
  trainers::Run rb(*cfg, {.out_dir = b.str(), .quiet = true});
  auto a_greedy = eval(ra, true), a_sampled = eval(ra, false);
  auto b_sampled = eval(rb, false), b_greedy = eval(rb, true);
  EXPECT_EQ(a_greedy.ret, b_greedy.ret);
  EXPECT_EQ(a_greedy.p_optimal, b_greedy.p_optimal);
  EXPECT_EQ(a_sampled.ret, b_sampled.ret);
  EXPECT_EQ(a_sampled.p_optimal, b_sampled.p_optimal);
  ra.End("completed");
  rb.End("completed");
}

TEST(TrainLoop, ResumeWithoutACheckpointIsAnIoError) {
  auto cfg = Experiment(LoopToml());
  TempDir dir("resume_none");
  EXPECT_THROW(trainers::Run(*cfg, {.out_dir = dir.str(), .resume = true, .quiet = true}), IoError);
  auto trainer = MakeTrainer(*cfg);
  trainers::Run s(*cfg, {.out_dir = dir.str(), .quiet = true});
  EXPECT_THROW(Train(s, *trainer, {.resume = true, .quiet = true}), IoError);
}

// Every checkpoint in the run directory holds finite weights.
void ExpectFiniteCheckpoints(const std::string& run_dir) {
  fs::path root = fs::path(run_dir) / "checkpoints";
  if (!fs::exists(root)) return;
  for (const auto& entry : fs::directory_iterator(root)) {
    if (!entry.is_directory()) continue;
    auto ck = policy::LoadCheckpoint(entry.path().string());
    for (const auto& p : ck.model->named_parameters())
      EXPECT_TRUE(torch::isfinite(p.value()).all().item<bool>()) << entry.path() << " " << p.key();
  }
}

// The bandit, except that a wrong recommendation pays NaN. Config values are
// never NaN (env.wrong_reward = nan is a ConfigError), so the env itself has
// to misbehave for the non-finite reward guard to be reached.
class NanWrongRewardState final : public envs::State {
 public:
  explicit NanWrongRewardState(std::unique_ptr<envs::State> inner) : inner_(std::move(inner)) {}
  std::string Observation() const override { return inner_->Observation(); }
  std::vector<envs::ActionId> LegalActions() const override { return inner_->LegalActions(); }
  envs::Menu CompileMenu() const override { return inner_->CompileMenu(); }
  envs::StepOutcome Apply(envs::ActionId action) override {
    envs::StepOutcome out = inner_->Apply(action);
    if (!out.success) out.reward = std::nan("");
    return out;
  }
  bool IsTerminal() const override { return inner_->IsTerminal(); }
  envs::CompileResult Compile(std::string_view text) const override {
    return inner_->Compile(text);
  }
  std::unique_ptr<envs::State> Clone() const override {
    return std::make_unique<NanWrongRewardState>(inner_->Clone());
  }
  uint64_t Hash() const override { return inner_->Hash(); }
  int StepCount() const override { return inner_->StepCount(); }

 private:
  std::unique_ptr<envs::State> inner_;
};

const Registrar<envs::EnvRegistry> kNanBandit(
    "test_nan_bandit", "test only: the bandit, paying NaN for a wrong recommendation",
    [](ConfigNode c) -> std::unique_ptr<envs::Env> {
      std::shared_ptr<const envs::Env> bandit = envs::EnvRegistry::Global().Make("bandit", c);
      envs::EnvInfo info = bandit->Info();
      info.name = "test_nan_bandit";
      return std::make_unique<envs::SimpleEnv>(
          info, bandit->Instructions(), [bandit](uint64_t seed) -> std::unique_ptr<envs::State> {
            return std::make_unique<NanWrongRewardState>(bandit->NewState(seed));
          });
    });

TEST(TrainLoop, NonFiniteRewardStopsWithTheTensorAndIteration) {
  // A wrong recommendation pays NaN: the first batch already has one.
  auto cfg =
      Experiment(LoopToml("name = \"test_nan_bandit\"\narms = 4"), {"trainer.checkpoint_every=1"});
  TempDir dir("nan_reward");
  try {
    RunTraining(*cfg, dir.str());
    FAIL() << "expected a NumericError";
  } catch (const NumericError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("non-finite reward nan from env 'test_nan_bandit' at iteration 0"),
              std::string::npos)
        << what;
  }
  EXPECT_FALSE(fs::exists(dir.path() / "checkpoints" / "latest"));
}

TEST(TrainLoop, AbsurdLearningRateStopsBeforeWritingBrokenWeights) {
  // lr = 1e12 with clipping off: the first Adam steps move weights by ~1e12,
  // the forward overflows, and a non-finite tensor appears within a few steps.
  // (The growth guard is off: this test is about the non-finite guard.)
  auto cfg = Experiment(LoopToml(), {"trainer.lr=1e12", "trainer.max_grad_norm=0",
                                     "trainer.lr_schedule=constant", "trainer.checkpoint_every=1",
                                     "trainer.max_weight_growth=0"});
  TempDir dir("absurd_lr");
  std::string message;
  try {
    RunTraining(*cfg, dir.str());
  } catch (const NumericError& e) {
    message = e.what();
  }
  ASSERT_FALSE(message.empty()) << "training with lr = 1e12 finished without a NumericError";
  EXPECT_NE(message.find("non-finite"), std::string::npos) << message;
  EXPECT_NE(message.find("iteration"), std::string::npos) << message;
  std::cout << "  guard: " << message << "\n";
  ExpectFiniteCheckpoints(dir.str());
}

// lr = 1e30 gives finite weights of ~1e30 that pass the non-finite guard; the
// growth guard stops the run at that iteration, before any checkpoint.
TEST(TrainLoop, ExplodingButFiniteWeightsStopTheRun) {
  // One optimiser step per iteration (1 epoch, 1 minibatch): the step moves
  // weights by ~1e30 and the iteration ends with them finite.
  auto cfg = Experiment(LoopToml(), {"trainer.lr=1e30", "trainer.lr_schedule=constant",
                                     "trainer.checkpoint_every=1", "trainer.epochs=1",
                                     "trainer.minibatch_size=16"});
  TempDir dir("exploding");
  try {
    RunTraining(*cfg, dir.str());
    FAIL() << "lr = 1e30 finished without a NumericError";
  } catch (const NumericError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("exploding weights at iteration 0"), std::string::npos) << what;
    EXPECT_NE(what.find("trainer.max_weight_growth = 10"), std::string::npos) << what;
  }
  EXPECT_FALSE(fs::exists(dir.path() / "checkpoints" / "latest"));
  EXPECT_NO_THROW(CheckWeightGrowth(1.0, 9.0, 10, 1e-3, 4));
  EXPECT_NO_THROW(CheckWeightGrowth(1.0, 1e9, 0, 1e-3, 4));  // off
  EXPECT_THROW(CheckWeightGrowth(1.0, 11.0, 10, 1e-3, 4), NumericError);
}

TEST(TrainLoop, RerunningAConfigRecordsTheSameTrajectories) {
  auto cfg = Experiment(LoopToml(kMaze2), {"trainer.iterations=2"});
  TempDir a("rerun_a"), b("rerun_b");
  RunTraining(*cfg, a.str());
  RunTraining(*cfg, b.str());
  const std::string steps =
      "SELECT e.iteration, e.split, e.seed, s.t, s.action, s.label, s.reward, s.logp_rollout, "
      "s.prompt_hash "
      "FROM steps s JOIN episodes e ON e.id = s.episode_id ORDER BY e.id, s.t";
  auto ra = Query(a.str(), steps), rb = Query(b.str(), steps);
  EXPECT_GT(ra.rows.size(), 32u);
  EXPECT_EQ(memory::FormatCsv(ra), memory::FormatCsv(rb));
}

TEST(TrainLoop, BudgetCountersAgreeWithTheStore) {
  auto cfg = Experiment(LoopToml(kMaze2), {"trainer.iterations=2", "trainer.num_envs=8",
                                           "trainer.eval_sampled=false"});
  TempDir dir("budget");
  RunTraining(*cfg, dir.str());
  auto metric = [&](const std::string& key) {
    auto q =
        Query(dir.str(), "SELECT value FROM metrics WHERE iteration = 1 AND key = '" + key + "'");
    return AsDouble(q.rows.at(0).at(0));
  };
  auto scalar = [&](const std::string& sql) {
    return AsDouble(Query(dir.str(), sql).rows.at(0).at(0));
  };
  const double train_steps = scalar(
      "SELECT count(*) FROM steps s JOIN episodes e ON e.id = s.episode_id WHERE e.split = "
      "'train'");
  EXPECT_EQ(metric("budget/episodes"), 2 * 16);
  EXPECT_EQ(metric("budget/env_steps"), train_steps);
  EXPECT_EQ(metric("budget/samples_generated"), train_steps);
  EXPECT_EQ(metric("budget/samples_used"), train_steps);  // PPO trains on every decision
  EXPECT_EQ(metric("budget/invalid_steps"), 0);
  EXPECT_EQ(metric("budget/generated_tokens"), 0);
  // Lockstep: 16 episodes on 8 slots; one forward per round over the active
  // episodes, and slots refill as soon as an episode ends (an episode the step
  // limit cut stays one more round: the readout of V(s_T)). Rebuild the rounds
  // from the recorded episode lengths.
  double forwards = 0;
  for (int64_t it = 0; it < 2; ++it) {
    auto q =
        Query(dir.str(),
              "SELECT length + truncated FROM episodes WHERE split = 'train' AND iteration = " +
                  std::to_string(it) + " ORDER BY id");
    std::vector<int64_t> queue;
    for (const auto& row : q.rows) queue.push_back(std::get<int64_t>(row[0]));
    std::vector<int64_t> active;
    size_t next = 0;
    while (next < queue.size() || !active.empty()) {
      while (active.size() < 8 && next < queue.size()) active.push_back(queue[next++]);
      forwards += 1;
      for (auto& left : active) left -= 1;
      std::erase(active, 0);
    }
  }
  EXPECT_EQ(metric("budget/rollout_forwards"), forwards);
  EXPECT_LT(forwards, train_steps);
  // Prompt tokens: at least every prompt once (the readout also reads the realisations).
  EXPECT_GT(
      metric("budget/prompt_tokens"),
      scalar("SELECT sum(s.prompt_tokens) FROM steps s JOIN episodes e ON e.id = s.episode_id "
             "WHERE e.split = 'train'"));
  EXPECT_GT(metric("budget/update_flops"), metric("budget/rollout_flops"));
  EXPECT_EQ(metric("budget/flops"), metric("budget/update_flops") + metric("budget/rollout_flops"));
  EXPECT_EQ(metric("budget/forward_passes"),
            metric("budget/rollout_forwards") + metric("budget/update_forwards"));
  EXPECT_GT(metric("budget/eval_flops"), 0);  // counted, but not in budget/flops
  // The time split covers the iteration.
  double parts = metric("time/readout_s") + metric("time/env_s") + metric("time/update_s") +
                 metric("time/logging_s");
  EXPECT_GT(metric("time/readout_s"), 0);
  EXPECT_GT(metric("time/update_s"), 0);
  EXPECT_LE(parts, metric("time/iteration_s") + metric("time/logging_s") + 1e-6);
}

TEST(TrainLoop, RecordingOffKeepsMetricsAndDropsProvenance) {
  auto cfg = Experiment(LoopToml(), {"trainer.iterations=2"});
  TempDir dir("record_off");
  auto trainer = MakeTrainer(*cfg);
  {
    trainers::Run s(*cfg, {.out_dir = dir.str(), .quiet = true, .record = false});
    Train(s, *trainer, {.quiet = true});
    s.End("completed");
  }
  EXPECT_EQ(AsDouble(Query(dir.str(), "SELECT count(*) FROM episodes").rows[0][0]), 0);
  EXPECT_GT(AsDouble(Query(dir.str(), "SELECT count(*) FROM metrics").rows[0][0]), 20);
}

// run.keep_checkpoints keeps the newest N; a run started from policy.init
// records the model it loaded (model.json, a note in config.toml), and
// policy.dtype = bfloat16 gives a bfloat16 KL reference model.
TEST(TrainLoop, KeepsTheNewestCheckpointsAndRecordsTheLoadedModel) {
  auto cfg = Experiment(LoopToml(), {"trainer.checkpoint_every=1", "run.keep_checkpoints=2"});
  TempDir dir("keep_ckpt");
  RunTraining(*cfg, dir.str());
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir.path() / "checkpoints"))
    names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"iter_000002", "iter_000003", "latest"}));  // 0-based
  EXPECT_TRUE(fs::exists(dir.path() / "checkpoints" / "latest" / "model.safetensors"));

  const std::string init = (dir.path() / "checkpoints" / "latest").string();
  auto from = Experiment(LoopToml(), {"trainer.iterations=1", "policy.init=" + init,
                                      "policy.dtype=bfloat16", "trainer.kl.coef=0.05"});
  TempDir dir2("init_record");
  auto trainer = MakeTrainer(*from);
  trainers::Run s(*from, {.out_dir = dir2.str(), .quiet = true});
  ASSERT_TRUE(s.ref_model);
  EXPECT_EQ(s.ref_model->dtype(), torch::kBFloat16);
  EXPECT_EQ(s.model->dtype(), torch::kFloat32);  // the trained weights stay float32
  Train(s, *trainer, {.quiet = true});
  s.End("completed");
  std::ifstream mj(dir2.path() / "model.json");
  const auto model = nlohmann::json::parse(mj);
  EXPECT_EQ(model.at("parameters").get<int64_t>(), s.model->config().NumParameters());
  EXPECT_EQ(model.at("config").at("num_hidden_layers"), 1);
  std::ifstream ct(dir2.path() / "config.toml");
  const std::string toml((std::istreambuf_iterator<char>(ct)), std::istreambuf_iterator<char>());
  EXPECT_NE(toml.find("# policy.init loaded"), std::string::npos) << toml;
}

// Bring your own model: a Hugging Face directory (the sharded BF16 Qwen3
// fixture, with a tokenizer that fits its 300 ids) trains with policy.init.
TEST(TrainLoop, TrainsAHuggingFaceModelDirectory) {
  TempDir dir("hf_init");
  const fs::path model = dir.path() / "model";
  fs::create_directories(model);
  for (const auto& e : fs::directory_iterator(fs::path(RLID_SOURCE_DIR) / "tests/data/hf/qwen3_tiny_bf16_sharded"))
    if (e.path().filename() != "reference.json") fs::copy_file(e.path(), model / e.path().filename());
  auto env = envs::MakeEnv("bandit");
  policy::EnvCorpusOptions co;
  co.episodes = 60;
  policy::TokenizerTrainOptions to;
  to.vocab_size = 300;
  policy::Tokenizer::Train(policy::EnvTextCorpus(*env, co), to).SaveDirectory(model.string());
  auto cfg = Experiment(LoopToml(), {"trainer.iterations=1", "policy.init=" + model.string()});
  auto before = policy::LoadCheckpoint(model.string());
  EXPECT_EQ(before.weight_files.size(), 2u);
  const std::string out = (dir.path() / "run").string();
  RunTraining(*cfg, out);
  auto after = policy::LoadCheckpoint(out + "/checkpoints/latest");
  EXPECT_EQ(after.model->config().ModelType(), "qwen3");
  EXPECT_EQ(after.model->config().NumParameters(), before.model->config().NumParameters());
  const auto& w0 = before.model->model->layer_list[0]->self_attn->q_proj->weight;
  const auto& w1 = after.model->model->layer_list[0]->self_attn->q_proj->weight;
  EXPECT_FALSE(torch::equal(w0, w1));  // it trained
  EXPECT_LT((w0 - w1).abs().max().item<double>(), 0.1);
}

// LoRA on a Hugging Face base (sharded BF16 on disk, bfloat16 in memory via
// policy.dtype): the base never changes, the adapters and the value head do,
// checkpoints hold adapters only and load back through their base, and the KL
// reference is the base itself.
TEST(TrainLoop, TrainsLoraAdaptersOnAFrozenHuggingFaceBase) {
  TempDir dir("hf_lora");
  const fs::path model = dir.path() / "model";
  fs::create_directories(model);
  for (const auto& e : fs::directory_iterator(fs::path(RLID_SOURCE_DIR) / "tests/data/hf/qwen3_tiny_bf16_sharded"))
    if (e.path().filename() != "reference.json") fs::copy_file(e.path(), model / e.path().filename());
  auto env = envs::MakeEnv("bandit");
  policy::EnvCorpusOptions co;
  co.episodes = 60;
  policy::TokenizerTrainOptions to;
  to.vocab_size = 300;
  policy::Tokenizer::Train(policy::EnvTextCorpus(*env, co), to).SaveDirectory(model.string());
  auto cfg = Experiment(LoopToml(), {"trainer.iterations=2", "policy.init=" + model.string(),
                                     "policy.lora.rank=4", "policy.lora.alpha=16",
                                     "policy.dtype=bfloat16", "trainer.kl.coef=0.05"});
  const std::string out = (dir.path() / "run").string();
  RunTraining(*cfg, out);
  const fs::path latest = fs::path(out) / "checkpoints" / "latest";
  EXPECT_TRUE(fs::exists(latest / "adapter_model.safetensors"));
  EXPECT_FALSE(fs::exists(latest / "model.safetensors"));
  auto before = policy::LoadCheckpoint(model.string());
  auto after = policy::LoadCheckpoint(latest.string());
  ASSERT_TRUE(after.model->lora().has_value());
  EXPECT_EQ(after.base_dir, fs::absolute(model).lexically_normal().string());
  auto pb = before.model->named_parameters();
  double adapter_norm = 0;
  for (const auto& p : after.model->named_parameters()) {
    if (p.key().find(".lora_") != std::string::npos) {
      if (p.key().find(".lora_B.") != std::string::npos) adapter_norm += p.value().norm().item<double>();
      continue;
    }
    if (p.key().rfind("value_head.", 0) == 0) continue;
    EXPECT_TRUE(torch::equal(p.value(), pb[p.key()])) << p.key() << " changed";
  }
  EXPECT_GT(adapter_norm, 0) << "the adapters trained";
  EXPECT_GT(after.model->value_head->weight.abs().sum().item<double>(), 0);
  const auto j = nlohmann::json::parse(std::ifstream(fs::path(out) / "model.json"));
  EXPECT_EQ(j["lora"]["rank"], 4);
  EXPECT_EQ(j["dtype"], "BFloat16");
  // The KL term was computed (against the adapter-free base) and logged.
  EXPECT_GT(AsDouble(Query(out, "SELECT max(value) FROM metrics WHERE key = 'losses/kl_ref'").rows[0][0]), 0);
}

// A fresh model with adapters: its base is saved once in the run directory, the
// adapter checkpoints name it, and a crashed run resumes to the same adapters
// and metrics as an uninterrupted one (LoRA dropout included: LibTorch's
// generator is re-seeded per iteration), with activation checkpointing on.
TEST(TrainLoop, LoraResumeEqualsAnUninterruptedRun) {
  auto cfg = Experiment(LoopToml(), {"policy.lora.rank=2", "policy.lora.dropout=0.1", "policy.gradient_checkpointing=true",
                                     "policy.lora.target_modules=[\"q_proj\", \"v_proj\", \"down_proj\"]"});
  ExpectResumeEqualsUninterrupted(*cfg, /*crash_at=*/3, [](const std::string& whole) {
    EXPECT_TRUE(fs::exists(fs::path(whole) / "base" / "model.safetensors"));
    const auto ac = nlohmann::json::parse(
        std::ifstream(fs::path(whole) / "checkpoints" / "latest" / "adapter_config.json"));
    EXPECT_EQ(ac["base_model_name_or_path"],
              fs::absolute(fs::path(whole) / "base").lexically_normal().string());
    EXPECT_EQ(ac["lora_dropout"], 0.1);
  });
}

TEST(PpoDecision, AllActionEstimatorTrainsAndLogsTheGradientSnr) {
  auto cfg = Experiment(LoopToml(), {"trainer.iterations=2", "trainer.gradient_estimator=all_action",
                                     "trainer.grad_snr_every=1", "trainer.grad_snr_episodes=6"});
  TempDir dir("all_action");
  RunTraining(*cfg, dir.str());
  auto q = Query(dir.str(),
                 "SELECT key, count(*), min(value), max(value) FROM metrics WHERE key IN "
                 "('grad/snr', 'grad/episode_trace_cov', 'grad/snr_episodes', "
                 "'losses/afterstate_value', 'losses/menu_kl_old') "
                 "GROUP BY key ORDER BY key");
  ASSERT_EQ(q.rows.size(), 5u);
  for (const auto& row : q.rows) {
    EXPECT_EQ(std::get<int64_t>(row[1]), 2) << std::get<std::string>(row[0]);
    EXPECT_TRUE(std::isfinite(AsDouble(row[2]))) << std::get<std::string>(row[0]);
    std::cout << "  " << std::get<std::string>(row[0]) << " in [" << AsDouble(row[2]) << ", "
              << AsDouble(row[3]) << "]\n";
  }
  EXPECT_GT(AsDouble(q.rows[0][2]), 0);      // grad/episode_trace_cov
  EXPECT_GE(AsDouble(q.rows[1][2]), 0);      // grad/snr
  EXPECT_EQ(AsDouble(q.rows[2][2]), 6);      // grad/snr_episodes
  EXPECT_GE(AsDouble(q.rows[4][2]), -1e-9);  // losses/menu_kl_old: a KL is never negative
}

// Decision PPO's update reads the rollout's own readout rows once per epoch,
// forward and backward: its FLOPs are exactly 3 x epochs x the rollout's
// (bandit: no step-limit cuts, no reference), and every minibatch is one backward.
TEST(PpoDecision, CountsEveryForwardAndBackward) {
  // Without prefix sharing, the update's rows are the rollout's rows exactly
  // (sharing saves different amounts in differently composed batches).
  auto cfg = Experiment(LoopToml(), {"trainer.iterations=2", "trainer.target_kl=0",
                                     "readout.share_prefix=false"});
  TempDir dir("ppo_flops");
  RunTraining(*cfg, dir.str());
  auto at = [&](int64_t it, const std::string& key) {
    auto q = Query(dir.str(), "SELECT value FROM metrics WHERE iteration = " + std::to_string(it) +
                                  " AND key = '" + key + "'");
    return AsDouble(q.rows.at(0).at(0));
  };
  for (int64_t it = 0; it < 2; ++it) {
    auto prev = [&](const std::string& key) { return it == 0 ? 0.0 : at(it - 1, key); };
    const double rollout = at(it, "budget/rollout_flops") - prev("budget/rollout_flops");
    const double update = at(it, "budget/update_flops") - prev("budget/update_flops");
    const double epochs = at(it, "charts/epochs"), decisions = at(it, "charts/decisions");
    EXPECT_NEAR(update, 3 * epochs * rollout, 1e-9 * update) << "iteration " << it;
    // 16 decisions, minibatch 8: 2 minibatches an epoch, one backward each.
    EXPECT_EQ(at(it, "budget/update_backwards") - prev("budget/update_backwards"),
              epochs * std::ceil(decisions / 8));
    EXPECT_EQ(at(it, "budget/rollout_backwards"), 0);
  }
}

// An episode the step limit cuts costs one more readout (its V(s_T)) when
// decision PPO bootstraps it, and none with bootstrap_truncated = false; the
// trajectories (per-episode streams) are the same either way.
TEST(PpoDecision, BootstrapTruncatedDecidesTheExtraValueReadout) {
  std::map<bool, std::map<std::string, double>> m;
  for (bool boot : {true, false}) {
    auto cfg =
        Experiment(LoopToml("name = \"maze\"\nsize = 4\nstep_limit = 2"),
                   {"trainer.iterations=1", "trainer.eval_every=0",
                    std::string("trainer.bootstrap_truncated=") + (boot ? "true" : "false")});
    TempDir dir("ppo_boot");
    RunTraining(*cfg, dir.str());
    for (const char* key : {"charts/truncated_frac", "budget/env_steps", "budget/prompt_tokens",
                            "budget/rollout_tokens"}) {
      auto q = Query(
          dir.str(),
          std::string("SELECT value FROM metrics WHERE iteration = 0 AND key = '") + key + "'");
      m[boot][key] = AsDouble(q.rows.at(0).at(0));
    }
  }
  ASSERT_GT(m[true]["charts/truncated_frac"], 0.25)
      << "a step limit of 2 on a 4x4 maze cuts episodes";
  EXPECT_EQ(m[true]["charts/truncated_frac"], m[false]["charts/truncated_frac"]);
  EXPECT_EQ(m[true]["budget/env_steps"], m[false]["budget/env_steps"]);
  EXPECT_GT(m[true]["budget/prompt_tokens"], m[false]["budget/prompt_tokens"]);
  EXPECT_GT(m[true]["budget/rollout_tokens"], m[false]["budget/rollout_tokens"]);
}

// A second process pointed at a live run directory is refused by the store's
// lock before it writes anything: the live run's config and tokenizer (which
// --resume needs) stay as they were.
TEST(TrainLoop, ASecondRunOnALiveDirectoryChangesNothingThere) {
  auto cfg = Experiment(LoopToml());
  TempDir dir("live_dir");
  trainers::Run live(*cfg, {.out_dir = dir.str(), .quiet = true});
  auto read = [&](const char* name) {
    std::ifstream in(dir.path() / name);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const std::string config = read("config.toml"), tokenizer = read("tokenizer.json");
  ASSERT_FALSE(config.empty());
  ASSERT_FALSE(tokenizer.empty());
  auto other = Experiment(LoopToml(), {"run.seed=9", "tokenizer.vocab_size=300"});
  try {
    trainers::Run second(*other, {.out_dir = dir.str(), .quiet = true});
    ADD_FAILURE() << "a second writer opened the run";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("is locked"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read("config.toml"), config);
  EXPECT_EQ(read("tokenizer.json"), tokenizer);
  live.End("completed");
}

// ---- command line ------------------------------------------------------------

struct Cli {
  int code;
  std::string out;
};

// Runs `rlid ARGS` (in directory `cwd` when given) and returns its exit code and output.
Cli RunRlid(const std::string& args, const fs::path& cwd = {}) {
  const auto r = rlid::testing::RunRlidProcess(args, cwd);
  return {r.code, r.out};
}

// Runs `rlid ARGS`, sends `sig` once its output contains `after`, and returns
// its exit code and output.
Cli RunRlidAndSignal(const std::vector<std::string>& args, const std::string& after, int sig) {
  const char* bin = std::getenv("RLID_BIN");
  const std::string exe = bin ? bin : (fs::path(RLID_BINARY_DIR) / "rlid").string();
  int out[2];
  if (::pipe(out) != 0) return {-1, "pipe failed"};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::dup2(out[1], 2);
    ::close(out[0]);
    std::vector<std::string> all = {exe};
    all.insert(all.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& a : all) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(exe.c_str(), argv.data());
    _exit(127);
  }
  ::close(out[1]);
  Cli r{-1, ""};
  bool sent = false;
  char buf[4096];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) > 0;) {
    r.out.append(buf, static_cast<size_t>(n));
    if (!sent && r.out.find(after) != std::string::npos) {
      ::kill(pid, sig);
      sent = true;
    }
  }
  ::close(out[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 1000 + WTERMSIG(status);
  if (!sent) r.out += "\n[the test never sent the signal]";
  return r;
}

// SIGTERM, SIGINT or SIGHUP mid-run: the process commits what it recorded,
// marks the run "interrupted" and exits 128 + the signal; --resume finishes it.
TEST(TrainCli, StopSignalsMarkTheRunInterruptedAndResumeFinishesIt) {
  TempDir dir("signals");
  fs::path config = dir.path() / "bandit.toml";
  std::ofstream(config) << LoopToml();
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    SCOPED_TRACE(sig);
    const fs::path run = dir.path() / fmt::format("run_{}", sig);
    Cli stopped = RunRlidAndSignal({"train", config.string(), "--out", run.string(), "--set",
                                    "trainer.iterations=40", "--set", "trainer.checkpoint_every=1"},
                                   "[iteration 0 (1/40)]", sig);
    EXPECT_EQ(stopped.code, 128 + sig) << stopped.out;
    EXPECT_NE(stopped.out.find("stopped by SIG"), std::string::npos) << stopped.out;
    {
      auto store = memory::Store::Open((run / memory::kDatabaseFileName).string(),
                                       memory::Store::Mode::kReadOnly);
      EXPECT_EQ(store->db().QueryText("SELECT status FROM runs"), "interrupted");
      std::string report;
      EXPECT_TRUE(store->CheckIntegrity(&report)) << report;
      EXPECT_LT(store->db().QueryInt("SELECT MAX(iteration) FROM episodes"), 39);
    }
    if (sig != SIGTERM) continue;  // one resume is enough
    Cli resumed = RunRlid("train " + config.string() + " --out " + run.string() +
                          " --resume --set trainer.iterations=3 --set trainer.checkpoint_every=1");
    ASSERT_EQ(resumed.code, 0) << resumed.out;
    EXPECT_EQ(AsDouble(Query(run.string(), "SELECT count(*) FROM runs WHERE status = 'completed'").rows[0][0]), 1);
  }
}

TEST(TrainCli, TrainThenEvalACheckpoint) {
  TempDir dir("cli");
  fs::path config = dir.path() / "bandit.toml";
  std::ofstream(config) << LoopToml();
  fs::path run = dir.path() / "run";
  // --threads beats the config's run.threads = 1, and the resolved config says so.
  Cli train = RunRlid("--threads 2 train " + config.string() + " --out " + run.string() +
                      " --set trainer.iterations=2");
  ASSERT_EQ(train.code, 0) << train.out;
  {
    std::ifstream in(run / "config.toml");
    const std::string resolved((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_NE(resolved.find("threads = 2"), std::string::npos) << resolved;
    EXPECT_EQ(resolved.find("threads = 1"), std::string::npos) << resolved;
  }
  EXPECT_NE(train.out.find("ppo_decision finished 2 iterations"), std::string::npos) << train.out;
  EXPECT_NE(train.out.find("test (greedy)"), std::string::npos) << train.out;
  // The progress line numbers iterations as the checkpoints do.
  EXPECT_NE(train.out.find("[iteration 1 (2/2)]"), std::string::npos) << train.out;
  EXPECT_NE(train.out.find("saved iter_000001"), std::string::npos) << train.out;
  fs::path ckpt = run / "checkpoints" / "iter_000001";
  ASSERT_TRUE(fs::exists(ckpt / "rlid.json")) << train.out;

  Cli eval = RunRlid("eval --checkpoint " + ckpt.string() + " --env bandit --episodes 8 --out " +
                     (dir.path() / "eval").string());
  ASSERT_EQ(eval.code, 0) << eval.out;
  EXPECT_NE(eval.out.find("(8 test episodes)"), std::string::npos) << eval.out;
  EXPECT_EQ(AsDouble(Query((dir.path() / "eval").string(),
                           "SELECT count(*) FROM episodes WHERE split = 'test'")
                         .rows[0][0]),
            8);

  // Without --out, the evaluation is a new `runs` row of the run that wrote the
  // checkpoint; that run's own files stay as they were.
  auto read = [](const fs::path& f) {
    std::ifstream in(f);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  };
  const std::string config_before = read(run / "config.toml"), tok_before = read(run / "tokenizer.json");
  Cli into_run = RunRlid("eval --checkpoint " + ckpt.string() + " --env bandit --episodes 8", dir.path());
  ASSERT_EQ(into_run.code, 0) << into_run.out;
  EXPECT_NE(into_run.out.find("records in " + fs::canonical(run).string() + " (runs.id 2, kind 'eval')"),
            std::string::npos)
      << into_run.out;
  EXPECT_EQ(memory::FormatCsv(Query(run.string(), "SELECT id, kind, status FROM runs ORDER BY id")),
            "id,kind,status\n1,train,completed\n2,eval,completed\n");
  EXPECT_EQ(AsDouble(Query(run.string(), "SELECT count(*) FROM episodes WHERE run_id = 2 AND split = 'test'")
                         .rows[0][0]),
            8);
  EXPECT_EQ(read(run / "config.toml"), config_before);
  EXPECT_EQ(read(run / "tokenizer.json"), tok_before);
  EXPECT_FALSE(fs::exists(dir.path() / "runs")) << "no new run directory";

  // Every command that makes a directory under ./runs points runs/latest at it.
  Cli fresh = RunRlid("train " + config.string() + " --set trainer.iterations=1", dir.path());
  ASSERT_EQ(fresh.code, 0) << fresh.out;
  ASSERT_TRUE(fs::is_symlink(dir.path() / "runs" / "latest"));
  const fs::path latest = fs::read_symlink(dir.path() / "runs" / "latest");
  EXPECT_EQ(latest.parent_path(), fs::path()) << "a relative link: " << latest;
  EXPECT_TRUE(fs::exists(dir.path() / "runs" / latest / "rlid.db"));
  Cli eval_new = RunRlid("eval --checkpoint " + ckpt.string() + " --env bandit --episodes 4 --out runs/ev",
                         dir.path());
  ASSERT_EQ(eval_new.code, 0) << eval_new.out;
  EXPECT_EQ(fs::read_symlink(dir.path() / "runs" / "latest"), fs::path("ev"));

  // A bad value is a clean error with a non-zero exit code.
  Cli bad = RunRlid("train " + config.string() + " --out " + (dir.path() / "bad").string() +
                    " --set trainer.lr=-1");
  EXPECT_EQ(bad.code, 2);  // a ConfigError
  EXPECT_NE(bad.out.find("--set trainer.lr: 'trainer.lr' must be > 0, found -1"), std::string::npos)
      << bad.out;
}

}  // namespace
}  // namespace rlid::trainers

// Interface matching in the store: a token-plane run records, per step, the
// prompt, the menu it was shown, the memory items it read (with provenance),
// the generated text, rollout-engine and training log-probs, and invalid
// answers with their reason — the same per-step provenance a decision-plane
// run records from the same warm start, env and memory settings.
#include <gtest/gtest.h>

#include "tests/trainers/algorithms/token_rig.h"
#include "tests/trainers/algorithms/warm_start.h"
#include "tests/trainers/algorithms/warm_start_configs.h"

namespace rlid::testing {
namespace {

const char* const kMemory = R"(
[memory]
enabled = true
scope = "episode"
)";

std::vector<std::string> Sets(const std::string& ckpt, const std::string& algorithm) {
  return {"policy.init=" + ckpt,
          "trainer.algorithm=" + algorithm,
          "trainer.episodes_per_iteration=8",
          "trainer.group_size=4",
          "trainer.num_envs=8",
          "trainer.epochs=1",
          "sampler.temperature=1.5",
          "sampler.max_new_tokens=6",
          "trainer.invalid.rule=penalty_noop",
          "env.step_limit=8"};
}

// Per-plane facts about the steps of one run (train split).
struct StepFacts {
  double steps = 0, with_prompt = 0, with_menu = 0, menu_rows = 0, menu_size_ok = 0, with_reads = 0,
         provenance_rows = 0, logp_rollout = 0, logp_train = 0, generated = 0, invalid = 0,
         invalid_ok = 0, valid_ok = 0;
};

StepFacts Facts(const TokenRun& run) {
  StepFacts f;
  const std::string train =
      "FROM steps s JOIN episodes e ON e.id = s.episode_id WHERE e.split = 'train'";
  f.steps = run.Scalar("SELECT count(*) " + train);
  f.with_prompt =
      run.Scalar("SELECT count(*) " + train + " AND s.prompt_hash IN (SELECT hash FROM prompts)");
  f.with_menu = run.Scalar(
      "SELECT count(*) " + train +
      " AND EXISTS (SELECT 1 FROM menu_items m WHERE m.episode_id = s.episode_id AND m.t = s.t)");
  // Menus are complete: positions 0..K-1 with distinct labels.
  f.menu_size_ok = run.Scalar(
      "SELECT count(*) FROM (SELECT episode_id, t, count(*) k, max(position) p, count(DISTINCT "
      "label) l "
      "FROM menu_items GROUP BY episode_id, t) WHERE p = k - 1 AND l = k");
  f.menu_rows = run.Scalar("SELECT count(*) FROM (SELECT DISTINCT episode_id, t FROM menu_items)");
  f.with_reads = run.Scalar(
      "SELECT count(*) " + train +
      " AND EXISTS (SELECT 1 FROM memory_reads r WHERE r.episode_id = s.episode_id AND r.t = s.t)");
  f.provenance_rows = run.Scalar(
      "SELECT count(*) FROM v_step_provenance WHERE episode_split = 'train' AND source_episode_id "
      "= episode_id");
  f.logp_rollout = run.Scalar("SELECT count(*) " + train + " AND s.logp_rollout IS NOT NULL");
  f.logp_train = run.Scalar("SELECT count(*) " + train + " AND s.logp_train IS NOT NULL");
  f.generated = run.Scalar("SELECT count(*) " + train +
                           " AND s.generated_text IS NOT NULL AND s.generated_tokens > 0");
  f.invalid = run.Scalar("SELECT count(*) " + train + " AND s.invalid = 1");
  f.invalid_ok = run.Scalar(
      "SELECT count(*) " + train +
      " AND s.invalid = 1 AND s.action = -1 AND s.invalid_reason <> '' AND s.label = ''");
  // A valid step's label and command are those of the menu item with its action.
  f.valid_ok = run.Scalar(
      "SELECT count(*) " + train +
      " AND s.invalid = 0 AND EXISTS (SELECT 1 FROM menu_items m WHERE m.episode_id = s.episode_id "
      "AND m.t = s.t AND m.action = s.action AND m.label = s.label AND m.command = s.command)");
  return f;
}

TEST(TokenStore, TokenRunRecordsTheSameProvenanceAsTheDecisionPlane) {
  const std::string ckpt = WarmStart("maze3_sft", kMaze3SftToml);
  std::string toml = kMaze3SftToml;
  toml += kMemory;
  TokenRun token("store_token", toml, Sets(ckpt, "grpo"));
  token.Iterate(0);
  TokenRun decision("store_decision", toml, Sets(ckpt, "ppo_decision"));
  decision.Iterate(0);

  const StepFacts t = Facts(token), d = Facts(decision);
  std::printf(
      "[store] token: %.0f steps, %.0f invalid, %.0f with memory reads; decision: %.0f steps, %.0f "
      "with reads\n",
      t.steps, t.invalid, t.with_reads, d.steps, d.with_reads);
  for (const StepFacts* f : {&t, &d}) {
    ASSERT_GT(f->steps, 0);
    EXPECT_EQ(f->with_prompt, f->steps);
    EXPECT_EQ(f->with_menu, f->steps);
    EXPECT_EQ(f->menu_size_ok, f->menu_rows);
    EXPECT_GT(f->with_reads, 0);       // maze facts are written and read back
    EXPECT_GT(f->provenance_rows, 0);  // ... with their source step
    EXPECT_EQ(f->logp_rollout, f->steps);
    EXPECT_EQ(f->logp_train, f->steps);
    EXPECT_EQ(f->valid_ok, f->steps - f->invalid);
  }
  // Token plane: generated text on every step, invalid answers with their reason.
  EXPECT_EQ(t.generated, t.steps);
  EXPECT_GT(t.invalid, 0);
  EXPECT_EQ(t.invalid_ok, t.invalid);
  // Decision plane: no free text, never invalid, menu probabilities sum to one.
  EXPECT_EQ(d.generated, 0);
  EXPECT_EQ(d.invalid, 0);
  EXPECT_LT(decision.Scalar(
                "SELECT max(abs(p - 1.0)) FROM (SELECT sum(probability) p FROM menu_items GROUP BY "
                "episode_id, t)"),
            1e-4);
  // Token plane: the stored log-probs are sums over the response tokens, and the
  // rollout engine (fp32 here) agrees with the training forward.
  EXPECT_LT(token.Scalar("SELECT max(abs(logp_rollout - logp_train) / generated_tokens) FROM steps "
                         "s JOIN episodes e "
                         "ON e.id = s.episode_id WHERE e.split = 'train'"),
            1e-3);
  EXPECT_LT(token.Scalar("SELECT max(logp_rollout) FROM steps"), 0.0);
  EXPECT_TRUE(token.session().store->CheckIntegrity());
  EXPECT_TRUE(decision.session().store->CheckIntegrity());
}

}  // namespace
}  // namespace rlid::testing

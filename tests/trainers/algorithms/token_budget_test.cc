// DAPO's honest budget accounting: zero-variance groups are generated, dropped
// and resampled; the iteration's metrics and the cumulative budget counters
// show generated = kept + dropped for groups, responses and tokens, the store
// holds every generated episode, and a batch that cannot be filled follows
// trainer.sampling.on_partial_batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "memory/query.h"
#include "policy/reading/sampler.h"
#include "tests/trainers/algorithms/token_rig.h"
#include "tests/trainers/algorithms/warm_start.h"
#include "tests/trainers/algorithms/warm_start_configs.h"

namespace rlid::testing {
namespace {

TEST(TokenBudget, DapoCountsGeneratedKeptAndDroppedWork) {
  const std::string ckpt = WarmStart("bandit_sft", kBanditSftToml);
  // 8 groups of 4 per batch, up to 3 rounds: with a good start many groups
  // succeed 4/4 (zero variance) and are dropped. The overlong shaping is off:
  // it gives answers of different lengths different rewards, and the filter
  // compares the shaped rewards.
  TokenRun run(
      "dapo_budget", kBanditSftToml,
      {"policy.init=" + ckpt, "trainer.algorithm=dapo", "trainer.episodes_per_iteration=32",
       "trainer.group_size=4", "trainer.sampling.max_generation_rounds=3", "trainer.epochs=1",
       "trainer.minibatch_size=32", "trainer.lr=1e-4", "sampler.max_new_tokens=8",
       "trainer.sampling.overlong_buffer=0"});
  const agents::Budget start = run.session().budget;
  double gen_groups = 0, kept_groups = 0, gen_samples = 0, kept_samples = 0, gen_tokens = 0,
         kept_tokens = 0;
  double dropped_samples = 0;
  for (int64_t it = 0; it < 2; ++it) {
    auto m = run.Iterate(it);
    const char* kinds[] = {"groups", "samples", "tokens"};
    for (const char* k : kinds) {
      const std::string g = std::string("sampling/generated_") + k,
                        kp = std::string("sampling/kept_") + k,
                        d = std::string("sampling/dropped_") + k;
      EXPECT_EQ(MetricValue(m, g), MetricValue(m, kp) + MetricValue(m, d))
          << k << " at iteration " << it;
    }
    const double rounds = MetricValue(m, "sampling/rounds");
    EXPECT_EQ(MetricValue(m, "sampling/generated_groups"), 8 * rounds);
    EXPECT_LE(MetricValue(m, "sampling/kept_groups"), 8);
    if (MetricValue(m, "sampling/kept_groups") < 8) {
      EXPECT_EQ(rounds, 3);
    }
    EXPECT_EQ(MetricValue(m, "sampling/kept_samples"),
              4 * MetricValue(m, "sampling/kept_groups"));  // bandit: 1 step
    EXPECT_EQ(MetricValue(m, "charts/responses"), MetricValue(m, "sampling/kept_samples"));
    gen_groups += MetricValue(m, "sampling/generated_groups");
    kept_groups += MetricValue(m, "sampling/kept_groups");
    gen_samples += MetricValue(m, "sampling/generated_samples");
    kept_samples += MetricValue(m, "sampling/kept_samples");
    dropped_samples += MetricValue(m, "sampling/dropped_samples");
    gen_tokens += MetricValue(m, "sampling/generated_tokens");
    kept_tokens += MetricValue(m, "sampling/kept_tokens");
    std::printf(
        "[dapo budget] iteration %lld: rounds %.0f, groups generated %.0f kept %.0f, tokens "
        "generated %.0f "
        "kept %.0f\n",
        static_cast<long long>(it), rounds, MetricValue(m, "sampling/generated_groups"),
        MetricValue(m, "sampling/kept_groups"), MetricValue(m, "sampling/generated_tokens"),
        MetricValue(m, "sampling/kept_tokens"));
  }
  EXPECT_GT(gen_groups, kept_groups) << "the warm start should produce zero-variance groups";
  EXPECT_GE(gen_groups - kept_groups, 4) << "many zero-variance groups expected";
  EXPECT_GT(kept_groups, 0);
  // The cumulative budget agrees with the per-iteration counts.
  const agents::Budget& b = run.session().budget;
  EXPECT_EQ(b.groups_generated - start.groups_generated, gen_groups);
  EXPECT_EQ(b.groups_kept - start.groups_kept, kept_groups);
  EXPECT_EQ(b.samples_generated - start.samples_generated, gen_samples);
  EXPECT_EQ(b.samples_used - start.samples_used, kept_samples);
  EXPECT_EQ(b.generated_tokens - start.generated_tokens, gen_tokens);
  EXPECT_EQ(b.tokens_used - start.tokens_used, kept_tokens);
  EXPECT_EQ(b.env_steps, b.samples_generated);
  EXPECT_EQ(b.episodes, gen_samples);  // one decision per bandit episode
  // The store holds every generated episode; every one of them was scored by
  // the training forward (the filter compares shaped rewards, which need it).
  EXPECT_EQ(run.Scalar("SELECT count(*) FROM episodes WHERE split = 'train'"), gen_samples);
  EXPECT_EQ(run.Scalar("SELECT count(*) FROM steps s JOIN episodes e ON e.id = s.episode_id "
                       "WHERE e.split = 'train' AND s.logp_train IS NULL"),
            0);
  EXPECT_GT(dropped_samples, 0);
  EXPECT_EQ(run.Scalar("SELECT sum(generated_tokens) FROM steps"), gen_tokens);
  EXPECT_EQ(run.Scalar("SELECT sum(value) FROM metrics WHERE key = 'sampling/dropped_groups'"),
            gen_groups - kept_groups);
}

TEST(TokenBudget, GrpoKeepsEverythingItGenerates) {
  const std::string ckpt = WarmStart("bandit_sft", kBanditSftToml);
  TokenRun run(
      "grpo_budget", kBanditSftToml,
      {"policy.init=" + ckpt, "trainer.algorithm=grpo", "trainer.episodes_per_iteration=16",
       "trainer.group_size=4", "trainer.epochs=1", "sampler.max_new_tokens=8"});
  auto m = run.Iterate(0);
  EXPECT_EQ(MetricValue(m, "sampling/rounds"), 1);
  EXPECT_EQ(MetricValue(m, "sampling/dropped_groups"), 0);
  EXPECT_EQ(MetricValue(m, "sampling/kept_groups"), 4);
  const agents::Budget& b = run.session().budget;
  EXPECT_EQ(b.samples_used, b.samples_generated);
  EXPECT_EQ(b.tokens_used, b.generated_tokens);
  EXPECT_EQ(b.groups_kept, b.groups_generated);
  EXPECT_GT(b.rollout.flops, 0);  // the rollout engine's work is counted
  EXPECT_EQ(b.rollout.backwards, 0);
  // The learner: the old-log-prob pass, then each update's forward + backward.
  EXPECT_GT(b.update.flops, 0);
  EXPECT_EQ(b.update.backwards, MetricValue(m, "charts/epochs"));  // 16 responses: one minibatch
  EXPECT_GT(b.update.forwards, b.update.backwards);                // + the old-log-prob pass
}

// gigpo is selected like any estimator and trains a GRPO-family run end to end.
TEST(TokenBudget, GigpoTrainsWithStepGroups) {
  const std::string ckpt = WarmStart("bandit_sft", kBanditSftToml);
  TokenRun run(
      "gigpo_iteration", kBanditSftToml,
      {"policy.init=" + ckpt, "trainer.algorithm=grpo", "trainer.advantage.estimator=gigpo",
       "trainer.advantage.step_weight=0.5", "trainer.episodes_per_iteration=16",
       "trainer.group_size=4", "trainer.epochs=1", "sampler.max_new_tokens=8"});
  auto m = run.Iterate(0);
  EXPECT_EQ(MetricValue(m, "sampling/kept_groups"), 4);
  EXPECT_EQ(run.session().budget.update.backwards, MetricValue(m, "charts/epochs"));
  // Whether step groups formed: a bandit episode is one step from its seed's
  // state, so every step shares its anchor with the 3 other episodes of its group.
  EXPECT_EQ(MetricValue(m, "gigpo/step_group_size"), 4);
  EXPECT_EQ(MetricValue(m, "gigpo/step_group_size_max"), 4);
  const double nonzero = MetricValue(m, "gigpo/step_term_nonzero");
  EXPECT_GE(nonzero, 0);
  EXPECT_LE(nonzero, 1);
}

// Asynchronous GRPO (trainer.max_staleness = 1) with LoRA adapters and a bf16
// rollout engine: iteration i trains on episodes played with the adapters of
// update max(0, i - 1), and the store records that version. The staleness
// weight (pi_prox / pi_behav, both by the float32 training forward) is
// reported apart from the engine gap (pi_behav against the bf16 engine).
TEST(TokenBudget, AsyncGrpoWithLoraTrainsOnEpisodesOneUpdateOld) {
  const std::string ckpt = WarmStart("bandit_sft", kBanditSftToml);
  TokenRun run("grpo_async", kBanditSftToml,
               {"policy.init=" + ckpt, "trainer.algorithm=grpo",
                "trainer.episodes_per_iteration=16", "trainer.group_size=4", "trainer.epochs=1",
                "sampler.max_new_tokens=8", "policy.lora.rank=4", "policy.lora.alpha=64",
                "trainer.lr=1e-2", "sampler.dtype=bfloat16", "trainer.max_staleness=1"});
  double largest_gap = 0;
  for (int64_t it = 0; it < 5; ++it) {
    auto m = run.Iterate(it);
    EXPECT_EQ(MetricValue(m, "async/version_lag"), it == 0 ? 0 : 1) << it;
    EXPECT_EQ(HasMetric(m, "staleness/weight_mean"), it > 0) << it;
    EXPECT_NE(MetricValue(m, "engine/logp_gap_abs"), 0) << "bf16 engine vs float32 forward";
    if (it > 0) largest_gap = std::max(largest_gap, std::abs(MetricValue(m, "staleness/kl")));
  }
  EXPECT_GT(largest_gap, 0) << "the adapters moved, so some batch was off-policy";
  EXPECT_EQ(memory::FormatCsv(run.Query(
                "SELECT iteration, min(policy_version), max(policy_version) FROM episodes "
                "WHERE split = 'train' GROUP BY iteration ORDER BY iteration")),
            "iteration,min(policy_version),max(policy_version)\n0,0,0\n1,0,0\n2,1,1\n3,2,2\n"
            "4,3,3\n");
}

// The tokens every stage of the budget booked, summed.
int64_t BookedTokens(const agents::Budget& b) {
  return b.rollout.tokens + b.update.tokens + b.eval.tokens + b.diagnostic.tokens;
}

// Compute is counted in one place, by the models themselves
// (TransformerLMImpl::work(), booked by agents::ComputeScope): in an iteration
// of either plane, with the gradient-SNR diagnostic on, every token the policy
// and the rollout engine processed is booked to exactly one budget stage.
TEST(TokenBudget, EveryTokenTheModelsProcessIsBookedOnce) {
  const std::string ckpt = WarmStart("bandit_sft", kBanditSftToml);
  for (const std::string algorithm : {"grpo", "ppo_decision"}) {
    TokenRun run(
        "booked_" + algorithm, kBanditSftToml,
        {"policy.init=" + ckpt, "trainer.algorithm=" + algorithm,
         "trainer.episodes_per_iteration=16", "trainer.group_size=4", "trainer.epochs=2",
         "sampler.max_new_tokens=8", "trainer.grad_snr_every=1", "trainer.grad_snr_episodes=4"});
    policy::TransformerLM model = run.session().model;
    auto* sampler = run.session().Agent(run.trainer().plane(), 0).sampler;
    auto* local = dynamic_cast<policy::TextSampler*>(sampler);  // rlid's engine
    policy::TransformerLM engine = local ? local->engine() : policy::TransformerLM(nullptr);
    const bool separate_engine = engine && engine.ptr() != model.ptr();
    const policy::ForwardCost model_start = model->work();
    const policy::ForwardCost engine_start =
        separate_engine ? engine->work() : policy::ForwardCost{};
    const int64_t booked_start = BookedTokens(run.session().budget);
    auto m = run.Iterate(0);
    EXPECT_TRUE(HasMetric(m, "grad/snr")) << algorithm;
    int64_t processed = policy::Difference(model->work(), model_start).tokens;
    if (separate_engine) processed += policy::Difference(engine->work(), engine_start).tokens;
    EXPECT_GT(processed, 0) << algorithm;
    EXPECT_EQ(BookedTokens(run.session().budget) - booked_start, processed) << algorithm;
    EXPECT_GT(run.session().budget.diagnostic.tokens, 0) << algorithm;
  }
}

// The token plane with LoRA adapters on the warm start: the update trains the
// adapters only, and the rollout engine then holds the merged weights (it
// computes what the adapted policy computes).
TEST(TokenBudget, GrpoTrainsLoraAdaptersAndTheEngineGetsThemMerged) {
  const std::string ckpt = WarmStart("bandit_sft", kBanditSftToml);
  TokenRun run("grpo_lora", kBanditSftToml,
               {"policy.init=" + ckpt, "trainer.algorithm=grpo", "trainer.episodes_per_iteration=16",
                "trainer.group_size=4", "trainer.epochs=1", "sampler.max_new_tokens=8",
                "policy.lora.rank=4", "policy.lora.alpha=64", "trainer.lr=1e-2"});
  auto& model = run.session().model;
  const auto q0 = model->model->layer_list[0]->self_attn->q_proj->weight.clone();
  const auto& q = model->model->layer_list[0]->self_attn->q_proj;
  // Until some group's rewards differ (all-equal groups have zero advantage).
  for (int64_t it = 0; it < 6 && q->lora_B->weight.abs().sum().item<double>() == 0; ++it) run.Iterate(it);
  EXPECT_TRUE(torch::equal(q->weight, q0));  // the base is frozen
  EXPECT_GT(q->lora_B->weight.abs().sum().item<double>(), 0);
  auto& engine = dynamic_cast<policy::TextSampler&>(run.session().Sampler()).engine();
  EXPECT_TRUE(torch::allclose(engine->model->layer_list[0]->self_attn->q_proj->weight, q->MergedWeight()));
  EXPECT_FALSE(torch::equal(engine->model->layer_list[0]->self_attn->q_proj->weight, q0));
}

TEST(TokenBudget, PartialBatchFollowsTheConfiguredRule) {
  // Every outcome pays 1 (right, wrong or invalid answer), so every group has
  // zero variance and no batch can be filled.
  const std::string ckpt = WarmStart("bandit_sft", kBanditSftToml);
  std::vector<std::string> sets = {
      "policy.init=" + ckpt,      "env.wrong_reward=1.0",
      "trainer.invalid.rule=end", "trainer.invalid.penalty=1.0",
      "trainer.algorithm=dapo",   "trainer.episodes_per_iteration=8",
      "trainer.group_size=4",     "trainer.sampling.max_generation_rounds=2",
      "sampler.max_new_tokens=8", "trainer.sampling.overlong_buffer=0"};
  {
    TokenRun run("dapo_partial", kBanditSftToml, sets);
    auto m = run.Iterate(0);  // on_partial_batch = "continue": an empty batch, no update
    EXPECT_EQ(MetricValue(m, "sampling/rounds"), 2);
    EXPECT_EQ(MetricValue(m, "sampling/generated_groups"), 4);
    EXPECT_EQ(MetricValue(m, "sampling/kept_groups"), 0);
    EXPECT_EQ(MetricValue(m, "charts/responses"), 0);
    EXPECT_EQ(run.session().budget.samples_used, 0);
    EXPECT_EQ(run.session().budget.groups_generated, 4);
  }
  sets.push_back("trainer.sampling.on_partial_batch=error");
  TokenRun run("dapo_partial_error", kBanditSftToml, sets);
  try {
    run.Iterate(0);
    ADD_FAILURE() << "expected an error for a batch that cannot be filled";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("0 of 2 groups"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("max_generation_rounds"), std::string::npos);
  }
}

TEST(TokenBudget, DapoRejectsAnOverlongBufferThatCoversEveryAnswer) {
  // DAPO's preset buffer is 4 tokens: with answers of at most 4 tokens every
  // answer would be shaped, so the run stops before it starts.
  const std::string ckpt = WarmStart("bandit_sft", kBanditSftToml);
  try {
    TokenRun run("dapo_overlong", kBanditSftToml,
                 {"policy.init=" + ckpt, "trainer.algorithm=dapo", "sampler.max_new_tokens=4"});
    ADD_FAILURE() << "expected a ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("overlong_buffer = 4"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace rlid::testing

// Train-vs-rollout engine mismatch: with a bf16 rollout engine the log-probs
// it records differ from the fp32 training forward; TIS caps the weights,
// IcePop zeroes the tokens whose ratio leaves [low, high] (they get no
// gradient), and the trainer reports both the gap (engine/kl,
// engine/logp_gap_abs) and the correction (engine/capped_frac,
// engine/masked_frac, engine/weight_mean) — checked against the log-probs the
// run stored, and against an fp32 engine whose gap is ~0.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "policy/model/safetensors.h"
#include "policy/reading/scoring.h"
#include "tests/trainers/algorithms/token_rig.h"
#include "tests/trainers/algorithms/warm_start.h"
#include "tests/trainers/algorithms/warm_start_configs.h"
#include "trainers/losses/losses.h"

namespace rlid::testing {
namespace {

std::vector<std::string> Sets(const std::string& ckpt, const std::string& dtype) {
  return {
      "policy.init=" + ckpt,     "trainer.algorithm=grpo",   "trainer.episodes_per_iteration=32",
      "trainer.group_size=4",    "trainer.num_envs=32",      "trainer.epochs=1",
      "sampler.temperature=0.7", "sampler.max_new_tokens=8", "sampler.dtype=" + dtype};
}

// Per trained response: (rollout log-prob, training log-prob, tokens), from the store.
struct Seq {
  double rollout, train, n;
};
std::vector<Seq> TrainedResponses(const TokenRun& run) {
  auto q = run.Query(
      "SELECT s.logp_rollout, s.logp_train, s.generated_tokens FROM steps s JOIN episodes e ON "
      "e.id = s.episode_id "
      "WHERE e.split = 'train' AND s.logp_train IS NOT NULL");
  std::vector<Seq> out;
  for (const auto& r : q.rows)
    out.push_back({std::get<double>(r[0]), std::get<double>(r[1]),
                   static_cast<double>(std::get<int64_t>(r[2]))});
  return out;
}

// Token-weighted mean of f(sequence ratio k_i = exp(train_i - rollout_i)).
template <class F>
double TokenMean(const std::vector<Seq>& seqs, F f) {
  double num = 0, den = 0;
  for (const auto& s : seqs) num += s.n * f(std::exp(s.train - s.rollout)), den += s.n;
  return num / den;
}

TEST(TokenEngine, Bf16RolloutGapIsCorrectedAndReportedAtSequenceLevel) {
  const std::string ckpt = WarmStart("bandit_sft", kBanditSftToml);
  auto sets = Sets(ckpt, "bfloat16");
  sets.insert(sets.end(), {"trainer.loss.engine.kind=tis", "trainer.loss.engine.level=sequence",
                           "trainer.loss.engine.cap=1.0"});
  TokenRun tis("engine_tis", kBanditSftToml, sets);
  auto m = tis.Iterate(0);
  auto seqs = TrainedResponses(tis);
  ASSERT_EQ(static_cast<double>(seqs.size()), MetricValue(m, "charts/responses"));
  double tokens = 0, gap = 0, gap_abs_seq = 0;
  for (const auto& s : seqs)
    tokens += s.n, gap += s.rollout - s.train, gap_abs_seq += std::abs(s.rollout - s.train);
  // engine/kl = mean over tokens of (rollout - old): the stored per-response sums give it exactly.
  EXPECT_NEAR(MetricValue(m, "engine/kl"), gap / tokens, 1e-6);
  EXPECT_GT(gap_abs_seq / static_cast<double>(seqs.size()), 1e-3)
      << "bf16 must differ from the fp32 forward";
  EXPECT_GT(MetricValue(m, "engine/logp_gap_abs"), 1e-4);
  // TIS at sequence level, cap 1: w_i = min(k_i, 1), token weighted.
  const double capped = TokenMean(seqs, [](double k) { return k > 1.0 ? 1.0 : 0.0; });
  EXPECT_NEAR(MetricValue(m, "engine/capped_frac"), capped, 1e-6);
  EXPECT_NEAR(MetricValue(m, "engine/weight_mean"),
              TokenMean(seqs, [](double k) { return std::min(k, 1.0); }), 1e-6);
  EXPECT_NEAR(MetricValue(m, "engine/ratio_mean"), TokenMean(seqs, [](double k) { return k; }),
              1e-6);
  EXPECT_GT(capped, 0.05);
  EXPECT_LT(capped, 0.95);
  EXPECT_LE(MetricValue(m, "engine/weight_mean"), 1.0);

  // IcePop with [low, high] = [e^-x, e^x], x = the median |train - rollout| of the
  // responses above: the same seed replays the same rollouts, so about half the
  // tokens fall outside and are masked.
  std::vector<double> d;
  for (const auto& s : seqs) d.push_back(std::abs(s.train - s.rollout));
  std::nth_element(d.begin(), d.begin() + d.size() / 2, d.end());
  const double x = d[d.size() / 2];
  sets = Sets(ckpt, "bfloat16");
  sets.insert(sets.end(), {"trainer.loss.engine.kind=icepop", "trainer.loss.engine.level=sequence",
                           "trainer.loss.engine.low=" + std::to_string(std::exp(-x)),
                           "trainer.loss.engine.high=" + std::to_string(std::exp(x))});
  TokenRun ice("engine_icepop", kBanditSftToml, sets);
  auto mi = ice.Iterate(0);
  auto seqs2 = TrainedResponses(ice);
  ASSERT_EQ(seqs2.size(), seqs.size());
  const double low = std::stod(std::to_string(std::exp(-x))),
               high = std::stod(std::to_string(std::exp(x)));
  const double masked = TokenMean(seqs2, [&](double k) { return k < low || k > high ? 1.0 : 0.0; });
  EXPECT_NEAR(MetricValue(mi, "engine/masked_frac"), masked, 1e-6);
  EXPECT_NEAR(MetricValue(mi, "engine/weight_mean"),
              TokenMean(seqs2, [&](double k) { return k < low || k > high ? 0.0 : k; }), 1e-6);
  EXPECT_GT(masked, 0.2);
  EXPECT_LT(masked, 0.8);
  std::printf(
      "[engine] bf16: mean |gap| per response %.2e, engine/kl %.2e; tis cap 1 capped %.3f; icepop "
      "[%.5f, %.5f] masked %.3f\n",
      gap_abs_seq / static_cast<double>(seqs.size()), gap / tokens, capped, low, high, masked);
}

TEST(TokenEngine, Fp32EngineAgreesWithTheTrainingForward) {
  const std::string ckpt = WarmStart("bandit_sft", kBanditSftToml);
  TokenRun run("engine_fp32", kBanditSftToml, Sets(ckpt, "float32"));
  auto m = run.Iterate(0);
  std::printf("[engine] fp32: engine/logp_gap_abs %.2e\n", MetricValue(m, "engine/logp_gap_abs"));
  EXPECT_LT(MetricValue(m, "engine/logp_gap_abs"), 1e-5);
  EXPECT_LT(std::abs(MetricValue(m, "engine/kl")), 1e-5);
  EXPECT_FALSE(HasMetric(m, "engine/capped_frac"));  // no correction configured
}

TEST(TokenEngine, TokenLevelTisCapsAndIcePopMasksRealRollouts) {
  // Rollouts of the bf16 engine, scored by the fp32 training forward.
  const std::string ckpt = WarmStart("bandit_sft", kBanditSftToml);
  TokenRun run("engine_tokens", kBanditSftToml, Sets(ckpt, "bfloat16"));
  auto& s = run.session();
  auto ctx = s.Agent(policy::Plane::kToken, 0);
  std::vector<agents::EpisodeSpec> specs;
  for (int i = 0; i < 24; ++i)
    specs.push_back({envs::SplitSeed(envs::Split::kTrain, i), static_cast<uint64_t>(i), i});
  auto eps = agents::RunTokenEpisodes(ctx, specs, envs::Split::kTrain, false, s.budget);
  std::vector<policy::ScoreRequest> reqs;
  std::vector<const std::vector<float>*> roll;
  int64_t T = 1;
  for (const auto& e : eps) {
    reqs.push_back({e.steps[0].prompt.tokens, e.steps[0].text.response});
    roll.push_back(&e.steps[0].text.rollout_logp);
    T = std::max<int64_t>(T, static_cast<int64_t>(e.steps[0].text.response.size()));
  }
  policy::ScoreOptions so;
  so.temperature = 0.7;
  torch::Tensor old, mask;
  {
    torch::NoGradGuard ng;
    auto sb = policy::ScoreResponses(s.model, reqs, so);
    old = sb.logp.slice(1, 0, T).to(torch::kFloat64);
    mask = sb.mask.slice(1, 0, T).to(torch::kBool);
  }
  auto rollout = torch::zeros_like(old);
  for (size_t i = 0; i < roll.size(); ++i)
    for (size_t t = 0; t < roll[i]->size(); ++t) rollout[i][t] = (*roll[i])[t];
  auto k = torch::exp(old - rollout);

  trainers::EngineConfig tis;
  tis.kind = trainers::EngineKind::kTis;
  tis.cap = 1.0;
  auto ct = trainers::CorrectEngine(tis, old, rollout, mask);
  EXPECT_LE(ct.weight.masked_select(mask).max().item<double>(), 1.0);
  auto below = mask & (k <= 1.0);
  EXPECT_TRUE(torch::allclose(ct.weight.masked_select(below), k.masked_select(below)));
  const double capped = ct.metrics.at("engine/capped_frac");
  EXPECT_GT(capped, 0.05);
  EXPECT_LT(capped, 0.95);

  // IcePop around the median token gap: outside tokens get weight 0 and no gradient.
  auto gaps = (old - rollout).abs().masked_select(mask);
  const double x = gaps.median().item<double>();
  trainers::LossConfig loss;
  loss.engine.kind = trainers::EngineKind::kIcepop;
  loss.engine.low = std::exp(-x);
  loss.engine.high = std::exp(x);
  auto ci = trainers::CorrectEngine(loss.engine, old, rollout, mask);
  auto outside = mask & ((k < loss.engine.low) | (k > loss.engine.high));
  auto inside = mask & ~outside;
  EXPECT_GT(outside.sum().item<int64_t>(), 0);
  EXPECT_GT(inside.sum().item<int64_t>(), 0);
  EXPECT_EQ(ci.weight.masked_select(outside).abs().max().item<double>(), 0.0);
  EXPECT_TRUE(torch::allclose(ci.weight.masked_select(inside), k.masked_select(inside)));
  EXPECT_NEAR(ci.metrics.at("engine/masked_frac"),
              outside.sum().item<double>() / mask.sum().item<double>(), 1e-12);

  trainers::PolicyLossInputs in;
  in.log_prob = old.clone().requires_grad_(true);
  in.old_log_prob = old;
  in.rollout_log_prob = rollout;
  in.response_mask = mask;
  in.advantages =
      torch::linspace(-1.0, 1.0, old.size(0), torch::kFloat64) + 0.05;  // none exactly 0
  auto res = trainers::PolicyLoss(loss, trainers::KlConfig{}, in);
  res.loss.backward();
  auto g = in.log_prob.grad();
  EXPECT_EQ(g.masked_select(outside).abs().max().item<double>(), 0.0);
  EXPECT_GT(g.masked_select(inside).abs().min().item<double>(), 0.0);
  std::printf(
      "[engine] token level: %lld tokens, median |gap| %.2e, tis cap 1 capped %.3f, icepop masked "
      "%.3f\n",
      static_cast<long long>(mask.sum().item<int64_t>()), x, capped,
      ci.metrics.at("engine/masked_frac"));
}

// The warm start as a Qwen3-MoE checkpoint (scripts/upcycle_moe.py's upcycling):
// each layer's MLP copied into 4 experts with noise, top-2 of a random router.
std::string UpcycledWarmStart(const std::string& dense, const std::filesystem::path& out) {
  namespace fs = std::filesystem;
  fs::create_directories(out);
  fs::copy_file(fs::path(dense) / "tokenizer.json", out / "tokenizer.json", fs::copy_options::overwrite_existing);
  std::ifstream in(fs::path(dense) / "config.json");
  auto cfg = nlohmann::json::parse(in);
  cfg["model_type"] = "qwen3_moe", cfg["architectures"] = {"Qwen3MoeForCausalLM"};
  cfg["num_experts"] = 4, cfg["num_experts_per_tok"] = 2, cfg["norm_topk_prob"] = true;
  cfg["moe_intermediate_size"] = cfg["intermediate_size"], cfg["mlp_only_layers"] = nlohmann::json::array();
  std::ofstream(out / "config.json") << cfg.dump(2);
  torch::manual_seed(7);
  policy::TensorMap moe;
  for (const auto& [name, w] : policy::LoadSafetensors((fs::path(dense) / "model.safetensors").string())) {
    const auto mlp = name.find(".mlp.");
    if (mlp == std::string::npos) {
      moe[name] = w;
      continue;
    }
    const std::string layer = name.substr(0, mlp), proj = name.substr(mlp + 5);
    for (int e = 0; e < 4; ++e)
      moe[layer + ".mlp.experts." + std::to_string(e) + "." + proj] = w + 0.1 * w.std() * torch::randn_like(w);
    moe[layer + ".mlp.gate.weight"] = 0.1 * torch::randn({4, w.size(proj.rfind("down", 0) == 0 ? 0 : 1)});
  }
  policy::SaveSafetensors((out / "model.safetensors").string(), moe);
  return out.string();
}

// engine/routing_mismatch on an MoE policy: 0 with a float32 copy of the
// trainer as the engine (the same forward), a share in [0, 1] with bfloat16.
TEST(TokenEngine, RoutingMismatchOfAnMoePolicy) {
  const std::string dense = WarmStart("bandit_sft", kBanditSftToml);
  const auto dir = TestCacheDir() / "bandit_sft_moe";
  const std::string moe = UpcycledWarmStart(dense, dir);
  for (const char* dtype : {"float32", "bfloat16"}) {
    TokenRun run(std::string("engine_moe_") + dtype, kBanditSftToml, Sets(moe, dtype));
    auto m = run.Iterate(0);
    ASSERT_TRUE(HasMetric(m, "engine/routing_mismatch")) << dtype;
    const double share = MetricValue(m, "engine/routing_mismatch");
    std::printf("[engine] moe %s: engine/routing_mismatch %.4f, logp_gap_max %.3g\n", dtype, share,
                MetricValue(m, "engine/logp_gap_max"));
    if (std::string(dtype) == "float32") EXPECT_EQ(share, 0.0);
    EXPECT_GE(share, 0.0);
    EXPECT_LE(share, 1.0);
  }
}

}  // namespace
}  // namespace rlid::testing

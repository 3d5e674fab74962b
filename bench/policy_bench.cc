// Policy benchmarks (`rlid bench readout|flops|sample`), each reporting ratios
// measured in the same run: single-pass readout vs naive per-realisation scoring and
// batched vs batch-1 readout; training FLOP/s as a fraction of measured torch::mm
// FLOP/s; rollout tokens/s with/without KV cache, fp32 vs bf16, and the
// train-vs-rollout log-prob gap. Shapes: ~200-token prompts, vocab 1024.
#include <fmt/format.h>

#include <algorithm>
#include <iostream>

#include "bench/bench.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/rng.h"
#include "policy/model/model.h"
#include "policy/model/runtime.h"
#include "policy/reading/readout.h"
#include "policy/reading/sampler.h"
#include "policy/reading/scoring.h"

namespace rlid::bench {
namespace {

using policy::TokenId;

// Qwen3.5-shaped configs (hybrid: every 4th layer full attention, the rest
// Gated DeltaNet), as a config.json states them, with random weights:
//   qwen3_5-tiny  D 128, 4 layers, vocab 1024 (the tests' scale)
//   qwen3_5-0.8b  D 1024, 24 layers, SwiGLU 3584, 8 heads of 256 (2 KV), linear 16 x 128,
//                 vocab 248,320, tied: 0.75B parameters
//   qwen3_5-2b    D 2048, 24 layers, SwiGLU 6144, otherwise as 0.8b: 1.88B parameters
policy::ModelConfig Qwen35Shape(const std::string& size) {
  const bool tiny = size == "tiny", big = size == "2b";
  const int64_t D = tiny ? 128 : big ? 2048 : 1024, layers = tiny ? 4 : 24;
  nlohmann::json j = {
      {"model_type", "qwen3_5_text"},
      {"vocab_size", tiny ? 1024 : 248320},
      {"hidden_size", D},
      {"intermediate_size", tiny  ? 384
                            : big ? 6144
                                  : 3584},
      {"num_hidden_layers", layers},
      {"num_attention_heads", tiny ? 2 : 8},
      {"num_key_value_heads", tiny ? 1 : 2},
      {"head_dim", tiny ? 64 : 256},
      {"linear_num_key_heads", tiny ? 2 : 16},
      {"linear_num_value_heads", tiny ? 4 : 16},
      {"linear_key_head_dim", tiny ? 32 : 128},
      {"linear_value_head_dim", tiny ? 32 : 128},
      {"tie_word_embeddings", true},
      {"max_position_embeddings", 4096},
      {"rope_parameters",
       {{"rope_type", "default"}, {"rope_theta", 1e7}, {"partial_rotary_factor", 0.25}}}};
  return policy::ModelConfig::FromJson(j);
}

// An rlid preset (tiny | small | base, vocab 1024) or a Qwen3.5 shape (qwen3_5-tiny | -0.8b | -2b).
policy::ModelConfig BenchConfig(const std::string& preset) {
  if (preset.rfind("qwen3_5-", 0) == 0) {
    const std::string size = preset.substr(8);
    if (size != "tiny" && size != "0.8b" && size != "2b")
      throw ConfigError(fmt::format("unknown model shape '{}'", preset),
                        "use qwen3_5-tiny, qwen3_5-0.8b or qwen3_5-2b");
    return Qwen35Shape(size);
  }
  policy::ModelConfig c;
  c.ApplyPreset(preset);
  c.vocab_size = 1024;
  return c;
}

std::vector<TokenId> RandomTokens(Rng& rng, int64_t n, TokenId lo, TokenId hi) {
  std::vector<TokenId> v(n);
  for (auto& t : v) t = static_cast<TokenId>(rng.UniformRange(lo, hi));
  return v;
}

// A menu state: ~200-token prompt, K single-token labels (ids 1000 - K + k), and
// K/4 + 1 items with a second, multi-token realisation ("go north"-like, 3 tokens).
policy::ReadoutRequest MenuState(Rng& rng, int K) {
  policy::ReadoutRequest req;
  req.prompt = RandomTokens(rng, rng.UniformRange(190, 210), 2, 900);
  req.end_token = 1;
  for (int k = 0; k < K; ++k) req.realisations.push_back({{static_cast<TokenId>(1000 - K + k)}});
  for (int k = 0; k <= K / 4; ++k)
    req.realisations[k].push_back(
        {static_cast<TokenId>(950 + k % 3), static_cast<TokenId>(960 + k), static_cast<TokenId>(980 + k % 2)});
  return req;
}

class ReadoutBench : public Benchmark {
 public:
  void AddOptions(CLI::App& app) override {
    app.add_option(
           "--preset", preset_,
           "model: an rlid preset (tiny, small, base) or a Qwen3.5 shape with random weights "
           "(qwen3_5-tiny, qwen3_5-0.8b, qwen3_5-2b)")
        ->capture_default_str();
    app.add_option("--seconds", seconds_, "time per measurement")->capture_default_str();
    app.add_option("--probe", probe_, "states timed one at a time per measurement")
        ->capture_default_str();
    app.add_flag("--skip-batched", skip_batched_,
                 "leave out the B = 16 / 32 batches (large models)");
  }
  nlohmann::json Run() override {
    threads_ = cli::GlobalThreads().value_or(0);  // rlid --threads N
    policy::SetNumThreads(threads_);
    policy::TransformerLM model(BenchConfig(preset_));
    model->InitWeights(1);
    torch::NoGradGuard no_grad;
    nlohmann::json out = {{"preset", preset_},
                          {"parameters", model->config().NumParameters()},
                          {"recurrent_layers", model->config().HasLinearLayers()},
                          {"runtime", policy::TorchSummary()}};
    std::cout << fmt::format("{:>4} {:>12} {:>11} {:>12} {:>9} {:>7} {:>12} {:>12} {:>9} {:>9}\n",
                             "K", "realisations", "naive ms", "single ms", "speed-up", "target",
                             "B=16 ms/st", "B=32 ms/st", "x B=16", "x B=32");
    {
      // The process's first forwards are slow (allocator growth, kernel selection, thread pool
      // start): run both kinds of pass for a while before anything is timed.
      Rng rng = Rng::Stream(7, "bench_readout_warmup");
      const policy::ReadoutRequest s = MenuState(rng, 16);
      TimePerCall(seconds_, [&] {
        policy::Readout(model, {s});
        policy::NaiveRealisationLogProbs(model, s.prompt, s.realisations[0][0]);
      });
    }
    Progress progress("bench readout: menu sizes", 3, true, /*every_s=*/0);
    for (int K : {4, 8, 16}) {
      Rng rng = Rng::Stream(7, "bench_readout", K);
      std::vector<policy::ReadoutRequest> states;
      for (int i = 0; i < 32; ++i) states.push_back(MenuState(rng, K));
      int realisations = 0;
      for (const auto& item : states[0].realisations) realisations += static_cast<int>(item.size());
      const int probe = probe_;  // states timed one at a time
      double naive = TimePerCall(seconds_, [&] {
                       for (int i = 0; i < probe; ++i)
                         for (const auto& item : states[i].realisations)
                           for (const auto& w : item) policy::NaiveRealisationLogProbs(model, states[i].prompt, w);
                     }) / probe;
      double single = TimePerCall(seconds_, [&] {
                        for (int i = 0; i < probe; ++i) policy::Readout(model, {states[i]});
                      }) / probe;
      std::vector<policy::ReadoutRequest> b16(states.begin(), states.begin() + 16);
      double batch16 = 0, batch32 = 0;
      if (!skip_batched_) {
        batch16 = TimePerCall(seconds_, [&] { policy::Readout(model, b16); }) / 16;
        batch32 = TimePerCall(seconds_, [&] { policy::Readout(model, states); }) / 32;
      }
      // A skipped batch reads "-" in the table and null in the JSON.
      auto cell = [&](double v, int width, int digits) {
        return skip_batched_ ? fmt::format("{:>{}}", "-", width)
                             : fmt::format("{:>{}.{}f}", v, width, digits);
      };
      auto value = [&](double v) { return skip_batched_ ? nlohmann::json() : nlohmann::json(v); };
      const double speedup = naive / single, target = 0.8 * K;
      std::cout << fmt::format("{:>4} {:>12} {:>11.2f} {:>12.2f} {:>9.1f} {:>7.1f} {} {} {} {}\n",
                               K, realisations, naive * 1e3, single * 1e3, speedup, target,
                               cell(batch16 * 1e3, 12, 2), cell(batch32 * 1e3, 12, 2),
                               cell(single / batch16, 9, 2), cell(single / batch32, 9, 2));
      out["menus"].push_back({{"menu_size", K},
                              {"realisations", realisations},
                              {"naive_ms_per_state", naive * 1e3},
                              {"single_pass_ms_per_state", single * 1e3},
                              {"speedup_vs_naive", speedup},
                              {"target_speedup", target},
                              {"meets_target", speedup >= target},
                              {"batch16_ms_per_state", value(batch16 * 1e3)},
                              {"batch32_ms_per_state", value(batch32 * 1e3)},
                              {"batch16_vs_batch1", value(single / batch16)},
                              {"batch32_vs_batch1", value(single / batch32)}});
      progress.Update(K == 4 ? 1 : K == 8 ? 2 : 3, fmt::format("(K = {})", K));
    }
    return out;
  }

 private:
  std::string preset_ = "tiny";
  double seconds_ = 1.0;
  int probe_ = 4;
  bool skip_batched_ = false;
  int threads_ = 0;
};

// Peak torch::mm FLOP/s over a few square sizes (fp32).
double MeasureMmFlops(double seconds, nlohmann::json& detail) {
  double best = 0;
  for (int64_t n : {512, 1024, 2048}) {
    auto a = torch::randn({n, n}), b = torch::randn({n, n});
    double t = TimePerCall(seconds, [&] { torch::mm(a, b); });
    double f = 2.0 * n * n * n / t;
    detail[fmt::format("mm_{}_gflops", n)] = f / 1e9;
    best = std::max(best, f);
  }
  return best;
}

class FlopsBench : public Benchmark {
 public:
  void AddOptions(CLI::App& app) override {
    app.add_option("--preset", preset_, "model preset")->capture_default_str();
    app.add_option("--batch", batch_, "sequences per step")->capture_default_str();
    app.add_option("--seq", seq_, "tokens per sequence")->capture_default_str();
    app.add_option("--seconds", seconds_, "time per measurement")->capture_default_str();
  }
  nlohmann::json Run() override {
    threads_ = cli::GlobalThreads().value_or(0);  // rlid --threads N
    policy::SetNumThreads(threads_);
    nlohmann::json out = {{"preset", preset_}, {"runtime", policy::TorchSummary()}};
    Progress progress("bench flops: measurements", 2, true, /*every_s=*/0);
    const double mm = MeasureMmFlops(seconds_, out);
    progress.Update(1, fmt::format("(torch::mm peak {:.1f} GFLOP/s)", mm / 1e9));
    auto cfg = BenchConfig(preset_);
    policy::TransformerLM model(cfg);
    model->InitWeights(1);
    auto ids = torch::randint(0, cfg.vocab_size, {batch_, seq_ + 1}, torch::kInt64);
    auto inputs = ids.slice(1, 0, seq_), targets = ids.slice(1, 1).reshape({-1});
    auto pos = torch::arange(seq_, torch::kInt64).unsqueeze(0).expand({batch_, seq_}).contiguous();
    auto mask =
        policy::AttentionMask::Causal(std::vector<int64_t>(batch_, seq_), seq_, torch::kCPU);
    auto train_step = [&] {
      model->zero_grad();
      auto h = model->forward(inputs, pos, mask).hidden;
      auto loss = torch::nn::functional::cross_entropy(model->Logits(h).view({-1, cfg.vocab_size}), targets);
      loss.backward();
    };
    const policy::ForwardCost before = model->work();
    train_step();
    const policy::ForwardCost cost = policy::Difference(model->work(), before);
    double step = TimePerCall(seconds_, train_step);
    // Forward + backward = 3 x the forward FLOPs the model counted for one step
    // (a causal forward over batch x seq tokens with logits at every position).
    const double flops = 3.0 * cfg.ForwardFlops(cost);
    const double achieved = flops / step;
    progress.Update(2, "(train step)");
    std::cout << fmt::format("{:<28} {:>12}\n", "measure", "value");
    std::cout << fmt::format("{:<28} {:>12.1f}\n", "torch::mm peak GFLOP/s", mm / 1e9);
    std::cout << fmt::format("{:<28} {:>12.1f}\n", "train fwd+bwd GFLOP/s", achieved / 1e9);
    std::cout << fmt::format("{:<28} {:>12.1f}\n", "fraction of mm (%)", 100 * achieved / mm);
    std::cout << fmt::format("{:<28} {:>12.0f}\n", "train tokens/s", batch_ * seq_ / step);
    out.update({{"batch", batch_},
                {"seq", seq_},
                {"params", cfg.NumParameters()},
                {"mm_peak_gflops", mm / 1e9},
                {"train_gflops", achieved / 1e9},
                {"fraction_of_mm", achieved / mm},
                {"meets_target", achieved / mm >= 0.4},
                {"step_ms", step * 1e3},
                {"train_tokens_per_s", batch_ * seq_ / step}});
    return out;
  }

 private:
  std::string preset_ = "tiny";
  int64_t batch_ = 16, seq_ = 256;
  double seconds_ = 2.0;
  int threads_ = 0;
};

class SampleBench : public Benchmark {
 public:
  void AddOptions(CLI::App& app) override {
    app.add_option("--preset", preset_, "model preset")->capture_default_str();
    app.add_option("--prompts", prompts_, "distinct prompts")->capture_default_str();
    app.add_option("--group", group_, "samples per prompt")->capture_default_str();
    app.add_option("--new-tokens", new_tokens_, "tokens generated per sample")->capture_default_str();
    app.add_option("--seconds", seconds_, "time per measurement")->capture_default_str();
  }
  nlohmann::json Run() override {
    threads_ = cli::GlobalThreads().value_or(0);  // rlid --threads N
    policy::SetNumThreads(threads_);
    auto cfg = BenchConfig(preset_);
    policy::TransformerLM model(cfg);
    model->InitWeights(1);
    Rng rng = Rng::Stream(3, "bench_sample");
    std::vector<std::vector<TokenId>> prompts;
    for (int i = 0; i < prompts_; ++i) prompts.push_back(RandomTokens(rng, rng.UniformRange(190, 210), 0, 1023));
    nlohmann::json out = {{"preset", preset_}, {"runtime", policy::TorchSummary()}};
    std::cout << fmt::format("{:<10} {:>6} {:>12} {:>12} {:>16}\n", "dtype", "cache", "tokens/s", "vs no-cache",
                             "mean |gap| (nats)");
    Progress progress("bench sample: engine measurements", 4, true, /*every_s=*/0);
    int measured = 0;
    for (std::string dtype : {"float32", "bfloat16"}) {
      double tps[2] = {0, 0};
      double gap = 0;
      for (bool cache : {true, false}) {
        policy::SamplerOptions o;
        o.max_new_tokens = new_tokens_;
        o.dtype = RequireMode<policy::Precision>("dtype", dtype);
        o.kv_cache = cache;
        policy::TextSampler sampler(cfg, o, torch::kCPU);
        sampler.SyncWeights(model);
        std::vector<std::vector<policy::SampleResult>> res;
        double t = TimePerCall(seconds_, [&] { res = sampler.Sample(prompts, group_, nullptr, 11); });
        tps[cache ? 0 : 1] = static_cast<double>(prompts_) * group_ * new_tokens_ / t;
        if (cache) gap = MeanGap(model, prompts, res);
        progress.Update(++measured, fmt::format("({} kv_cache {})", dtype, cache ? "on" : "off"));
      }
      std::cout << fmt::format("{:<10} {:>6} {:>12.0f} {:>12.2f} {:>16.3g}\n", dtype, "on", tps[0], tps[0] / tps[1],
                               gap);
      std::cout << fmt::format("{:<10} {:>6} {:>12.0f} {:>12} {:>16}\n", dtype, "off", tps[1], "", "");
      out["engines"][dtype] = {{"tokens_per_s_kv", tps[0]},
                               {"tokens_per_s_no_kv", tps[1]},
                               {"kv_speedup", tps[0] / tps[1]},
                               {"mean_abs_logprob_gap", gap}};
    }
    out["bf16_vs_fp32_kv_tokens_per_s"] =
        out["engines"]["bfloat16"]["tokens_per_s_kv"].get<double>() / out["engines"]["float32"]["tokens_per_s_kv"].get<double>();
    out.update({{"prompts", prompts_}, {"group", group_}, {"new_tokens", new_tokens_}});
    return out;
  }

 private:
  // Mean |log π_train - log π_rollout| over all sampled tokens (fp32 training forward).
  static double MeanGap(policy::TransformerLM& model, const std::vector<std::vector<TokenId>>& prompts,
                        const std::vector<std::vector<policy::SampleResult>>& res) {
    torch::NoGradGuard no_grad;
    std::vector<policy::ScoreRequest> reqs;
    std::vector<float> engine;
    for (size_t i = 0; i < prompts.size(); ++i)
      for (const auto& r : res[i]) {
        reqs.push_back({prompts[i], r.tokens});
        engine.insert(engine.end(), r.logprobs.begin(), r.logprobs.end());
      }
    auto s = policy::ScoreResponses(model, reqs, {});
    return (s.logp.masked_select(s.mask > 0) - torch::tensor(engine)).abs().mean().item<double>();
  }

  std::string preset_ = "tiny";
  int prompts_ = 8, group_ = 4, new_tokens_ = 32;
  double seconds_ = 1.0;
  int threads_ = 0;
};

const Registrar<BenchRegistry> kReadout(
    "readout", "single-pass label readout vs naive per-realisation scoring; batching",
    [] { return std::make_unique<ReadoutBench>(); });
const Registrar<BenchRegistry> kFlops("flops", "training forward+backward FLOP/s as a fraction of torch::mm",
                                      [] { return std::make_unique<FlopsBench>(); });
const Registrar<BenchRegistry> kSample("sample", "rollout tokens/s (KV cache, bf16) and train-rollout log-prob gap",
                                       [] { return std::make_unique<SampleBench>(); });

}  // namespace
}  // namespace rlid::bench

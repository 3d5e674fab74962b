// `rlid bench audit_memory`: peak resident memory and wall time of the audit's
// gradient checks (rao_blackwell, then ppo_gradient) on a random model shaped
// like Qwen3-0.6B (hidden 1024, 28 layers, 16 query / 8 KV heads, head_dim 128,
// SwiGLU 3072, vocab 151936, tied embeddings, q/k norm; ~596M parameters), on
// bandit states rendered with bandit's small trained tokenizer (its ids are far
// below the model's vocabulary). Peak RSS is getrusage's ru_maxrss, a process
// lifetime maximum, read after building the model and after each check; it is
// printed next to the float32 weights' bytes and the 8 GB target. Minutes of
// CPU time; not part of CI.
#include <fmt/format.h>

#include <iostream>

#include "bench/bench.h"
#include "core/error.h"
#include "envs/api/env.h"
#include "policy/model/model.h"
#include "policy/reading/prompt.h"
#include "policy/model/runtime.h"
#include "policy/tokenizer/tokenizer.h"
#include "trainers/analysis/audit.h"

namespace rlid::bench {
namespace {

constexpr double kTargetBytes = 8e9;  // 8 GB

double Gb(double bytes) { return bytes / 1e9; }

class AuditMemoryBench : public Benchmark {
 public:
  void AddOptions(CLI::App& app) override {
    app.add_option("--states", states_, "bandit test states the checks run on")
        ->capture_default_str();
    app.add_option("--mc-samples", mc_samples_, "Monte-Carlo draws per state (Rao-Blackwell)")
        ->capture_default_str();
    app.add_option("--layers", layers_, "decoder layers (28 = Qwen3-0.6B; fewer for a smoke run)")
        ->capture_default_str();
    app.add_option("--checks", checks_, "the checks to run, in order")->capture_default_str();
  }

  nlohmann::json Run() override {
    threads_ = cli::GlobalThreads().value_or(1);  // rlid --threads N
    policy::SetNumThreads(threads_);
    auto env = envs::MakeEnv("bandit");
    auto tok = SmallEnvTokenizer(*env);
    policy::PromptRenderer renderer(policy::PromptConfig{}, tok);

    policy::ModelConfig c;
    c.ApplyPreset("custom");
    c.vocab_size = 151936;
    c.hidden_size = 1024;
    c.intermediate_size = 3072;
    c.num_layers = layers_;
    c.num_heads = 16;
    c.num_kv_heads = 8;
    c.head_dim = 128;
    c.rope_theta = 1e6;
    c.rms_norm_eps = 1e-6;
    c.qk_norm = true;
    c.tie_embeddings = true;
    c.Validate();
    const double rss_start = PeakRssBytes();
    const double t_build = MonotonicSeconds();
    policy::TransformerLM model(c);
    model->InitWeights(1);
    double weight_bytes = 0;
    int64_t params = 0;
    for (const auto& p : model->parameters()) {
      weight_bytes += static_cast<double>(p.numel() * p.element_size());
      params += p.numel();
    }
    const double build_s = MonotonicSeconds() - t_build, rss_model = PeakRssBytes();

    nlohmann::json out = {{"runtime", policy::TorchSummary()},
                          {"parameters", params},
                          {"weights_bytes", weight_bytes},
                          {"states", states_},
                          {"mc_samples", mc_samples_},
                          {"layers", layers_},
                          {"target_bytes", kTargetBytes},
                          {"peak_rss_bytes_before_model", rss_start},
                          {"peak_rss_bytes_after_model", rss_model},
                          {"model_build_s", build_s}};
    std::cout << fmt::format(
        "model: {:.1f}M parameters, {:.2f} GB float32 weights; peak RSS {:.2f} GB after building "
        "it ({:.1f} s)\n\n",
        params / 1e6, Gb(weight_bytes), Gb(rss_model), build_s);
    std::vector<std::vector<std::string>> rows;
    bool all_passed = true;
    for (const auto& id : checks_) {
      if (id != "rao_blackwell" && id != "ppo_gradient")
        throw ConfigError(fmt::format("--checks: unknown check '{}'", id),
                          "use rao_blackwell and/or ppo_gradient");
      trainers::AuditOptions o;
      o.states = states_;
      o.mc_samples = mc_samples_;
      o.only = {id};
      o.progress = true;
      const double t0 = MonotonicSeconds();
      auto checks = trainers::RunAudit(model, renderer, *env, o);
      const double wall = MonotonicSeconds() - t0, rss = PeakRssBytes();
      std::cout << trainers::FormatAudit(checks);
      const bool passed = trainers::CountFailed(checks) == 0;
      all_passed = all_passed && passed;
      out["checks"][id] = {{"wall_s", wall}, {"peak_rss_bytes", rss}, {"passed", passed}};
      rows.push_back({id, fmt::format("{:.1f}", wall), fmt::format("{:.2f}", Gb(rss)),
                      fmt::format("{:.2f}", rss / weight_bytes), passed ? "PASS" : "FAIL"});
    }
    const double peak = PeakRssBytes();
    std::cout << fmt::format("{:<14} {:>9} {:>18} {:>16} {:>7}\n", "check", "wall s",
                             "peak RSS so far GB", "x weights bytes", "result");
    for (const auto& r : rows)
      std::cout << fmt::format("{:<14} {:>9} {:>18} {:>16} {:>7}\n", r[0], r[1], r[2], r[3], r[4]);
    std::cout << fmt::format(
        "\npeak RSS {:.2f} GB = {:.2f} x the {:.2f} GB of weights; target {:.0f} GB: {}\n",
        Gb(peak), peak / weight_bytes, Gb(weight_bytes), Gb(kTargetBytes),
        peak <= kTargetBytes ? "met" : "MISSED");
    out["peak_rss_bytes"] = peak;
    out["peak_over_weights"] = peak / weight_bytes;
    out["target_met"] = peak <= kTargetBytes;
    out["checks_passed"] = all_passed;
    return out;
  }

 private:
  int threads_ = 1;
  int64_t states_ = 2;
  int64_t mc_samples_ = 2000;
  int64_t layers_ = 28;
  std::vector<std::string> checks_ = {"rao_blackwell", "ppo_gradient"};
};

const Registrar<BenchRegistry> kRegister(
    "audit_memory",
    "peak RSS and wall time of the audit's gradient checks on a Qwen3-0.6B-shaped model",
    [] { return std::make_unique<AuditMemoryBench>(); });

}  // namespace
}  // namespace rlid::bench

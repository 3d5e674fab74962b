// `rlid bench device`: the GPU against this machine's CPU, in one run, on the
// same models and work. For the tiny preset (float32, full fine-tuning) and a
// Qwen3-0.6B-shaped checkpoint (bf16 base, LoRA; generated with --generate
// when the directory does not exist), on every device asked for, it measures:
//   readout   bandit decisions/s of one batched menu readout (B states);
//   sample    tokens/s the token-plane engine generates (B prompts x n samples);
//   train     seconds per decision-PPO iteration (B episodes, after a warm-up).
// Each device's time is wall-clock after the device has finished its work
// (torch::cuda::synchronize). Prints a table with the GPU / CPU ratios.
// scripts/gpu_check.sh runs it on a borrowed GPU.
#include <fmt/format.h>

#include <filesystem>
#include <iostream>

#include "bench/bench.h"
#include "bench/training_arm.h"
#include "core/config.h"
#include "core/error.h"
#include "core/progress.h"
#include "core/strings.h"
#include "envs/api/env.h"
#include "policy/model/checkpoint.h"
#include "policy/model/device.h"
#include "policy/reading/prompt.h"
#include "policy/reading/readout.h"
#include "policy/model/runtime.h"
#include "policy/reading/sampler.h"

namespace rlid::bench {
namespace {
namespace fs = std::filesystem;

// Waits until `device` has run everything queued (a no-op on the CPU).
void Finish(const torch::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

struct ModelCase {
  std::string name;       // "tiny" | "qwen3-0.6b"
  std::string init;       // policy.init ("" = a fresh preset)
  std::string dtype;      // weights and rollout engine: float32 | bfloat16
  int64_t lora_rank = 0;  // 0 = full fine-tuning
};

class DeviceBench : public Benchmark {
 public:
  void AddOptions(CLI::App& app) override {
    app.add_option("--devices", devices_, "devices to compare, comma-separated (default: cpu and, "
                                          "when there is a GPU, cuda)");
    app.add_option("--models", models_, "tiny, qwen3-0.6b or both (comma-separated)")
        ->capture_default_str();
    app.add_option("--checkpoint", checkpoint_,
                   "the Qwen3-0.6B-shaped model directory (written there when absent)")
        ->capture_default_str();
    app.add_option("--layers", layers_, "decoder layers of the generated checkpoint (28 = Qwen3-0.6B)")
        ->capture_default_str();
    app.add_option("--batch", batch_, "states per readout, prompts per sample call, episodes per "
                                      "training iteration")
        ->capture_default_str();
    app.add_option("--samples", samples_, "samples per prompt")->capture_default_str();
    app.add_option("--max-new-tokens", max_new_tokens_, "tokens per sample")->capture_default_str();
    app.add_option("--repeats", repeats_, "timed readout/sample repeats (the fastest counts)")
        ->capture_default_str();
    app.add_option("--train-iterations", train_iterations_, "timed training iterations")
        ->capture_default_str();
    app.add_option("--lora-rank", lora_rank_, "LoRA rank on the Qwen3-shaped model")
        ->capture_default_str();
  }

  nlohmann::json Run() override {
    threads_ = cli::GlobalThreads().value_or(0);  // rlid --threads N
    policy::SetNumThreads(threads_);
    std::vector<std::string> devices = devices_.empty() ? DefaultDevices() : Split(devices_, ',');
    for (const auto& d : devices) policy::ResolveDevice(d);  // a missing GPU fails before any work
    std::vector<ModelCase> cases;
    for (const auto& m : Split(models_, ',')) {
      if (m == "tiny") {
        cases.push_back({"tiny", "", "float32", 0});
      } else if (m == "qwen3-0.6b") {
        if (!fs::exists(checkpoint_)) {
          std::cout << fmt::format("writing a random Qwen3-0.6B-shaped BF16 checkpoint ({} layers) to {}\n",
                                   layers_, checkpoint_) << std::flush;
          GenerateQwen3ShapedCheckpoint(checkpoint_, layers_);
        }
        cases.push_back({"qwen3-0.6b", fs::absolute(checkpoint_).string(), "bfloat16", lora_rank_});
      } else {
        throw ConfigError(fmt::format("--models: unknown model '{}'", m), "use tiny and/or qwen3-0.6b");
      }
    }
    std::cout << policy::TorchSummary() << "\n";
    nlohmann::json rows = nlohmann::json::array();
    Progress progress("bench device", static_cast<int64_t>(cases.size() * devices.size()));
    int64_t done = 0;
    for (const auto& c : cases) {
      for (const auto& d : devices) {
        rows.push_back(Measure(c, policy::ResolveDevice(d)));
        progress.Update(++done);
      }
    }
    PrintTable(rows, devices);
    return {{"runtime", policy::TorchSummary()}, {"batch", batch_}, {"samples", samples_},
            {"max_new_tokens", max_new_tokens_}, {"rows", rows}};
  }

 private:
  static std::vector<std::string> DefaultDevices() {
    if (policy::CudaDeviceCount() > 0) return {"cpu", "cuda"};
    return {"cpu"};
  }

  std::string Toml(const ModelCase& c, const torch::Device& device) const {
    std::string policy = c.init.empty()
                             ? "preset = \"tiny\"\n"
                             : fmt::format("init = \"{}\"\ndtype = \"{}\"\n", c.init, c.dtype);
    if (c.lora_rank > 0)
      policy += fmt::format("[policy.lora]\nrank = {}\nalpha = {}\n", c.lora_rank, 2 * c.lora_rank);
    return fmt::format(R"(
[run]
name = "bench_device"
seed = 1
device = "{}"
threads = {}
[env]
name = "bandit"
[tokenizer]
vocab_size = 512
corpus_episodes = 100
[policy]
{}
[sampler]
dtype = "{}"
max_new_tokens = {}
[trainer]
algorithm = "ppo_decision"
iterations = {}
episodes_per_iteration = {}
num_envs = {}
minibatch_size = {}
epochs = 1
eval_every = 0
)",
                       device.str(), threads_, policy, c.dtype, max_new_tokens_,
                       train_iterations_ + 1, batch_, batch_, batch_);
  }

  nlohmann::json Measure(const ModelCase& c, const torch::Device& device) {
    auto cfg = trainers::ExperimentConfig::FromConfig(
        Config::FromString(Toml(c, device), "bench device"));
    const fs::path root =
        fs::temp_directory_path() / fmt::format("rlid_device_bench_{}_{}", ::getpid(), c.name);
    fs::remove_all(root);
    nlohmann::json row = {{"model", c.name}, {"device", device.str()}, {"dtype", c.dtype},
                          {"lora_rank", c.lora_rank}};
    {
      TrainingArm arm(*cfg, root.string(), /*record=*/false);
      auto& model = arm.session->model;
      row["parameters"] = model->config().NumParameters();
      // Readout: B bandit states in one batched call.
      const MenuPrompts menus = RenderMenuPrompts(*arm.session->env, *arm.session->renderer, batch_);
      const auto& reqs = menus.readouts;
      const auto& prompts = menus.token_prompts;
      model->eval();
      policy::ReadoutOptions ro;
      ro.share_prefix = true;
      double readout_s = 0;
      {
        torch::NoGradGuard ng;
        readout_s = Fastest(repeats_, [&] {
          policy::Readout(model, reqs, ro);
          Finish(device);
        });
      }
      row["readout_decisions_per_s"] = batch_ / readout_s;
      // Sampling: the rollout engine with the model's weights (LoRA folded in).
      policy::SamplerOptions so;
      so.dtype = RequireMode<policy::Precision>("dtype", c.dtype);
      so.max_new_tokens = max_new_tokens_;
      policy::TextSampler sampler(model->config(), so, device);
      sampler.SyncWeights(model);
      double sample_s = 1e30, tokens = 0;
      for (int r = 0; r <= repeats_; ++r) {
        const int64_t before = sampler.tokens_generated();
        const double s = MonotonicSeconds();
        sampler.Sample(prompts, static_cast<int>(samples_), nullptr, static_cast<uint64_t>(r));
        Finish(device);
        if (r > 0 && MonotonicSeconds() - s < sample_s) {
          sample_s = MonotonicSeconds() - s;
          tokens = static_cast<double>(sampler.tokens_generated() - before);
        }
      }
      row["sampled_tokens_per_s"] = tokens / sample_s;
      // Training: one warm-up iteration, then the timed ones.
      arm.Iteration(0);
      Finish(device);
      arm.Reset();
      const double t0 = MonotonicSeconds();
      for (int64_t it = 1; it <= train_iterations_; ++it) arm.Iteration(it);
      Finish(device);
      row["train_s_per_iteration"] =
          (MonotonicSeconds() - t0) / static_cast<double>(train_iterations_);
    }
    fs::remove_all(root);
    return row;
  }

  void PrintTable(const nlohmann::json& rows, const std::vector<std::string>& devices) const {
    std::cout << fmt::format(
        "\n{} bandit states per readout, {} prompts x {} samples x {} tokens, {} episodes per "
        "decision-PPO iteration\n",
        batch_, batch_, samples_, max_new_tokens_, batch_);
    std::cout << fmt::format("{:<12} {:<8} {:>10} {:>16} {:>16} {:>14}\n", "model", "device", "dtype",
                             "readout dec/s", "sampled tok/s", "train s/iter");
    for (const auto& r : rows)
      std::cout << fmt::format("{:<12} {:<8} {:>10} {:>16.1f} {:>16.1f} {:>14.3f}\n",
                               r["model"].get<std::string>(), r["device"].get<std::string>(),
                               r["dtype"].get<std::string>() +
                                   (r["lora_rank"].get<int64_t>() > 0 ? "+LoRA" : ""),
                               r["readout_decisions_per_s"].get<double>(),
                               r["sampled_tokens_per_s"].get<double>(),
                               r["train_s_per_iteration"].get<double>());
    if (devices.size() < 2) return;
    // Ratios of every later device to the first, per model (measured in this run).
    for (size_t i = 0; i + 1 < rows.size(); i += devices.size())
      for (size_t j = 1; j < devices.size(); ++j) {
        const auto& a = rows[i];
        const auto& b = rows[i + j];
        std::cout << fmt::format(
            "{} {} / {}: readout {:.1f}x, sampling {:.1f}x, training {:.1f}x faster\n",
            a["model"].get<std::string>(), b["device"].get<std::string>(),
            a["device"].get<std::string>(),
            b["readout_decisions_per_s"].get<double>() / a["readout_decisions_per_s"].get<double>(),
            b["sampled_tokens_per_s"].get<double>() / a["sampled_tokens_per_s"].get<double>(),
            a["train_s_per_iteration"].get<double>() / b["train_s_per_iteration"].get<double>());
      }
  }

  std::string devices_, models_ = "tiny,qwen3-0.6b", checkpoint_ = "build/qwen3_0.6b_shaped";
  int64_t layers_ = 28, batch_ = 16, samples_ = 4, max_new_tokens_ = 16, train_iterations_ = 2,
          lora_rank_ = 16;
  int repeats_ = 3, threads_ = 0;
};

const Registrar<BenchRegistry> kRegister(
    "device", "GPU vs CPU in one run: readout decisions/s, sampled tokens/s, s per training iteration",
    [] { return std::make_unique<DeviceBench>(); });

}  // namespace
}  // namespace rlid::bench

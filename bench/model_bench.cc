// `rlid bench model --checkpoint DIR`: what a user's own pretrained model
// costs here. Loads DIR (timed, with peak RSS against the weights' bytes in
// the compute dtype), then measures in the same run: torch::mm FLOP/s, prefill
// FLOP/s of the model (as a ratio to mm), and menu-readout throughput at batch
// 1 and batch B (as a ratio). With --lora-rank R > 0 it first trains
// decision PPO with LoRA adapters of rank R on the bandit menu env for a few
// iterations, in a child process whose peak RSS is the training's alone, and
// reports decisions/s of the readout (rollout) and of the update. --generate
// first writes a random BF16 checkpoint shaped exactly like Qwen3-0.6B (HF
// names and config, plus a small bandit tokenizer) when DIR does not exist,
// also in a child process. Not part of CI.
#include <fmt/format.h>
#include <sys/wait.h>
#include <unistd.h>

#include <ATen/CPUGeneratorImpl.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <iostream>

#include "bench/bench.h"
#include "bench/training_arm.h"
#include "core/progress.h"
#include "core/config.h"
#include "core/error.h"
#include "envs/api/env.h"
#include "policy/model/checkpoint.h"
#include "policy/model/device.h"
#include "policy/model/model.h"
#include "policy/reading/prompt.h"
#include "policy/reading/readout.h"
#include "policy/model/runtime.h"
#include "policy/model/safetensors.h"
#include "policy/tokenizer/tokenizer.h"

namespace rlid::bench {
namespace {
namespace fs = std::filesystem;

class ModelBench : public Benchmark {
 public:
  void AddOptions(CLI::App& app) override {
    app.add_option("--checkpoint", dir_, "Hugging Face model directory (config.json + safetensors)")
        ->required();
    app.add_flag("--generate", generate_,
                 "if the directory does not exist, first write a random Qwen3-0.6B-shaped BF16 "
                 "checkpoint there");
    app.add_option("--layers", layers_, "decoder layers of a generated checkpoint (28 = Qwen3-0.6B)")
        ->capture_default_str();
    app.add_option("--dtype", dtype_, "compute dtype of the loaded weights: float32 | bfloat16")
        ->capture_default_str();
    app.add_option("--prefill-tokens", prefill_tokens_, "tokens of the timed prefill forward")
        ->capture_default_str();
    app.add_option("--batch", batch_, "states per batched readout")->capture_default_str();
    app.add_option("--repeats", repeats_, "timed repetitions (the fastest counts)")->capture_default_str();
    app.add_option("--lora-rank", lora_rank_,
                   "rank of the LoRA adapters of the decision-PPO training part (0 = skip it)")
        ->capture_default_str();
    app.add_option("--train-iterations", train_iterations_,
                   "measured PPO iterations (after one warm-up iteration)")
        ->capture_default_str();
    app.add_option("--train-episodes", train_episodes_, "bandit episodes (decisions) per PPO iteration")
        ->capture_default_str();
    app.add_option("--checkpointing", checkpointing_,
                   "policy.gradient_checkpointing of the training part (true | false)")
        ->capture_default_str();
  }

  nlohmann::json Run() override {
    if (dtype_ != "float32" && dtype_ != "bfloat16")
      throw ConfigError(fmt::format("--dtype '{}' is not float32 or bfloat16", dtype_));
    if (!fs::exists(dir_)) {
      if (!generate_)
        throw IoError(fmt::format("'{}' does not exist", dir_),
                      "pass a Hugging Face model directory, or --generate to write a random "
                      "Qwen3-0.6B-shaped one there first");
      GenerateInChild();
    }
    // Before this process starts LibTorch's thread pool (fork() and OpenMP do not mix).
    nlohmann::json train = lora_rank_ > 0 ? TrainInChild() : nlohmann::json();
    threads_ = cli::GlobalThreads().value_or(0);  // rlid --threads N
    policy::SetNumThreads(threads_);
    const double rss_before = PeakRssBytes();
    policy::LoadOptions lo;
    lo.dtype = policy::TorchDtype(RequireMode<policy::Precision>("--dtype", dtype_));
    lo.require_tokenizer = false;
    const double t0 = MonotonicSeconds();
    auto ck = policy::LoadCheckpoint(dir_, torch::kCPU, lo);
    const double load_s = MonotonicSeconds() - t0, rss_load = PeakRssBytes();
    auto& model = ck.model;
    model->eval();
    double weight_bytes = 0;
    int64_t params = 0;
    for (const auto& p : model->parameters()) {
      weight_bytes += static_cast<double>(p.numel() * p.element_size());
      params += p.numel();
    }
    const auto& mc = model->config();
    std::cout << fmt::format("{}\n{}: {:.1f}M parameters, {} on disk, {:.2f} GB in {}\n",
                             policy::TorchSummary(), dir_, params / 1e6, mc.source_dtype,
                             weight_bytes / 1e9, dtype_);
    std::cout << fmt::format(
        "load: {:.2f} s; peak RSS {:.2f} GB = {:.2f} x the weights (target <= 3 s, <= 1.3 x)\n",
        load_s, rss_load / 1e9, rss_load / weight_bytes);

    torch::NoGradGuard ng;
    // torch::mm reference: a square float32 matmul.
    const int64_t n = 2048;
    auto a = torch::randn({n, n}), b = torch::randn({n, n});
    // Every timed repeat of the three measurements (mm, prefill, readout).
    Progress progress("bench model: timed repeats (mm, prefill, readout)", 3 * repeats_);
    int64_t repeats_done = 0;
    const auto tick = [&] { progress.Update(++repeats_done); };
    const double mm_s = Fastest(repeats_, [&] { torch::mm(a, b); }, tick);
    const double mm_flops = 2.0 * n * n * n / mm_s;

    // Prefill: one sequence, logits at the last position only (what a readout needs).
    const int64_t T = prefill_tokens_;
    auto ids = torch::randint(0, std::min<int64_t>(mc.vocab_size, 30000), {1, T}, torch::kInt64);
    auto pos = torch::arange(T, torch::kInt64).unsqueeze(0);
    auto mask = policy::AttentionMask::Causal({T}, T, torch::kCPU);
    auto prefill = [&] {
      auto h = model->forward(ids, pos, mask).hidden;
      return model->Logits(h.select(1, T - 1));
    };
    const policy::ForwardCost before = model->work();
    prefill();
    const policy::ForwardCost cost = policy::Difference(model->work(), before);  // one prefill
    const double prefill_s = Fastest(repeats_, prefill, tick);
    const double prefill_flops = mc.ForwardFlops(cost) / prefill_s;

    // Readout of bandit menus (its small trained tokenizer's ids lie far below
    // the model's vocabulary): B states in one call vs one state per call.
    auto env = envs::MakeEnv("bandit");
    auto tok = SmallEnvTokenizer(*env);
    policy::PromptRenderer renderer(policy::PromptConfig{}, tok);
    const MenuPrompts menus = RenderMenuPrompts(*env, renderer, batch_);
    const auto& reqs = menus.readouts;
    const int64_t prompt_tokens = menus.readout_prompt_tokens;
    policy::ReadoutOptions ro;
    ro.share_prefix = true;  // what batching can save: the common prompt prefix
    int64_t one_tokens = 0, batched_tokens = 0;
    const double one_s = Fastest(repeats_, [&] {
      one_tokens = 0;
      for (const auto& rq : reqs) one_tokens += policy::Readout(model, {rq}, ro).cost.tokens;
    });
    const double batched_s =
        Fastest(repeats_, [&] { batched_tokens = policy::Readout(model, reqs, ro).cost.tokens; }, tick);
    const double rss_end = PeakRssBytes();

    std::cout << fmt::format("torch::mm {}x{} float32: {:.1f} GFLOP/s\n", n, n, mm_flops / 1e9);
    std::cout << fmt::format("prefill {} tokens ({}): {:.2f} s, {:.1f} GFLOP/s = {:.2f} x torch::mm (target >= 0.5)\n",
                             T, dtype_, prefill_s, prefill_flops / 1e9, prefill_flops / mm_flops);
    std::cout << fmt::format(
        "readout, {} bandit states ({:.0f} prompt tokens each): {:.2f} decisions/s one per call, "
        "{:.2f} batched = {:.2f} x (target >= 1.5)\n",
        batch_, static_cast<double>(prompt_tokens) / batch_, batch_ / one_s, batch_ / batched_s,
        one_s / batched_s);
    std::cout << fmt::format(
        "  tokens computed: {} one per call, {} batched (the shared prompt prefix is computed "
        "once); prefill at batch 1 already runs at {:.2f} x torch::mm\n",
        one_tokens, batched_tokens, prefill_flops / mm_flops);
    std::cout << fmt::format("peak RSS at the end {:.2f} GB\n", rss_end / 1e9);
    if (!train.is_null()) PrintTraining(train);
    return {{"runtime", policy::TorchSummary()},
            {"lora_training", train},
            {"checkpoint", dir_},
            {"dtype", dtype_},
            {"parameters", params},
            {"weights_bytes", weight_bytes},
            {"load_s", load_s},
            {"peak_rss_bytes_before_load", rss_before},
            {"peak_rss_bytes_after_load", rss_load},
            {"load_rss_over_weights", rss_load / weight_bytes},
            {"mm_flops", mm_flops},
            {"prefill_tokens", T},
            {"prefill_s", prefill_s},
            {"prefill_flops", prefill_flops},
            {"prefill_over_mm", prefill_flops / mm_flops},
            {"readout_batch", batch_},
            {"readout_decisions_per_s_batch1", batch_ / one_s},
            {"readout_decisions_per_s_batched", batch_ / batched_s},
            {"readout_batch_speedup", one_s / batched_s},
            {"readout_tokens_batch1", one_tokens},
            {"readout_tokens_batched", batched_tokens},
            {"peak_rss_bytes", rss_end}};
  }

 private:
  // Runs `fn` in a child process and returns the JSON it returned; the
  // child's peak RSS is added as "peak_rss_bytes".
  nlohmann::json InChild(const std::function<nlohmann::json()>& fn, const std::string& what) {
    const fs::path result = fs::temp_directory_path() / fmt::format("rlid_model_bench_{}.json", ::getpid());
    const pid_t pid = fork();
    if (pid < 0) throw IoError("fork failed");
    if (pid == 0) {
      int code = 0;
      try {
        nlohmann::json j = fn();
        j["peak_rss_bytes"] = PeakRssBytes();
        std::ofstream(result) << j.dump();
      } catch (const std::exception& e) {
        std::cerr << what << ": " << e.what() << "\n";
        code = 1;
      }
      std::cout << std::flush;
      _exit(code);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    nlohmann::json j;
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
      std::ifstream in(result);
      j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    }
    fs::remove(result);
    if (j.is_discarded() || j.is_null()) throw IoError(fmt::format("{} failed (see above)", what));
    return j;
  }

  // Decision PPO with LoRA adapters on the bandit menus: one warm-up iteration,
  // then --train-iterations measured ones, like `rlid bench train`.
  nlohmann::json TrainInChild() {
    if (!fs::exists(fs::path(dir_) / "tokenizer.json"))
      throw IoError(fmt::format("the training part needs '{}/tokenizer.json'", dir_),
                    "copy the model's tokenizer there, or --lora-rank 0 to skip training");
    std::cout << fmt::format("training: decision PPO, LoRA rank {}, bandit, {} episodes per iteration, "
                             "1 warm-up + {} iterations (child process)\n",
                             lora_rank_, train_episodes_, train_iterations_)
              << std::flush;
    return InChild(
        [&] {
          const std::string toml = fmt::format(R"(
[run]
name = "bench_model_lora"
seed = 1
threads = {}
[env]
name = "bandit"
[policy]
init = "{}"
dtype = "{}"
gradient_checkpointing = {}
[policy.lora]
rank = {}
alpha = {}
[trainer]
algorithm = "ppo_decision"
iterations = {}
episodes_per_iteration = {}
num_envs = {}
minibatch_size = {}
epochs = 1
)",
                                               threads_, fs::absolute(dir_).string(), dtype_, checkpointing_, lora_rank_,
                                               2 * lora_rank_, train_iterations_ + 1, train_episodes_,
                                               train_episodes_, train_episodes_);
          auto cfg = trainers::ExperimentConfig::FromConfig(Config::FromString(toml, "bench model"));
          const fs::path root = fs::temp_directory_path() / fmt::format("rlid_model_bench_run_{}", ::getpid());
          fs::remove_all(root);
          nlohmann::json out;
          {
            TrainingArm arm(*cfg, root.string(), /*record=*/false);
            int64_t trainable = 0;
            for (const auto& p : arm.session->model->parameters())
              if (p.requires_grad()) trainable += p.numel();
            const double t0 = MonotonicSeconds();
            arm.Iteration(0);
            const double warmup_s = MonotonicSeconds() - t0;
            arm.Reset();
            for (int64_t it = 1; it <= train_iterations_; ++it) arm.Iteration(it);
            out = {{"lora_rank", lora_rank_},
                   {"base_dtype", dtype_},
                   {"gradient_checkpointing", checkpointing_},
                   {"trainable_parameters", trainable},
                   {"episodes_per_iteration", train_episodes_},
                   {"epochs", cfg->trainer.epochs},
                   {"iterations", train_iterations_},
                   {"warmup_iteration_s", warmup_s},
                   {"decisions", arm.decisions},
                   {"readout_s", arm.times.readout},
                   {"update_s", arm.times.update},
                   {"seconds", arm.seconds},
                   {"readout_decisions_per_s", arm.decisions / arm.times.readout},
                   {"update_decisions_per_s", arm.decisions * cfg->trainer.epochs / arm.times.update},
                   {"decisions_per_s", arm.decisions / arm.seconds}};
          }
          fs::remove_all(root);
          return out;
        },
        "the LoRA training part");
  }

  static void PrintTraining(const nlohmann::json& t) {
    std::cout << fmt::format(
        "decision PPO, LoRA rank {} ({:.2f}M trainable, base {}, gradient checkpointing {}): readout "
        "{:.2f} decisions/s, "
        "update {:.2f} decisions/s (forward + backward per decision and epoch), overall {:.2f} "
        "decisions/s\n",
        t["lora_rank"].get<int64_t>(), t["trainable_parameters"].get<double>() / 1e6,
        t["base_dtype"].get<std::string>(), t["gradient_checkpointing"].get<bool>() ? "on" : "off",
        t["readout_decisions_per_s"].get<double>(),
        t["update_decisions_per_s"].get<double>(), t["decisions_per_s"].get<double>());
    std::cout << fmt::format("  peak RSS of the training process {:.2f} GB (target <= 6 GB)\n",
                             t["peak_rss_bytes"].get<double>() / 1e9);
  }

  void GenerateInChild() {
    std::cout << fmt::format("writing a random Qwen3-0.6B-shaped BF16 checkpoint ({} layers) to {}\n",
                             layers_, dir_)
              << std::flush;
    InChild(
        [&] {
          GenerateQwen3ShapedCheckpoint(dir_, layers_);
          return nlohmann::json::object();
        },
        fmt::format("writing the checkpoint to '{}'", dir_));
  }

  std::string dir_, dtype_ = "float32";
  bool generate_ = false;
  int64_t layers_ = 28;
  int threads_ = 0;
  int64_t prefill_tokens_ = 256;
  int64_t batch_ = 8;
  int repeats_ = 3;
  int64_t lora_rank_ = 16;
  int64_t train_iterations_ = 2;
  int64_t train_episodes_ = 8;
  bool checkpointing_ = true;
};

const Registrar<BenchRegistry> kRegister(
    "model", "load time, memory, prefill FLOP/s and readout batching of a pretrained model",
    [] { return std::make_unique<ModelBench>(); });

}  // namespace
}  // namespace rlid::bench

// run.device on every machine, and CUDA where there is a GPU. The Device.*
// tests run everywhere: device names, "auto", and "cuda" without a GPU as a
// clear config error (exit 2) that creates nothing. The Cuda.* tests need a
// GPU and skip without one (scripts/gpu_check.sh runs them on a borrowed GPU):
// readout and response scoring equal the CPU's within 1e-4 in float32, the
// sampler's decode loop synchronises with the host once per decoded token, a
// checkpoint written from CUDA loads bit-exact on the CPU and back, and one
// decision-PPO and one GRPO iteration train LoRA adapters on CUDA.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "envs/api/env.h"
#include "memory/store.h"
#include "policy/model/checkpoint.h"
#include "policy/model/device.h"
#include "policy/reading/readout.h"
#include "policy/model/runtime.h"
#include "policy/reading/sampler.h"
#include "policy/reading/scoring.h"
#include "tests/agents/fixtures.h"
#include "tests/cli/run_cli.h"
#include "trainers/runtime/trainer.h"

#ifdef RLID_TORCH_CUDA
#include <c10/cuda/CUDAFunctions.h>
#include <c10/util/Exception.h>
#endif

namespace rlid::trainers {
namespace {

namespace fs = std::filesystem;
using rlid::testing::Experiment;
using rlid::testing::TempDir;

#define RLID_REQUIRE_GPU()                                                           \
  if (policy::CudaDeviceCount() == 0)                                                \
  GTEST_SKIP() << "no GPU here (" << policy::TorchSummary()                         \
               << "); scripts/gpu_check.sh runs this test on a machine with one"

// Two bandit iterations with LoRA adapters on a tiny fresh model.
std::string SmallToml(const std::string& algorithm) {
  return R"(
[run]
name = "device"
seed = 5
threads = 1
[env]
name = "bandit"
arms = 4
[tokenizer]
vocab_size = 384
corpus_episodes = 60
[policy]
preset = "tiny"
num_layers = 1
[policy.lora]
rank = 4
alpha = 8
[trainer]
algorithm = ")" + algorithm + R"("
iterations = 1
episodes_per_iteration = 8
num_envs = 8
group_size = 4
epochs = 1
minibatch_size = 8
eval_every = 0
checkpoint_every = 1
)";
}

TEST(Device, NamesResolveAndUnknownOnesAreConfigErrors) {
  for (const char* ok : {"cpu", "cuda", "cuda:0", "cuda:12", "auto"})
    EXPECT_TRUE(policy::IsDeviceSpec(ok)) << ok;
  for (const char* bad : {"gpu", "CUDA", "cuda:", "cuda:x", "cuda:-1", "", "mps"})
    EXPECT_FALSE(policy::IsDeviceSpec(bad)) << bad;
  EXPECT_EQ(policy::ResolveDevice("cpu"), torch::Device(torch::kCPU));
  EXPECT_THROW(policy::ResolveDevice("gpu"), ConfigError);
  try {
    Experiment(SmallToml("ppo_decision"), {"run.device=\"gpu\""});
    FAIL() << "run.device = gpu was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'run.device' must be"), std::string::npos) << e.what();
  }
}

TEST(Device, AutoUsesTheGpuWhenThereIsOne) {
  const torch::Device d = policy::ResolveDevice("auto");
  if (policy::CudaDeviceCount() == 0) {
    EXPECT_TRUE(d.is_cpu());
  } else {
    EXPECT_EQ(d, torch::Device(torch::kCUDA, 0));
  }
}

// Without a GPU, "cuda" stops before anything is written, names what was
// asked for and what was found, and exits 2 like every config error.
TEST(Device, CudaWithoutAGpuIsAClearConfigError) {
  if (policy::CudaDeviceCount() > 0) GTEST_SKIP() << "this machine has a GPU";
  EXPECT_THROW(policy::ResolveDevice("cuda"), ConfigError);
  EXPECT_THROW(policy::ResolveDevice("cuda:1"), ConfigError);
  TempDir dir("device_cli");
  const fs::path cfg = dir.path() / "c.toml";
  std::ofstream(cfg) << SmallToml("ppo_decision");
  const fs::path out = dir.path() / "run";
  auto r = rlid::testing::RunRlid(
      {"train", cfg.string(), "--out", out.string(), "--set", "run.device=\"cuda\""});
  EXPECT_EQ(r.code, 2) << r.err;
  EXPECT_NE(r.err.find("run.device = 'cuda' but no GPU"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("run.device = \"cpu\""), std::string::npos) << "the hint names the fix";
  EXPECT_FALSE(fs::exists(out / memory::kDatabaseFileName)) << "nothing is recorded";
}

// --------------------------------------------------------------------------
// On a GPU.

policy::TransformerLM SharpModel(int64_t vocab, uint64_t seed) {
  policy::ModelConfig c;
  c.ApplyPreset("tiny");
  c.vocab_size = vocab;
  c.num_layers = 2;
  policy::TransformerLM m(c);
  m->InitWeights(seed);
  torch::NoGradGuard ng;
  for (auto& p : m->named_parameters())
    if (p.key().find("norm") == std::string::npos) p.value().mul_(4.0);
  return m;
}

double MaxDiff(const torch::Tensor& a, const torch::Tensor& b) {
  auto x = a.to(torch::kCPU, torch::kFloat64), y = b.to(torch::kCPU, torch::kFloat64);
  auto finite = torch::isfinite(x) & torch::isfinite(y);
  EXPECT_TRUE(torch::equal(torch::isfinite(x), torch::isfinite(y)));
  return (x - y).abs().masked_select(finite).max().item<double>();
}

TEST(Cuda, ReadoutAndScoringEqualTheCpu) {
  RLID_REQUIRE_GPU();
  auto m = SharpModel(61, 7);
  std::vector<policy::ReadoutRequest> reqs;
  for (int b = 0; b < 3; ++b) {
    policy::ReadoutRequest q;
    for (int t = 0; t < 20 + 7 * b; ++t) q.prompt.push_back((t * 13 + b) % 59);
    q.realisations = {{{1}, {2, 3, 4}}, {{5}, {1, 6}}, {{7, 8}}};
    q.end_token = 60;
    reqs.push_back(q);
  }
  policy::ReadoutOptions ro;
  ro.share_prefix = true;
  torch::NoGradGuard ng;
  auto cpu = policy::Readout(m, reqs, ro);
  m->to(torch::Device(torch::kCUDA, 0));
  auto gpu = policy::Readout(m, reqs, ro);
  const double d_logp = MaxDiff(cpu.log_p, gpu.log_p);
  const double d_words = MaxDiff(cpu.realisation_logp, gpu.realisation_logp);
  const double d_value = MaxDiff(cpu.value, gpu.value);
  std::printf("[cuda] readout max |cpu - cuda|: log p(a|s) %.2e, realisations %.2e, value %.2e\n",
              d_logp, d_words, d_value);
  EXPECT_LE(d_logp, 1e-4);
  EXPECT_LE(d_words, 1e-4);
  EXPECT_LE(d_value, 1e-4);

  std::vector<policy::ScoreRequest> sreqs = {{reqs[0].prompt, {1, 2, 3}}, {reqs[0].prompt, {9}},
                                             {reqs[1].prompt, {4, 4, 4, 4, 5}}};
  for (bool shared : {true, false}) {
    policy::ScoreOptions so;
    so.shared_prefix = shared;
    auto g = policy::ScoreResponses(m, sreqs, so);
    m->to(torch::kCPU);
    auto c = policy::ScoreResponses(m, sreqs, so);
    m->to(torch::Device(torch::kCUDA, 0));
    const double d = MaxDiff(c.logp, g.logp);
    std::printf("[cuda] ScoreResponses (shared prefix %d) max |cpu - cuda| %.2e\n", shared, d);
    EXPECT_LE(d, 1e-4);
  }
}

#ifdef RLID_TORCH_CUDA
// Counts CUDA's "called a synchronizing CUDA operation" warnings.
class SyncCounter : public c10::WarningHandler {
 public:
  void process(const c10::Warning& w) override {
    if (w.msg().find("synchroniz") != std::string::npos) ++syncs;
  }
  int64_t syncs = 0;
};
#endif

TEST(Cuda, SamplerSynchronisesOncePerDecodedToken) {
  RLID_REQUIRE_GPU();
#ifdef RLID_TORCH_CUDA
  auto m = SharpModel(97, 3);
  policy::SamplerOptions so;
  so.max_new_tokens = 24;
  policy::TextSampler sampler(m->config(), so, torch::Device(torch::kCUDA, 0));
  m->to(torch::Device(torch::kCUDA, 0));
  sampler.SyncWeights(m);
  std::vector<std::vector<policy::TokenId>> prompts = {{1, 2, 3, 4, 5}, {6, 7, 8}, {9, 10, 11, 12}};
  sampler.Sample(prompts, 2, nullptr, 1);  // warm-up (allocator, kernels)
  SyncCounter counter;
  c10::WarningUtils::WarningHandlerGuard guard(&counter);
  c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN);
  // Stop rows at different steps so the active set shrinks on the way.
  policy::StopFn stop = [](const std::vector<policy::TokenId>& g) { return g.size() >= 4 && g.back() % 5 == 0; };
  auto results = sampler.Sample(prompts, 4, stop, 2);
  c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
  size_t steps = 0;
  for (const auto& per_prompt : results)
    for (const auto& r : per_prompt) steps = std::max(steps, r.tokens.size());
  std::printf("[cuda] sampler: %lld host synchronisations for %zu decode steps\n",
              static_cast<long long>(counter.syncs), steps);
  // One per decode step (the stop test reads the drawn tokens) plus the prompt's upload.
  EXPECT_LE(counter.syncs, static_cast<int64_t>(steps) + 2);
#endif
}

TEST(Cuda, CheckpointsMoveBetweenCudaAndCpuBitExact) {
  RLID_REQUIRE_GPU();
  TempDir dir("cuda_ckpt");
  auto env = envs::MakeEnv("bandit");
  auto tok = rlid::testing::EnvTokenizer(*env, 300);
  auto m = rlid::testing::TinyModel(tok, 11);
  m->to(torch::Device(torch::kCUDA, 0));
  {
    torch::NoGradGuard ng;  // weights no CPU initialiser could produce
    for (auto& p : m->parameters()) p.add_(torch::randn_like(p) * 1e-3);
  }
  const std::string a = (dir.path() / "a").string(), b = (dir.path() / "b").string();
  policy::SaveCheckpoint(a, m, tok);
  auto on_cpu = policy::LoadCheckpoint(a, torch::kCPU);
  auto ref = m->named_parameters();
  for (const auto& p : on_cpu.model->named_parameters())
    EXPECT_TRUE(torch::equal(p.value(), ref[p.key()].to(torch::kCPU))) << p.key();
  policy::SaveCheckpoint(b, on_cpu.model, tok);
  auto back = policy::LoadCheckpoint(b, torch::Device(torch::kCUDA, 0));
  for (const auto& p : back.model->named_parameters()) {
    EXPECT_TRUE(p.value().is_cuda()) << p.key();
    EXPECT_TRUE(torch::equal(p.value(), ref[p.key()])) << p.key();
  }
}

// One iteration of each plane on CUDA with LoRA: finite losses, adapters that
// moved, and checkpoints that load on the CPU.
TEST(Cuda, DecisionPpoAndGrpoTrainLoraOnTheGpu) {
  RLID_REQUIRE_GPU();
  for (const std::string algo : {"ppo_decision", "grpo"}) {
    TempDir dir("cuda_train_" + algo);
    auto cfg = Experiment(SmallToml(algo), {"run.device=\"cuda\""});
    auto trainer = TrainerRegistry::Global().Make(cfg->trainer.algorithm);
    trainers::Run s(*cfg, {.out_dir = dir.str(), .quiet = true});
    ASSERT_TRUE(s.device.is_cuda());
    Train(s, *trainer, {.quiet = true});
    s.End("completed");
    auto ck = policy::LoadCheckpoint((dir.path() / "checkpoints" / "latest").string(), torch::kCPU);
    double adapter_norm = 0;
    for (const auto& p : ck.model->named_parameters()) {
      EXPECT_TRUE(torch::isfinite(p.value()).all().item<bool>()) << algo << " " << p.key();
      if (p.key().find(".lora_B.") != std::string::npos) adapter_norm += p.value().norm().item<double>();
    }
    std::printf("[cuda] %s: one iteration on %s, |lora_B| = %.3g\n", algo.c_str(),
                s.device.str().c_str(), adapter_norm);
    EXPECT_GT(adapter_norm, 0) << algo << ": the adapters trained";
  }
}

}  // namespace
}  // namespace rlid::trainers

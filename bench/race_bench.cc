// `rlid bench race --checkpoint DIR --workload FILE`: rlid's half of the
// side-by-side race with Hugging Face transformers. bench/vs_transformers.py
// writes the workload (token ids only), times transformers on it, runs this
// command in the same session and prints the ratios. Each task runs once to
// warm up, then `repeats` times; the fastest repeat counts. Besides timings the
// output carries what the reference must reproduce: every candidate's
// log π(w|s), greedy continuations, and the training loss.
//
// Workload (every task optional):
//   {"repeats": 3,
//    "menus":    [{"prompt": [ids], "candidates": [[ids], ...]}, ...]   one state per readout
//    "batched":  [{"prompt": ..., "candidates": ...}, ...]             N one-state passes vs one N-state pass
//    "train":    {"states": [...], "chosen": [k], "advantages": [a], "old_logp": [l]}
//    "generate": [{"prompts": [[ids]], "group": G, "new_tokens": N, "temperature": t}, ...]}
#include <fmt/format.h>

#include <algorithm>
#include <iostream>

#include "bench/bench.h"
#include "cli/command.h"
#include "core/error.h"
#include "core/file_io.h"
#include "policy/model/checkpoint.h"
#include "policy/model/device.h"
#include "policy/reading/readout.h"
#include "policy/model/runtime.h"
#include "policy/reading/sampler.h"
#include "trainers/losses/decision_losses.h"

namespace rlid::bench {
namespace {

using nlohmann::json;
using policy::TokenId;

// One menu state: each candidate is an item with one realisation.
policy::ReadoutRequest MenuRequest(const json& state) {
  policy::ReadoutRequest rq;
  rq.prompt = state.at("prompt").get<std::vector<TokenId>>();
  for (const auto& c : state.at("candidates")) rq.realisations.push_back({c.get<std::vector<TokenId>>()});
  return rq;
}

std::vector<policy::ReadoutRequest> MenuRequests(const json& states) {
  std::vector<policy::ReadoutRequest> out;
  for (const auto& s : states) out.push_back(MenuRequest(s));
  return out;
}

class RaceBench : public Benchmark {
 public:
  void AddOptions(CLI::App& app) override {
    app.add_option("--checkpoint", dir_, "model directory (Hugging Face or rlid)")->required();
    app.add_option("--workload", workload_, "JSON workload (see bench/race_bench.cc)")->required();
    app.add_option("--dtype", dtype_, "weights: float32 | bfloat16")
        ->check(CLI::IsMember({"float32", "bfloat16"}))
        ->capture_default_str();
  }

  json Run() override {
    try {
      return Race(ParseWorkload());
    } catch (const json::exception& e) {  // a missing key or a wrong type in the workload
      throw ConfigError(fmt::format("workload '{}': {}", workload_, e.what()),
                        "see the schema at the top of bench/race_bench.cc, or write it with "
                        "bench/vs_transformers.py");
    }
  }

 private:
  json Race(const json& w) {
    policy::SetNumThreads(cli::GlobalThreads().value_or(0));
    policy::LoadOptions lo;
    lo.dtype = policy::TorchDtype(RequireMode<policy::Precision>("--dtype", dtype_));
    lo.require_tokenizer = false;
    auto ck = policy::LoadCheckpoint(dir_, torch::kCPU, lo);
    auto& model = ck.model;
    model->eval();
    const int repeats = w.value("repeats", 3);
    json out = {{"dtype", dtype_}, {"threads", policy::NumThreads()}, {"repeats", repeats}};
    if (w.contains("menus")) out["menus"] = Menus(model, w["menus"], repeats);
    if (w.contains("batched")) out["batched"] = Batched(model, w["batched"], repeats);
    if (w.contains("train")) out["train"] = Train(model, w["train"], repeats);
    // Last: the sampler adopts (freezes) the model.
    if (w.contains("generate")) out["generate"] = Generate(std::move(model), w["generate"], repeats);
    return out;
  }

  json ParseWorkload() const {
    try {
      return json::parse(ReadRegularFile(workload_, 1ull << 30, "workload"));
    } catch (const json::exception& e) {
      throw ConfigError(fmt::format("workload '{}' is not valid JSON: {}", workload_, e.what()),
                        "write it with bench/vs_transformers.py");
    }
  }

  static json Menus(policy::TransformerLM& model, const json& menus, int repeats) {
    torch::NoGradGuard ng;
    json out = json::array();
    for (const auto& m : menus) {
      const std::vector<policy::ReadoutRequest> rq = {MenuRequest(m)};
      policy::ReadoutBatch rb;
      const double s = Fastest(repeats, [&] { rb = policy::Readout(model, rq); });
      auto logp = rb.realisation_logp[0].select(1, 0).to(torch::kFloat64).contiguous();
      out.push_back({{"seconds", s},
                     {"logp", std::vector<double>(logp.data_ptr<double>(), logp.data_ptr<double>() + logp.numel())}});
    }
    return out;
  }

  // Per state: one state per pass vs all states in one pass (prompts' common
  // prefix computed once, as a training iteration reads them).
  static json Batched(policy::TransformerLM& model, const json& states, int repeats) {
    torch::NoGradGuard ng;
    const auto rq = MenuRequests(states);
    policy::ReadoutOptions ro;
    ro.share_prefix = true;
    const double one = Fastest(repeats, [&] {
      for (const auto& r : rq) policy::Readout(model, {r}, ro);
    });
    const double all = Fastest(repeats, [&] { policy::Readout(model, rq, ro); });
    return {{"states", rq.size()}, {"seconds_one_per_pass", one}, {"seconds_batched", all}};
  }

  // Forward + backward of decision PPO on the batch (no optimiser step).
  static json Train(policy::TransformerLM& model, const json& t, int repeats) {
    const auto rq = MenuRequests(t.at("states"));
    const auto chosen = torch::tensor(t.at("chosen").get<std::vector<int64_t>>());
    const auto adv = torch::tensor(t.at("advantages").get<std::vector<double>>(), torch::kFloat32);
    const auto old = torch::tensor(t.at("old_logp").get<std::vector<double>>(), torch::kFloat32);
    trainers::LossConfig cfg;
    double loss = 0;
    model->train();
    const double s = Fastest(repeats, [&] {
      model->zero_grad();
      const auto dist = policy::DecisionDistribution(policy::Readout(model, rq));
      const auto logp = dist.log_p.gather(1, chosen.unsqueeze(1)).squeeze(1);
      auto r = trainers::DecisionPpoLoss(cfg, logp, old, adv);
      r.loss.backward();
      loss = r.loss.item<double>();
    });
    model->eval();
    return {{"seconds", s}, {"loss", loss}};
  }

  json Generate(policy::TransformerLM model, const json& tasks, int repeats) const {
    json out = json::array();
    policy::SamplerOptions so;
    so.dtype = RequireMode<policy::Precision>("--dtype", dtype_);
    policy::TextSampler sampler(std::move(model), so);
    for (const auto& g : tasks) {
      so.max_new_tokens = g.at("new_tokens").get<int>();
      so.temperature = g.at("temperature").get<double>();
      sampler.SetOptions(so);
      const auto prompts = g.at("prompts").get<std::vector<std::vector<TokenId>>>();
      const int group = g.at("group").get<int>();
      std::vector<std::vector<policy::SampleResult>> res;
      const double s = Fastest(repeats, [&] { res = sampler.Sample(prompts, group, nullptr, 1234); });
      json seqs = json::array();
      int64_t tokens = 0;
      for (const auto& per_prompt : res)
        for (const auto& r : per_prompt) {
          tokens += static_cast<int64_t>(r.tokens.size());
          seqs.push_back(r.tokens);
        }
      out.push_back({{"seconds", s}, {"tokens", tokens}, {"sequences", seqs}});
    }
    return out;
  }

  std::string dir_, workload_, dtype_ = "float32";
};

const Registrar<BenchRegistry> kRegister(
    "race", "rlid's side of the race with transformers on a token workload (bench/vs_transformers.py)",
    [] { return std::make_unique<RaceBench>(); });

}  // namespace
}  // namespace rlid::bench

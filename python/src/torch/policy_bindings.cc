// _rlid.Policy: a checkpoint (rlid's or a Hugging Face directory) with the
// prompt settings of an experiment config. readout() reads p(a|s) of every
// menu item and π of every realisation for a batch of states (one forward pass),
// exactly as `rlid policy readout` and the decision-plane trainers do;
// sample() draws token-plane answers as `rlid policy sample` does. Tensors
// cross to Python as torch.Tensor sharing the C++ storage (no copies).
#include <fmt/format.h>
#include <pybind11/stl.h>
#include <torch/python.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/error.h"
#include "core/rng.h"
#include "envs/api/menu.h"
#include "policy/model/checkpoint.h"
#include "policy/model/device.h"
#include "policy/reading/answers.h"
#include "policy/reading/menu_request.h"
#include "policy/reading/prompt.h"
#include "policy/reading/readout.h"
#include "policy/reading/sampler.h"
#include "python/src/bindings.h"
#include "trainers/runtime/experiment.h"

namespace py = pybind11;

namespace rlid::python {
namespace {

// One state as the Python Env hands it over: what the prompt shows, the menu
// in the env's order, and the instance seed and step that seed the label order.
struct StateView {
  std::string instructions, observation;
  std::vector<envs::MenuItem> menu;
  uint64_t seed = 0;
  int step = 0;
};

// The menu the model reads (permuted under label_order = "shuffle", as the
// trainers and the CLI do) and, per shown position, the env's index of the item.
struct ShownMenu {
  envs::Menu menu;
  std::vector<int64_t> env_index;
};

class PyPolicy {
 public:
  PyPolicy(const std::string& dir, const std::string& config_path,
           const std::vector<std::string>& sets, const std::string& dtype,
           const std::string& device) {
    const auto precision = RequireMode<policy::Precision>("dtype", dtype);
    Config c = config_path.empty() ? Config() : Config::FromFile(config_path);
    c.ApplyOverrides(sets);
    c.ApplyOverride("policy.init=" + dir);
    // The states come from whatever envs readout() is given; an experiment
    // config names one, which only its validation reads.
    if (!c.Root().Section("env").Has("name")) c.ApplyOverride("env.name=bandit");
    cfg_ = trainers::ExperimentConfig::FromConfig(std::move(c));
    policy::LoadOptions lo;
    lo.dtype = precision == policy::Precision::kBFloat16 ? torch::kBFloat16
                                                         : policy::TorchDtype(cfg_->policy_dtype);
    device_ = policy::ResolveDevice(device);
    py::gil_scoped_release nogil;  // a large checkpoint reads for a while
    ck_ = policy::LoadCheckpoint(dir, device_, lo);
    ck_.model->eval();
    renderer_ = std::make_unique<policy::PromptRenderer>(cfg_->prompt, ck_.tokenizer);
  }

  py::dict Readout(const std::vector<StateView>& states, bool all_realisations,
                   const std::string& normalisation) {
    if (states.empty()) throw ConfigError("readout needs at least one state");
    std::vector<ShownMenu> shown;
    std::vector<policy::ReadoutRequest> reqs;
    std::vector<std::string> prompts;
    for (const auto& s : states) {
      if (s.menu.empty())
        throw ConfigError("a state has an empty menu (the episode is over)",
                          "read out only states whose env is not terminal");
      shown.push_back(Show(s));
      auto p = renderer_->Render(s.instructions, s.observation, {}, shown.back().menu,
                                 policy::Plane::kDecision);
      reqs.push_back(
          policy::MenuReadoutRequest(*renderer_, p.tokens, shown.back().menu, all_realisations));
      prompts.push_back(std::move(p.text));
    }
    policy::ReadoutOptions opts;
    opts.normalisation = RequireMode<policy::Normalisation>("normalisation", normalisation);
    policy::ReadoutBatch rb;
    {
      py::gil_scoped_release nogil;
      torch::NoGradGuard ng;
      rb = policy::Readout(ck_.model, reqs, opts);
    }
    // Back to the env's menu order: row b, column k is env.menu()[k].
    const int64_t B = static_cast<int64_t>(states.size()), K = rb.log_p.size(1);
    auto order = torch::arange(K, torch::kInt64).repeat({B, 1});
    py::list labels;
    for (int64_t b = 0; b < B; ++b) {
      py::list row(states[b].menu.size());
      for (size_t j = 0; j < shown[b].env_index.size(); ++j) {
        order[b][shown[b].env_index[j]] = static_cast<int64_t>(j);
        row[shown[b].env_index[j]] = shown[b].menu.items[j].label;
      }
      labels.append(row);
    }
    order = order.to(rb.log_p.device());
    auto by_env = [&](const torch::Tensor& t) {
      auto idx = order;
      for (int64_t d = 2; d < t.dim(); ++d) idx = idx.unsqueeze(-1);
      std::vector<int64_t> shape(t.sizes().begin(), t.sizes().end());
      return t.gather(1, idx.expand(shape));
    };
    py::dict out;
    out["log_p"] = by_env(rb.log_p);
    out["mask"] = by_env(rb.item_mask);
    out["realisation_log_p"] = by_env(rb.realisation_logp);
    out["log_p_other"] = rb.log_p_other;
    out["candidate_mass"] = rb.candidate_mass;
    out["row_entropy"] = rb.row_entropy;
    out["menu_entropy"] = rb.menu_entropy;
    out["value"] = rb.value;
    out["labels"] = labels;
    out["prompts"] = prompts;
    return out;
  }

  py::list Sample(const StateView& s, int n, double temperature, double top_p, int max_new_tokens,
                  uint64_t seed) {
    if (n < 1) throw ConfigError(fmt::format("n must be >= 1, got {}", n));
    if (s.menu.empty()) throw ConfigError("the state's menu is empty (the episode is over)");
    const ShownMenu m = Show(s);
    const auto prompt =
        renderer_->Render(s.instructions, s.observation, {}, m.menu, policy::Plane::kToken);
    policy::SamplerOptions so;
    so.temperature = temperature;
    so.top_p = top_p;
    so.max_new_tokens = max_new_tokens;
    so.dtype = ck_.model->dtype() == torch::kBFloat16 ? policy::Precision::kBFloat16 : policy::Precision::kFloat32;
    const auto& tok = ck_.tokenizer;
    std::vector<policy::SampleResult> res;
    {
      py::gil_scoped_release nogil;
      torch::NoGradGuard ng;
      res = policy::SampleAnswers(ck_, prompt.tokens, so, n, seed, device_);
    }
    py::list out;
    for (const auto& r : res) {
      const std::string text = tok.Decode(r.tokens, true);
      const auto c = m.menu.Compile(text);
      double lp = 0;
      for (float v : r.logprobs) lp += v;
      py::dict o;
      o["text"] = py::bytes(text).attr("decode")("utf-8", "replace");
      o["tokens"] = r.tokens;
      o["logprobs"] = r.logprobs;
      o["logprob"] = lp;
      o["finish"] = r.finish;
      o["valid"] = c.valid();
      o["item"] = c.valid() ? py::object(py::int_(m.env_index[c.item])) : py::object(py::none());
      o["command"] = c.valid() ? m.menu.items[c.item].command : "";
      o["label"] = c.valid() ? m.menu.items[c.item].label : "";
      o["matched"] = c.matched;
      o["reason"] = c.reason;
      out.append(o);
    }
    return out;
  }

  py::dict Info() const {
    const auto& mc = ck_.model->config();
    py::dict d;
    d["dir"] = ck_.dir;
    d["parameters"] = mc.NumParameters();
    d["vocab_size"] = mc.vocab_size;
    d["dtype"] = ck_.model->dtype() == torch::kBFloat16 ? "bfloat16" : "float32";
    d["device"] = device_.str();
    d["label_order"] = std::string(NameOf(cfg_->prompt.label_order));
    d["chat_template"] = renderer_->uses_chat_template();
    return d;
  }

 private:
  ShownMenu Show(const StateView& s) const {
    ShownMenu m;
    m.menu.items = s.menu;
    if (cfg_->prompt.label_order == policy::LabelOrder::kShuffle) {
      Rng rng = Rng::Stream(s.seed, "labels", static_cast<uint64_t>(s.step));
      envs::ShuffleMenu(m.menu, rng);
    }
    envs::Menu original{s.menu};
    for (const auto& item : m.menu.items)
      m.env_index.push_back(original.IndexOfAction(item.action));
    return m;
  }

  std::unique_ptr<trainers::ExperimentConfig> cfg_;
  policy::LoadedCheckpoint ck_;
  std::unique_ptr<policy::PromptRenderer> renderer_;
  torch::Device device_{torch::kCPU};
};

}  // namespace

void BindPolicy(py::module_& m) {
  py::class_<StateView>(m, "StateView")
      .def(py::init<std::string, std::string, std::vector<envs::MenuItem>, uint64_t, int>(),
           py::arg("instructions"), py::arg("observation"), py::arg("menu"), py::arg("seed"),
           py::arg("step"));
  py::class_<PyPolicy>(m, "Policy")
      .def(py::init<std::string, std::string, std::vector<std::string>, std::string, std::string>(),
           py::arg("dir"), py::arg("config"), py::arg("sets"), py::arg("dtype"), py::arg("device"))
      .def("readout", &PyPolicy::Readout, py::arg("states"), py::arg("all_realisations"),
           py::arg("normalisation"))
      .def("sample", &PyPolicy::Sample, py::arg("state"), py::arg("n"), py::arg("temperature"),
           py::arg("top_p"), py::arg("max_new_tokens"), py::arg("seed"))
      .def("info", &PyPolicy::Info);
  // The zero-copy contract, testable from Python: a tensor made here keeps its
  // storage in Python, and a tensor passed in is the same object coming back.
  m.def("_tensor_made_in_cpp", [](int64_t n) {
    auto t = torch::arange(n, torch::kFloat32);
    return py::make_tuple(t, reinterpret_cast<uintptr_t>(t.data_ptr()));
  });
  m.def("_tensor_seen_in_cpp", [](const torch::Tensor& t) {
    return py::make_tuple(t, reinterpret_cast<uintptr_t>(t.data_ptr()));
  });
}

}  // namespace rlid::python

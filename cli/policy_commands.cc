// `rlid policy init|readout|sample`: create a model checkpoint, read out
// p(a|s) for a state of any env (single pass, with realisations, candidate
// mass and value), or sample token-plane answers with their log-probs and the
// action they compile to.
#include <fmt/format.h>

#include <cmath>
#include <iostream>
#include <nlohmann/json.hpp>

#include "cli/command.h"
#include "cli/json_output.h"
#include "core/error.h"
#include "core/rng.h"
#include "envs/env.h"
#include "policy/checkpoint.h"
#include "policy/prompt.h"
#include "policy/readout.h"
#include "policy/runtime.h"
#include "policy/sampler.h"
#include "trainers/algorithms/experiment.h"

namespace rlid::cli {
namespace {

// Checkpoint + env + prompt settings shared by readout and sample.
struct PolicyOptions {
  std::string checkpoint;
  std::string config;
  EnvOptions env;
  bool no_afterstates = false;
  bool json = false;

  void Add(CLI::App& app) {
    app.add_option("--checkpoint", checkpoint,
                   "checkpoint directory (rlid policy init / sft / train)")
        ->required();
    env.Add(app);
    app.add_flag("--no-afterstates", no_afterstates, "hide afterstates in the prompt");
    app.add_flag("--json", json, "print JSON");
  }
};

struct Loaded {
  policy::LoadedCheckpoint ck;
  std::unique_ptr<envs::Env> env;
  std::unique_ptr<envs::State> state;
  std::unique_ptr<policy::PromptRenderer> renderer;
  envs::Menu menu;
  policy::RenderedPrompt prompt;
};

Loaded Load(const PolicyOptions& o, policy::Plane plane, policy::PromptConfig pc = {}) {
  Loaded l;
  l.ck = policy::LoadCheckpoint(o.checkpoint);
  l.env = o.env.Make();
  l.state = l.env->NewState(o.env.seed);
  if (l.state->IsTerminal())
    throw ConfigError("the initial state is terminal; nothing to read out");
  if (o.no_afterstates) pc.show_afterstates = false;
  l.renderer = std::make_unique<policy::PromptRenderer>(pc, l.ck.tokenizer);
  l.menu = l.state->CompileMenu();
  if (pc.label_order == "shuffle") {
    Rng rng = Rng::Stream(o.env.seed, "labels", 0);
    envs::ShuffleMenu(l.menu, rng);
  }
  l.prompt = l.renderer->Render(l.env->Instructions(), l.state->Observation(), {}, l.menu, plane);
  return l;
}

class PolicyCommand : public Command {
 public:
  void Setup(CLI::App& app) override {
    app.require_subcommand(1);
    auto* init = app.add_subcommand("init", "write a freshly initialised model checkpoint");
    init->add_option("--out", init_out_, "checkpoint directory to write")->required();
    init->add_option("--tokenizer", init_tokenizer_,
                     "tokenizer.json (default: train one on --env text)");
    init->add_option("--env", init_env_, "env whose text trains the tokenizer")
        ->capture_default_str();
    init->add_option("--preset", init_preset_, "tiny | small | base")->capture_default_str();
    init->add_option("--seed", init_seed_, "initialisation seed")->capture_default_str();
    init->callback([this] { Init(); });

    auto* readout = app.add_subcommand("readout", "p(a|s) for every menu item in one forward pass");
    ro_.Add(*readout);
    readout->add_option("--realisations", realisations_, "all | labels")->capture_default_str();
    readout->add_option("--normalisation", normalisation_, "menu | other")->capture_default_str();
    readout->callback([this] { Readout(); });

    auto* sample = app.add_subcommand("sample", "sample token-plane answers and compile them");
    sample->footer(
        "With --json: one object per sample. An answer is whatever bytes its tokens decode to, "
        "which need not be UTF-8: \"text\" shows each invalid byte as U+FFFD (so the output is "
        "always valid JSON), \"text_hex\" holds the exact bytes in hex, and \"text_is_utf8\" "
        "says whether \"text\" is exact. \"matched\" is the menu wording (label, command or "
        "alias) the answer compiled by.");
    sa_.Add(*sample);
    sample->add_option("-n,--num", num_, "samples")->capture_default_str();
    sample->add_option("--temperature", sopts_.temperature, "sampling temperature (0 = greedy)")
        ->capture_default_str();
    sample->add_option("--top-p", sopts_.top_p, "nucleus mass")->capture_default_str();
    sample->add_option("--max-new-tokens", sopts_.max_new_tokens, "longest answer")
        ->capture_default_str();
    sample->add_option("--dtype", sopts_.dtype, "rollout engine: float32 | bfloat16")
        ->capture_default_str();
    sample->add_option("--sample-seed", sample_seed_, "sampling seed")->capture_default_str();
    sample->callback([this] { Sample(); });
  }

 private:
  void Init() {
    auto env = envs::MakeEnv(init_env_);
    policy::Tokenizer tok;
    if (!init_tokenizer_.empty()) {
      tok = policy::Tokenizer::FromFile(init_tokenizer_);
    } else {
      auto cfg = trainers::ExperimentConfig::Load("", {"env.name=" + init_env_});
      tok = trainers::MakeTokenizer(*cfg, *env);
    }
    policy::ModelConfig mc;
    mc.ApplyPreset(init_preset_);
    mc.vocab_size = tok.VocabSize();
    policy::TransformerLM model(mc);
    model->InitWeights(init_seed_);
    policy::SaveCheckpoint(init_out_, model, tok, {{"kind", "init"}, {"seed", init_seed_}});
    std::cout << fmt::format("wrote {} ({} preset, {} parameters, vocab {})\n", init_out_,
                             init_preset_, mc.NumParameters(), tok.VocabSize());
  }

  void Readout() {
    auto l = Load(ro_, policy::Plane::kDecision);
    torch::NoGradGuard ng;
    l.ck.model->eval();
    policy::ReadoutRequest req;
    req.prompt = l.prompt.tokens;
    req.realisations = l.renderer->Realisations(l.menu, realisations_ == "all");
    req.end_token = l.ck.tokenizer.eos_id();
    policy::ReadoutOptions opts;
    opts.normalisation = normalisation_;
    auto rb = policy::Readout(l.ck.model, {req}, opts);
    nlohmann::json items = nlohmann::json::array();
    for (size_t k = 0; k < l.menu.size(); ++k) {
      const auto& it = l.menu.items[k];
      nlohmann::json words = nlohmann::json::array();
      for (size_t w = 0; w < req.realisations[k].size(); ++w)
        words.push_back({{"text", w == 0 ? it.label : it.realisations[w - 1]},
                         {"p", std::exp(rb.realisation_logp[0][k][w].item<double>())}});
      items.push_back({{"label", it.label},
                       {"command", it.command},
                       {"action", it.action},
                       {"p", std::exp(rb.log_p[0][k].item<double>())},
                       {"realisations", words}});
    }
    nlohmann::json out = {{"prompt", l.prompt.text},
                          {"prompt_tokens", l.prompt.tokens.size()},
                          {"menu", items},
                          {"candidate_mass", rb.candidate_mass[0].item<double>()},
                          {"p_other", std::exp(rb.log_p_other[0].item<double>())},
                          {"row_entropy", rb.row_entropy[0].item<double>()},
                          {"menu_entropy", rb.menu_entropy[0].item<double>()},
                          {"value", rb.value[0].item<double>()}};
    if (ro_.json) {
      std::cout << DumpJson(out, 2) << "\n";
      return;
    }
    std::cout << l.prompt.text << "\n\n";
    std::cout << fmt::format("{:<4} {:>7}  {}\n", "", "p(a|s)",
                             "command   [realisations: pi(r|s)]");
    for (const auto& it : items) {
      std::string words;
      for (const auto& w : it["realisations"])
        words += fmt::format("{}{}: {:.4f}", words.empty() ? "" : ", ",
                             w["text"].get<std::string>(), w["p"].get<double>());
      std::cout << fmt::format("{:<4} {:>7.4f}  {}   [{}]\n", it["label"].get<std::string>() + ")",
                               it["p"].get<double>(), it["command"].get<std::string>(), words);
    }
    std::cout << fmt::format(
        "\ncandidate mass {:.4f}  off-menu {:.4f}  row entropy {:.3f}  menu entropy {:.3f}  value "
        "{:+.4f}  ({} prompt tokens, one forward)\n",
        out["candidate_mass"].get<double>(), out["p_other"].get<double>(),
        out["row_entropy"].get<double>(), out["menu_entropy"].get<double>(),
        out["value"].get<double>(), l.prompt.tokens.size());
  }

  void Sample() {
    auto l = Load(sa_, policy::Plane::kToken);
    policy::TextSampler sampler(l.ck.model->config(), sopts_, torch::kCPU);
    sampler.SyncWeights(l.ck.model);
    const auto& tok = l.ck.tokenizer;
    const auto eos = tok.eos_id();
    auto res = sampler.Sample(
        {l.prompt.tokens}, num_,
        [&](const std::vector<policy::TokenId>& g) {
          return g.back() == eos || tok.DecodeToken(g.back()).find('\n') != std::string::npos;
        },
        sample_seed_);
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : res[0]) {
      std::string text = tok.Decode(r.tokens, true);
      auto c = l.menu.Compile(text);
      double lp = 0;
      for (float v : r.logprobs) lp += v;
      nlohmann::json o = {{"tokens", r.tokens},
                          {"logprobs", r.logprobs},
                          {"logprob", lp},
                          {"finish", r.finish},
                          {"valid", c.valid()},
                          {"action", c.valid() ? l.menu.items[c.item].command : ""},
                          {"label", c.valid() ? l.menu.items[c.item].label : ""},
                          {"matched", c.matched},
                          {"invalid_reason", c.reason}};
      TextWithBytes(o, "text", text);
      o["text_is_utf8"] = IsValidUtf8(text);
      out.push_back(std::move(o));
    }
    if (sa_.json) {
      std::cout << DumpJson(out, 2) << "\n";
      return;
    }
    std::cout << l.prompt.text << "\n\n";
    for (const auto& o : out) {
      std::string shown = o["text"].get<std::string>();
      for (char& ch : shown)
        if (ch == '\n') ch = ' ';
      std::cout << fmt::format(
          "{:<24} logp {:8.4f}  -> {}\n", "'" + shown + "'", o["logprob"].get<double>(),
          o["valid"].get<bool>()
              ? o["label"].get<std::string>() + ") " + o["action"].get<std::string>()
              : "invalid: " + o["invalid_reason"].get<std::string>());
    }
  }

  std::string init_out_, init_tokenizer_, init_env_ = "maze", init_preset_ = "tiny";
  uint64_t init_seed_ = 0;
  PolicyOptions ro_, sa_;
  std::string realisations_ = "all", normalisation_ = "menu";
  policy::SamplerOptions sopts_;
  int num_ = 4;
  uint64_t sample_seed_ = 0;
};

const Registrar<CommandRegistry> kRegister("policy",
                                           "initialise a model, read out p(a|s), sample answers",
                                           [] { return std::make_unique<PolicyCommand>(); });

}  // namespace
}  // namespace rlid::cli

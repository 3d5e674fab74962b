// `rlid policy init|readout|sample|logits`: create a model checkpoint, read
// out p(a|s) for a state of any env (single pass, with realisations, candidate
// mass and value), sample token-plane answers with their log-probs and the
// action they compile to, or print a model's logits for given token ids (the
// parity check against Hugging Face transformers).
#include <fmt/format.h>

#include <chrono>
#include <cmath>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <set>

#include "cli/command.h"
#include "cli/json_output.h"
#include "core/error.h"
#include "core/file_io.h"
#include "core/log.h"
#include "core/progress.h"
#include "core/rng.h"
#include "envs/api/env.h"
#include "policy/model/checkpoint.h"
#include "policy/model/device.h"
#include "policy/model/runtime.h"
#include "policy/reading/answers.h"
#include "policy/reading/menu_request.h"
#include "policy/reading/prompt.h"
#include "policy/reading/readout.h"
#include "policy/reading/sampler.h"
#include "trainers/runtime/experiment.h"

namespace rlid::cli {
namespace {

// Checkpoint + env + prompt settings shared by readout and sample.
struct PolicyOptions {
  std::string checkpoint;
  EnvOptions env;
  std::string dtype = "float32";
  bool no_afterstates = false;
  bool json = false;

  void Add(CLI::App& app, const std::string& dtype_help) {
    app.add_option("--checkpoint", checkpoint,
                   "checkpoint directory (rlid policy init / sft / train)")
        ->required();
    env.Add(app);
    app.add_option("--dtype", dtype, dtype_help)
        ->check(CLI::IsMember({"float32", "bfloat16"}))
        ->capture_default_str();
    app.add_flag("--no-afterstates", no_afterstates, "hide afterstates in the prompt");
    app.add_flag("--json", json, "print JSON");
  }

  // [env], [prompt] and the rest of an experiment config from --config, --env
  // and --set (a key of no section is an env key: --set size=9), checked
  // before any weights load.
  std::unique_ptr<trainers::ExperimentConfig> Resolve() const {
    static const std::set<std::string> kSections = {"run",    "env",    "tokenizer", "policy",
                                                    "prompt", "readout", "sampler",  "memory",
                                                    "trainer", "sft"};
    Config c = LoadConfig(env.config, {});
    if (!env.env.empty()) c.ApplyOverride("env.name=" + env.env);
    for (const auto& s : env.sets) {
      const std::string section = s.substr(0, std::min(s.find('.'), s.find('=')));
      c.ApplyOverride(kSections.count(section) ? s : "env." + s);
    }
    c.ApplyOverride("policy.init=" + checkpoint);
    return trainers::ExperimentConfig::FromConfig(std::move(c));
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

Loaded Load(const PolicyOptions& o, policy::Plane plane) {
  const auto cfg = o.Resolve();
  Loaded l;
  l.env = envs::MakeEnv(cfg->env_section);
  l.state = l.env->NewState(o.env.seed);
  if (l.state->IsTerminal())
    throw ConfigError("the initial state is terminal; nothing to read out");
  policy::PromptConfig pc = cfg->prompt;
  if (o.no_afterstates) pc.show_afterstates = false;
  policy::LoadOptions lo;
  const bool bf16 = RequireMode<policy::Precision>("--dtype", o.dtype) == policy::Precision::kBFloat16 ||
                    cfg->policy_dtype == policy::Precision::kBFloat16;  // --set policy.dtype too
  lo.dtype = bf16 ? torch::kBFloat16 : torch::kFloat32;
  l.ck = policy::LoadCheckpoint(o.checkpoint, torch::kCPU, lo);
  l.renderer = std::make_unique<policy::PromptRenderer>(pc, l.ck.tokenizer);
  l.menu = l.state->CompileMenu();
  if (pc.label_order == policy::LabelOrder::kShuffle) {
    Rng rng = Rng::Stream(o.env.seed, "labels", 0);
    envs::ShuffleMenu(l.menu, rng);
  }
  l.prompt = l.renderer->Render(l.env->Instructions(), l.state->Observation(), {}, l.menu, plane);
  return l;
}

// `rlid policy logits` input: {"input_ids": [[...]], "attention_mask": [[...]],
// "position_ids": [[...]]}; mask and positions optional (absent or null: all
// ones, 0..T-1).
struct LogitsInput {
  torch::Tensor ids, mask, positions;  // [B, T] int64
};

torch::Tensor ReadIdMatrix(const nlohmann::json& doc, const std::string& key, const std::string& path,
                           int64_t rows, int64_t cols) {
  const auto& m = doc.at(key);
  auto bad = [&](const std::string& what) {
    return ConfigError(fmt::format("{}: \"{}\" {}", path, key, what),
                       "expected a list of equally long lists of integers, one per batch row");
  };
  if (!m.is_array() || m.empty()) throw bad("is not a non-empty list of rows");
  if (rows >= 0 && static_cast<int64_t>(m.size()) != rows)
    throw bad(fmt::format("has {} rows, input_ids has {}", m.size(), rows));
  const int64_t T = m[0].is_array() ? static_cast<int64_t>(m[0].size()) : -1;
  if (T < 1) throw bad("has an empty or non-list first row");
  if (cols >= 0 && T != cols) throw bad(fmt::format("rows have {} columns, input_ids has {}", T, cols));
  auto out = torch::empty({static_cast<int64_t>(m.size()), T}, torch::kInt64);
  auto acc = out.accessor<int64_t, 2>();
  for (size_t b = 0; b < m.size(); ++b) {
    if (!m[b].is_array() || static_cast<int64_t>(m[b].size()) != T)
      throw bad(fmt::format("row {} does not have {} entries", b, T));
    for (int64_t t = 0; t < T; ++t) {
      if (!m[b][t].is_number_integer()) throw bad(fmt::format("[{}][{}] is not an integer", b, t));
      acc[b][t] = m[b][t].get<int64_t>();
    }
  }
  return out;
}

LogitsInput ReadLogitsInput(const std::string& path, const policy::ModelConfig& mc) {
  const std::string text = ReadRegularFile(path, kMaxJsonFileBytes, "logits input file");
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(fmt::format("'{}' is not valid JSON: {}", path, e.what()));
  }
  if (!doc.is_object() || !doc.contains("input_ids"))
    throw ConfigError(fmt::format("'{}' has no \"input_ids\"", path),
                      R"(expected {"input_ids": [[...]], "attention_mask": [[...]], "position_ids": [[...]]})");
  for (auto it = doc.begin(); it != doc.end(); ++it)
    if (it.key() != "input_ids" && it.key() != "attention_mask" && it.key() != "position_ids")
      throw ConfigError(fmt::format("'{}': unknown key \"{}\"", path, it.key()),
                        "known keys: input_ids, attention_mask, position_ids");
  LogitsInput x;
  x.ids = ReadIdMatrix(doc, "input_ids", path, -1, -1);
  const int64_t B = x.ids.size(0), T = x.ids.size(1);
  if (x.ids.min().item<int64_t>() < 0 || x.ids.max().item<int64_t>() >= mc.vocab_size)
    throw ConfigError(fmt::format("'{}': token ids must lie in [0, {}) (the model's vocab_size)",
                                  path, mc.vocab_size));
  auto given = [&](const char* k) { return doc.contains(k) && !doc[k].is_null(); };
  x.mask = given("attention_mask") ? ReadIdMatrix(doc, "attention_mask", path, B, T)
                                          : torch::ones({B, T}, torch::kInt64);
  if (((x.mask != 0) & (x.mask != 1)).any().item<bool>())
    throw ConfigError(fmt::format("'{}': attention_mask entries must be 0 or 1", path));
  x.positions = given("position_ids") ? ReadIdMatrix(doc, "position_ids", path, B, T)
                                             : torch::arange(T, torch::kInt64).expand({B, T}).clone();
  if (x.positions.min().item<int64_t>() < 0)
    throw ConfigError(fmt::format("'{}': position_ids must be >= 0", path));
  return x;
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
    ro_.Add(*readout, "weights: float32 | bfloat16 (the value head stays float32)");
    readout->add_option("--realisations", realisations_, "all | labels")
        ->check(CLI::IsMember({"all", "labels"}))
        ->capture_default_str();
    readout->add_option("--normalisation", normalisation_, "menu | other")
        ->check(CLI::IsMember(NamesOf<policy::Normalisation>()))
        ->capture_default_str();
    readout->callback([this] { Readout(); });

    auto* sample = app.add_subcommand("sample", "sample token-plane answers and compile them");
    sample->footer(
        "With --json: one object per sample. An answer is whatever bytes its tokens decode to, "
        "which need not be UTF-8: \"text\" shows each invalid byte as U+FFFD (so the output is "
        "always valid JSON), \"text_hex\" holds the exact bytes in hex, and \"text_is_utf8\" "
        "says whether \"text\" is exact. \"matched\" is the menu realisation (label, command or "
        "alias) the answer compiled by.");
    sa_.Add(*sample, "weights and rollout engine: float32 | bfloat16");
    sample->add_option("-n,--num", num_, "samples")->capture_default_str();
    sample->add_option("--temperature", sopts_.temperature, "sampling temperature (0 = greedy)")
        ->capture_default_str();
    sample->add_option("--top-p", sopts_.top_p, "nucleus mass")->capture_default_str();
    sample->add_option("--max-new-tokens", sopts_.max_new_tokens, "longest answer")
        ->capture_default_str();
    sample->add_option("--sample-seed", sample_seed_, "sampling seed")->capture_default_str();
    sample->callback([this] { Sample(); });

    auto* logits = app.add_subcommand("logits", "a model's logits for token ids (parity with transformers)");
    logits->footer(
        "FILE is JSON {\"input_ids\": [[...]], \"attention_mask\": [[...]], \"position_ids\": "
        "[[...]]}; mask and positions are optional (all ones; 0..T-1, as in transformers). "
        "--json prints {\"logits\": [B][T][V]} (float32 values) for every position, padding "
        "included; otherwise the top tokens at each row's last position. The directory needs "
        "config.json and safetensors weights, not a tokenizer.");
    logits->add_option("--checkpoint", lg_checkpoint_, "model directory (Hugging Face or rlid)")
        ->required();
    logits->add_option("--input", lg_input_, "JSON file with input_ids (see below)")->required();
    logits->add_option("--dtype", lg_dtype_, "weights: float32 | bfloat16")->capture_default_str();
    logits->add_flag("--json", lg_json_, "print the full logits as JSON");
    logits
        ->add_option(
            "--recurrent-form", lg_form_,
            "how Qwen3.5's linear-attention layers run a sequence: auto (chunked; one token "
            "recurrent), chunked or recurrent (token by token); the same numbers up to rounding")
        ->check(CLI::IsMember({"auto", "chunked", "recurrent"}))
        ->capture_default_str();
    logits->callback([this] { Logits(); });
  }

 private:
  void Init() {
    auto env = envs::MakeEnv(init_env_);
    policy::Tokenizer tok;
    if (!init_tokenizer_.empty()) {
      tok = policy::Tokenizer::FromPath(init_tokenizer_);
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
    const auto t0 = std::chrono::steady_clock::now();
    auto since = [&] {
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    };
    auto l = Load(ro_, policy::Plane::kDecision);
    // Two stages, each logged: loading a large model is most of the time, and
    // the readout is one forward pass whatever the menu size.
    spdlog::info("policy readout: model, tokenizer and prompt ready in {} ({} prompt tokens, {} menu "
                 "items); reading every label in one forward pass",
                 FormatDuration(since()), l.prompt.tokens.size(), l.menu.size());
    torch::NoGradGuard ng;
    l.ck.model->eval();
    const policy::ReadoutRequest req =
        policy::MenuReadoutRequest(*l.renderer, l.prompt.tokens, l.menu, realisations_ == "all");
    policy::ReadoutOptions opts;
    opts.normalisation = RequireMode<policy::Normalisation>("--normalisation", normalisation_);
    auto rb = policy::Readout(l.ck.model, {req}, opts);
    spdlog::info("policy readout: done in {}", FormatDuration(since()));
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
    sopts_.dtype = RequireMode<policy::Precision>("--dtype", sa_.dtype);
    const auto& tok = l.ck.tokenizer;
    const auto res =
        policy::SampleAnswers(l.ck, l.prompt.tokens, sopts_, num_, sample_seed_, torch::kCPU);
    nlohmann::json out = nlohmann::json::array();
    for (const auto& r : res) {
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

  void Logits() {
    policy::LoadOptions lo;
    lo.dtype = policy::TorchDtype(RequireMode<policy::Precision>("--dtype", lg_dtype_));
    lo.require_tokenizer = false;
    auto ck = policy::LoadCheckpoint(lg_checkpoint_, torch::kCPU, lo);
    const auto x = ReadLogitsInput(lg_input_, ck.model->config());
    torch::NoGradGuard ng;
    ck.model->eval();
    ck.model->set_recurrent_form(lg_form_ == "chunked"     ? policy::RecurrentForm::kChunked
                                 : lg_form_ == "recurrent" ? policy::RecurrentForm::kRecurrent
                                                           : policy::RecurrentForm::kAuto);
    auto hidden = ck.model->forward(x.ids, x.positions,
                                    policy::TransformerLMImpl::CausalMaskFromAttention(x.mask))
                      .hidden;
    auto logits = ck.model->Logits(hidden).to(torch::kFloat32).contiguous();  // [B, T, V]
    const int64_t B = logits.size(0), T = logits.size(1), V = logits.size(2);
    if (lg_json_) {
      // Streamed: a [B][T][V] array can be large.
      auto acc = logits.accessor<float, 3>();
      std::string out = "{\"logits\": [";
      for (int64_t b = 0; b < B; ++b) {
        out += b ? ",[" : "[";
        for (int64_t t = 0; t < T; ++t) {
          out += t ? ",[" : "[";
          for (int64_t v = 0; v < V; ++v) {
            if (v) out += ',';
            out += nlohmann::json(acc[b][t][v]).dump();
          }
          out += ']';
        }
        out += ']';
        std::cout << out;
        out.clear();
      }
      std::cout << "]}\n";
      return;
    }
    std::cout << fmt::format("{}: {} parameters ({}), logits [{}, {}, {}]\n", lg_checkpoint_,
                             ck.model->config().NumParameters(), lg_dtype_, B, T, V);
    auto mask = x.mask.accessor<int64_t, 2>();
    for (int64_t b = 0; b < B; ++b) {
      int64_t last = -1;
      for (int64_t t = 0; t < T; ++t)
        if (mask[b][t]) last = t;
      if (last < 0) continue;
      auto lp = torch::log_softmax(logits[b][last], -1);
      auto top = lp.topk(std::min<int64_t>(5, V));
      std::string row;
      for (int64_t k = 0; k < std::get<0>(top).size(0); ++k)
        row += fmt::format("  {}:{:.4f}", std::get<1>(top)[k].item<int64_t>(),
                           std::get<0>(top)[k].item<float>());
      std::cout << fmt::format("row {} position {}: top log-probs{}\n", b, last, row);
    }
  }

  std::string lg_checkpoint_, lg_input_, lg_dtype_ = "float32", lg_form_ = "auto";
  bool lg_json_ = false;
  std::string init_out_, init_tokenizer_, init_env_ = "maze", init_preset_ = "tiny";
  uint64_t init_seed_ = 0;
  PolicyOptions ro_, sa_;
  std::string realisations_ = "all", normalisation_ = "menu";
  policy::SamplerOptions sopts_;
  int num_ = 4;
  uint64_t sample_seed_ = 0;
};

const Registrar<CommandRegistry> kRegister("policy",
                                           "initialise a model, read out p(a|s), sample answers, print logits",
                                           [] { return std::make_unique<PolicyCommand>(); });

}  // namespace
}  // namespace rlid::cli

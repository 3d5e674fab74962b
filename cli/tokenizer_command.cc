// `rlid tokenizer encode|decode|train`: inspect HF tokenizer.json files and
// train rlid's compact BPE vocabulary on env text (see docs/tokenizer.md).
#include <fmt/format.h>

#include <chrono>
#include <fstream>
#include <iostream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/command.h"
#include "cli/json_output.h"
#include "core/check.h"
#include "core/error.h"
#include "core/file_io.h"
#include "envs/env.h"
#include "policy/tokenizer.h"
#include "policy/tokenizer_corpus.h"

namespace rlid::cli {
namespace {

using policy::TokenId;
using policy::Tokenizer;

// The argument itself, or all of stdin for "-" / no argument.
std::string ArgOrStdin(const std::string& arg, bool given) {
  if (given && arg != "-") return arg;
  std::ostringstream ss;
  ss << std::cin.rdbuf();
  return ss.str();
}

std::string ReadFile(const std::string& path) {
  return ReadRegularFile(path, kMaxCorpusFileBytes, "corpus file");
}

std::vector<TokenId> ParseIds(const std::string& text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(fmt::format("token ids are not valid JSON: {}", e.what()),
                      "pass a JSON array such as [9707, 11, 1879]");
  }
  if (!j.is_array())
    throw ConfigError(fmt::format("expected a JSON array of token ids, found {}", j.type_name()),
                      "pass a JSON array such as [9707, 11, 1879]");
  std::vector<TokenId> ids;
  for (const auto& v : j) {
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || v.get<int64_t>() > INT32_MAX)
      throw ConfigError(fmt::format("expected non-negative integer token ids, found {}", v.dump()),
                        "pass a JSON array such as [9707, 11, 1879]");
    ids.push_back(v.get<TokenId>());
  }
  return ids;
}

class TokenizerCommand : public Command {
 public:
  void Setup(CLI::App& app) override {
    app.require_subcommand(1);

    auto* encode = app.add_subcommand("encode", "text -> token ids (JSON array)");
    encode->add_option("--tokenizer", encode_path_, "tokenizer.json, or a model directory (adds its tokenizer_config.json)")
        ->required();
    encode->add_option("text", text_, "text to encode; '-' or nothing reads stdin");
    encode->add_flag("--no-special", no_special_,
                     "encode special tokens such as <|im_start|> as plain text");
    encode->callback([this, encode] {
      const Tokenizer tok = Tokenizer::FromPath(encode_path_);
      const std::string text = ArgOrStdin(text_, encode->count("text") > 0);
      std::cout << DumpJson(nlohmann::json(tok.Encode(text, !no_special_))) << "\n";
    });

    auto* decode =
        app.add_subcommand("decode", "token ids (JSON array) -> text, printed as exact bytes");
    decode->add_option("--tokenizer", decode_path_, "tokenizer.json, or a model directory (adds its tokenizer_config.json)")
        ->required();
    decode->add_option("ids", ids_, "JSON array of ids; '-' or nothing reads stdin");
    decode->add_flag("--skip-special", skip_special_, "drop special tokens");
    decode->callback([this, decode] {
      const Tokenizer tok = Tokenizer::FromPath(decode_path_);
      const auto ids = ParseIds(ArgOrStdin(ids_, decode->count("ids") > 0));
      std::cout << tok.Decode(ids, skip_special_) << std::flush;
    });

    auto* train = app.add_subcommand("train", "learn a compact BPE vocabulary from env text");
    train->add_option("--out", out_, "where to write tokenizer.json")->required();
    train
        ->add_option("--vocab-size", train_opt_.vocab_size,
                     "ids in total (bytes + merges + 3 special)")
        ->capture_default_str();
    train
        ->add_option("--min-frequency", train_opt_.min_frequency,
                     "merge only pairs seen this often")
        ->capture_default_str();
    train->add_option("--env", envs_, "environment whose text to learn from (repeatable)");
    train
        ->add_option("--episodes", corpus_opt_.episodes,
                     "random-play episodes per env (train seeds)")
        ->capture_default_str();
    train->add_option("--seed", corpus_opt_.seed, "seed of the random play")->capture_default_str();
    train->add_option("--corpus", corpus_files_, "also learn from this text file (repeatable)");
    train->callback([this] { Train(); });
  }

 private:
  void Train() {
    if (envs_.empty() && corpus_files_.empty())
      throw ConfigError("tokenizer train needs text",
                        fmt::format("pass --env NAME (one of: {}) and/or --corpus FILE",
                                    fmt::join(envs::EnvRegistry::Global().Names(), ", ")));
    std::vector<std::string> corpus;
    for (const auto& name : envs_) {
      auto env = envs::MakeEnv(name);
      auto docs = policy::EnvTextCorpus(*env, corpus_opt_);
      corpus.insert(corpus.end(), std::make_move_iterator(docs.begin()),
                    std::make_move_iterator(docs.end()));
    }
    for (const auto& path : corpus_files_) corpus.push_back(ReadFile(path));
    size_t bytes = 0;
    for (const auto& d : corpus) bytes += d.size();

    const auto t0 = std::chrono::steady_clock::now();
    const Tokenizer tok = Tokenizer::Train(corpus, train_opt_);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (char c = 'A'; c <= 'Z'; ++c)
      tok.RequireLabelToken(std::string(1, c));  // the trainer's guarantee
    size_t tokens = 0;
    for (const auto& d : corpus) tokens += tok.Encode(d, /*allow_special=*/false).size();
    tok.Save(out_);
    const std::string early =
        tok.VocabSize() < train_opt_.vocab_size
            ? fmt::format(" (stopped early: no pair left that occurs >= {} times)",
                          train_opt_.min_frequency)
            : "";
    std::cout << fmt::format(
        "trained on {} document(s), {} bytes in {:.2f} s\n"
        "vocab {} ids{} (eos/pad {} = <|endoftext|>), {:.2f} bytes/token on the corpus\n"
        "wrote {} (fingerprint {:016x})\n",
        corpus.size(), bytes, seconds, tok.VocabSize(), early, tok.eos_id(),
        tokens ? static_cast<double>(bytes) / tokens : 0.0, out_, tok.Fingerprint());
  }

  std::string encode_path_, decode_path_, text_, ids_, out_;
  bool no_special_ = false, skip_special_ = false;
  policy::TokenizerTrainOptions train_opt_;
  policy::EnvCorpusOptions corpus_opt_;
  std::vector<std::string> envs_, corpus_files_;
};

const Registrar<CommandRegistry> kRegister("tokenizer",
                                           "encode, decode and train byte-level BPE tokenizers",
                                           [] { return std::make_unique<TokenizerCommand>(); });

}  // namespace
}  // namespace rlid::cli

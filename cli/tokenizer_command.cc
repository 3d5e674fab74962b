// `rlid tokenizer encode|decode|chat|train`: inspect HF tokenizer.json files and
// chat templates, and train rlid's compact BPE vocabulary on env text (see
// docs/tokenizer.md). --batch forms take a JSON file of many inputs, so a
// reference check (tests/live/) pays the tokenizer's load time once.
#include <fmt/format.h>

#include <chrono>
#include <filesystem>
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
#include "envs/api/env.h"
#include "jinja/jinja.h"
#include "policy/tokenizer/tokenizer.h"
#include "policy/tokenizer/tokenizer_corpus.h"

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

// Largest --batch file read, in bytes.
constexpr uint64_t kMaxBatchFileBytes = 256ull << 20;

// A --batch file: a JSON array (of `what`), else a ConfigError naming the file.
nlohmann::ordered_json ReadBatch(const std::string& path, std::string_view what,
                                 std::string_view example) {
  const std::string text = ReadRegularFile(path, kMaxBatchFileBytes, "--batch file");
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(fmt::format("--batch file '{}' is not valid JSON: {}", path, e.what()),
                      fmt::format("write a JSON array of {}, e.g. {}", what, example));
  }
  if (!j.is_array())
    throw ConfigError(fmt::format("--batch file '{}' holds a JSON {}, not an array", path, j.type_name()),
                      fmt::format("write a JSON array of {}, e.g. {}", what, example));
  return j;
}

std::vector<TokenId> IdsFromJson(const nlohmann::ordered_json& j) {
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

std::vector<TokenId> ParseIds(const std::string& text) {
  nlohmann::ordered_json j;
  try {
    j = nlohmann::ordered_json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw ConfigError(fmt::format("token ids are not valid JSON: {}", e.what()),
                      "pass a JSON array such as [9707, 11, 1879]");
  }
  return IdsFromJson(j);
}

// The chat template of --template: a .jinja file, or a model directory (its
// tokenizer_config.json / chat_template.jinja, read without its tokenizer.json).
struct ChatTemplateSource {
  std::string source;
  std::string bos_token, eos_token;  // from the model directory; "" for a .jinja file
};

ChatTemplateSource LoadChatTemplate(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec))
    return {ReadRegularFile(path, kMaxBatchFileBytes, "chat template"), "", ""};
  policy::TokenizerConfig c = policy::ReadTokenizerConfig(path);
  if (c.chat_template.empty())
    throw ConfigError(fmt::format("model directory '{}' has no chat template", path),
                      "pass the template itself: --template FILE.jinja");
  return {std::move(c.chat_template), std::move(c.bos_token), std::move(c.eos_token)};
}

// As transformers' apply_chat_template: the tokenizer's special tokens are
// variables, unless the context sets them itself.
nlohmann::ordered_json WithSpecialTokens(nlohmann::ordered_json context, const ChatTemplateSource& src) {
  if (!src.bos_token.empty() && !context.contains("bos_token")) context["bos_token"] = src.bos_token;
  if (!src.eos_token.empty() && !context.contains("eos_token")) context["eos_token"] = src.eos_token;
  return context;
}

// One context rendered: {"text", "text_hex"}, or {"error"} when the template
// raises or the context is not an object (a reference may raise too).
nlohmann::json RenderOne(const jinja::Template& tmpl, nlohmann::ordered_json context,
                         const ChatTemplateSource& src) {
  nlohmann::json out;
  if (!context.is_object()) {
    out["error"] = fmt::format("a context must be a JSON object, found {}", context.type_name());
    return out;
  }
  try {
    TextWithBytes(out, "text", tmpl.Render(WithSpecialTokens(std::move(context), src)));
  } catch (const ConfigError& e) {
    out["error"] = e.what();
  }
  return out;
}

class TokenizerCommand : public Command {
 public:
  void Setup(CLI::App& app) override {
    app.require_subcommand(1);

    auto* encode = app.add_subcommand("encode", "text -> token ids (JSON array)");
    encode->add_option("--tokenizer", encode_path_, "tokenizer.json, or a model directory (adds its tokenizer_config.json)")
        ->required();
    encode->add_option("text", text_, "text to encode; '-' or nothing reads stdin");
    encode->add_option("--batch", batch_,
                       "encode every string of this JSON array file instead; prints an array of id arrays")
        ->excludes("text");
    encode->add_flag("--no-special", no_special_,
                     "encode special tokens such as <|im_start|> as plain text");
    encode->callback([this, encode] {
      const Tokenizer tok = Tokenizer::FromPath(encode_path_);
      if (!batch_.empty()) {
        nlohmann::json out = nlohmann::json::array();
        for (const auto& t : ReadBatch(batch_, "strings", R"(["hello", "wörld"])")) {
          if (!t.is_string())
            throw ConfigError(fmt::format("--batch file '{}' holds a {} where a string belongs",
                                          batch_, t.type_name()),
                              R"(write a JSON array of strings, e.g. ["hello", "wörld"])");
          out.push_back(tok.Encode(t.get<std::string>(), !no_special_));
        }
        std::cout << DumpJson(out) << "\n";
        return;
      }
      const std::string text = ArgOrStdin(text_, encode->count("text") > 0);
      std::cout << DumpJson(nlohmann::json(tok.Encode(text, !no_special_))) << "\n";
    });

    auto* decode =
        app.add_subcommand("decode", "token ids (JSON array) -> text, printed as exact bytes");
    decode->add_option("--tokenizer", decode_path_, "tokenizer.json, or a model directory (adds its tokenizer_config.json)")
        ->required();
    decode->add_option("ids", ids_, "JSON array of ids; '-' or nothing reads stdin");
    decode->add_flag("--skip-special", skip_special_, "drop special tokens");
    decode->add_option("--batch", batch_,
                       "decode every id array of this JSON file instead; prints [{text, text_hex}] "
                       "(text: invalid UTF-8 bytes as U+FFFD; text_hex: the exact bytes)")
        ->excludes("ids");
    decode->callback([this, decode] {
      const Tokenizer tok = Tokenizer::FromPath(decode_path_);
      if (!batch_.empty()) {
        nlohmann::json out = nlohmann::json::array();
        for (const auto& ids : ReadBatch(batch_, "id arrays", "[[9707, 11], [1879]]")) {
          nlohmann::json one;
          TextWithBytes(one, "text", tok.Decode(IdsFromJson(ids), skip_special_));
          out.push_back(std::move(one));
        }
        std::cout << DumpJson(out) << "\n";
        return;
      }
      const auto ids = ParseIds(ArgOrStdin(ids_, decode->count("ids") > 0));
      std::cout << tok.Decode(ids, skip_special_) << std::flush;
    });

    auto* chat = app.add_subcommand(
        "chat", "render a chat template on contexts ({messages, add_generation_prompt, tools, ...})");
    chat->add_option("--template", chat_path_,
                     "a .jinja file, or a model directory (its chat template; bos_token and "
                     "eos_token become variables as in transformers)")
        ->required();
    chat->add_option("context", context_, "JSON context object file; '-' or nothing reads stdin");
    chat->add_option("--batch", batch_,
                     "render every context of this JSON array file instead; prints "
                     "[{text, text_hex} | {error}]")
        ->excludes("context");
    chat->callback([this, chat] { Chat(chat->count("context") > 0); });

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

  void Chat(bool context_given) const {
    const ChatTemplateSource src = LoadChatTemplate(chat_path_);
    const auto tmpl = jinja::Template::Parse(src.source, fmt::format("'{}'", chat_path_));
    if (!batch_.empty()) {
      nlohmann::json out = nlohmann::json::array();
      for (auto& ctx : ReadBatch(batch_, "context objects", R"([{"messages": [{"role": "user", "content": "hi"}]}])"))
        out.push_back(RenderOne(tmpl, std::move(ctx), src));
      std::cout << DumpJson(out) << "\n";
      return;
    }
    nlohmann::ordered_json ctx;
    try {
      ctx = nlohmann::ordered_json::parse(
          context_given && context_ != "-" ? ReadRegularFile(context_, kMaxBatchFileBytes, "context file")
                                           : ArgOrStdin(context_, false));
    } catch (const nlohmann::json::exception& e) {
      throw ConfigError(fmt::format("the context is not valid JSON: {}", e.what()),
                        R"(pass {"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": true})");
    }
    if (!ctx.is_object())
      throw ConfigError(fmt::format("the context is a JSON {}, not an object", ctx.type_name()),
                        R"(pass {"messages": [{"role": "user", "content": "hi"}], "add_generation_prompt": true})");
    std::cout << tmpl.Render(WithSpecialTokens(std::move(ctx), src)) << std::flush;
  }

  std::string encode_path_, decode_path_, text_, ids_, out_, batch_, chat_path_, context_;
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

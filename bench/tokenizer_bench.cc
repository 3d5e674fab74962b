// `rlid bench tokenizer`: encode throughput (MB/s) on env text (and on an
// optional --text file, rows "/f"), single thread, for an rlid-trained
// vocabulary and for Qwen3's real tokenizer.json, each cold (empty BPE cache,
// first pass) and warm (cache filled); warm/cold is measured in the same run.
#include <fmt/format.h>

#include <filesystem>
#include <fstream>
#include <iostream>

#include "bench/bench.h"
#include "core/error.h"
#include "core/progress.h"
#include "envs/api/env.h"
#include "policy/tokenizer/tokenizer.h"
#include "policy/tokenizer/tokenizer_corpus.h"

namespace rlid::bench {
namespace {

using policy::Tokenizer;

class TokenizerBench : public Benchmark {
 public:
  void AddOptions(CLI::App& app) override {
    app.add_option("--episodes", corpus_opt_.episodes, "random-play episodes per env for the text")
        ->capture_default_str();
    app.add_option("--seconds", seconds_, "time spent on the warm measurement")
        ->capture_default_str();
    app.add_option("--vocab-size", train_opt_.vocab_size, "vocabulary of the trained tokenizer")
        ->capture_default_str();
    app.add_option("--qwen3", qwen3_path_, "Qwen3 tokenizer.json (scripts/fetch_test_assets.sh)")
        ->capture_default_str();
    app.add_option("--text", text_path_, "also measure on this text file (one document)");
  }

  nlohmann::json Run() override {
    // Stages: the corpus, training, then each tokenizer measured (trained,
    // trained/f, qwen3, qwen3/f as present).
    const bool qwen = std::filesystem::exists(qwen3_path_);
    const int64_t stages = 3 + (qwen ? 1 : 0) + (text_path_.empty() ? 0 : 1 + (qwen ? 1 : 0));
    Progress progress("bench tokenizer: stages", stages, true, /*every_s=*/0);
    int64_t stage = 0;
    std::vector<std::string> corpus;
    for (const auto& name : envs::BuiltInEnvNames()) {
      auto docs = policy::EnvTextCorpus(*envs::MakeEnv(name), corpus_opt_);
      corpus.insert(corpus.end(), docs.begin(), docs.end());
    }
    size_t bytes = 0;
    for (const auto& d : corpus) bytes += d.size();
    const double mb = bytes / 1e6;
    progress.Update(++stage, "env text corpus");
    nlohmann::json out = {{"corpus_bytes", bytes}, {"corpus_documents", corpus.size()}};

    double t0 = MonotonicSeconds();
    const Tokenizer trained = Tokenizer::Train(corpus, train_opt_);
    const double train_s = MonotonicSeconds() - t0;
    progress.Update(++stage, "trained a vocabulary");
    out["train"] = {
        {"seconds", train_s}, {"mb_per_s", mb / train_s}, {"vocab_size", trained.VocabSize()}};
    std::cout << fmt::format(
        "env text: {} documents, {:.2f} MB; trained vocab {} in {:.3f} s ({:.1f} MB/s)\n",
        corpus.size(), mb, trained.VocabSize(), train_s, mb / train_s);
    std::cout << fmt::format("{:<10} {:>12} {:>12} {:>10} {:>12}\n", "tokenizer", "cold MB/s",
                             "warm MB/s", "warm/cold", "bytes/token");
    std::vector<std::string> text;
    if (!text_path_.empty()) {
      std::ifstream in(text_path_, std::ios::binary);
      if (!in) throw IoError(fmt::format("cannot read '{}'", text_path_));
      text.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    // A fresh copy (re-read JSON) has an empty BPE cache.
    out["trained"] =
        Measure("trained", Tokenizer::FromJsonString(trained.ToJsonString()), corpus, mb);
    progress.Update(++stage, "trained");
    if (!text.empty()) {
      out["trained_text"] = Measure("trained/f", Tokenizer::FromJsonString(trained.ToJsonString()),
                                    text, text[0].size() / 1e6);
      progress.Update(++stage, "trained/f");
    }
    if (qwen) {
      t0 = MonotonicSeconds();
      const Tokenizer qwen = Tokenizer::FromFile(qwen3_path_);
      const double load_s = MonotonicSeconds() - t0;
      out["qwen3"] = Measure("qwen3", qwen, corpus, mb);
      out["qwen3"]["load_seconds"] = load_s;
      progress.Update(++stage, "qwen3");
      if (!text.empty()) {
        out["qwen3_text"] =
            Measure("qwen3/f", Tokenizer::FromFile(qwen3_path_), text, text[0].size() / 1e6);
        progress.Update(++stage, "qwen3/f");
      }
    } else {
      std::cout << fmt::format(
          "qwen3      (skipped: {} missing; run scripts/fetch_test_assets.sh)\n", qwen3_path_);
    }
    return out;
  }

 private:
  nlohmann::json Measure(const std::string& name, const Tokenizer& tok,
                         const std::vector<std::string>& corpus, double mb) const {
    size_t tokens = 0;
    double t0 = MonotonicSeconds();
    for (const auto& d : corpus) tokens += tok.Encode(d).size();
    const double cold_s = MonotonicSeconds() - t0;
    size_t passes = 0;
    t0 = MonotonicSeconds();
    double t1 = t0;
    while (passes == 0 || t1 - t0 < seconds_) {
      for (const auto& d : corpus) tok.Encode(d);
      ++passes;
      t1 = MonotonicSeconds();
    }
    const double cold = mb / cold_s, warm = mb * passes / (t1 - t0);
    const double bytes_per_token = mb * 1e6 / static_cast<double>(tokens);
    std::cout << fmt::format("{:<10} {:>12.2f} {:>12.2f} {:>10.2f} {:>12.2f}\n", name, cold, warm,
                             warm / cold, bytes_per_token);
    return {{"cold_mb_per_s", cold},
            {"warm_mb_per_s", warm},
            {"warm_over_cold", warm / cold},
            {"bytes_per_token", bytes_per_token},
            {"vocab_size", tok.VocabSize()}};
  }

  policy::EnvCorpusOptions corpus_opt_{.episodes = 500};
  policy::TokenizerTrainOptions train_opt_;
  double seconds_ = 2.0;
  std::string qwen3_path_ = "build/assets/qwen3/tokenizer.json";
  std::string text_path_;
};

const Registrar<BenchRegistry> kRegister(
    "tokenizer", "encode MB/s on env text (trained vs Qwen3, cold vs warm cache)",
    [] { return std::make_unique<TokenizerBench>(); });

}  // namespace
}  // namespace rlid::bench

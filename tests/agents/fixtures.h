// Small building blocks for agent/trainer tests: a tokenizer trained on an
// env's text, a tiny random model, a renderer, and a temporary directory.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <unistd.h>

#include "core/rng.h"
#include "envs/api/env.h"
#include "policy/model/model.h"
#include "policy/reading/prompt.h"
#include "policy/tokenizer/tokenizer.h"
#include "policy/tokenizer/tokenizer_corpus.h"
#include "trainers/runtime/experiment.h"

namespace rlid::testing {

inline policy::Tokenizer EnvTokenizer(const envs::Env& env, int vocab = 512) {
  policy::EnvCorpusOptions o;
  o.episodes = 100;
  auto corpus = policy::EnvTextCorpus(env, o);
  corpus.push_back("Options:\nA) x -> y\nAction: B\nMemory:\n- fact\n");
  policy::TokenizerTrainOptions t;
  t.vocab_size = vocab;
  return policy::Tokenizer::Train(corpus, t);
}

inline policy::TransformerLM TinyModel(const policy::Tokenizer& tok, uint64_t seed = 3) {
  policy::ModelConfig c;
  c.ApplyPreset("tiny");
  c.num_layers = 2;
  c.vocab_size = tok.VocabSize();
  policy::TransformerLM m(c);
  m->InitWeights(seed);
  return m;
}

// A fresh directory under the system temp dir, removed at destruction.
class TempDir {
 public:
  explicit TempDir(const std::string& name) {
    path_ = std::filesystem::temp_directory_path() /
            ("rlid_test_" + name + "_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string str() const { return path_.string(); }
  std::filesystem::path path() const { return path_; }

 private:
  std::filesystem::path path_;
  static inline int counter_ = 0;
};

// An experiment config from TOML text plus overrides.
inline std::unique_ptr<trainers::ExperimentConfig> Experiment(const std::string& toml,
                                                              const std::vector<std::string>& sets = {}) {
  Config c = Config::FromString(toml, "test.toml");
  c.ApplyOverrides(sets);
  return trainers::ExperimentConfig::FromConfig(std::move(c));
}

}  // namespace rlid::testing

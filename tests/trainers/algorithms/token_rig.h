// A token-plane training run for tests: a Run in a temporary directory,
// the registered trainer named by trainer.algorithm, and helpers to read its
// metrics and SQLite store. Used by the token_*_test.cc suites.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "core/error.h"
#include "tests/agents/fixtures.h"
#include "trainers/runtime/iteration.h"
#include "trainers/runtime/trainer.h"

namespace rlid::testing {

class TokenRun {
 public:
  TokenRun(const std::string& name, const std::string& toml, const std::vector<std::string>& sets)
      : dir_(name), cfg_(Experiment(toml, sets)) {
    session_ = std::make_unique<trainers::Run>(
        *cfg_, trainers::RunOptions{
                   .out_dir = dir_.str(), .kind = trainers::RunKind::kTrain, .arm = name, .quiet = true});
    trainer_ = trainers::TrainerRegistry::Global().Make(cfg_->trainer.algorithm);
    runner_ =
        std::make_unique<trainers::IterationRunner>(*trainer_, cfg_->trainer, session_->model);
  }
  ~TokenRun() {
    if (session_) session_->End("completed");
  }

  // One iteration; its metrics, with the writer flushed so the store shows it.
  trainers::Metrics Iterate(int64_t it) {
    trainers::IterationContext ctx{it, cfg_->trainer, cfg_->run.seed,
                                   session_->Agent(trainer_->plane(), it), session_->budget,
                                   session_->recorder(), session_->comm};
    auto m = runner_->Run(ctx);
    session_->recorder().Metrics(it, m);
    session_->recorder().Flush();
    return m;
  }

  // A single-value query (NaN for NULL).
  double Scalar(const std::string& sql) const {
    auto q = session_->store->Query(sql);
    if (q.rows.empty() || q.rows[0].empty()) throw InternalError("query returned nothing: " + sql);
    const auto& v = q.rows[0][0];
    if (std::holds_alternative<int64_t>(v)) return static_cast<double>(std::get<int64_t>(v));
    if (std::holds_alternative<double>(v)) return std::get<double>(v);
    return std::nan("");
  }
  memory::QueryResult Query(const std::string& sql) const { return session_->store->Query(sql); }

  trainers::Run& session() { return *session_; }
  trainers::Trainer& trainer() { return *trainer_; }
  const trainers::ExperimentConfig& cfg() const { return *cfg_; }

 private:
  TempDir dir_;
  std::unique_ptr<trainers::ExperimentConfig> cfg_;
  std::unique_ptr<trainers::Run> session_;
  std::unique_ptr<trainers::Trainer> trainer_;
  std::unique_ptr<trainers::IterationRunner> runner_;
};

// The value of `key` in metrics; fails the test (and returns NaN) when absent.
inline double MetricValue(const trainers::Metrics& m, const std::string& key) {
  for (const auto& [k, v] : m)
    if (k == key) return v;
  ADD_FAILURE() << "metric " << key << " is missing";
  return std::nan("");
}

inline bool HasMetric(const trainers::Metrics& m, const std::string& key) {
  for (const auto& [k, v] : m)
    if (k == key) return true;
  return false;
}

}  // namespace rlid::testing

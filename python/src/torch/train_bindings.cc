// _rlid.train / _rlid.compare: the code paths of `rlid train` and `rlid compare`
// (one process), writing the same run directories. While they run, rlid's log
// lines (progress with ETA, evaluations) go to a Python callable, so that a
// notebook cell shows them, and Ctrl-C stops at a safe point as it does in the
// CLI: the store is flushed, the run marked interrupted, and rlid.Interrupted
// (a KeyboardInterrupt) raised.
#include <fmt/format.h>
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <array>
#include <csignal>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/interrupt.h"
#include "python/src/bindings.h"
#include "trainers/analysis/compare.h"
#include "trainers/runtime/experiment.h"
#include "trainers/runtime/resume_config.h"
#include "trainers/runtime/run.h"
#include "trainers/runtime/train_run.h"
#include "trainers/runtime/trainer.h"

namespace py = pybind11;

namespace rlid::python {
namespace {

// Formats each record as the CLI does and hands the line to `write` under the GIL.
class PythonSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  explicit PythonSink(py::object write) : write_(std::move(write)) {}
  ~PythonSink() override {
    py::gil_scoped_acquire gil;
    write_ = py::object();
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    spdlog::memory_buf_t buf;
    formatter_->format(msg, buf);
    py::gil_scoped_acquire gil;
    try {
      write_(std::string(buf.data(), buf.size()));
    } catch (py::error_already_set&) {
      // A failing writer must not stop training; its lines are lost.
    }
  }
  void flush_() override {}

 private:
  py::object write_;
};

// For the scope of one call (entered with the GIL held): rlid's log goes to
// `write` (None: nowhere) at `level`, and SIGINT/SIGTERM/SIGHUP go to rlid's
// handlers. Restores Python's logger and handlers on the way out.
class HostedCall {
 public:
  HostedCall(py::object write, const std::string& level) {
    previous_logger_ = spdlog::default_logger();
    previous_level_ = spdlog::get_level();
    if (!write.is_none()) {
      auto logger = std::make_shared<spdlog::logger>("rlid", std::make_shared<PythonSink>(write));
      logger->set_pattern("[%H:%M:%S] [%l] %v");
      spdlog::set_default_logger(logger);
    }
    auto lvl = spdlog::level::from_str(level);
    if (lvl == spdlog::level::off && level != "off")
      throw ConfigError(fmt::format("unknown log level '{}'", level),
                        "use trace, debug, info, warn, error or off");
    spdlog::set_level(write.is_none() ? spdlog::level::off : lvl);
    for (size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], nullptr, &saved_[i]);
    ClearPendingSignal();
    InstallInterruptHandlers();
  }
  ~HostedCall() {
    for (size_t i = 0; i < kSignals.size(); ++i) sigaction(kSignals[i], &saved_[i], nullptr);
    ClearPendingSignal();
    spdlog::set_default_logger(previous_logger_);  // drops the sink (GIL held)
    spdlog::set_level(previous_level_);
  }
  HostedCall(const HostedCall&) = delete;
  HostedCall& operator=(const HostedCall&) = delete;

 private:
  static constexpr std::array<int, 3> kSignals = {SIGINT, SIGTERM, SIGHUP};
  std::array<struct sigaction, 3> saved_{};
  std::shared_ptr<spdlog::logger> previous_logger_;
  spdlog::level::level_enum previous_level_;
};

py::dict EvalDict(const trainers::EvalResult& e) {
  py::dict d;
  d["episodes"] = e.episodes;
  d["success"] = e.success;
  d["return"] = e.ret;
  d["length"] = e.length;
  d["invalid_rate"] = e.invalid_rate;
  d["p_optimal"] = e.p_optimal < 0 ? py::object(py::none()) : py::object(py::float_(e.p_optimal));
  return d;
}

py::dict Train(const std::string& config, const std::vector<std::string>& sets,
               const std::string& out, bool resume, bool metrics_only, py::object log,
               const std::string& level) {
  if (resume && out.empty())
    throw ConfigError("resume=True needs out=DIR (the run directory to continue)");
  HostedCall hosted(log, level);
  auto cfg = resume ? trainers::LoadResumeConfig(out, config, sets)
                    : trainers::ExperimentConfig::Load(config, sets);
  if (!resume && !out.empty()) trainers::RefuseExistingRun(out, trainers::RunKind::kTrain);
  trainers::TrainResult r;
  std::string dir;
  {
    py::gil_scoped_release nogil;
    auto run = trainers::TrainRun(*cfg, {.out = out, .resume = resume, .record = !metrics_only});
    r = run.result;
    dir = run.run_dir;
  }
  py::dict d;
  d["run_dir"] = std::filesystem::absolute(dir).string();
  d["algorithm"] = cfg->trainer.algorithm;
  d["iterations"] = r.iterations;
  d["checkpoint"] = r.final_checkpoint;
  d["budget_reached"] = r.budget_reached;
  d["test_greedy"] = EvalDict(r.final_greedy);
  d["test_sampled"] =
      cfg->trainer.eval_sampled ? py::object(EvalDict(r.final_sampled)) : py::object(py::none());
  return d;
}

py::dict Compare(const std::string& config, const std::vector<std::string>& sets,
                 const std::string& out, py::object log, const std::string& level) {
  HostedCall hosted(log, level);
  trainers::CompareResult r;
  {
    py::gil_scoped_release nogil;
    r = trainers::RunCompare(config, sets, out, log.is_none());
  }
  py::list arms;
  for (const auto& a : r.arms) {
    py::dict d;
    d["arm"] = a.arm;
    d["algorithm"] = a.algorithm;
    d["plane"] = a.plane;
    d["seeds"] = a.seeds;
    d["success"] = a.success.mean;
    d["success_se"] = a.success.se;
    d["return"] = a.return_mean;
    d["env_steps"] = a.env_steps;
    d["flops"] = a.flops;
    d["invalid_rate"] = a.invalid_rate;
    d["wall_s"] = a.wall;
    arms.append(d);
  }
  py::dict d;
  d["run_dir"] = std::filesystem::absolute(r.run_dir).string();
  d["warm_start"] = r.warm_start;
  d["report"] = std::filesystem::absolute(r.report).string();
  d["table"] = r.table;
  d["verdict"] = r.verdict;
  d["chance"] = r.chance < 0 ? py::object(py::none()) : py::object(py::float_(r.chance));
  d["arms"] = arms;
  return d;
}

}  // namespace

void BindTraining(py::module_& m) {
  m.def("train", &Train, py::arg("config"), py::arg("sets"), py::arg("out"), py::arg("resume"),
        py::arg("metrics_only"), py::arg("log"), py::arg("level"));
  m.def("compare", &Compare, py::arg("config"), py::arg("sets"), py::arg("out"), py::arg("log"),
        py::arg("level"));
}

}  // namespace rlid::python

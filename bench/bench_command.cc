// `rlid bench NAME [options]`: runs a registered benchmark and prints its JSON.
#include <fmt/format.h>

#include <fstream>
#include <iostream>

#include "bench/bench.h"
#include "cli/command.h"
#include "cli/json_output.h"
#include "core/error.h"
#include "policy/model/runtime.h"

namespace rlid::bench {
namespace {

class BenchCommand : public cli::Command {
 public:
  void Setup(CLI::App& app) override {
    app.require_subcommand(1);
    app.add_option("--out", out_, "also write the JSON result to this file");
    for (const auto& [name, entry] : BenchRegistry::Global().entries()) {
      CLI::App* sub = app.add_subcommand(name, entry.summary);
      benches_.push_back(entry.factory());
      Benchmark* b = benches_.back().get();
      b->AddOptions(*sub);
      sub->callback([this, b, name = name] {
        nlohmann::json result = b->Run();
        result["benchmark"] = name;
        // Speeds depend on where they were measured: say so next to the numbers.
        if (!result.contains("runtime")) result["runtime"] = policy::TorchSummary();
        result["intra_op_threads"] = policy::NumThreads();  // rlid --threads N (0: one per core)
        std::cout << cli::DumpJson(result, 2) << std::endl;
        if (!out_.empty()) {
          std::ofstream f(out_);
          if (!f) throw IoError(fmt::format("cannot write '{}'", out_));
          f << cli::DumpJson(result, 2) << "\n";
        }
      });
    }
  }

 private:
  std::vector<std::unique_ptr<Benchmark>> benches_;
  std::string out_;
};

const Registrar<cli::CommandRegistry> kRegister("bench",
                                                "run a benchmark (ratios measured in one run)",
                                                [] { return std::make_unique<BenchCommand>(); });

}  // namespace
}  // namespace rlid::bench

// `rlid export`: a checkpoint (rlid's, a Hugging Face model or a PEFT adapter)
// as a directory Hugging Face tools load: a plain model directory, or with
// LoRA adapters and no --merge, a PEFT adapter directory.
#include <fmt/format.h>

#include <iostream>

#include "cli/command.h"
#include "core/error.h"
#include "policy/model/checkpoint.h"

namespace rlid::cli {
namespace {

class ExportCommand final : public Command {
 public:
  void Setup(CLI::App& app) override {
    app.add_option("--checkpoint", checkpoint_,
                   "checkpoint directory (runs/<run>/checkpoints/latest, an HF model or a PEFT adapter)")
        ->required();
    app.add_option("--out", out_, "directory to write (must not exist, or be empty)")->required();
    app.add_flag("--merge", merge_,
                 "fold LoRA adapters into the base weights and write a plain model directory "
                 "(without it an adapter checkpoint is written as a PEFT adapter directory)");
    app.add_option("--dtype", dtype_,
                   "weights written: float32 or bfloat16 (default: the base model's dtype, as its "
                   "config.json says; float32 for other dtypes)")
        ->check(CLI::IsMember({"float32", "bfloat16"}));
    app.callback([this] { Run(); });
  }

 private:
  void Run() {
    policy::LoadOptions lo;
    lo.require_tokenizer = false;
    auto ck = policy::LoadCheckpoint(checkpoint_, torch::kCPU, lo);
    if (dtype_.empty()) {
      const std::string& source = ck.model->config().source_dtype;
      dtype_ = source == "bfloat16" ? "bfloat16" : "float32";
      if (source != dtype_)
        std::cout << fmt::format("note: the base model is {}; writing {} (rlid writes float32 or "
                                 "bfloat16; choose with --dtype)\n",
                                 source, dtype_);
    }
    policy::ExportOptions eo;
    eo.merge = merge_;
    eo.dtype = dtype_ == "bfloat16" ? torch::kBFloat16 : torch::kFloat32;
    policy::ExportModel(ck, out_, eo);
    const bool adapter = ck.model->lora() && !merge_;
    std::cout << fmt::format(
        "wrote {} ({}{}): {}\n", out_,
        adapter ? "PEFT LoRA adapter of " + ck.base_dir
                : fmt::format("{} model, {} parameters, {}", ck.model->config().ModelType(),
                              ck.model->config().NumParameters(), dtype_),
        ck.model->lora() && merge_ ? ", adapters merged" : "",
        adapter ? "load it with peft.PeftModel.from_pretrained(base_model, DIR)"
                : "load it with transformers.AutoModelForCausalLM.from_pretrained(DIR)");
    if (!ck.has_tokenizer)
      std::cout << "note: the checkpoint has no tokenizer.json, so the export has none either\n";
  }

  std::string checkpoint_, out_, dtype_;  // dtype_ "" = the base's
  bool merge_ = false;
};

const Registrar<CommandRegistry> kRegister(
    "export", "write a checkpoint as a Hugging Face model directory (or PEFT adapter)",
    [] { return std::make_unique<ExportCommand>(); });

}  // namespace
}  // namespace rlid::cli

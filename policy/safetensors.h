// Reading and writing the safetensors format (Hugging Face): an 8-byte
// little-endian header length, a JSON header {name: {dtype, shape,
// data_offsets}} (+ optional __metadata__), then raw little-endian data.
// Supports F32, F64, F16, BF16, I64, I32 and BOOL; BF16/F16 load as float32
// when asked.
#pragma once

#include <torch/torch.h>

#include <map>
#include <string>

namespace rlid::policy {

using TensorMap = std::map<std::string, torch::Tensor>;

// Writes atomically (temp file + rename). Tensors are saved contiguous on CPU.
void SaveSafetensors(const std::string& path, const TensorMap& tensors,
                     const std::map<std::string, std::string>& metadata = {});
// Loads every tensor (to CPU). IoError for unreadable/corrupt files.
TensorMap LoadSafetensors(const std::string& path, std::map<std::string, std::string>* metadata = nullptr);

}  // namespace rlid::policy

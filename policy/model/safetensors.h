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

// One opened safetensors file whose header has been validated (header <= 100 MB,
// every range inside the data section, length = numel x dtype size, no
// overlaps, overflow-checked). Tensors are read on demand with pread, straight
// into a destination tensor, so loading needs no second copy of the weights.
class SafetensorsReader {
 public:
  struct Entry {
    std::string dtype_name;  // "BF16", "F32", ...
    torch::Dtype dtype;
    std::vector<int64_t> shape;
    uint64_t begin = 0, end = 0;  // absolute file offsets
  };
  // IoError if the file cannot be opened or its header is invalid.
  explicit SafetensorsReader(const std::string& path);
  ~SafetensorsReader();
  SafetensorsReader(const SafetensorsReader&) = delete;
  SafetensorsReader& operator=(const SafetensorsReader&) = delete;

  const std::map<std::string, Entry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }
  const Entry* Find(const std::string& name) const;
  // Reads `name` into `dst` (CPU, contiguous, same shape; floating dtypes are
  // converted, in chunks of at most 64 MB). IoError on a short read or
  // mismatched shape; ConfigError when an integer tensor meets a float one.
  void ReadInto(const std::string& name, torch::Tensor dst) const;
  torch::Tensor Read(const std::string& name) const;  // in its stored dtype

 private:
  std::string path_;
  int fd_ = -1;
  std::map<std::string, Entry> entries_;
  std::map<std::string, std::string> metadata_;
};

}  // namespace rlid::policy

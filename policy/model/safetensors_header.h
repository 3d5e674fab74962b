// Validation of a safetensors JSON header, free of LibTorch so it is unit
// tested and fuzzed in the base build: {name: {dtype, shape, data_offsets}}
// plus an optional "__metadata__" string map. SafetensorsReader (safetensors.h)
// reads the 8-byte length and the header text, calls ParseSafetensorsHeader,
// then maps dtype names to torch dtypes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace rlid::policy {

// The supported dtypes and their element sizes.
struct SafetensorsDtype {
  std::string_view name;
  size_t bytes;
};
inline constexpr SafetensorsDtype kSafetensorsDtypes[] = {
    {"F32", 4}, {"F64", 8}, {"F16", 2}, {"BF16", 2}, {"I64", 8}, {"I32", 4}, {"U8", 1}, {"BOOL", 1}};

// Bytes per element of a supported dtype name; 0 for any other name.
constexpr size_t SafetensorsDtypeBytes(std::string_view dtype_name) {
  for (const auto& d : kSafetensorsDtypes)
    if (dtype_name == d.name) return d.bytes;
  return 0;
}

struct SafetensorsHeaderEntry {
  std::string dtype_name;  // "BF16", "F32", ...
  std::vector<int64_t> shape;
  // Byte range inside the data section (relative to its start).
  uint64_t begin = 0, end = 0;
};

struct ParsedSafetensorsHeader {
  std::map<std::string, SafetensorsHeaderEntry> entries;
  std::map<std::string, std::string> metadata;
};

// Parses and checks `header_json` against a data section of `data_size` bytes:
// a JSON object; each tensor has a supported dtype, non-negative dimensions and
// data_offsets [begin, end] with end - begin = numel x dtype size (overflow
// checked) inside the data section; no two tensors' ranges overlap. IoError
// naming `path` (for messages only) on anything else.
ParsedSafetensorsHeader ParseSafetensorsHeader(std::string_view header_json, uint64_t data_size,
                                               const std::string& path);

}  // namespace rlid::policy

#include "policy/model/safetensors_header.h"

#include <fmt/format.h>

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "core/error.h"

namespace rlid::policy {
namespace {

// a * b, or nullopt on uint64 overflow.
std::optional<uint64_t> MulChecked(uint64_t a, uint64_t b) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r)) return std::nullopt;
  return r;
}

// The integers of a JSON array, or nullopt when `j` is not an array of JSON
// integers. (nlohmann's get<> would convert 1.5 or 1e300, the latter with
// undefined behaviour, and wrap -1 to 2^64 - 1.)
struct JsonInt {
  bool negative;
  uint64_t magnitude;  // |value|; the value itself when !negative
};
std::optional<std::vector<JsonInt>> Integers(const nlohmann::json& j) {
  if (!j.is_array()) return std::nullopt;
  std::vector<JsonInt> out;
  for (const auto& x : j) {
    if (x.is_number_unsigned()) {
      out.push_back({false, x.get<uint64_t>()});
    } else if (x.is_number_integer()) {
      const int64_t v = x.get<int64_t>();
      out.push_back({v < 0, v < 0 ? uint64_t{0} - static_cast<uint64_t>(v) : static_cast<uint64_t>(v)});
    } else {
      return std::nullopt;
    }
  }
  return out;
}

}  // namespace

ParsedSafetensorsHeader ParseSafetensorsHeader(std::string_view header_json, uint64_t data_size,
                                               const std::string& path) {
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(header_json);
  } catch (const nlohmann::json::exception& e) {
    throw IoError(fmt::format("'{}': corrupt safetensors header: {}", path, e.what()));
  }
  if (!header.is_object()) throw IoError(fmt::format("'{}': header is not a JSON object", path));
  ParsedSafetensorsHeader out;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    try {
      if (it.key() == "__metadata__") {
        for (auto m = it->begin(); m != it->end(); ++m) out.metadata[m.key()] = m->get<std::string>();
        continue;
      }
      const std::string dtype = it->at("dtype").get<std::string>();
      const size_t dtype_bytes = SafetensorsDtypeBytes(dtype);
      if (dtype_bytes == 0)
        throw IoError(fmt::format("'{}': tensor '{}' has unsupported dtype '{}'", path, it.key(), dtype),
                      "supported: F32, F64, F16, BF16, I64, I32, U8, BOOL");
      const nlohmann::json& shape = it->at("shape");
      const std::optional<std::vector<JsonInt>> dims = Integers(shape);
      if (!dims)
        throw IoError(fmt::format("'{}': tensor '{}' has shape {}, not a list of integers", path,
                                  it.key(), shape.dump()));
      SafetensorsHeaderEntry e{dtype, {}, 0, 0};
      std::optional<uint64_t> bytes = dtype_bytes;
      for (const JsonInt& d : *dims) {
        if (d.negative) throw IoError(fmt::format("'{}': tensor '{}' has a negative dimension", path, it.key()));
        if (d.magnitude > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
          throw IoError(fmt::format("'{}': tensor '{}' has a dimension {} beyond int64", path,
                                    it.key(), d.magnitude));
        e.shape.push_back(static_cast<int64_t>(d.magnitude));
        if (bytes) bytes = MulChecked(*bytes, d.magnitude);
      }
      // Offsets that are not two non-negative integers fail the check below.
      const std::optional<std::vector<JsonInt>> offsets = Integers(it->at("data_offsets"));
      std::vector<uint64_t> offs;
      if (offsets && std::none_of(offsets->begin(), offsets->end(),
                                  [](const JsonInt& o) { return o.negative; }))
        for (const JsonInt& o : *offsets) offs.push_back(o.magnitude);
      if (!bytes || offs.size() != 2 || offs[1] < offs[0] || offs[1] > data_size ||
          offs[1] - offs[0] != *bytes)
        throw IoError(fmt::format("'{}': tensor '{}' has data_offsets {} that disagree with its "
                                  "shape x dtype or leave the {}-byte data section",
                                  path, it.key(), it->at("data_offsets").dump(), data_size),
                      "the file is damaged or truncated");
      e.begin = offs[0], e.end = offs[1];
      ranges.emplace_back(offs[0], offs[1]);
      out.entries.emplace(it.key(), std::move(e));
    } catch (const nlohmann::json::exception& ex) {
      throw IoError(fmt::format("'{}': bad header entry '{}': {}", path, it.key(), ex.what()));
    }
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second)
      throw IoError(fmt::format("'{}': two tensors' data ranges overlap", path),
                    "the file is damaged");
  return out;
}

}  // namespace rlid::policy

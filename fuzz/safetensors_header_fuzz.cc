// Safetensors header validation (policy/model/safetensors_header.h): the first 8
// bytes give the data-section size (little-endian, so tiny and huge sizes are
// both reached), the rest is the JSON header. An accepted header must describe
// supported dtypes, ranges inside the data section whose lengths are numel x
// dtype size, and no two overlapping ranges. Only IoError may be thrown.
#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/error.h"
#include "fuzz/fuzz_util.h"
#include "policy/model/safetensors_header.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace rlid;
  using namespace rlid::fuzz;
  Input in(data, size);
  const uint64_t data_size = in.TakeInt(8);
  policy::ParsedSafetensorsHeader h;
  try {
    h = policy::ParseSafetensorsHeader(in.Rest(), data_size, "fuzz.safetensors");
  } catch (const IoError&) {
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "unexpected exception: %s\n", e.what());
    FUZZ_CHECK(!"ParseSafetensorsHeader may only throw IoError");
  }
  std::vector<std::pair<uint64_t, uint64_t>> ranges;
  for (const auto& [name, e] : h.entries) {
    FUZZ_CHECK(name != "__metadata__");
    const size_t elem = policy::SafetensorsDtypeBytes(e.dtype_name);
    FUZZ_CHECK(elem > 0);
    FUZZ_CHECK(e.begin <= e.end && e.end <= data_size);
    // numel x elem, saturated above 2^64 (a later zero dimension still gives 0).
    const bool empty = std::count(e.shape.begin(), e.shape.end(), 0) > 0;
    unsigned __int128 bytes = empty ? 0 : elem;
    for (int64_t d : e.shape) {
      FUZZ_CHECK(d >= 0);
      if (!empty) bytes = std::min<unsigned __int128>(bytes * static_cast<uint64_t>(d),
                                                      static_cast<unsigned __int128>(1) << 64);
    }
    FUZZ_CHECK(bytes == e.end - e.begin);
    ranges.emplace_back(e.begin, e.end);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) FUZZ_CHECK(ranges[i].first >= ranges[i - 1].second);
  return 0;
}

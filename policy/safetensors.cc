#include "policy/safetensors.h"

#include <fmt/format.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"

namespace rlid::policy {
namespace {

struct DtypeInfo {
  const char* name;
  torch::Dtype dtype;
  size_t bytes;
};
constexpr DtypeInfo kDtypes[] = {{"F32", torch::kFloat32, 4}, {"F64", torch::kFloat64, 8},
                                 {"F16", torch::kFloat16, 2}, {"BF16", torch::kBFloat16, 2},
                                 {"I64", torch::kInt64, 8},   {"I32", torch::kInt32, 4},
                                 {"U8", torch::kUInt8, 1},    {"BOOL", torch::kBool, 1}};

const DtypeInfo& ByDtype(torch::Dtype d) {
  for (const auto& i : kDtypes)
    if (i.dtype == d) return i;
  throw IoError(fmt::format("safetensors: unsupported dtype {}", c10::toString(d)));
}

const DtypeInfo* ByName(const std::string& n) {
  for (const auto& i : kDtypes)
    if (n == i.name) return &i;
  return nullptr;
}

}  // namespace

void SaveSafetensors(const std::string& path, const TensorMap& tensors,
                     const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<torch::Tensor> data;
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    auto c = t.detach().to(torch::kCPU).contiguous();
    const auto& info = ByDtype(c.scalar_type());
    size_t n = static_cast<size_t>(c.numel()) * info.bytes;
    header[name] = {{"dtype", info.name}, {"shape", c.sizes().vec()}, {"data_offsets", {offset, offset + n}}};
    offset += n;
    data.push_back(c);
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h.push_back(' ');  // align data to 8 bytes
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw IoError(fmt::format("cannot write '{}'", tmp), "check the directory exists and is writable");
    uint64_t len = h.size();
    unsigned char le[8];
    for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>((len >> (8 * i)) & 0xff);
    out.write(reinterpret_cast<const char*>(le), 8);
    out.write(h.data(), static_cast<std::streamsize>(h.size()));
    for (const auto& c : data)
      out.write(static_cast<const char*>(c.data_ptr()), static_cast<std::streamsize>(c.nbytes()));
    out.flush();
    if (!out) throw IoError(fmt::format("write failed for '{}' (disk full?)", tmp));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw IoError(fmt::format("cannot rename '{}' to '{}': {}", tmp, path, ec.message()));
}

TensorMap LoadSafetensors(const std::string& path, std::map<std::string, std::string>* metadata) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw IoError(fmt::format("cannot open '{}'", path));
  in.seekg(0, std::ios::end);
  const uint64_t file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  unsigned char le[8];
  if (file_size < 8 || !in.read(reinterpret_cast<char*>(le), 8))
    throw IoError(fmt::format("'{}' is not a safetensors file (too short)", path));
  uint64_t len = 0;
  for (int i = 0; i < 8; ++i) len |= static_cast<uint64_t>(le[i]) << (8 * i);
  if (len > file_size - 8 || len > (1u << 30))
    throw IoError(fmt::format("'{}' is not a safetensors file (header length {})", path, len));
  std::string h(len, '\0');
  in.read(h.data(), static_cast<std::streamsize>(len));
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(h);
  } catch (const nlohmann::json::exception& e) {
    throw IoError(fmt::format("'{}': corrupt safetensors header: {}", path, e.what()));
  }
  const uint64_t data_start = 8 + len;
  TensorMap out;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (metadata)
        for (auto m = it->begin(); m != it->end(); ++m) (*metadata)[m.key()] = m->get<std::string>();
      continue;
    }
    try {
      const DtypeInfo* info = ByName(it->at("dtype").get<std::string>());
      if (!info) throw IoError(fmt::format("'{}': tensor '{}' has unsupported dtype {}", path, it.key(),
                                           it->at("dtype").dump()));
      std::vector<int64_t> shape = it->at("shape").get<std::vector<int64_t>>();
      auto offs = it->at("data_offsets").get<std::vector<uint64_t>>();
      int64_t numel = 1;
      for (auto d : shape) numel *= d;
      if (offs.size() != 2 || offs[1] < offs[0] || offs[1] - offs[0] != numel * info->bytes ||
          data_start + offs[1] > file_size)
        throw IoError(fmt::format("'{}': tensor '{}' has inconsistent offsets", path, it.key()));
      auto t = torch::empty(shape, torch::TensorOptions().dtype(info->dtype));
      in.seekg(static_cast<std::streamoff>(data_start + offs[0]));
      in.read(static_cast<char*>(t.data_ptr()), static_cast<std::streamsize>(offs[1] - offs[0]));
      if (!in) throw IoError(fmt::format("'{}': truncated data for '{}'", path, it.key()));
      out[it.key()] = t;
    } catch (const nlohmann::json::exception& e) {
      throw IoError(fmt::format("'{}': bad header entry '{}': {}", path, it.key(), e.what()));
    }
  }
  return out;
}

}  // namespace rlid::policy

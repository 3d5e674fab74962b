#include "policy/model/safetensors.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <utility>

#include "core/check.h"
#include "core/error.h"
#include "core/file_io.h"
#include "policy/model/safetensors_header.h"

namespace rlid::policy {
namespace {

// Element sizes must agree with kSafetensorsDtypes, the table the torch-free
// header parser checks lengths with.
struct DtypeInfo {
  const char* name;
  torch::Dtype dtype;
  size_t bytes;
};
constexpr DtypeInfo kDtypes[] = {{"F32", torch::kFloat32, 4}, {"F64", torch::kFloat64, 8},
                                 {"F16", torch::kFloat16, 2}, {"BF16", torch::kBFloat16, 2},
                                 {"I64", torch::kInt64, 8},   {"I32", torch::kInt32, 4},
                                 {"U8", torch::kUInt8, 1},    {"BOOL", torch::kBool, 1}};
static_assert([] {
  for (const auto& i : kDtypes)
    if (SafetensorsDtypeBytes(i.name) != i.bytes) return false;
  return std::size(kDtypes) == std::size(kSafetensorsDtypes);
}());

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
  try {
    CheckedFile out(tmp, "safetensors file");
    uint64_t len = h.size();
    unsigned char le[8];
    for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>((len >> (8 * i)) & 0xff);
    out.Write(le, 8);
    out.Write(h);
    for (const auto& c : data) out.Write(c.data_ptr(), c.nbytes());
    out.Close();
  } catch (...) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    throw;
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) throw IoError(fmt::format("cannot rename '{}' to '{}': {}", tmp, path, ec.message()));
}

TensorMap LoadSafetensors(const std::string& path, std::map<std::string, std::string>* metadata) {
  SafetensorsReader reader(path);
  if (metadata) *metadata = reader.metadata();
  TensorMap out;
  for (const auto& [name, e] : reader.entries()) out[name] = reader.Read(name);
  return out;
}

namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;
constexpr uint64_t kChunkBytes = 64ull << 20;

// pread until `n` bytes are read; false on error or end of file.
bool PreadAll(int fd, void* buf, uint64_t n, uint64_t offset) {
  auto* p = static_cast<char*>(buf);
  while (n > 0) {
    ssize_t got = ::pread(fd, p, std::min<uint64_t>(n, 1ull << 30), static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return false;
    p += got, n -= static_cast<uint64_t>(got), offset += static_cast<uint64_t>(got);
  }
  return true;
}

}  // namespace

SafetensorsReader::SafetensorsReader(const std::string& path) : path_(path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0)
    throw IoError(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
  if (!S_ISREG(st.st_mode)) throw IoError(fmt::format("'{}' is not a regular file", path));
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) throw IoError(fmt::format("cannot open '{}': {}", path, std::strerror(errno)));
  try {
    const uint64_t file_size = static_cast<uint64_t>(st.st_size);
    unsigned char le[8];
    if (file_size < 8 || !PreadAll(fd_, le, 8, 0))
      throw IoError(fmt::format("'{}' is not a safetensors file (too short)", path));
    uint64_t len = 0;
    for (int i = 0; i < 8; ++i) len |= static_cast<uint64_t>(le[i]) << (8 * i);
    if (len > kMaxHeaderBytes || len > file_size - 8)
      throw IoError(fmt::format("'{}' is not a safetensors file (header length {} of a {}-byte "
                                "file; at most 100 MB)",
                                path, len, file_size));
    std::string h(len, '\0');
    if (!PreadAll(fd_, h.data(), len, 8)) throw IoError(fmt::format("'{}': truncated header", path));
    const uint64_t data_start = 8 + len, data_size = file_size - data_start;
    ParsedSafetensorsHeader header = ParseSafetensorsHeader(h, data_size, path);
    metadata_ = std::move(header.metadata);
    for (auto& [name, h_entry] : header.entries) {
      const DtypeInfo* info = ByName(h_entry.dtype_name);
      RLID_CHECK(info != nullptr, "ParseSafetensorsHeader accepted an unknown dtype");
      entries_.emplace(name, Entry{std::move(h_entry.dtype_name), info->dtype,
                                   std::move(h_entry.shape), data_start + h_entry.begin,
                                   data_start + h_entry.end});
    }
  } catch (...) {
    ::close(fd_);
    throw;
  }
}

SafetensorsReader::~SafetensorsReader() {
  if (fd_ >= 0) ::close(fd_);
}

const SafetensorsReader::Entry* SafetensorsReader::Find(const std::string& name) const {
  auto it = entries_.find(name);
  return it == entries_.end() ? nullptr : &it->second;
}

torch::Tensor SafetensorsReader::Read(const std::string& name) const {
  const Entry* e = Find(name);
  if (!e) throw IoError(fmt::format("'{}' has no tensor '{}'", path_, name));
  auto t = torch::empty(e->shape, torch::TensorOptions().dtype(e->dtype));
  ReadInto(name, t);
  return t;
}

void SafetensorsReader::ReadInto(const std::string& name, torch::Tensor dst) const {
  const Entry* e = Find(name);
  if (!e) throw IoError(fmt::format("'{}' has no tensor '{}'", path_, name));
  if (dst.sizes().vec() != e->shape)
    throw IoError(fmt::format("'{}': tensor '{}' has shape {} but {} was expected", path_, name,
                              c10::str(c10::IntArrayRef(e->shape)), c10::str(dst.sizes())));
  RLID_CHECK(dst.device().is_cpu() && dst.is_contiguous(), "ReadInto needs a contiguous CPU tensor");
  if (c10::isFloatingType(e->dtype) != c10::isFloatingType(dst.scalar_type()))
    throw ConfigError(fmt::format("'{}': tensor '{}' is {} but a {} tensor was expected", path_,
                                  name, e->dtype_name, c10::toString(dst.scalar_type())));
  const uint64_t elem = ByDtype(e->dtype).bytes, numel = static_cast<uint64_t>(dst.numel());
  auto short_read = [&] {
    return IoError(fmt::format("'{}': short read of tensor '{}'", path_, name), "the file is truncated");
  };
  if (dst.scalar_type() == e->dtype) {
    if (!PreadAll(fd_, dst.data_ptr(), e->end - e->begin, e->begin)) throw short_read();
    return;
  }
  auto flat = dst.view({-1});
  const uint64_t per_chunk = std::max<uint64_t>(1, kChunkBytes / elem);
  auto buf = torch::empty({static_cast<int64_t>(std::min(per_chunk, numel))},
                          torch::TensorOptions().dtype(e->dtype));
  for (uint64_t i = 0; i < numel; i += per_chunk) {
    const uint64_t n = std::min(per_chunk, numel - i);
    if (!PreadAll(fd_, buf.data_ptr(), n * elem, e->begin + i * elem)) throw short_read();
    flat.slice(0, static_cast<int64_t>(i), static_cast<int64_t>(i + n))
        .copy_(buf.slice(0, 0, static_cast<int64_t>(n)));
  }
}

}  // namespace rlid::policy

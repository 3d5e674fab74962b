// ReadRegularFile: stat, a non-blocking open, fstat again (the path may have been swapped
// in between), then reads of at most max_bytes + 1 bytes.
#include "core/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "core/error.h"

namespace rlid {
namespace {

[[noreturn]] void NotRegular(const std::string& path, std::string_view what, mode_t mode) {
  const char* kind = S_ISDIR(mode)                      ? "a directory"
                     : S_ISFIFO(mode)                   ? "a FIFO"
                     : S_ISCHR(mode) || S_ISBLK(mode) ? "a device"
                     : S_ISSOCK(mode)                   ? "a socket"
                                                        : "not a regular file";
  throw IoError(fmt::format("{} '{}' is not a regular file: it is {}", what, path, kind),
                "name a regular file (not a directory, FIFO or device)");
}

[[noreturn]] void TooLarge(const std::string& path, std::string_view what, uint64_t max_bytes) {
  throw IoError(
      fmt::format("{} '{}' is larger than the {} bytes such files are limited to", what, path,
                  max_bytes),
      "check that the path names the right file");
}

}  // namespace

std::string ReadRegularFile(const std::string& path, uint64_t max_bytes, std::string_view what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    throw IoError(fmt::format("cannot open {} '{}': {}", what, path, std::strerror(errno)),
                  "check the path");
  }
  if (!S_ISREG(st.st_mode)) NotRegular(path, what, st.st_mode);
  if (static_cast<uint64_t>(st.st_size) > max_bytes) TooLarge(path, what, max_bytes);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    throw IoError(fmt::format("cannot open {} '{}': {}", what, path, std::strerror(errno)),
                  "check the path and its permissions");
  }
  std::string out;
  try {
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) NotRegular(path, what, st.st_mode);
    // One byte past the limit tells a file that grew (or a /proc entry of size 0) apart.
    out.resize(static_cast<size_t>(std::min<uint64_t>(static_cast<uint64_t>(st.st_size), max_bytes) + 1));
    size_t got = 0;
    while (true) {
      if (got == out.size()) {
        if (out.size() > max_bytes) TooLarge(path, what, max_bytes);
        out.resize(static_cast<size_t>(std::min<uint64_t>(uint64_t{out.size()} * 2, max_bytes + 1)));
      }
      const ssize_t n = ::read(fd, out.data() + got, out.size() - got);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        throw IoError(fmt::format("error while reading {} '{}': {}", what, path,
                                  std::strerror(errno)));
      }
      if (n == 0) break;
      got += static_cast<size_t>(n);
    }
    if (got > max_bytes) TooLarge(path, what, max_bytes);
    out.resize(got);
  } catch (...) {
    ::close(fd);
    throw;
  }
  ::close(fd);
  return out;
}

std::string WriteFailure(int err) {
  const std::string why = std::strerror(err);
  if (err == ENOSPC || err == EDQUOT) return "disk full (" + why + ")";
  if (err == EFBIG) return "larger than the file size limit, ulimit -f (" + why + ")";
  return why;
}

CheckedFile::CheckedFile(const std::string& path, std::string_view what)
    : path_(path), what_(what) {
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd_ < 0) Fail("cannot create", errno);
}

CheckedFile::~CheckedFile() {
  if (fd_ >= 0) ::close(fd_);
}

void CheckedFile::Fail(std::string_view doing, int err) const {
  const bool full = err == ENOSPC || err == EDQUOT || err == EFBIG;
  throw IoError(fmt::format("{} {} '{}': {}", doing, what_, path_, WriteFailure(err)),
                full ? "free space (or raise the limit) and run the command again; with "
                       "`rlid train`, --resume continues the run from its last checkpoint"
                     : "is the directory writable?");
}

void CheckedFile::Write(const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd_, p, std::min<size_t>(n, size_t{1} << 30));
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) Fail("cannot write", w < 0 ? errno : ENOSPC);
    p += w;
    n -= static_cast<size_t>(w);
  }
}

void CheckedFile::Close() {
  if (fd_ < 0) return;
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) Fail("cannot write", errno);
}

void WriteWholeFile(const std::string& path, std::string_view bytes, std::string_view what) {
  CheckedFile f(path, what);
  f.Write(bytes);
  f.Close();
}

void ReplaceFile(const std::string& path, std::string_view bytes, std::string_view what) {
  const std::string tmp = fmt::format("{}.tmp-{}", path, static_cast<long>(::getpid()));
  try {
    WriteWholeFile(tmp, bytes, what);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    throw IoError(fmt::format("cannot replace {} '{}': {}", what, path, WriteFailure(err)));
  }
}

void ReplaceSymlink(const std::string& link, const std::string& target, std::error_code& ec) {
  const std::string tmp = fmt::format("{}.tmp-{}", link, static_cast<long>(::getpid()));
  ::unlink(tmp.c_str());
  ec.clear();
  if (::symlink(target.c_str(), tmp.c_str()) != 0 || ::rename(tmp.c_str(), link.c_str()) != 0) {
    ec.assign(errno, std::generic_category());
    ::unlink(tmp.c_str());
  }
}

}  // namespace rlid

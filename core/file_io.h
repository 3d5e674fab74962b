// Reading the small files rlid takes from users (configs, tokenizers, checkpoint JSON,
// chat templates) whole into memory: only regular files, only up to a stated size, so a
// FIFO, /dev/zero or a directory named where a file belongs is an IoError, never a hang.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <system_error>

namespace rlid {

// Size limits per kind of file, far above what real ones need.
inline constexpr uint64_t kMaxJsonFileBytes = uint64_t{64} << 20;        // config.json & co.
inline constexpr uint64_t kMaxTokenizerFileBytes = uint64_t{256} << 20;  // tokenizer.json
inline constexpr uint64_t kMaxCorpusFileBytes = uint64_t{4} << 30;       // tokenizer training text

// The bytes of the regular file at `path` (symlinks followed), at most `max_bytes`.
// Throws IoError naming `what` ("tokenizer file", "checkpoint config") and the path when the
// file is missing or unreadable, is not a regular file (checked with stat before opening,
// and the open is non-blocking, so a FIFO or device is never read), or is larger than
// `max_bytes` (also when it grows past it while being read).
std::string ReadRegularFile(const std::string& path, uint64_t max_bytes, std::string_view what);

// A new file written with write(2), every failure an IoError that names the
// file and the cause in words: "disk full" (ENOSPC, EDQUOT), "larger than the
// file size limit (ulimit -f)" (EFBIG; rlid ignores SIGXFSZ, see interrupt.h).
// Close() flushes and closes, and must be called for the file to count as
// written; a file destroyed unclosed is closed and its error ignored (the
// caller is already failing).
class CheckedFile {
 public:
  CheckedFile(const std::string& path, std::string_view what);  // creates or truncates
  ~CheckedFile();
  CheckedFile(const CheckedFile&) = delete;
  CheckedFile& operator=(const CheckedFile&) = delete;
  void Write(const void* data, size_t n);
  void Write(std::string_view bytes) { Write(bytes.data(), bytes.size()); }
  void Close();

 private:
  [[noreturn]] void Fail(std::string_view doing, int err) const;
  std::string path_, what_;
  int fd_ = -1;
};

// `bytes` as the whole of the file at `path` (CheckedFile's errors).
void WriteWholeFile(const std::string& path, std::string_view bytes, std::string_view what);

// The same, written beside `path` (PATH.tmp-PID) and renamed over it: readers
// see the old file or the new one, never half of one; a symlink at `path` is
// replaced, not followed; a failed write leaves no temporary file.
void ReplaceFile(const std::string& path, std::string_view bytes, std::string_view what);

// Points the symlink `link` at `target` by renaming a fresh link over it
// (readers never find no link); the error in `ec`, nothing left behind.
void ReplaceSymlink(const std::string& link, const std::string& target, std::error_code& ec);

// The cause of a failed write in words ("disk full (No space left on device)").
std::string WriteFailure(int err);

}  // namespace rlid

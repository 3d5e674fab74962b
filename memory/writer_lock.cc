#include "memory/writer_lock.h"

#include <fcntl.h>
#include <fmt/format.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <utility>

#include "core/error.h"

namespace rlid::memory {
namespace fs = std::filesystem;
namespace {

struct Held {
  int fd;
  int refs;
  bool shared;         // taken by a WriterLock: this process's stores join it
  bool swept = false;  // a store has marked dead processes' runs crashed
};
std::mutex& HeldMutex() {
  static std::mutex m;
  return m;
}
// (device, inode) -> the descriptor this process locked it with.
std::map<std::pair<dev_t, ino_t>, Held>& HeldLocks() {
  static std::map<std::pair<dev_t, ino_t>, Held> m;
  return m;
}

IoError LockedError(const std::string& db_path, const std::string& info_path) {
  std::string holder;
  std::ifstream(info_path) >> holder;
  return IoError(fmt::format("database '{}' is locked: another rlid process{} is writing it",
                             db_path, holder.empty() ? "" : " (pid " + holder + ")"),
                 "one writer per database (whatever path, symlink or hard link leads to it): "
                 "wait for that run to finish, use another run directory, or read it "
                 "meanwhile with `rlid sql`");
}

// flock and SQLite's POSIX record locks do not interact on Linux. A second
// acquisition looks the inode up by stat() and never opens the file again:
// closing that extra descriptor would drop SQLite's record locks of another
// connection in this process. "<db>-writer.lock" only records the holder's pid
// for the error message.
int Acquire(const std::string& db_path, bool shared) {
  std::lock_guard<std::mutex> guard(HeldMutex());
  auto& held = HeldLocks();
  std::error_code ec;
  const fs::path canonical = fs::weakly_canonical(db_path, ec);
  const std::string info_path = (ec ? fs::path(db_path) : canonical).string() + "-writer.lock";
  struct stat st {};
  if (::stat(db_path.c_str(), &st) == 0) {
    if (auto it = held.find({st.st_dev, st.st_ino}); it != held.end()) {
      if (!it->second.shared) throw LockedError(db_path, info_path);
      ++it->second.refs;
      return it->second.fd;
    }
  }
  const int fd = ::open(db_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NONBLOCK, 0644);
  if (fd < 0) {
    const int err = errno;
    throw IoError(fmt::format("cannot open '{}' for writing ({})", db_path, std::strerror(err)),
                  err == EACCES || err == EROFS || err == EPERM
                      ? "the directory is not writable (or the file is read-only); pick a writable "
                        "run directory"
                      : "check that the directory exists and is writable");
  }
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw IoError(fmt::format("database path '{}' is not a regular file", db_path),
                  "rlid.db must be a plain file (not a FIFO, device or socket)");
  }
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd);
    if (err == EWOULDBLOCK) throw LockedError(db_path, info_path);
    throw IoError(fmt::format("cannot lock '{}' ({})", db_path, std::strerror(err)));
  }
  std::ofstream(info_path, std::ios::trunc) << ::getpid() << "\n";
  held[{st.st_dev, st.st_ino}] = {fd, 1, shared};
  return fd;
}

}  // namespace

int AcquireWriterLock(const std::string& db_path) { return Acquire(db_path, /*shared=*/false); }

WriterLock::WriterLock(const std::string& db_path) : fd_(Acquire(db_path, /*shared=*/true)) {}

bool ClaimCrashSweep(int fd) {
  std::lock_guard<std::mutex> guard(HeldMutex());
  for (auto& [key, h] : HeldLocks())
    if (h.fd == fd) return !std::exchange(h.swept, true);
  return false;
}

void ReleaseWriterLock(int fd) {
  std::lock_guard<std::mutex> guard(HeldMutex());
  auto& held = HeldLocks();
  for (auto it = held.begin(); it != held.end(); ++it) {
    if (it->second.fd != fd) continue;
    if (--it->second.refs == 0) {
      ::close(fd);
      held.erase(it);
    }
    return;
  }
  // Not held: nothing to release (this runs in destructors, so it never throws).
}

}  // namespace rlid::memory

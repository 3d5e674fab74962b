// The one-writer lock of an rlid database: flock on the database file's inode,
// so every path, symlink or hard link to one database meets the same lock, and
// the kernel drops it when the process dies. Store takes it when it opens for
// writing; a command that writes other files into a run directory before its
// stores open (rlid compare) holds a WriterLock around all of it.
#pragma once

#include <string>

namespace rlid::memory {

// Takes the lock of `db_path` (creating an empty file if absent) and returns
// its descriptor. IoError naming the holder's pid when another process (or
// another store of this one) holds it, or when the path is not a regular file
// or cannot be opened. While this process holds a WriterLock on the inode, the
// call joins it instead: it returns the same descriptor and counts a reference
// (so the stores of compare's arms open under compare's own lock).
int AcquireWriterLock(const std::string& db_path);
// Drops one reference; the last closes the descriptor. Call only after every
// SQLite connection this reference covered has closed (closing a descriptor
// of a file drops the process's POSIX record locks on it, SQLite's included).
void ReleaseWriterLock(int fd);

// True for the first caller per acquisition of the lock behind `fd`: runs left
// "running" in the database then belong to dead processes, but not once a
// store of this process has opened under the lock (its run may be running).
bool ClaimCrashSweep(int fd);

class WriterLock {
 public:
  // Same errors as AcquireWriterLock; stores this process opens on the
  // database meanwhile join this lock.
  explicit WriterLock(const std::string& db_path);
  ~WriterLock() { ReleaseWriterLock(fd_); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  int fd_;
};

}  // namespace rlid::memory

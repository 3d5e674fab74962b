// ReadRegularFile: the one reader of user files refuses what is not a regular file (without
// blocking on a FIFO) and what is over its size limit, naming the kind of file and the path.
#include "core/file_io.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.h"

namespace rlid {
namespace {

std::string ErrorOf(const std::string& path, uint64_t max_bytes = 1 << 20) {
  try {
    return "read " + std::to_string(ReadRegularFile(path, max_bytes, "test file").size());
  } catch (const IoError& e) {
    return e.what();
  }
}

TEST(ReadRegularFile, RefusesWhatIsNotARegularFileOrTooLarge) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("rlid_file_io_{}", ::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string fifo = (dir / "fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  EXPECT_EQ(ErrorOf(fifo), "test file '" + fifo + "' is not a regular file: it is a FIFO");
  EXPECT_EQ(ErrorOf("/dev/zero"), "test file '/dev/zero' is not a regular file: it is a device");
  std::filesystem::create_symlink("/dev/zero", dir / "zero.json");
  EXPECT_NE(ErrorOf((dir / "zero.json").string()).find("it is a device"), std::string::npos);
  EXPECT_NE(ErrorOf(dir.string()).find("it is a directory"), std::string::npos);
  EXPECT_NE(ErrorOf((dir / "missing").string()).find("cannot open test file"), std::string::npos);
  std::ofstream(dir / "ten") << "0123456789";
  EXPECT_EQ(ErrorOf((dir / "ten").string(), 10), "read 10");
  EXPECT_EQ(ErrorOf((dir / "ten").string(), 9),
            "test file '" + (dir / "ten").string() +
                "' is larger than the 9 bytes such files are limited to");
  std::ofstream(dir / "empty");
  EXPECT_EQ(ErrorOf((dir / "empty").string()), "read 0");
  // A file whose size stat reports as 0 but that has content (as /proc entries do) is read
  // up to the limit all the same.
  EXPECT_NE(ErrorOf("/proc/self/status", 4).find("larger than the 4 bytes"), std::string::npos);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace rlid

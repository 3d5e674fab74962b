// tests/build_id.h: the id the test caches are keyed on is the binary's GNU
// build-id, as binutils reads it from the file on disk.
#include "tests/build_id.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <memory>
#include <string>

namespace rlid::testing {
namespace {

// Output of `readelf -n` on this test binary ("" when readelf cannot run).
std::string ReadelfNotes() {
  char path[4096];
  ssize_t n = ::readlink("/proc/self/exe", path, sizeof(path) - 1);
  if (n <= 0) return "";
  path[n] = '\0';
  std::unique_ptr<FILE, int (*)(FILE*)> p(
      ::popen(("readelf -n '" + std::string(path) + "' 2>/dev/null").c_str(), "r"), ::pclose);
  if (!p) return "";
  std::string out;
  std::array<char, 4096> buf;
  while (size_t k = std::fread(buf.data(), 1, buf.size(), p.get())) out.append(buf.data(), k);
  return out;
}

TEST(BuildId, IsTheMainProgramsGnuBuildId) {
  const std::string id = BuildId();
  ASSERT_FALSE(id.empty());
  EXPECT_EQ(BuildId(), id);
  const std::string notes = ReadelfNotes();
  if (notes.empty()) GTEST_SKIP() << "readelf (binutils) is not available to cross-check " << id;
  const std::string marker = "Build ID: ";
  size_t at = notes.find(marker);
  if (at == std::string::npos) {  // linked without --build-id: the size+mtime fallback
    EXPECT_EQ(id.rfind("size-", 0), 0u) << id;
    return;
  }
  at += marker.size();
  EXPECT_EQ(id, notes.substr(at, notes.find_first_not_of("0123456789abcdef", at) - at));
}

}  // namespace
}  // namespace rlid::testing

// Where the test binaries find the source tree and the build directory.
// CMake defines the two strings once, in a generated file (test_paths.cc in
// the build directory), instead of passing absolute paths on every compile
// command of the tests: the commands then hash the same in a fresh clone
// elsewhere, so ccache (with CCACHE_BASEDIR) reuses the objects compiled here.
#pragma once

namespace rlid::testing::paths {
extern const char* const kSourceDir;  // the checkout (RLID_SOURCE_DIR)
extern const char* const kBinaryDir;  // the build directory (RLID_BINARY_DIR)
}  // namespace rlid::testing::paths

#define RLID_SOURCE_DIR ::rlid::testing::paths::kSourceDir
#define RLID_BINARY_DIR ::rlid::testing::paths::kBinaryDir

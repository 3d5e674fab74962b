// The tree's layering (README "Layout"): every component folder includes only
// its own folder and the folders below it in kLayers, so nothing imports
// upward. CMake links the same order; this test catches an #include that
// would make the layers circular before the link does (or instead of it, for
// header-only uses). A test of the whole tree, kept with core's tests because
// it needs nothing but the source files.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/test_paths.h"

namespace rlid {
namespace {
namespace fs = std::filesystem;

// Bottom to top. A file belongs to the deepest listed folder that holds it.
const std::vector<std::string> kLayers = {
    "core",
    "jinja",
    "envs/api",
    // builtin and external are siblings on api (SiblingsStayApart)
    "envs/builtin",
    "envs/external",
    "memory",
    "policy/tokenizer",
    "policy/model",
    "policy/reading",
    "policy/engines",
    "agents",
    "trainers/losses",
    "trainers/runtime",
    "trainers/algorithms",
    "trainers/analysis",
    "cli",
    "bench",
};

std::optional<size_t> LayerOf(const std::string& path) {
  std::optional<size_t> layer;
  for (size_t i = 0; i < kLayers.size(); ++i)
    if (path.rfind(kLayers[i] + "/", 0) == 0) layer = i;
  return layer;
}

std::vector<std::string> QuotedIncludes(const fs::path& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  static const std::regex kInclude(R"re(#include\s+"([^"]+)")re");
  std::vector<std::string> out;
  const std::string s = text.str();
  for (std::sregex_iterator it(s.begin(), s.end(), kInclude), end; it != end; ++it)
    out.push_back((*it)[1].str());
  return out;
}

// envs/builtin and envs/external: neither may include the other.
bool Siblings(size_t a, size_t b) {
  const auto builtin = LayerOf("envs/builtin/x.h"), external = LayerOf("envs/external/x.h");
  return (a == *builtin && b == *external) || (a == *external && b == *builtin);
}

TEST(Layering, NoComponentIncludesALayerAboveIt) {
  const fs::path root = RLID_SOURCE_DIR;
  size_t files = 0;
  for (const auto& top :
       {"core", "jinja", "envs", "memory", "policy", "agents", "trainers", "cli", "bench"}) {
    ASSERT_TRUE(fs::is_directory(root / top)) << top;
    for (const auto& entry : fs::recursive_directory_iterator(root / top)) {
      const auto ext = entry.path().extension();
      if (!entry.is_regular_file() || (ext != ".cc" && ext != ".h")) continue;
      const std::string rel = fs::relative(entry.path(), root).generic_string();
      const auto layer = LayerOf(rel);
      ASSERT_TRUE(layer.has_value()) << rel << " is in no layer: add its folder to kLayers";
      ++files;
      for (const auto& inc : QuotedIncludes(entry.path())) {
        const auto target = LayerOf(inc);
        if (target && *target > *layer)
          ADD_FAILURE() << rel << " (" << kLayers[*layer] << ") includes " << inc << " ("
                        << kLayers[*target] << "), a layer above it";
        if (target && Siblings(*layer, *target))
          ADD_FAILURE() << rel << " includes " << inc << ": the built-in envs and the external "
                        << "stack both build on envs/api, never on each other";
      }
    }
  }
  EXPECT_GT(files, 100u) << "the walk found the sources";
}

// The check itself: a file is placed in its deepest folder, and an include of
// a higher layer is seen as one.
TEST(Layering, LayersAreTheDeepestListedFolder) {
  EXPECT_EQ(LayerOf("policy/model/model.h"), LayerOf("policy/model/x.cc"));
  EXPECT_LT(*LayerOf("policy/tokenizer/tokenizer.h"), *LayerOf("policy/reading/readout.h"));
  EXPECT_LT(*LayerOf("trainers/runtime/run.h"), *LayerOf("trainers/algorithms/sft.h"));
  EXPECT_FALSE(LayerOf("tests/core/layering_test.cc").has_value());
  EXPECT_FALSE(LayerOf("policy/x.h").has_value()) << "policy/ files live in its parts";
  EXPECT_FALSE(LayerOf("envs/x.h").has_value()) << "envs/ files live in its parts";
  EXPECT_LT(*LayerOf("envs/api/env.h"), *LayerOf("envs/builtin/household.h"));
  EXPECT_TRUE(Siblings(*LayerOf("envs/external/external.h"), *LayerOf("envs/builtin/maze.cc")));
}

}  // namespace
}  // namespace rlid

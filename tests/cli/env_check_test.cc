// `rlid env check`: the conformance suite from the command line, on built-in
// and external envs; a broken env exits 1 and says which check failed and why.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "tests/cli/run_cli.h"

namespace rlid::cli {
namespace {

using testing::RunRlid;

const std::string kSource = RLID_SOURCE_DIR;

TEST(EnvCheck, PythonExamplePasses) {
  const auto o = RunRlid({"env", "check", "--command",
                          "python3 " + kSource + "/envs/external/python/examples/courier.py",
                          "--seeds", "4", "--param", "rooms=5"});
  EXPECT_EQ(o.code, 0) << o.out << o.err;
  EXPECT_NE(o.out.find("courier: 9 passed, 0 skipped, 0 failed"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("passed   oracle"), std::string::npos) << o.out;
}

TEST(EnvCheck, BrokenEnvExitsOneAndSaysWhy) {
  const auto o = RunRlid(
      {"env", "check", "--command", "python3 " + kSource + "/tests/data/external/hostile.py dup_actions",
       "--seeds", "2"});
  EXPECT_EQ(o.code, 1) << o.out << o.err;
  EXPECT_NE(o.out.find("FAILED   determinism"), std::string::npos) << o.out;
  EXPECT_NE(o.out.find("duplicate action 0"), std::string::npos) << o.out;
  EXPECT_NE(o.err.find("conformance checks failed for env 'hostile'"), std::string::npos) << o.err;
}

TEST(EnvCheck, BuiltInJsonAndBadFlags) {
  const auto o = RunRlid({"env", "check", "--env", "maze", "--only", "menu", "--json"});
  ASSERT_EQ(o.code, 0) << o.err;
  const auto j = nlohmann::json::parse(o.out);
  EXPECT_EQ(j["env"], "maze");
  ASSERT_EQ(j["checks"].size(), 1u);
  EXPECT_EQ(j["checks"][0]["status"], "passed");
  EXPECT_GT(j["checks"][0]["covered"].get<int>(), 0);

  EXPECT_EQ(RunRlid({"env", "check", "--env", "maze", "--only", "menus"}).code, 2);
  EXPECT_EQ(RunRlid({"env", "check", "--command", "python3 'unclosed"}).code, 2);
  const auto missing = RunRlid({"env", "check", "--command", "/nonexistent/env --x"});
  EXPECT_EQ(missing.code, 3) << missing.err;
  EXPECT_NE(missing.err.find("cannot start"), std::string::npos) << missing.err;
}

}  // namespace
}  // namespace rlid::cli

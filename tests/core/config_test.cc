#include "core/config.h"

#include <gtest/gtest.h>

#include "core/error.h"

namespace rlid {
namespace {

struct LossCfg {
  double clip_high = 0.2;
  std::string aggregation = "token_mean";
  void Load(ConfigNode n) {
    n.Get("clip_high", clip_high, "upper clip");
    n.GetEnum("aggregation", aggregation, {"token_mean", "token_sum"}, "aggregation");
  }
};

TEST(Config, DefaultsOverridesAndResolved) {
  Config cfg = Config::FromString("[trainer.loss]\nclip_high = 0.28\n", "x.toml");
  cfg.ApplyOverride("trainer.loss.aggregation=token_sum");
  LossCfg c;
  c.Load(cfg.Root().Section("trainer").Section("loss"));
  cfg.CheckAllUsed();
  EXPECT_DOUBLE_EQ(c.clip_high, 0.28);
  EXPECT_EQ(c.aggregation, "token_sum");
  std::string resolved = cfg.ResolvedToml();
  EXPECT_NE(resolved.find("[trainer.loss]"), std::string::npos);
  EXPECT_NE(resolved.find("clip_high = 0.28"), std::string::npos);
  EXPECT_NE(resolved.find("aggregation = 'token_sum'"), std::string::npos) << resolved;
  // The resolved text is valid TOML that loads to the same values.
  Config again = Config::FromString(resolved, "resolved");
  LossCfg c2;
  c2.Load(again.Root().Section("trainer").Section("loss"));
  again.CheckAllUsed();
  EXPECT_EQ(c2.aggregation, "token_sum");
}

TEST(Config, UnknownKeyNamesFileLineAndNearest) {
  Config cfg = Config::FromString("[trainer.loss]\nclip_high = 0.3\nclip_hihg = 0.28\n", "exp.toml");
  LossCfg c;
  c.Load(cfg.Root().Section("trainer").Section("loss"));
  try {
    cfg.CheckAllUsed();
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("exp.toml:3:1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("did you mean 'clip_high'"), std::string::npos) << msg;
  }
}

TEST(Config, UnknownSectionAndTypeErrors) {
  Config cfg = Config::FromString("[trainr]\nx = 1\n", "a.toml");
  cfg.Root().Section("trainer");
  EXPECT_THROW(cfg.CheckAllUsed(), ConfigError);

  Config bad = Config::FromString("[trainer.loss]\nclip_high = 'big'\n", "b.toml");
  LossCfg c;
  EXPECT_THROW(c.Load(bad.Root().Section("trainer").Section("loss")), ConfigError);

  Config bad_enum = Config::FromString("[l]\naggregation = 'token_maen'\n", "c.toml");
  try {
    c.Load(bad_enum.Root().Section("l"));
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("token_mean"), std::string::npos);
  }
  EXPECT_THROW(Config::FromString("[a\n", "d.toml"), ConfigError);
  EXPECT_THROW(Config::FromFile("/nonexistent/x.toml"), IoError);
  Config cfg2;
  EXPECT_THROW(cfg2.ApplyOverride("novalue"), ConfigError);
}

TEST(Config, OverrideStringsAndNumbers) {
  Config cfg;
  cfg.ApplyOverride("env.name=maze");
  cfg.ApplyOverride("env.size=9");
  cfg.ApplyOverride("env.flag=true");
  std::string name;
  int size = 0;
  bool flag = false;
  auto env = cfg.Root().Section("env");
  env.Get("name", name, "");
  env.Get("size", size, "");
  env.Get("flag", flag, "");
  EXPECT_EQ(name, "maze");
  EXPECT_EQ(size, 9);
  EXPECT_TRUE(flag);
  cfg.ApplyOverride("env.bogus=1");
  try {
    cfg.CheckAllUsed();
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--set env.bogus"), std::string::npos) << e.what();
  }
}

TEST(Config, TableArrays) {
  Config cfg = Config::FromString("[[arms]]\nname='a'\n[[arms]]\nname='b'\nextra=1\n", "t.toml");
  auto arms = cfg.Root().TableArray("arms");
  ASSERT_EQ(arms.size(), 2u);
  std::string n;
  arms[0].Get("name", n, "");
  EXPECT_EQ(n, "a");
  arms[1].Get("name", n, "");
  EXPECT_EQ(n, "b");
  EXPECT_THROW(cfg.CheckAllUsed(), ConfigError);  // arms[1].extra
}

}  // namespace
}  // namespace rlid

namespace rlid {
namespace {

TEST(Config, ConvertedDocumentsCiteTheSourceWithoutTomlPositions) {
  // The TOML text was generated from another format: its line numbers mean nothing to the user.
  Config cfg = Config::FromConverted("[trainer.loss]\nclip_high = 0.3\nclip_hihg = 0.28\n", "case.json");
  LossCfg c;
  c.Load(cfg.Root().Section("trainer").Section("loss"));
  try {
    cfg.CheckAllUsed();
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.find("case.json:3"), std::string::npos) << msg;
    EXPECT_NE(msg.find("case.json: unknown key 'trainer.loss.clip_hihg'"), std::string::npos) << msg;
  }
  Config bad = Config::FromConverted("[l]\naggregation = 'token_maen'\n", "case.json");
  try {
    c.Load(bad.Root().Section("l"));
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("case.json: ", 0), 0u) << e.what();
  }
}

}  // namespace
}  // namespace rlid

#include "core/config.h"

#include <fmt/format.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include <cmath>
#include <limits>

#include "core/error.h"
#include "core/strings.h"

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

enum class Colour { kRed, kDarkBlue };
constexpr auto Spellings(Colour) {
  return ModeNames<Colour>({{Colour::kRed, "red"}, {Colour::kDarkBlue, "dark_blue"}});
}

TEST(Config, ModesAreReadAsEnumsAndAnUnknownSpellingNamesTheChoices) {
  Config cfg = Config::FromString("[a]\nc = 'dark_blue'\nd = 'dark_bleu'\ne = 'red'\n", "m.toml");
  ConfigNode a = cfg.Root().Section("a");
  Colour c = Colour::kRed;
  a.GetEnum("c", c, "colour");
  EXPECT_EQ(c, Colour::kDarkBlue);
  EXPECT_EQ(NameOf(c), "dark_blue");
  Colour d = Colour::kRed;
  try {
    a.GetEnum("d", d, "colour");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("m.toml:3"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("did you mean 'dark_blue'"), std::string::npos) << e.what();
    EXPECT_NE(e.hint().find("red, dark_blue"), std::string::npos) << e.hint();
  }
  Colour e = Colour::kDarkBlue;  // a key that allows only some of the mode's values
  EXPECT_THROW(a.GetEnum("e", e, "colour", {Colour::kDarkBlue}), ConfigError);
  EXPECT_NE(cfg.ResolvedToml().find("c = 'dark_blue'"), std::string::npos) << cfg.ResolvedToml();
  EXPECT_EQ(RequireMode<Colour>("colour", "red"), Colour::kRed);
  EXPECT_THROW(RequireMode<Colour>("colour", "green"), ConfigError);
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

// Only regular files of bounded size are read: /dev/zero, a FIFO (whose open
// would block) and a directory are refused before reading, an oversized file
// too, and a good file still loads.
TEST(Config, FilesMustBeRegularAndBounded) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("rlid_config_files_{}", ::getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  auto error_of = [](const std::string& path) {
    try {
      Config::FromFile(path);
    } catch (const IoError& e) {
      return std::string(e.what());
    }
    return std::string("loaded");
  };
  EXPECT_NE(error_of("/dev/zero").find("not a regular file"), std::string::npos);
  EXPECT_NE(error_of(dir.string()).find("not a regular file"), std::string::npos);
  ASSERT_EQ(::mkfifo((dir / "fifo.toml").c_str(), 0644), 0);
  EXPECT_NE(error_of((dir / "fifo.toml").string()).find("not a regular file"), std::string::npos);
  {
    std::ofstream big(dir / "big.toml");
    big << "[run]\nname = \"x\"\n";
  }
  std::filesystem::resize_file(dir / "big.toml", Config::kMaxConfigBytes + 1);
  EXPECT_NE(error_of((dir / "big.toml").string()).find("limited to"), std::string::npos);
  std::ofstream(dir / "ok.toml") << "[run]\nname = \"x\"\n";
  EXPECT_EQ(error_of((dir / "ok.toml").string()), "loaded");
  std::filesystem::remove_all(dir);
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

// Found by fuzz/config_fuzz: ResolvedToml() wrote keys that need quotes bare
// ("x y = 1") and array-of-tables elements as "[compare.arm[0]]", neither of
// which is TOML, so a run's stored config could not be read back; root keys read
// after a section landed under that section's header.
TEST(Config, ResolvedTomlQuotesKeysAndWritesArraysOfTables) {
  Config cfg = Config::FromString(R"(top = 1
[compare]
seeds = [1, 2]
[[compare.arm]]
name = "a"
[[compare.arm]]
name = "b"
[compare.arm.extra]
k = 3
["x y"]
"k=v" = 2
"" = 4
)",
                                  "fuzz.toml");
  auto read = [](Config& c) {
    std::vector<std::string> out;
    ConfigNode compare = c.Root().Section("compare");
    std::vector<int64_t> seeds;
    compare.Get("seeds", seeds, "seeds");
    for (auto& arm : compare.TableArray("arm")) {
      std::string name;
      arm.Get("name", name, "arm name");
      int64_t k = 0;
      arm.Section("extra").Get("k", k, "extra");
      out.push_back(fmt::format("{}:{}", name, k));
    }
    int64_t kv = 0, empty = 0, top = 0;
    c.Root().Section("x y").Get("k=v", kv, "odd key");
    c.Root().Section("x y").Get("", empty, "empty key");
    c.Root().Get("top", top, "read after the sections");
    out.push_back(fmt::format("{} {} {} {}", seeds.size(), kv, empty, top));
    return out;
  };
  const std::vector<std::string> first = read(cfg);
  EXPECT_EQ(first, (std::vector<std::string>{"a:0", "b:3", "2 2 4 1"}));
  const std::string resolved = cfg.ResolvedToml();
  Config again;
  ASSERT_NO_THROW(again = Config::FromString(resolved, "resolved")) << resolved;
  EXPECT_EQ(read(again), first) << resolved;
}

// Found by fuzz/config_fuzz: an override with invalid UTF-8 created a key (or a
// string) that DocumentToml() and ResolvedToml() wrote as different text.
TEST(Config, OverridesMustBeUtf8) {
  Config cfg = Config::FromString("[env]\nname = 'bandit'\n", "x.toml");
  EXPECT_THROW(cfg.ApplyOverride("env.na\xECme=1"), ConfigError);
  EXPECT_THROW(cfg.ApplyOverride("env.name=\xff\xfe"), ConfigError);
  EXPECT_THROW(cfg.ApplyOverride("env.name=\xed\xa0\x80"), ConfigError);  // a surrogate
  cfg.ApplyOverride("env.name=caf\xc3\xa9");
  const Config again = Config::FromString(cfg.DocumentToml(), "doc");
  EXPECT_NE(cfg.DocumentToml().find("caf\xc3\xa9"), std::string::npos);
}

// Found by fuzz/config_fuzz: toml++ writes the keys "a'b" and "c<TAB>d" bare,
// so a document with such a key could not be read back from DocumentToml().
TEST(Config, KeysTomlCannotWriteBackAreRefused) {
  auto error = [](std::string_view text) -> std::string {
    try {
      Config::FromString(text, "x.toml");
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_EQ(error("\"a'b\" = 1\n"), "x.toml:1:1: key \"a'b\" cannot be written back as TOML");
  EXPECT_EQ(error("[t]\nx = 1\n[[t.arr]]\ny = [{\"'k\" = 2}]\n"),
            "x.toml:4:7: key \"'k\" cannot be written back as TOML");
  EXPECT_EQ(error("\"c\\td\" = 1\n"),
            "x.toml:1:1: key \"c\\u0009d\" cannot be written back as TOML");
  EXPECT_EQ(error("s = \"it's fine in a value\"\n\"x y\" = 1\n\"q\\\"\" = 2\n"), "");
  Config cfg;
  EXPECT_THROW(cfg.ApplyOverride("env.it's=1"), ConfigError);
  EXPECT_THROW(cfg.ApplyOverride("env.c\tlip_high=0.2"), ConfigError);
  cfg.ApplyOverride("env.name=it's");  // values may
  EXPECT_NO_THROW(Config::FromString(cfg.DocumentToml(), "doc"));
}

// A dotted key of 200k parts made toml++ build (and free, recursively) 200k nested tables:
// SIGSEGV. Nesting is bounded before anything recurses: in a file, under [env.params], in a
// --set key and in a --set value.
TEST(Config, DeepNestingIsAConfigError) {
  auto dotted = [](int parts) {
    std::string key = "a";
    for (int i = 1; i < parts; ++i) key += ".a";
    return key;
  };
  auto error = [](const std::function<void()>& f) -> std::string {
    try {
      f();
    } catch (const ConfigError& e) {
      return e.what();
    }
    return "";
  };
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / fmt::format("rlid_config_deep_{}", ::getpid());
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "deep.toml") << dotted(200'000) << " = 1\n";
  EXPECT_EQ(error([&] { Config::FromFile((dir / "deep.toml").string()); }),
            (dir / "deep.toml").string() + ":1: a dotted key has more than 64 parts");
  std::filesystem::remove_all(dir);
  EXPECT_EQ(error([&] { Config::FromString("[env.params]\n" + dotted(50'000) + " = 1\n", "x"); }),
            "x:2: a dotted key has more than 64 parts");
  EXPECT_EQ(error([&] { Config::FromString("[" + dotted(1000) + "]\n", "x"); }),
            "x:1: a dotted key has more than 64 parts");
  // Headers, dotted keys and inline values add up.
  EXPECT_NE(error([&] { Config::FromString("[" + dotted(40) + "]\n" + dotted(40) + " = 1\n", "x"); })
                .find("nest more than 64 levels"),
            std::string::npos);
  EXPECT_NE(error([&] {
              Config::FromString("v = " + std::string(100, '[') + std::string(100, ']'), "x");
            }).find("nest more than 64 levels"),
            std::string::npos);
  EXPECT_NE(error([&] { Config::FromString(std::string(2000, 'k') + " = 1\n", "x"); })
                .find("more than the 1024 allowed"),
            std::string::npos);
  Config cfg;
  EXPECT_NE(error([&] { cfg.ApplyOverride(dotted(200'000) + "=1"); }).find("more than 64 parts"),
            std::string::npos);
  EXPECT_NE(error([&] { cfg.ApplyOverride("env.params." + dotted(50'000) + "=1"); })
                .find("more than 64 parts"),
            std::string::npos);
  EXPECT_NE(error([&] { cfg.ApplyOverride("env.params.x={" + dotted(50'000) + "=1}"); })
                .find("more than 64 parts"),
            std::string::npos);
  EXPECT_NE(error([&] { cfg.ApplyOverride("env.params.x=" + std::string(100, '[') + std::string(100, ']')); })
                .find("nest more than 64 levels"),
            std::string::npos);
  // Within the bounds, and dots inside strings and comments are no keys.
  std::string fine = dotted(60) + " = 1\ns = \"" + dotted(1000) + "\"\nt = '" + dotted(1000) +
                     "'\nm = \"\"\"\n" + dotted(1000) + "\n\"\"\"\n# " + dotted(1000) +
                     "\nf = [1.5, 2e+3, 1979-05-27T07:32:00.999]\n";
  EXPECT_EQ(error([&] { Config::FromString(fine, "x"); }), "");
  EXPECT_EQ(error([&] { cfg.ApplyOverride("env.params." + dotted(60) + "=1"); }), "");
}

TEST(Strings, IsValidUtf8) {
  EXPECT_TRUE(IsValidUtf8(""));
  EXPECT_TRUE(IsValidUtf8("ascii \xc3\xa9 \xe6\x97\xa5 \xf0\x9f\x98\x80"));
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));          // overlong
  EXPECT_FALSE(IsValidUtf8("\xe0\x80\xaf"));      // overlong
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));      // surrogate
  EXPECT_FALSE(IsValidUtf8("\xf4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_FALSE(IsValidUtf8("\xc3"));              // truncated
  EXPECT_FALSE(IsValidUtf8("\x80"));
}

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

namespace rlid {
namespace {

// The message of the ConfigError `f` throws ("" when it throws none).
template <class F>
std::string ErrorOf(F&& f) {
  try {
    f();
  } catch (const ConfigError& e) {
    return std::string(e.what()) + "\n  hint: " + e.hint();
  }
  return "";
}

bool Has(const std::string& text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

// x as TOML float text.
std::string TomlFloat(double x) {
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  return fmt::format("{}", x);
}

TEST(Config, QuotedDottedKeyAtTheTopLevelIsUnknown) {
  // One key named "trainer.lr": its text equals the declared path trainer.lr.
  Config cfg = Config::FromString("\"trainer.lr\" = 1\n", "q.toml");
  double lr = 0.1;
  cfg.Root().Section("trainer").Get("lr", lr, "learning rate");
  EXPECT_DOUBLE_EQ(lr, 0.1);  // the quoted key did not set it
  std::string msg = ErrorOf([&] { cfg.CheckAllUsed(); });
  // At the value's position.
  EXPECT_TRUE(Has(msg, "q.toml:1:16: unknown key \"trainer.lr\" at the top level")) << msg;
  EXPECT_TRUE(Has(msg, "a quoted key with dots is one key named 'trainer.lr'")) << msg;
  EXPECT_TRUE(Has(msg, "write `[trainer]` then `lr = 1`, or `trainer.lr = 1` unquoted")) << msg;
}

TEST(Config, QuotedDottedKeysInSectionsAndTablesAreUnknown) {
  Config in_section = Config::FromString("[trainer]\n\"loss.clip_high\" = 0.3\n", "s.toml");
  double clip = 0.2;
  in_section.Root().Section("trainer").Section("loss").Get("clip_high", clip, "");
  std::string msg = ErrorOf([&] { in_section.CheckAllUsed(); });
  EXPECT_TRUE(Has(msg, "s.toml:2:20: unknown key \"loss.clip_high\" in [trainer]")) << msg;
  EXPECT_TRUE(Has(msg, "write `[trainer.loss]` then `clip_high = 0.3`")) << msg;

  Config table = Config::FromString("[\"trainer.loss\"]\nclip_high = 0.3\n", "t.toml");
  table.Root().Section("trainer").Section("loss").Get("clip_high", clip, "");
  msg = ErrorOf([&] { table.CheckAllUsed(); });
  EXPECT_TRUE(Has(msg, "t.toml:1:")) << msg;
  EXPECT_TRUE(Has(msg, "write `[trainer.loss]` unquoted")) << msg;

  // Unquoted dotted keys are nested tables and stay valid.
  Config plain = Config::FromString("trainer.lr = 1\n", "p.toml");
  double lr = 0.1;
  plain.Root().Section("trainer").Get("lr", lr, "");
  EXPECT_NO_THROW(plain.CheckAllUsed());
  EXPECT_DOUBLE_EQ(lr, 1.0);
}

TEST(Config, NonFiniteFloatsAreRejectedByDefault) {
  for (const char* text : {"nan", "inf", "-inf", "+nan"}) {
    Config cfg = Config::FromString(fmt::format("[trainer]\nlr = {}\n", text), "f.toml");
    double lr = 0.1;
    std::string msg = ErrorOf([&] { cfg.Root().Section("trainer").Get("lr", lr, "peak lr"); });
    EXPECT_TRUE(Has(msg, "f.toml:2:6: ")) << text << ": " << msg;
    EXPECT_TRUE(Has(msg, "'trainer.lr' must be a finite number, found ")) << text << ": " << msg;
  }
  Config cfg = Config::FromString("[trainer]\nlr = nan\n", "f.toml");
  double lr = 0.1;
  EXPECT_TRUE(Has(ErrorOf([&] { cfg.Root().Section("trainer").Get("lr", lr, ""); }),
                  "must be a finite number, found nan"));
  // Elements of float arrays as well.
  Config arr = Config::FromString("xs = [1.0, inf]\n", "a.toml");
  std::vector<double> xs;
  std::string msg = ErrorOf([&] { arr.Root().Get("xs", xs, ""); });
  EXPECT_TRUE(Has(msg, "'xs[1]' must be a finite number, found inf")) << msg;
}

// A table under the empty key at the root would have the root's path: its
// header was written as the parent of every section, and of itself
// (ResolvedToml() recursed without end; found by fuzz/config_fuzz). Reading
// it as a section is a ConfigError; an override must name a key.
TEST(Config, TheEmptyRootKeyIsNoSection) {
  Config c = Config::FromString("\"\" = {a = 1}\nb = 2\n[s]\nc = 3\n", "t.toml");
  EXPECT_THROW(c.Root().Section(""), ConfigError);
  EXPECT_THROW(c.Root().TableArray(""), ConfigError);
  int64_t b = 0, sc = 0;
  c.Root().Get("b", b, "b");
  c.Root().Section("s").Get("c", sc, "c");
  const std::string resolved = c.ResolvedToml();
  EXPECT_NE(resolved.find("[s]"), std::string::npos) << resolved;
  EXPECT_NO_THROW(Config::FromString(resolved, "resolved")) << resolved;
  try {
    c.ApplyOverride(" = {a = 1}");
    ADD_FAILURE() << "an override without a key was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("no key before '='"), std::string::npos) << e.what();
  }
}

TEST(Config, InfIsAcceptedOnlyWhereTheRangeAllowsIt) {
  Config cfg = Config::FromString("cap = inf\nlow = -inf\nbad = nan\n", "i.toml");
  double cap = 2.0, low = 0.0, bad = 0.0;
  cfg.Root().Get("cap", cap, "upper clamp", Range::Positive().AllowInf());
  EXPECT_TRUE(std::isinf(cap));
  std::string msg = ErrorOf([&] { cfg.Root().Get("low", low, "", Range::Positive().AllowInf()); });
  EXPECT_TRUE(Has(msg, "'low' must be > 0 (inf allowed), found -inf")) << msg;
  msg = ErrorOf([&] { cfg.Root().Get("bad", bad, "", Range::Any().AllowInf()); });
  EXPECT_TRUE(Has(msg, "'bad' must be a finite number, found nan")) << msg;
  EXPECT_TRUE(Has(cfg.ResolvedToml(), "cap = inf")) << cfg.ResolvedToml();
  EXPECT_TRUE(Has(cfg.ResolvedToml(), "# upper clamp, > 0 (inf allowed)")) << cfg.ResolvedToml();
}

TEST(Config, EveryRangeFormAcceptsItsBoundsAndNamesItsViolations) {
  struct Case {
    Range range;
    double inside, outside;
    const char* description;
  };
  const std::vector<Case> cases = {
      {Range::Any(), -1e300, std::nan(""), "a finite number"},
      {Range::AtLeast(2), 2, 1.5, ">= 2"},
      {Range::GreaterThan(1), 1.5, 1, "> 1"},
      {Range::AtMost(3), 3, 3.5, "<= 3"},
      {Range::AtMost(3).OpenHigh(), 2.5, 3, "< 3"},
      {Range::Closed(-1, 1), -1, 1.01, "in [-1, 1]"},
      {Range::Positive(), 1e-12, 0, "> 0"},
      {Range::NonNegative(), 0, -1e-12, ">= 0"},
      {Range::Unit(), 1, -0.5, "in [0, 1]"},
      {Range::Probability(), 0, 1.5, "in [0, 1]"},
      {Range::Unit().OpenHigh(), 0, 1, "in [0, 1)"},
      {Range::Unit().OpenLow(), 1, 0, "in (0, 1]"},
      {Range::Unit().OpenLow().OpenHigh(), 0.5, 1, "in (0, 1)"},
      {Range::GreaterThan(1).Or(0), 0, 0.5, "0 or > 1"},
      {Range::Positive().AllowInf(), std::numeric_limits<double>::infinity(), 0,
       "> 0 (inf allowed)"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.description);
    EXPECT_EQ(c.range.Describe(), c.description);
    EXPECT_TRUE(c.range.Contains(c.inside));
    EXPECT_FALSE(c.range.Contains(c.outside));
    Config ok = Config::FromConverted(fmt::format("[s]\nx = {}\n", TomlFloat(c.inside)), "ok");
    double x = 0;
    EXPECT_NO_THROW(ok.Root().Section("s").Get("x", x, "doc", c.range));
    EXPECT_EQ(x, c.inside);
    if (std::isnan(c.outside)) continue;
    Config bad = Config::FromString(fmt::format("[s]\n\nx = {}\n", TomlFloat(c.outside)), "r.toml");
    std::string msg = ErrorOf([&] { bad.Root().Section("s").Get("x", x, "doc", c.range); });
    // The position is the value's: line 3, column 5.
    EXPECT_TRUE(
        Has(msg, fmt::format("r.toml:3:5: 's.x' must be {}, found {}", c.description, c.outside)))
        << msg;
    EXPECT_TRUE(Has(msg, fmt::format("hint: s.x: doc, {}", c.description))) << msg;
  }
}

TEST(Config, NoValueIsInsideAnEmptyOrNanRange) {
  EXPECT_FALSE(Range::Any().Contains(std::nan("")));
  EXPECT_FALSE(Range::Any().AllowInf().Contains(std::nan("")));
  EXPECT_FALSE(Range::Any().Contains(std::numeric_limits<double>::infinity()));
  EXPECT_TRUE(Range::Any().AllowInf().Contains(-std::numeric_limits<double>::infinity()));
  EXPECT_FALSE(Range::Closed(1, 1).OpenHigh().Contains(1));
}

TEST(Config, IntegerRangesNameKeyRangeAndValue) {
  Config cfg = Config::FromString(
      "[env]\narms = 9\nsteps = -1\nseed = -3\nsmall = 3000000000\nsizes = [4, 0, 2]\n", "n.toml");
  ConfigNode env = cfg.Root().Section("env");
  int arms = 2;
  std::string msg = ErrorOf([&] { env.Get("arms", arms, "menu items", IntRange{2, 8}); });
  EXPECT_TRUE(Has(msg, "n.toml:2:8: 'env.arms' must be in [2, 8], found 9")) << msg;
  EXPECT_TRUE(Has(msg, "hint: env.arms: menu items, in [2, 8]")) << msg;
  int64_t steps = 5;
  msg = ErrorOf([&] { env.Get("steps", steps, "", IntRange::NonNegative()); });
  EXPECT_TRUE(Has(msg, "n.toml:3:9: 'env.steps' must be >= 0, found -1")) << msg;
  msg = ErrorOf([&] { env.Get("steps", steps, "", IntRange::Positive()); });
  EXPECT_TRUE(Has(msg, "'env.steps' must be >= 1, found -1")) << msg;
  uint64_t seed = 0;
  msg = ErrorOf([&] { env.Get("seed", seed, ""); });
  EXPECT_TRUE(Has(msg, "n.toml:4:8: 'env.seed' must be >= 0, found -3")) << msg;
  EXPECT_TRUE(Has(msg, "hint: env.seed: >= 0")) << msg;  // no doc: the hint is the range
  int small = 0;
  msg = ErrorOf([&] { env.Get("small", small, ""); });
  EXPECT_TRUE(Has(msg, "'env.small' must be in [-2147483648, 2147483647], found 3000000000"))
      << msg;
  std::vector<int64_t> sizes;
  msg = ErrorOf([&] { env.Get("sizes", sizes, "", IntRange::Positive()); });
  EXPECT_TRUE(Has(msg, "n.toml:6:9: 'env.sizes[1]' must be >= 1, found 0")) << msg;
  EXPECT_EQ(IntRange::Closed(1, 4).Describe(), "in [1, 4]");
  EXPECT_EQ(IntRange{.max = 5}.Describe(), "<= 5");
  EXPECT_EQ(IntRange::Any().Describe(), "an integer");
  // In range: read, and the range is part of the resolved doc.
  Config good = Config::FromString("[env]\narms = 8\n", "g.toml");
  good.Root().Section("env").Get("arms", arms, "menu items", IntRange{2, 8});
  EXPECT_EQ(arms, 8);
  EXPECT_TRUE(Has(good.ResolvedToml(), "arms = 8  # menu items, in [2, 8]")) << good.ResolvedToml();
}

TEST(Config, RangesApplyToDefaultsAndOverrides) {
  Config cfg;
  cfg.ApplyOverride("trainer.adam_beta1=2");
  double beta1 = 0.9;
  std::string msg = ErrorOf([&] {
    cfg.Root().Section("trainer").Get("adam_beta1", beta1, "AdamW beta1", Range::Unit().OpenHigh());
  });
  EXPECT_TRUE(Has(msg, "--set trainer.adam_beta1: 'trainer.adam_beta1' must be in [0, 1), found 2"))
      << msg;
  // A default outside the stated range is a bug the getter reports too.
  Config empty = Config::FromString("", "e.toml");
  int64_t n = 0;
  msg = ErrorOf([&] { empty.Root().Get("n", n, "", IntRange::Positive()); });
  EXPECT_TRUE(Has(msg, "e.toml: 'n' must be >= 1, found 0")) << msg;
  std::vector<double> fracs = {0.5, 1.5};
  msg = ErrorOf([&] { empty.Root().Get("fracs", fracs, "", Range::Unit()); });
  EXPECT_TRUE(Has(msg, "'fracs[1]' must be in [0, 1], found 1.5")) << msg;
}

}  // namespace
}  // namespace rlid

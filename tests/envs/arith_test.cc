// arith: the pinned instance, candidates that differ from the sum only by
// carry mistakes (same units digit, same length, all distinct), the worked
// reasoning ends with the sum and adds up column by column, realisations compile,
// and parameters that cannot fill a menu are refused.
#include <gtest/gtest.h>

#include <set>
#include <sstream>

#include "core/error.h"
#include "core/strings.h"
#include "envs/api/env.h"
#include "envs/api/reasoning_oracle.h"
#include "tests/envs/env_test_util.h"

namespace rlid::envs {
namespace {

// "8 6 1" -> 861.
uint64_t Parse(const std::string& spaced) {
  uint64_t v = 0;
  for (char c : spaced)
    if (c >= '0' && c <= '9') v = v * 10 + static_cast<uint64_t>(c - '0');
  return v;
}

// The numbers in "Compute 4 7 2 + 3 8 9."
std::vector<uint64_t> Terms(const std::string& obs) {
  std::vector<uint64_t> out;
  std::string body = obs.substr(std::string("Compute ").size());
  body.pop_back();  // '.'
  size_t at = 0;
  while (true) {
    size_t plus = body.find(" + ", at);
    out.push_back(Parse(body.substr(at, plus - at)));
    if (plus == std::string::npos) break;
    at = plus + 3;
  }
  return out;
}

TEST(Arith, PinnedInstance) {
  auto env = MakeEnv("arith");
  auto s = env->NewState(0);
  EXPECT_EQ(s->Observation(), "Compute 1 6 1 + 6 5 0.");
  const auto menu = s->CompileMenu();
  ASSERT_EQ(menu.items.size(), 4u);
  std::vector<std::string> commands;
  for (const auto& item : menu.items) commands.push_back(item.label + ") " + item.command);
  EXPECT_EQ(Join(commands, " | "),
            "A) answer 8 1 1 | B) answer 8 0 1 | C) answer 9 1 1 | D) answer 7 1 1");
  EXPECT_EQ(dynamic_cast<ReasoningOracle*>(s.get())->OracleReasoning(),
            "1 + 0 = 1 ; 6 + 5 = 1 1 ; 1 + 6 + 1 = 8 ; so 8 1 1");
  // The command, its realisations and the afterstate name the same number.
  const auto& it = menu.items[0];
  const std::string n = it.command.substr(std::string("answer ").size());
  EXPECT_EQ(it.afterstate, "You answer " + n + ".");
  std::set<std::string> realisations(it.realisations.begin(), it.realisations.end());
  EXPECT_TRUE(realisations.count(n)) << n;
  EXPECT_TRUE(realisations.count(std::to_string(Parse(n)))) << n;
  EXPECT_TRUE(realisations.count("the answer is " + n)) << n;
}

TEST(Arith, CandidatesDifferOnlyByCarryMistakes) {
  for (const std::vector<std::string>& params :
       {std::vector<std::string>{}, {"digits=4", "operands=3", "choices=6"}, {"digits=5", "choices=8"}}) {
    auto env = MakeEnv("arith", params);
    for (uint64_t seed = 0; seed < 300; ++seed) {
      auto s = env->NewState(seed);
      const auto terms = Terms(s->Observation());
      uint64_t sum = 0;
      for (uint64_t t : terms) sum += t;
      const auto menu = s->CompileMenu();
      std::set<uint64_t> values;
      int correct = 0;
      for (const auto& it : menu.items) {
        const uint64_t v = Parse(it.command);
        values.insert(v);
        correct += v == sum;
        EXPECT_EQ(v % 10, sum % 10) << "seed " << seed << ": the units digit gives it away";
        EXPECT_EQ(std::to_string(v).size(), std::to_string(sum).size()) << "seed " << seed;
        EXPECT_EQ((v > sum ? v - sum : sum - v) % 10, 0u);
      }
      EXPECT_EQ(correct, 1) << "seed " << seed;
      EXPECT_EQ(values.size(), menu.items.size()) << "seed " << seed << ": duplicate candidates";
      // The oracle picks the sum, and picking it pays 1.
      auto* oracle = dynamic_cast<OracleState*>(s.get());
      ASSERT_NE(oracle, nullptr);
      const auto best = oracle->OptimalActions();
      ASSERT_EQ(best.size(), 1u);
      EXPECT_EQ(Parse(menu.items[menu.IndexOfAction(best[0])].command), sum);
      auto outcome = s->Apply(best[0]);
      EXPECT_TRUE(outcome.success);
      EXPECT_EQ(outcome.reward, 1.0);
    }
  }
}

// Every column line "a + b (+ c) = s" adds up, the carries chain, and the
// last word is the sum; spaced and unspaced.
TEST(Arith, ReasoningWorksTheColumnsOut) {
  for (const char* spaced : {"spaced=true", "spaced=false"}) {
    auto env = MakeEnv("arith", {"digits=4", "operands=3", spaced});
    for (uint64_t seed = 0; seed < 200; ++seed) {
      auto s = env->NewState(seed);
      auto* r = dynamic_cast<ReasoningOracle*>(s.get());
      ASSERT_NE(r, nullptr);
      const std::string text = r->OracleReasoning();
      EXPECT_EQ(text.find('\n'), std::string::npos);
      const auto terms = Terms(s->Observation());
      uint64_t sum = 0;
      for (uint64_t t : terms) sum += t;
      const auto so = text.rfind(" ; so ");
      ASSERT_NE(so, std::string::npos) << text;
      EXPECT_EQ(Parse(text.substr(so + 6)), sum) << text;
      std::istringstream columns(text.substr(0, so));
      std::string line;
      int k = 0;
      uint64_t carry = 0, pow = 1, rebuilt = 0;
      for (std::string col; std::getline(columns, col, ';'); ++k, pow *= 10) {
        const auto eq = col.find('=');
        ASSERT_NE(eq, std::string::npos) << col;
        uint64_t lhs = 0;
        int addends = 0;
        std::istringstream in(col.substr(0, eq));
        for (std::string w; in >> w;)
          if (w != "+") lhs += std::stoull(w), ++addends;
        const uint64_t rhs = Parse(col.substr(eq + 1));
        EXPECT_EQ(lhs, rhs) << col;
        EXPECT_EQ(addends, 3 + (carry > 0 ? 1 : 0)) << col;
        rebuilt += (rhs % 10) * pow;
        carry = rhs / 10;
      }
      EXPECT_EQ(k, 4);
      EXPECT_EQ(rebuilt + carry * pow, sum) << text;
      s->Apply(dynamic_cast<OracleState*>(s.get())->OptimalActions()[0]);
      EXPECT_THROW(r->OracleReasoning(), Error);
    }
  }
}

TEST(Arith, RealisationsCompileAndNearMissesDoNot) {
  auto env = MakeEnv("arith", {"spaced=true"});
  auto s = env->NewState(3);
  const auto menu = s->CompileMenu();
  for (size_t i = 0; i < menu.items.size(); ++i) {
    for (const auto& w : menu.items[i].realisations) {
      auto r = s->Compile(w);
      ASSERT_TRUE(r.valid()) << w << ": " << r.reason;
      EXPECT_EQ(r.action, menu.items[i].action) << w;
    }
  }
  const uint64_t v = Parse(menu.items[0].command);
  EXPECT_FALSE(s->Compile(std::to_string(v + 1)).valid());
  EXPECT_FALSE(s->Compile("answer").valid());
}

TEST(Arith, ParametersThatCannotFillAMenuAreRefused) {
  EXPECT_THROW(MakeEnv("arith", {"digits=2", "choices=4"}), ConfigError);
  EXPECT_NO_THROW(MakeEnv("arith", {"digits=2", "choices=2"}));
  EXPECT_THROW(MakeEnv("arith", {"digits=1"}), ConfigError);
  EXPECT_THROW(MakeEnv("arith", {"operands=9"}), ConfigError);
  // The smallest sums still fill the largest menu the factory allows.
  auto env = MakeEnv("arith", {"digits=3", "choices=4", "operands=2"});
  for (uint64_t seed = 0; seed < 2000; ++seed) EXPECT_EQ(env->NewState(seed)->CompileMenu().items.size(), 4u);
}

}  // namespace
}  // namespace rlid::envs

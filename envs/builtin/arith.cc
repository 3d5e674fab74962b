// arith: multi-digit addition as a menu decision, the env where a scratchpad
// matters. "Compute 4 7 2 + 3 8 9." offers the sum among distractors that
// differ from it by a carry mistake (± 10^k, k >= 1), so every candidate has
// the right units digit and only working through the carries tells them
// apart. One decision per episode. The oracle also writes the column-by-column
// working (ReasoningOracle), the warm start of policies that think first.
#include <fmt/format.h>

#include <algorithm>
#include <cstdint>
#include <set>

#include "core/check.h"
#include "core/hash.h"
#include "core/rng.h"
#include "core/strings.h"
#include "envs/api/menu_state.h"
#include "envs/api/reasoning_oracle.h"
#include "envs/api/simple_env.h"

namespace rlid::envs {
namespace {

struct ArithParams {
  int digits = 3;    // digits of each operand (its leading digit is not 0)
  int operands = 2;  // numbers to add
  int choices = 4;   // menu items: the sum and choices-1 carry mistakes
  bool spaced = true;  // write numbers digit by digit ("4 7 2"): one token per digit
};

uint64_t Pow10(int k) {
  uint64_t p = 1;
  while (k-- > 0) p *= 10;
  return p;
}

// The decimal digits of n, most significant first.
std::vector<int> Digits(uint64_t n) {
  std::vector<int> d;
  do {
    d.push_back(static_cast<int>(n % 10));
    n /= 10;
  } while (n > 0);
  std::reverse(d.begin(), d.end());
  return d;
}

class ArithState final : public MenuState, public OracleState, public ReasoningOracle {
 public:
  ArithState(const ArithParams& p, uint64_t seed) : MenuState(1), p_(p) {
    Rng rng = Rng::Stream(seed, "arith");
    const uint64_t lo = Pow10(p.digits - 1), hi = Pow10(p.digits);
    for (int i = 0; i < p.operands; ++i) {
      terms_.push_back(lo + rng.UniformInt(hi - lo));
      sum_ += terms_.back();
    }
    // Carry mistakes: a column's carry dropped or added (± 10^k) or two of
    // them (± 10^k ± 10^j), kept positive and with the sum's digit count, so
    // that neither the units digit nor the length gives the answer away.
    const int len = static_cast<int>(Digits(sum_).size());
    std::vector<uint64_t> single, twice;
    auto add = [&](std::vector<uint64_t>& to, int64_t delta) {
      const int64_t v = static_cast<int64_t>(sum_) + delta;
      if (v > 0 && static_cast<int>(Digits(static_cast<uint64_t>(v)).size()) == len &&
          static_cast<uint64_t>(v) != sum_)
        to.push_back(static_cast<uint64_t>(v));
    };
    for (int k = 1; k < len; ++k)
      for (int sign : {-1, 1}) add(single, sign * static_cast<int64_t>(Pow10(k)));
    for (int k = 1; k < len; ++k)
      for (int j = k + 1; j < len; ++j)
        for (int sk : {-1, 1})
          for (int sj : {-1, 1})
            add(twice, sk * static_cast<int64_t>(Pow10(k)) + sj * static_cast<int64_t>(Pow10(j)));
    rng.Shuffle(single);
    rng.Shuffle(twice);
    std::vector<uint64_t> pool = single;
    pool.insert(pool.end(), twice.begin(), twice.end());
    RLID_CHECK(static_cast<int>(pool.size()) >= p.choices - 1,
               "arith: too few carry mistakes for the menu (checked by the factory)");
    candidates_ = {sum_};
    candidates_.insert(candidates_.end(), pool.begin(), pool.begin() + (p.choices - 1));
    rng.Shuffle(candidates_);
  }

  std::string Observation() const override {
    if (chosen_ >= 0) return fmt::format("You answered {}.", Number(candidates_[chosen_]));
    std::vector<std::string> parts;
    for (uint64_t t : terms_) parts.push_back(Number(t));
    return fmt::format("Compute {}.", Join(parts, " + "));
  }
  std::unique_ptr<State> Clone() const override { return std::make_unique<ArithState>(*this); }
  uint64_t Hash() const override {
    uint64_t h = HashCombine(sum_, chosen_ + 1);
    for (uint64_t t : terms_) h = HashCombine(h, t);
    for (uint64_t c : candidates_) h = HashCombine(h, c);
    return h;
  }
  std::vector<ActionId> OptimalActions() const override {
    if (IsTerminal()) return {};
    return {CorrectAction()};
  }
  double OptimalReturn() const override { return IsTerminal() ? 0.0 : 1.0; }

  // Column by column from the right: "2 + 9 = 1 1 ; 7 + 8 + 1 = 1 6 ;
  // 4 + 3 + 1 = 8 ; so 8 6 1" (carries written as the last addend; digits
  // spaced or not as the numbers are). One line.
  std::string OracleReasoning() const override {
    RLID_CHECK(!IsTerminal(), "arith: no reasoning after the answer");
    std::vector<std::string> steps;
    uint64_t carry = 0;
    for (int k = 0; k < p_.digits; ++k) {
      std::vector<std::string> addends;
      uint64_t column = carry;
      for (uint64_t t : terms_) {
        const uint64_t d = (t / Pow10(k)) % 10;
        column += d;
        addends.push_back(std::to_string(d));
      }
      if (carry > 0) addends.push_back(std::to_string(carry));
      steps.push_back(fmt::format("{} = {}", Join(addends, " + "), Number(column)));
      carry = column / 10;
    }
    return Join(steps, " ; ") + " ; so " + Number(sum_);
  }

  uint64_t sum() const { return sum_; }

 protected:
  std::vector<ActionSpec> Actions() const override {
    std::vector<ActionSpec> out;
    for (int i = 0; i < static_cast<int>(candidates_.size()); ++i) {
      const std::string n = Number(candidates_[i]), plain = std::to_string(candidates_[i]);
      std::vector<std::string> aliases = {n, "the answer is " + n};
      if (plain != n) aliases.insert(aliases.begin() + 1, plain);
      out.push_back({i, "answer " + n, aliases});
    }
    return out;
  }
  StepOutcome Transition(ActionId action) override {
    chosen_ = action;
    const bool ok = action == CorrectAction();
    return {ok ? 1.0 : 0.0, /*terminal=*/true, /*success=*/ok, false};
  }

 public:
  std::string AfterstateText() const override {
    if (chosen_ < 0) return Observation();
    return fmt::format("You answer {}.", Number(candidates_[chosen_]));
  }

 private:
  std::string Number(uint64_t n) const {
    if (!p_.spaced) return std::to_string(n);
    std::vector<std::string> d;
    for (int x : Digits(n)) d.push_back(std::to_string(x));
    return Join(d, " ");
  }
  ActionId CorrectAction() const {
    return static_cast<ActionId>(std::find(candidates_.begin(), candidates_.end(), sum_) -
                                 candidates_.begin());
  }

  ArithParams p_;
  std::vector<uint64_t> terms_, candidates_;
  uint64_t sum_ = 0;
  int chosen_ = -1;
};

// Carry mistakes every instance has for `digits`-digit operands: the sum has
// len >= digits digits, and for each column k in 1..len-1 at least one of
// ± 10^k keeps the digit count (both fail only if 9 x 10^(len-1) < 2 x 10^k),
// and likewise for each pair of columns one of ± (10^k + 10^j).
int MistakesAtLeast(int digits) { return (digits - 1) + (digits - 1) * (digits - 2) / 2; }

std::unique_ptr<Env> MakeArithEnv(const ArithParams& p) {
  return std::make_unique<SimpleEnv>(
      EnvInfo{"arith", "multi-digit addition: pick the sum among carry mistakes", 1, true},
      "Add the numbers and answer with their sum. The options differ only where a carry goes "
      "wrong, so work through the columns from the right.",
      [p](uint64_t seed) -> std::unique_ptr<State> {
        return std::make_unique<ArithState>(p, seed);
      });
}

const BuiltInEnv kRegister(
    "arith", "multi-digit addition among carry mistakes (one decision; reasoning helps)",
    [](ConfigNode c) {
      ArithParams p;
      c.Get("digits", p.digits, "digits of each operand", IntRange{2, 12});
      c.Get("operands", p.operands, "numbers to add", IntRange{2, 6});
      c.Get("choices", p.choices, "menu items: the sum and choices-1 carry mistakes",
            IntRange{2, 8});
      c.Get("spaced", p.spaced, "write numbers digit by digit (\"4 7 2\")");
      if (MistakesAtLeast(p.digits) < p.choices - 1)
        throw ConfigError(
            fmt::format("arith: {} digits leave too few carry mistakes for {} choices", p.digits,
                        p.choices),
            fmt::format("use at most {} choices or more digits", MistakesAtLeast(p.digits) + 1));
      return MakeArithEnv(p);
    });

}  // namespace
}  // namespace rlid::envs

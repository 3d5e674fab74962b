// bandit: a contextual k-armed bandit with a text context. A customer states
// a need ("Mia is thirsty after a long run."); recommending the item that
// meets it pays 1, anything else pays `wrong_reward`. One decision per
// episode. The smallest env and the target of the learning tests.
#include <fmt/format.h>

#include <array>

#include "core/hash.h"
#include "core/rng.h"
#include "envs/api/menu_state.h"
#include "envs/api/simple_env.h"

namespace rlid::envs {
namespace {

struct Arm {
  const char* item;
  std::array<const char*, 3> needs;  // cue phrases that make this arm the right one
};

constexpr std::array<Arm, 8> kArms = {{
    {"water", {"is thirsty after a long run", "has a dry throat", "feels parched"}},
    {"umbrella",
     {"sees dark rain clouds", "is about to walk out into a storm", "hates getting wet"}},
    {"coat", {"is shivering in the cold", "is going out into the snow", "feels chilly"}},
    {"sunscreen",
     {"is heading to a sunny beach", "burns easily in the sun", "will sit in the sun all day"}},
    {"map", {"is lost in a new city", "does not know the way", "needs directions"}},
    {"lamp", {"wants to read at night", "sits in a dark room", "cannot see in the dark"}},
    {"bandage", {"has a cut on the hand", "scraped a knee", "is bleeding a little"}},
    {"snack", {"is very hungry", "skipped lunch", "has an empty stomach"}},
}};
constexpr std::array<const char*, 8> kNames = {"Mia", "Leo",  "Ava",  "Noah",
                                               "Zoe", "Omar", "Ines", "Ravi"};
constexpr std::array<const char*, 4> kPlaces = {"at the market", "at the station", "in the park",
                                                "at the harbour"};

struct BanditParams {
  int arms = 4;               // number of items on the menu (2..8)
  double wrong_reward = 0.0;  // reward for a wrong recommendation
  bool shuffle = true;        // menu order varies with the seed (else fixed item order)
};

class BanditState final : public MenuState, public OracleState {
 public:
  BanditState(const BanditParams& p, uint64_t seed) : MenuState(1), params_(p) {
    Rng rng = Rng::Stream(seed, "bandit");
    target_ = static_cast<int>(rng.UniformInt(p.arms));
    cue_ = static_cast<int>(rng.UniformInt(3));
    name_ = static_cast<int>(rng.UniformInt(kNames.size()));
    place_ = static_cast<int>(rng.UniformInt(kPlaces.size()));
    order_.resize(p.arms);
    for (int i = 0; i < p.arms; ++i) order_[i] = i;
    if (p.shuffle) rng.Shuffle(order_);
  }

  std::string Observation() const override {
    if (chosen_ >= 0)
      return fmt::format("You recommended the {} to {}.", kArms[chosen_].item, kNames[name_]);
    return fmt::format("{} {} {}. Recommend one item.", kNames[name_], kArms[target_].needs[cue_],
                       kPlaces[place_]);
  }
  std::unique_ptr<State> Clone() const override { return std::make_unique<BanditState>(*this); }
  uint64_t Hash() const override {
    return HashCombine(HashCombine(HashCombine(target_, cue_), name_ * 16 + place_), chosen_ + 1);
  }
  std::vector<ActionId> OptimalActions() const override {
    if (IsTerminal()) return {};
    return {target_};
  }
  double OptimalReturn() const override { return IsTerminal() ? 0.0 : 1.0; }

 protected:
  std::vector<ActionSpec> Actions() const override {
    std::vector<ActionSpec> out;
    for (int a : order_) {
      std::string item = kArms[a].item;
      out.push_back({a, "recommend " + item, {item, "the " + item, "give " + item}});
    }
    return out;
  }
  StepOutcome Transition(ActionId action) override {
    chosen_ = action;
    bool ok = action == target_;
    return {ok ? 1.0 : params_.wrong_reward, /*terminal=*/true, /*success=*/ok, false};
  }

 public:
  std::string AfterstateText() const override {
    if (chosen_ < 0) return Observation();
    return fmt::format("{} gets the {}.", kNames[name_], kArms[chosen_].item);
  }

 private:
  BanditParams params_;
  int target_ = 0, cue_ = 0, name_ = 0, place_ = 0;
  int chosen_ = -1;
  std::vector<int> order_;
};

// The env: its facts, its rules, and a state per seed.
std::unique_ptr<Env> MakeBanditEnv(const BanditParams& p) {
  return std::make_unique<SimpleEnv>(
      EnvInfo{"bandit", "contextual k-armed bandit: recommend the item a customer needs", 1, true},
      "You run a small shop. Recommend the item that meets the customer's need.",
      [p](uint64_t seed) -> std::unique_ptr<State> {
        return std::make_unique<BanditState>(p, seed);
      });
}

const BuiltInEnv kRegister(
    "bandit", "contextual k-armed bandit with a text context (one decision)", [](ConfigNode c) {
      BanditParams p;
      c.Get("arms", p.arms, "number of items on the menu",
            IntRange{2, static_cast<int64_t>(kArms.size())});
      c.Get("wrong_reward", p.wrong_reward, "reward for a wrong recommendation");
      c.Get("shuffle", p.shuffle, "menu order varies with the seed");
      return MakeBanditEnv(p);
    });

}  // namespace
}  // namespace rlid::envs

#include "envs/api/conformance.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <regex>
#include <set>

#include "core/clock.h"
#include "core/error.h"
#include "core/interrupt.h"
#include "core/log.h"
#include "core/rng.h"
#include "core/strings.h"
#include "envs/api/menu_state.h"
#include "envs/api/state_graph.h"

namespace rlid::envs {

const char* StatusName(ConformanceResult::Status s) {
  switch (s) {
    case ConformanceResult::Status::kPassed: return "passed";
    case ConformanceResult::Status::kFailed: return "FAILED";
    case ConformanceResult::Status::kSkipped: return "skipped";
  }
  return "?";
}

namespace {

using Status = ConformanceResult::Status;

// Collects the failures of one check, and once each, how to fix them.
class Report {
 public:
  Report(ConformanceResult& r, const ConformanceOptions& o) : r_(r), max_(o.max_failures) {}
  void Fail(std::string message, std::string_view fix = {}) {
    r_.status = Status::kFailed;
    if (static_cast<int>(r_.failures.size()) < max_) r_.failures.push_back(std::move(message));
    ++r_.failure_count;
    if (!fix.empty() && std::find(r_.fixes.begin(), r_.fixes.end(), fix) == r_.fixes.end())
      r_.fixes.emplace_back(fix);
  }
  // Fails with message() when !ok; returns ok.
  template <class F>
  bool Expect(bool ok, std::string_view fix, F&& message) {
    ThrowIfInterrupted();  // every check asserts often: a stop signal ends it here
    if (!ok) Fail(message(), fix);
    return ok;
  }

 private:
  ConformanceResult& r_;
  int max_;
};

// How to fix what a check found, as the env's author would do it (the
// protocol's field names, and the Python helper's where it differs).
constexpr std::string_view kFixInfo =
    "send name, summary, step_limit and instructions in the hello reply (Python helper: the "
    "class attributes of your Env)";
constexpr std::string_view kFixDeterminism =
    "make reset(seed) depend only on the seed and step() only on the state and the action: draw "
    "randomness from a generator made from the seed (random.Random(seed)), never from the global "
    "random module, the clock, or the order of a set";
constexpr std::string_view kFixVariety =
    "build each instance from its seed (random.Random(seed)); instances that differ must differ in "
    "their task or observation text, or in the 'state_hash' you send";
constexpr std::string_view kFixMenuPure =
    "building the menu must not change the state: compute what an action leads to on a copy";
constexpr std::string_view kFixCopy =
    "a copy ('clone', or a replay of the actions from reset) must equal its original and share "
    "no mutable data with it (Python helper: clone() deep-copies the state; override it if your "
    "state holds something deepcopy cannot copy)";
constexpr std::string_view kFixTerminal =
    "a terminal state offers no actions: send no menu once 'terminal' is true";
constexpr std::string_view kFixMenu =
    "give each menu item its own action id, and each command and realisation to one action only";
constexpr std::string_view kFixAfterstate =
    "an item's afterstate must be the state its action leads to. Send 'afterstate' as that "
    "state's full observation, or, for a short afterstate text, also send 'afterstate_hash': the "
    "'state_hash' of the state the action leads to (Python helper: Action(id, command, "
    "afterstate=text, afterstate_hash=self.state_hash(next_state)), or leave afterstate out and "
    "the helper computes both)";
constexpr std::string_view kFixRealisation =
    "every label, command and realisation must compile to its action: make each realisation a "
    "phrase of its own that no other item's realisation contains (docs/free_text.md has the "
    "grammar); an env compiler ('compile') is asked only about text the menu grammar rejects";
constexpr std::string_view kFixGarbage =
    "your compile_text must reject text that names no action: raise Invalid(\"reason\") (in the "
    "protocol: reply {\"invalid\": \"reason\"}), and return only actions on the current menu";
constexpr std::string_view kFixOracle =
    "oracle(state) must name at least one optimal action in every non-terminal state, following "
    "its first action must end in success (Step(..., success=True)), and the return it predicts "
    "(ids, return) must be what that play collects";
constexpr std::string_view kFixGraph =
    "the oracle's return must be the best return reachable: its actions are not optimal, or the "
    "return it predicts is wrong";
constexpr std::string_view kFixSplits =
    "use the whole seed: seeds 2i (train) and 2i+1 (test) must give different instances, so do "
    "not divide or shift the seed before using it";
// Conditions only a bug in rlid or a built-in env can break.
constexpr std::string_view kFixBuiltIn = {};

std::string Quoted(std::string_view s) {
  std::string out = "'";
  for (char c : s.substr(0, 80)) {
    if (c == '\n') out += "\\n";
    else if (static_cast<unsigned char>(c) < 0x20) out += fmt::format("\\x{:02x}", c);
    else out += c;
  }
  if (s.size() > 80) out += "...";
  return out + "'";
}

struct Traj {
  std::vector<std::string> obs;
  std::vector<uint64_t> hashes;
  std::vector<double> rewards;
  bool operator==(const Traj&) const = default;
};

Traj RandomPlay(const Env& env, uint64_t seed, uint64_t play_seed, Report& rep) {
  auto s = env.NewState(seed);
  Rng rng(play_seed);
  Traj t;
  const int limit = env.Info().step_limit;
  while (!s->IsTerminal()) {
    t.obs.push_back(s->Observation());
    t.hashes.push_back(s->Hash());
    auto legal = s->LegalActions();
    if (!rep.Expect(!legal.empty(), kFixBuiltIn, [&] {
          return fmt::format("seed {} step {}: a non-terminal state without actions", seed,
                             s->StepCount());
        }))
      break;
    auto out = s->Apply(legal[rng.UniformInt(legal.size())]);
    rep.Expect(std::isfinite(out.reward), kFixBuiltIn, [&] {
      return fmt::format("seed {} step {}: non-finite reward {}", seed, s->StepCount(), out.reward);
    });
    t.rewards.push_back(out.reward);
    if (!rep.Expect(s->StepCount() <= limit, kFixBuiltIn, [&] {
          return fmt::format("seed {}: {} steps played, past the step limit {}", seed,
                             s->StepCount(), limit);
        }))
      break;
  }
  t.obs.push_back(s->Observation());
  return t;
}

// Plays every seed 0..n-1 with seeded random actions, calling visit(state, seed)
// before each action.
template <class Visit>
void PlayAll(const Env& env, const ConformanceOptions& o, uint64_t rng_offset, Visit&& visit) {
  for (uint64_t seed = 0; seed < static_cast<uint64_t>(o.seeds); ++seed) {
    auto s = env.NewState(seed);
    Rng rng(seed + rng_offset);
    while (!s->IsTerminal()) {
      ThrowIfInterrupted();
      if (!visit(*s, seed)) break;
      auto legal = s->LegalActions();
      if (legal.empty()) break;
      s->Apply(legal[rng.UniformInt(legal.size())]);
    }
  }
}

void CheckInfo(const Env& env, const ConformanceOptions&, Report& rep, ConformanceResult&) {
  const auto info = env.Info();
  rep.Expect(!info.name.empty(), kFixInfo, [] { return std::string("Info().name is empty"); });
  rep.Expect(!info.summary.empty(), kFixInfo,
             [] { return std::string("Info().summary is empty"); });
  rep.Expect(info.step_limit > 0, kFixInfo, [&] {
    return fmt::format("Info().step_limit must be > 0, found {}", info.step_limit);
  });
  rep.Expect(!env.Instructions().empty(), kFixInfo, [] {
    return std::string("Instructions() is empty (the rules shown in every prompt)");
  });
}

void CheckDeterminism(const Env& env, const ConformanceOptions& o, Report& rep,
                      ConformanceResult& r) {
  for (uint64_t seed = 0; seed < static_cast<uint64_t>(o.seeds); ++seed) {
    const Traj a = RandomPlay(env, seed, 99 + seed, rep), b = RandomPlay(env, seed, 99 + seed, rep);
    rep.Expect(a == b, kFixDeterminism, [&] {
      size_t t = 0;
      while (t < a.obs.size() && t < b.obs.size() && a.obs[t] == b.obs[t] &&
             (t >= a.hashes.size() || t >= b.hashes.size() || a.hashes[t] == b.hashes[t]))
        ++t;
      return fmt::format("seed {}: the same seed and actions gave different episodes (first "
                         "difference at step {}: {} vs {})",
                         seed, t, t < a.obs.size() ? Quoted(a.obs[t]) : "(ended)",
                         t < b.obs.size() ? Quoted(b.obs[t]) : "(ended)");
    });
    const std::string first = env.NewState(seed)->Observation();
    rep.Expect(first == env.NewState(seed)->Observation(), kFixDeterminism, [&] {
      return fmt::format("seed {}: two NewState(seed) show different observations", seed);
    });
    ++r.covered;
  }
  std::set<uint64_t> initial;
  for (uint64_t seed = 0; seed < static_cast<uint64_t>(o.seeds); ++seed)
    initial.insert(env.NewState(seed)->Hash());
  // An env that ignores the seed fails; one with a small pool of instances
  // (OpenSpiel's catch has five) passes with a note: its seeds repeat.
  rep.Expect(o.seeds < 4 || initial.size() > 1, kFixVariety, [&] {
    return fmt::format(
        "seeds 0..{} all give the same initial state (Hash()): the seed does not "
        "change the instance",
        o.seeds - 1);
  });
  if (initial.size() > 1 && static_cast<int>(initial.size()) <= o.seeds / 2)
    r.note = fmt::format(
        "seeds 0..{} give {} distinct initial states: a small pool of "
        "instances, so train and test seeds share them",
        o.seeds - 1, initial.size());
}

void CheckClone(const Env& env, const ConformanceOptions& o, Report& rep, ConformanceResult& r) {
  for (uint64_t seed = 0; seed < static_cast<uint64_t>(o.seeds); ++seed) {
    auto s = env.NewState(seed);
    Rng rng(seed);
    while (!s->IsTerminal()) {
      const int t = s->StepCount();
      const std::string obs = s->Observation();
      const uint64_t h = s->Hash();
      s->CompileMenu();
      rep.Expect(s->Observation() == obs && s->Hash() == h, kFixMenuPure, [&] {
        return fmt::format("seed {} step {}: CompileMenu() changed the state", seed, t);
      });
      auto c = s->Clone();
      rep.Expect(c->Hash() == h && c->Observation() == obs, kFixCopy, [&] {
        return fmt::format("seed {} step {}: Clone() differs from the original (hash or "
                           "observation)",
                           seed, t);
      });
      c->Apply(c->LegalActions()[0]);
      rep.Expect(s->Hash() == h && s->Observation() == obs, kFixCopy, [&] {
        return fmt::format("seed {} step {}: Apply() on a clone changed the original", seed, t);
      });
      auto legal = s->LegalActions();
      s->Apply(legal[rng.UniformInt(legal.size())]);
    }
    rep.Expect(s->LegalActions().empty() && s->CompileMenu().items.empty(), kFixTerminal,
               [&] { return fmt::format("seed {}: a terminal state still offers actions", seed); });
    ++r.covered;
  }
}

void CheckMenu(const Env& env, const ConformanceOptions& o, Report& rep, ConformanceResult& r) {
  int64_t with_afterstates = 0, without = 0;
  PlayAll(env, o, 1000, [&](State& s, uint64_t seed) {
    const int t = s.StepCount();
    Menu menu = s.CompileMenu();
    try {
      ValidateMenu(menu);
    } catch (const Error& e) {
      rep.Fail(fmt::format("seed {} step {}: {}", seed, t, AuthorMessage(e.what())), kFixMenu);
      return false;
    }
    const auto legal = s.LegalActions();
    if (!rep.Expect(legal.size() == menu.size(), kFixBuiltIn, [&] {
          return fmt::format("seed {} step {}: {} legal actions but {} menu items", seed, t,
                             legal.size(), menu.size());
        }))
      return false;
    for (size_t i = 0; i < menu.size(); ++i) {
      const auto& it = menu.items[i];
      rep.Expect(it.action == legal[i], kFixBuiltIn, [&] {
        return fmt::format("seed {} step {}: menu item {} has action {}, LegalActions()[{}] is {}",
                           seed, t, i, it.action, i, legal[i]);
      });
      if (it.afterstate.empty()) {
        ++without;
        if (o.require_afterstates)
          rep.Fail(
              fmt::format("seed {} step {}: {} has no afterstate", seed, t, Quoted(it.command)),
              kFixAfterstate);
        continue;
      }
      ++with_afterstates;
      auto child = s.Clone();
      child->Apply(it.action);
      rep.Expect(it.afterstate_hash == child->Hash(), kFixAfterstate, [&] {
        return fmt::format(
            "seed {} step {}: the afterstate of {}, {} (id {:016x}), is not the "
            "state that action leads to, {} (id {:016x})",
            seed, t, Quoted(it.command), Quoted(it.afterstate), it.afterstate_hash,
            Quoted(child->Observation()), child->Hash());
      });
      if (auto* ms = dynamic_cast<MenuState*>(child.get()))
        rep.Expect(it.afterstate == ms->AfterstateText(), kFixBuiltIn, [&] {
          return fmt::format("seed {} step {}: afterstate text of {} differs from the stepped "
                             "state's AfterstateText()",
                             seed, t, Quoted(it.command));
        });
      int expected = -1;
      for (size_t j = 0; j < i && expected < 0; ++j)
        if (menu.items[j].afterstate_hash == it.afterstate_hash) expected = static_cast<int>(j);
      rep.Expect(it.same_afterstate_as == expected, kFixBuiltIn, [&] {
        return fmt::format("seed {} step {}: same_afterstate_as of {} is {}, expected {}", seed, t,
                           Quoted(it.command), it.same_afterstate_as, expected);
      });
    }
    ++r.covered;
    return true;
  });
  if (with_afterstates == 0 && without > 0)
    r.note = "the menus carry no afterstates, so they were not compared with Clone()+Apply()";
  else if (without > 0)
    r.note = fmt::format("{} of {} items had no afterstate", without, with_afterstates + without);
}

void CheckCompile(const Env& env, const ConformanceOptions& o, Report& rep, ConformanceResult& r) {
  Rng bytes(5);
  PlayAll(env, o, 7, [&](State& s, uint64_t seed) {
    const int t = s.StepCount();
    const Menu menu = s.CompileMenu();
    for (const auto& it : menu.items) {
      std::vector<std::string> texts = {it.label,
                                        " " + it.label + "\n",
                                        "(" + it.label + ")",
                                        "I choose " + it.label + ".",
                                        "Action: " + it.label,
                                        it.label + ") " + it.command};
      for (const auto& w : it.realisations) {
        texts.push_back(w);
        std::string upper = w;
        for (char& ch : upper) ch = static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
        texts.push_back("  " + upper + "  ");
        texts.push_back("Action: " + w);
      }
      for (const auto& text : texts) {
        const auto res = s.Compile(text);
        rep.Expect(res.valid() && res.action == it.action, kFixRealisation, [&] {
          return fmt::format("seed {} step {}: {} should compile to {} ({}), got {}", seed, t,
                             Quoted(text), it.label, Quoted(it.command),
                             res.valid() ? fmt::format("action {}", res.action)
                                         : "invalid: " + res.reason);
        });
        rep.Expect(menu.Compile(text).action == it.action, kFixRealisation, [&] {
          return fmt::format("seed {} step {}: the menu compiles {} to another action", seed, t,
                             Quoted(text));
        });
      }
    }
    std::vector<std::string> junks = {std::string(), std::string("   "), std::string("xyzzy plugh"),
                                      std::string("\xff\xfe\x00\x01", 4)};
    if (o.huge_inputs && seed < 2 && t == 0) {
      junks.push_back(std::string(1 << 20, 'q'));
      junks.push_back(std::string(100000, ' ') + "zzz");
    }
    for (const std::string& junk : junks) {
      const auto res = s.Compile(junk);
      rep.Expect(!res.valid() && !res.reason.empty(), kFixGarbage, [&] {
        return fmt::format("seed {} step {}: garbage {} {}", seed, t, Quoted(junk),
                           res.valid() ? "was accepted as " + Quoted(res.matched)
                                       : std::string("was rejected without a reason"));
      });
    }
    for (int k = 0; k < 20; ++k) {
      std::string junk(bytes.UniformInt(300), '\0');
      for (char& ch : junk) ch = static_cast<char>(bytes.UniformInt(256));
      const auto res = s.Compile(junk);
      rep.Expect(res.valid() ? menu.IndexOfAction(res.action) >= 0 : !res.reason.empty(),
                 kFixGarbage, [&] {
                   return fmt::format("seed {} step {}: random bytes compiled to {}", seed, t,
                                      res.valid()
                                          ? fmt::format("action {}, not on the menu", res.action)
                                          : std::string("invalid without a reason"));
                 });
    }
    ++r.covered;
    return true;
  });
}

void CheckLabels(const Env& env, const ConformanceOptions& o, Report& rep, ConformanceResult& r) {
  for (uint64_t seed = 0; seed < static_cast<uint64_t>(std::min(o.seeds, 4)); ++seed) {
    auto s = env.NewState(seed);
    Menu menu = s->CompileMenu();
    Rng rng(11 + seed);
    ShuffleMenu(menu, rng);
    try {
      ValidateMenu(menu);
    } catch (const Error& e) {
      rep.Fail(
          fmt::format("seed {}: the shuffled menu is invalid: {}", seed, AuthorMessage(e.what())),
          kFixMenu);
      continue;
    }
    for (size_t i = 0; i < menu.size(); ++i) {
      rep.Expect(menu.items[i].label == LabelFor(static_cast<int>(i)), kFixBuiltIn, [&] {
        return fmt::format("seed {}: shuffled item {} is labelled {}", seed, i, menu.items[i].label);
      });
      rep.Expect(menu.Compile(menu.items[i].label).action == menu.items[i].action, kFixBuiltIn,
                 [&] {
                   return fmt::format("seed {}: shuffled label {} does not compile to its action",
                                      seed, menu.items[i].label);
                 });
    }
    ++r.covered;
  }
}

void CheckOracle(const Env& env, const ConformanceOptions& o, Report& rep, ConformanceResult& r) {
  if (!dynamic_cast<OracleState*>(env.NewState(SplitSeed(Split::kTest, 0)).get())) {
    r.status = Status::kSkipped;
    r.note = "the env has no oracle (OracleState)";
    return;
  }
  for (uint64_t i = 0; i < static_cast<uint64_t>(o.seeds); ++i) {
    const uint64_t seed = SplitSeed(Split::kTest, i);
    auto s = env.NewState(seed);
    const double predicted = dynamic_cast<OracleState*>(s.get())->OptimalReturn();
    double ret = 0;
    bool success = false, stuck = false;
    while (!s->IsTerminal()) {
      const auto best = dynamic_cast<OracleState*>(s.get())->OptimalActions();
      if (!rep.Expect(!best.empty(), kFixOracle, [&] {
            return fmt::format("seed {} step {}: the oracle names no optimal action", seed,
                               s->StepCount());
          })) {
        stuck = true;
        break;
      }
      const auto out = s->Apply(best[0]);
      ret += out.reward;
      success = success || out.success;
    }
    if (stuck) continue;
    rep.Expect(success, kFixOracle, [&] {
      return fmt::format("test seed {}: following the oracle did not succeed", seed);
    });
    rep.Expect(std::abs(ret - predicted) <= 1e-9, kFixOracle, [&] {
      return fmt::format("test seed {}: the oracle's play returned {}, OptimalReturn() said {}",
                         seed, ret, predicted);
    });
    ++r.covered;
  }
}

void CheckGraph(const Env& env, const ConformanceOptions& o, Report& rep, ConformanceResult& r) {
  if (!env.Info().deterministic) {
    r.status = Status::kSkipped;
    r.note = "state graphs need deterministic transitions";
    return;
  }
  if (!dynamic_cast<OracleState*>(env.NewState(0).get())) {
    r.status = Status::kSkipped;
    r.note = "the env has no oracle to compare with";
    return;
  }
  int too_large = 0;
  size_t most = 0;  // states reached by the largest enumeration cut short
  for (uint64_t seed = 0; seed < static_cast<uint64_t>(o.graph_seeds); ++seed) {
    auto s = env.NewState(seed);
    const double t0 = MonotonicSeconds();
    double said = t0;
    const auto sg = EnumerateStates(*s, o.max_graph_states, false, [&](size_t states) {
      ThrowIfInterrupted();
      const double now = MonotonicSeconds();
      if (now - said >= 10) {  // progress on a slow graph, every 10 s
        said = now;
        spdlog::info(
            "env check: graph of seed {}: {} states after {:.0f} s (stops at {} states "
            "or {:g} s)",
            seed, states, now - t0, o.max_graph_states, o.max_graph_seconds);
      }
      return now - t0 < o.max_graph_seconds;
    });
    if (!sg.complete) {
      ++too_large;
      most = std::max(most, sg.num_states());
      continue;
    }
    const auto values = OptimalValues(sg);
    const double oracle = dynamic_cast<OracleState*>(s.get())->OptimalReturn();
    rep.Expect(std::abs(values[sg.root] - oracle) <= 1e-9, kFixGraph, [&] {
      return fmt::format("seed {}: value iteration over the {} states gives {}, the oracle {}",
                         seed, sg.num_states(), values[sg.root], oracle);
    });
    ++r.covered;
  }
  r.note = fmt::format(
      "{} of {} instances enumerated{}", r.covered, o.graph_seeds,
      too_large ? fmt::format(" ({} stopped at {} states or {:g} s; up to {} states seen: a graph "
                              "that keeps growing may hash the action history into Hash(), so "
                              "paths to one state never merge; raise --graph-states / "
                              "--graph-seconds to go further)",
                              too_large, o.max_graph_states, o.max_graph_seconds, most)
                : "");
  if (r.covered == 0 && r.status != Status::kFailed) r.status = Status::kSkipped;
}

void CheckSplits(const Env& env, const ConformanceOptions& o, Report& rep, ConformanceResult& r) {
  // Through this env: distinct seeds must give independent instances, so that
  // disjoint seeds mean disjoint tasks. An env that drops the seed's low bit
  // (seed / 2) would give train index i and test index i the same instance.
  // Compare how often paired train/test instances coincide with how often two
  // neighbouring train seeds' instances do: for an env that uses the whole seed
  // both are the same small collision rate.
  const uint64_t pairs = static_cast<uint64_t>(o.split_pairs);
  int cross = 0, within = 0;
  std::set<uint64_t> train, test;
  for (uint64_t i = 0; i < pairs; ++i) {
    const uint64_t a = env.NewState(SplitSeed(Split::kTrain, i))->Hash();
    const uint64_t b = env.NewState(SplitSeed(Split::kTest, i))->Hash();
    const uint64_t next = env.NewState(SplitSeed(Split::kTrain, i + 1))->Hash();
    cross += a == b;
    within += a == next;
    train.insert(a);
    test.insert(b);
  }
  r.covered = static_cast<int64_t>(pairs);
  rep.Expect(cross <= within + static_cast<int>(pairs / 10), kFixSplits, [&] {
    return fmt::format("train seed 2i and test seed 2i+1 give the same instance in {} of {} pairs "
                       "(neighbouring train seeds: {}): the env ignores the seed's low bit",
                       cross, pairs, within);
  });
  rep.Expect(test.size() > train.size() / 2, kFixSplits, [&] {
    return fmt::format("the test seeds give {} distinct instances, the train seeds {}",
                       test.size(), train.size());
  });
}

struct CheckDef {
  const char* name;
  const char* description;
  void (*run)(const Env&, const ConformanceOptions&, Report&, ConformanceResult&);
};

const std::vector<CheckDef>& Defs() {
  static const std::vector<CheckDef> kDefs = {
      {"info", "name, summary, step limit and instructions are set", CheckInfo},
      {"determinism", "the same seed and actions give the same episode; seeds vary instances",
       CheckDeterminism},
      {"clone", "Clone() is independent of the original; CompileMenu() changes nothing",
       CheckClone},
      {"menu", "menu contract (labels, actions, realisations), afterstate = Clone()+Apply()",
       CheckMenu},
      {"compile", "every label and realisation compiles to its action; garbage is invalid",
       CheckCompile},
      {"labels", "shuffled labels still compile", CheckLabels},
      {"oracle", "following the oracle solves every test seed with its predicted return",
       CheckOracle},
      {"graph", "exact state-graph values equal the oracle's return", CheckGraph},
      {"splits", "train and test seeds give disjoint, equally varied instances", CheckSplits},
  };
  return kDefs;
}

// Whether two errors are one, up to the numbers that change between tries
// (a restarted process's pid, a seed, a request id).
bool SameError(const std::string& a, const std::string& b) {
  static const std::regex kNumbers(R"(\d+)");
  return std::regex_replace(a, kNumbers, "N") == std::regex_replace(b, kNumbers, "N");
}

// Whether the env fails to play even one episode (reset, menus, steps to the
// end): then every check would stop with the same error.
bool CannotPlay(const Env& env) {
  try {
    auto s = env.NewState(0);
    for (int t = 0; !s->IsTerminal() && t <= env.Info().step_limit; ++t) {
      s->CompileMenu();
      const auto legal = s->LegalActions();
      if (legal.empty()) break;
      s->Apply(legal[0]);
    }
  } catch (const Error&) {
    return true;
  }
  return false;
}

}  // namespace

std::string AuthorMessage(const std::string& message) {
  // core/check.h's form: "check failed at FILE:LINE: EXPR — MESSAGE".
  static const std::regex kWithMessage(R"(check failed at \S+:\d+: [^\n]*? — )");
  static const std::regex kBare(R"(check failed at \S+:\d+: [^\n]*)");
  return std::regex_replace(std::regex_replace(message, kWithMessage, ""), kBare,
                            "an internal consistency check failed");
}

const std::vector<std::string>& ConformanceChecks() {
  static const std::vector<std::string> kNames = [] {
    std::vector<std::string> v;
    for (const auto& d : Defs()) v.push_back(d.name);
    return v;
  }();
  return kNames;
}

ConformanceResult RunConformanceCheck(const Env& env, std::string_view check,
                                      const ConformanceOptions& opt) {
  for (const auto& d : Defs()) {
    if (check != d.name) continue;
    ConformanceResult r;
    r.check = d.name;
    r.description = d.description;
    Report rep(r, opt);
    const double t0 = MonotonicSeconds();
    try {
      d.run(env, opt, rep, r);
    } catch (const Interrupted&) {
      throw;  // a stop signal ends the whole check, not this check's verdict
    } catch (const Error& e) {
      r.error = AuthorMessage(e.what());
      rep.Fail(fmt::format("stopped by an error: {}{}", r.error,
                           e.hint().empty() ? "" : "\n" + AuthorMessage(e.hint())));
    }
    r.seconds = MonotonicSeconds() - t0;
    return r;
  }
  throw ConfigError(fmt::format("unknown conformance check '{}'{}", check,
                                DidYouMean(check, ConformanceChecks())),
                    fmt::format("checks: {}", fmt::join(ConformanceChecks(), ", ")));
}

std::vector<ConformanceResult> RunConformance(
    const Env& env, const ConformanceOptions& opt,
    const std::function<void(const ConformanceResult&)>& on_done) {
  std::vector<ConformanceResult> out;
  std::string env_broken;  // the check whose error shows the env cannot play at all
  for (const auto& name : ConformanceChecks()) {
    ConformanceResult r;
    if (!env_broken.empty()) {
      for (const auto& d : Defs())
        if (name == d.name) r.description = d.description;
      r.check = name;
      r.status = Status::kSkipped;
      r.note = fmt::format("not run: the env cannot play an episode; see {}", env_broken);
    } else {
      r = RunConformanceCheck(env, name, opt);
      if (!r.error.empty()) {
        for (const auto& earlier : out) {
          if (earlier.error.empty() || !SameError(earlier.error, r.error)) continue;
          r.failures = {
              fmt::format("stopped by the same error as the {} check (above)", earlier.check)};
          r.fixes.clear();
          break;
        }
        if (CannotPlay(env)) env_broken = name;
      }
    }
    out.push_back(std::move(r));
    if (on_done) on_done(out.back());
  }
  return out;
}

}  // namespace rlid::envs

// household: an ALFWorld-like house. Rooms hold receptacles (fridge, sink
// basin, desk, ...), some of them closed; objects carry states (dirty, hot,
// cold, sliced) and the agent holds one at a time. Tasks follow ALFWorld's
// families (pick, clean, heat, cool, slice, examine under a lamp), and the
// test split uses (object, receptacle) pairs that train seeds never see.
// Oracle: the shared backward search (envs/api/shortest_path_oracle.h) over an
// exact abstraction of the state (distractors dropped), built once per
// instance and shared by clones.
#include "envs/builtin/household.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <memory>
#include <set>

#include "core/check.h"
#include "core/hash.h"
#include "core/rng.h"
#include "core/strings.h"
#include "envs/api/menu_state.h"
#include "envs/api/shortest_path_oracle.h"
#include "envs/api/simple_env.h"
#include "envs/builtin/household_catalogue.h"

namespace rlid::envs {
namespace {

using namespace house;  // the catalogue (household_catalogue.h)

// ---- parameters, instances and the world state ------------------------------------

struct HouseParams {
  int rooms = 2;        // 1..4; the kitchen is always one of them
  int receptacles = 3;  // per room, 3..6
  int distractors = 1;  // objects besides the task object (and the knife), 0..16
  std::vector<std::string> tasks = {"pick", "clean", "heat", "cool", "slice", "light"};
  int step_limit = 40;  // >= 3x the longest optimal solution at the defaults
  double success_reward = 1.0;
  double step_cost = 0.01;
};

// Upper bound on the menu size (see MaxMenuSize in docs/env_household.md): the
// go actions of a receptacle, open/close, and either one take per object or
// put + an appliance action or put + a slice per other object, + the lamp.
int MaxMenuSize(const HouseParams& p, bool knife) {
  return p.receptacles + p.rooms + std::max(1, p.distractors + (knife ? 1 : 0));
}

// Action ids: kind base + index (receptacle, room or object index).
constexpr ActionId kGoRoom = 0, kGoRec = 10, kOpen = 100, kClose = 150, kTake = 200, kPut = 300,
                   kHeat = 400, kCool = 450, kClean = 500, kSlice = 600, kLampOn = 700,
                   kLampOff = 701;
// The oracle's abstraction only: take some distractor (never on a menu).
constexpr ActionId kTakeOther = 299;

constexpr int8_t kNothing = -1;  // held: nothing
constexpr int8_t kOther = -2;    // held, in the oracle's abstraction: some distractor
constexpr int8_t kInHand = -1;   // loc of the held object
constexpr int8_t kAbsent =
    30;  // loc, in the oracle's abstraction: an object that no longer matters

// The mutable part of an instance.
struct World {
  int8_t room = 0;
  int8_t at = -1;  // receptacle index, -1 = the room's entrance
  int8_t held = kNothing;
  bool lamp_on = false;
  uint32_t opened = 0;                    // bit k: receptacle k is open
  std::array<int8_t, kMaxObjects> loc{};  // receptacle index or kInHand
  std::array<uint8_t, kMaxObjects> state{};
};

// One generated instance; immutable except for the lazily built oracle table.
struct HouseLayout {
  HouseParams params;
  Task task;
  std::vector<int> room_kind;               // per room
  std::vector<int> rec_kind, rec_room;      // per receptacle, room by room
  std::vector<std::vector<int>> room_recs;  // per room: its receptacles in display order
  int target = -1;                          // receptacle of the goal (for kLightTask: the lamp's)
  int lamp = -1;                      // receptacle the desk lamp stands on, -1 when there is none
  int knife = -1;                     // object index of the knife (slice tasks), -1 otherwise
  int num_objects = 0, num_core = 0;  // objects 0..num_core-1 matter to the goal
  std::vector<int> obj_kind;          // per object; object 0 is the task object
  World initial;
  uint64_t fingerprint = 0;

  uint32_t openable_mask = 0;  // bit k: receptacle k can be opened

  // Oracle: steps to success (-1: none) of every abstract world reachable from
  // `initial`, by its Key().
  mutable GoalDistances oracle;

  int num_recs() const { return static_cast<int>(rec_kind.size()); }
  const RecKind& Kind(int k) const { return kRecKinds[rec_kind[k]]; }
  bool Openable(int k) const { return Kind(k).flags & kOpenable; }
  bool Accessible(const World& w, int k) const { return !Openable(k) || ((w.opened >> k) & 1); }
  uint8_t Caps(int i) const { return i < 0 ? 0 : kObjKinds[obj_kind[i]].caps; }
  bool Visible(const World& w, int i) const {
    return w.at >= 0 && w.loc[i] == w.at && Accessible(w, w.at);
  }
  std::string RoomName(int r) const { return kRoomNames[room_kind[r]]; }
  std::string RecName(int k) const { return Kind(k).name; }
  std::string ObjName(int i) const { return kObjKinds[obj_kind[i]].name; }
  // "hot dirty sliced apple": the object with its state.
  std::string Described(int i, uint8_t st) const {
    std::string out;
    if (st & kHot) out += "hot ";
    if (st & kCold) out += "cold ";
    if (st & kDirty) out += "dirty ";
    if (st & kSliced) out += "sliced ";
    return out + ObjName(i);
  }
  // "in the fridge", "on the countertop".
  std::string At(int k) const { return fmt::format("{} the {}", Kind(k).prep, RecName(k)); }

  bool Success(const World& w) const {
    if (task.family == kLightTask) return w.held == 0 && w.at == lamp && w.lamp_on;
    if (w.loc[0] != target) return false;
    const uint8_t st = w.state[0];
    switch (task.family) {
      case kCleanTask:
        return !(st & kDirty);
      case kHeatTask:
        return st & kHot;
      case kCoolTask:
        return st & kCold;
      case kSliceTask:
        return st & kSliced;
      default:
        return true;
    }
  }

  // The legal actions in menu order: go to a receptacle of this room, go to
  // another room, open/close, take, put, heat/cool/clean, slice, the lamp.
  // In the oracle's abstraction (`abstract`) only the objects that matter are
  // present, kOther stands for any other held object, and kTakeOther takes
  // one wherever the hand is free at an open receptacle.
  void LegalMoves(const World& w, bool abstract, std::vector<ActionId>& out) const {
    out.clear();
    const int n = abstract ? num_core : num_objects;
    for (int k : room_recs[w.room])
      if (k != w.at) out.push_back(kGoRec + k);
    for (int r = 0; r < static_cast<int>(room_kind.size()); ++r)
      if (r != w.room) out.push_back(kGoRoom + r);
    const int k = w.at;
    if (k < 0) return;
    if (Openable(k)) out.push_back(((w.opened >> k) & 1 ? kClose : kOpen) + k);
    const bool open = Accessible(w, k);
    if (w.held == kNothing) {
      if (open) {
        for (int i = 0; i < n; ++i)
          if (w.loc[i] == k) out.push_back(kTake + i);
        if (abstract && (num_objects > num_core || (knife >= 0 && (w.state[0] & kSliced))))
          out.push_back(kTakeOther);
      }
    } else {
      if (open) out.push_back(kPut + k);
      const uint8_t caps = Caps(w.held), st = w.held >= 0 ? w.state[w.held] : 0;
      const uint8_t fn = Kind(k).flags;
      if ((fn & kHeats) && (caps & kCanHeat) && !(st & kHot)) out.push_back(kHeat + k);
      if ((fn & kCools) && (caps & kCanCool) && !(st & kCold)) out.push_back(kCool + k);
      if ((fn & kCleans) && (caps & kCanClean) && (st & kDirty)) out.push_back(kClean + k);
      if (w.held == knife && open)
        for (int i = 0; i < n; ++i)
          if (i != knife && w.loc[i] == k && (Caps(i) & kCanSlice) && !(w.state[i] & kSliced))
            out.push_back(kSlice + i);
    }
    if (k == lamp) out.push_back(w.lamp_on ? kLampOff : kLampOn);
  }

  // Applies a legal action; returns whether the goal now holds.
  bool ApplyMove(World& w, ActionId a) const {
    if (a == kLampOn || a == kLampOff) {
      w.lamp_on = a == kLampOn;
    } else if (a >= kSlice) {
      w.state[a - kSlice] |= kSliced;
    } else if (a >= kClean) {
      w.state[w.held] &= static_cast<uint8_t>(~kDirty);
    } else if (a >= kCool) {
      w.state[w.held] = static_cast<uint8_t>((w.state[w.held] & ~kHot) | kCold);
    } else if (a >= kHeat) {
      w.state[w.held] = static_cast<uint8_t>((w.state[w.held] & ~kCold) | kHot);
    } else if (a >= kPut) {
      if (w.held >= 0) w.loc[w.held] = static_cast<int8_t>(a - kPut);
      w.held = kNothing;
    } else if (a == kTakeOther) {
      w.held = kOther;
    } else if (a >= kTake) {
      w.held = static_cast<int8_t>(a - kTake);
      w.loc[w.held] = kInHand;
    } else if (a >= kClose) {
      w.opened &= ~(1u << (a - kClose));
    } else if (a >= kOpen) {
      w.opened |= 1u << (a - kOpen);
    } else if (a >= kGoRec) {
      w.at = static_cast<int8_t>(a - kGoRec);
    } else {
      w.room = static_cast<int8_t>(a - kGoRoom);
      w.at = -1;
    }
    return Success(w);
  }

  // The oracle's abstraction of a world: what the distance to the goal
  // depends on. Distractors are dropped (a held one becomes kOther), and so is
  // the knife once the task object is sliced; the lamp is kept only for
  // kLightTask, and of the task object's state only the bit the goal reads;
  // a receptacle that neither is the target nor holds an object that matters
  // counts as open. Why this is exact: docs/env_household.md ("Oracle").
  World Abstract(const World& w) const {
    World a;
    a.room = w.room;
    a.at = w.at;
    a.lamp_on = task.family == kLightTask && w.lamp_on;
    a.state[0] = w.state[0] & kGoalBits[task.family];
    const bool knife_matters = knife >= 0 && !(w.state[0] & kSliced);
    a.held = w.held;
    if (w.held >= num_core || (knife >= 0 && w.held == knife && !knife_matters)) a.held = kOther;
    a.loc[0] = w.loc[0];
    if (knife >= 0) a.loc[knife] = knife_matters ? w.loc[knife] : kAbsent;
    uint32_t relevant = 1u << target;
    for (int i = 0; i < num_core; ++i)
      if (a.loc[i] >= 0 && a.loc[i] != kAbsent) relevant |= 1u << a.loc[i];
    a.opened = (w.opened & relevant) | (openable_mask & ~relevant);
    return a;
  }
  // Injective on abstract worlds in 51 bits (24 receptacles at most): room 2,
  // at 5, held 5, lamp 1, opened 24, task object loc 5 + state 4, knife loc 5.
  static uint64_t Key(const World& a) {
    uint64_t k = static_cast<uint64_t>(a.room) | static_cast<uint64_t>(a.at + 1) << 2 |
                 static_cast<uint64_t>(a.held + 2) << 7 | static_cast<uint64_t>(a.lamp_on) << 12 |
                 static_cast<uint64_t>(a.opened) << 13;
    k |= static_cast<uint64_t>(a.loc[0] + 1) << 37 | static_cast<uint64_t>(a.state[0]) << 42 |
         static_cast<uint64_t>(a.loc[1] + 1) << 46;
    return k;
  }

  // The legal moves of the env itself (not of the oracle's abstraction).
  void LegalMoves(const World& w, std::vector<ActionId>& out) const {
    LegalMoves(w, /*abstract=*/false, out);
  }

  // Steps to success from a world (-1: never). On the first call, the search
  // over every abstract world reachable from `initial`; built once per
  // instance (thread-safe), shared by clones.
  int Distance(const World& w) const {
    BuildOracle();
    return oracle.Distance(Key(Abstract(w)));
  }
  size_t OracleStates() const {
    BuildOracle();
    return oracle.size();
  }
  void BuildOracle() const {
    oracle.BuildOnce(
        Abstract(initial), &Key, [this](const World& w) { return Success(w); },
        [this](const World& w, std::vector<ActionId>& out) {
          LegalMoves(w, /*abstract=*/true, out);
        },
        [this](World w, ActionId a) {
          ApplyMove(w, a);
          return Abstract(w);
        });
  }
};

// Steps of the walk from where `w` stands to receptacle k.
int Walk(const HouseLayout& m, const World& w, int k) {
  if (w.at == k) return 0;
  return m.rec_room[k] == w.room ? 1 : 2;
}

// The length of the constructive solution (an upper bound on the optimal one):
// fetch the tool (slice), fetch the object, use the appliance, deliver.
int PlanLength(const HouseLayout& m) {
  World w = m.initial;
  int steps = 0;
  auto go = [&](int k) {
    steps += Walk(m, w, k);
    w.room = static_cast<int8_t>(m.rec_room[k]);
    w.at = static_cast<int8_t>(k);
    if (!m.Accessible(w, k)) {
      w.opened |= 1u << k;
      ++steps;
    }
  };
  const int object_rec = m.initial.loc[0];
  if (m.task.family == kSliceTask) {
    go(m.initial.loc[m.knife]);
    go(object_rec);
    steps += 4;  // take the knife, slice, put the knife down, take the object
  } else {
    go(object_rec);
    steps += 1;  // take
  }
  for (int k = 0; k < m.num_recs(); ++k) {
    const uint8_t fn = m.Kind(k).flags;
    const int fam = m.task.family;
    if ((fam == kHeatTask && (fn & kHeats)) || (fam == kCoolTask && (fn & kCools)) ||
        (fam == kCleanTask && (fn & kCleans))) {
      steps += Walk(m, w, k) + 1;
      w.room = static_cast<int8_t>(m.rec_room[k]);
      w.at = static_cast<int8_t>(k);
      break;
    }
  }
  if (m.task.family == kLightTask) {
    steps += Walk(m, w, m.lamp) + 1;  // turn the lamp on
  } else {
    go(m.target);
    steps += 1;  // put
  }
  return steps;
}

// Receptacle kinds with the given flag, ascending.
std::vector<int> RecKindsWith(uint8_t flag) {
  std::vector<int> out;
  for (int k = 0; k < kNumRecKinds; ++k)
    if (kRecKinds[k].flags & flag) out.push_back(k);
  return out;
}

// Receptacle kinds the task needs: its target, the object's start, the
// appliance and the knife's start (the last, for kSliceTask).
std::vector<int> NeededKinds(const Task& task, int start, Rng& rng) {
  std::vector<int> needed = {task.receptacle, start};
  const uint8_t appliance = task.family == kCleanTask  ? kCleans
                            : task.family == kHeatTask ? kHeats
                            : task.family == kCoolTask ? kCools
                                                       : 0;
  if (appliance) {
    auto options = RecKindsWith(appliance);
    needed.push_back(options[rng.UniformInt(options.size())]);
  }
  if (task.family == kSliceTask) {
    const auto& options = Objects().starts[kKnifeKind];
    needed.push_back(options[rng.UniformInt(options.size())]);
  }
  return needed;
}

// Rooms: the kitchen and the rooms the needed kinds stand in, then others.
void DrawRooms(HouseLayout& m, const std::vector<int>& needed, int rooms, Rng& rng) {
  std::vector<int> kinds = {kKitchen};
  for (int k : needed)
    if (std::find(kinds.begin(), kinds.end(), kRecKinds[k].room) == kinds.end())
      kinds.push_back(kRecKinds[k].room);
  RLID_CHECK_LE(static_cast<int>(kinds.size()), rooms);
  for (int r : rng.Permutation(kMaxRooms))
    if (static_cast<int>(kinds.size()) < rooms &&
        std::find(kinds.begin(), kinds.end(), r) == kinds.end())
      kinds.push_back(r);
  for (int r : rng.Permutation(rooms)) m.room_kind.push_back(kinds[r]);
}

// Receptacles: the needed ones of each room, then random others of its kind.
// Returns the receptacle of each kind (-1 for a kind not in the house).
std::vector<int> DrawReceptacles(HouseLayout& m, const std::vector<int>& needed, int per_room,
                                 Rng& rng) {
  const int rooms = static_cast<int>(m.room_kind.size());
  m.room_recs.assign(rooms, {});
  std::vector<int> rec_of_kind(kNumRecKinds, -1);
  for (int r = 0; r < rooms; ++r) {
    std::vector<int> chosen;
    for (int k : needed)
      if (kRecKinds[k].room == m.room_kind[r] &&
          std::find(chosen.begin(), chosen.end(), k) == chosen.end())
        chosen.push_back(k);
    for (int k : rng.Permutation(kNumRecKinds))
      if (static_cast<int>(chosen.size()) < per_room && kRecKinds[k].room == m.room_kind[r] &&
          std::find(chosen.begin(), chosen.end(), k) == chosen.end())
        chosen.push_back(k);
    RLID_CHECK_EQ(static_cast<int>(chosen.size()), per_room);
    rng.Shuffle(chosen);
    for (int k : chosen) {
      rec_of_kind[k] = m.num_recs();
      m.room_recs[r].push_back(m.num_recs());
      if (kRecKinds[k].flags & kOpenable) m.openable_mask |= 1u << m.num_recs();
      m.rec_kind.push_back(k);
      m.rec_room.push_back(r);
    }
  }
  return rec_of_kind;
}

// The desk lamp: on the target for kLightTask; otherwise, half the time, on a
// random lamp host of the house (so a lamp is no hint of the task).
void PlaceLamp(HouseLayout& m, Rng& rng) {
  if (m.task.family == kLightTask) {
    m.lamp = m.target;
    return;
  }
  std::vector<int> hosts;
  for (int k = 0; k < m.num_recs(); ++k)
    if (m.Kind(k).flags & kLampHost) hosts.push_back(k);
  if (!hosts.empty() && rng.Bernoulli(0.5)) m.lamp = hosts[rng.UniformInt(hosts.size())];
}

// Adds an object of `kind` on/in receptacle `rec`; one that can be cleaned
// starts dirty with probability 0.3.
void AddObject(HouseLayout& m, int kind, int rec, Rng& rng) {
  const int i = m.num_objects++;
  m.obj_kind.push_back(kind);
  m.initial.loc[i] = static_cast<int8_t>(rec);
  if ((kObjKinds[kind].caps & kCanClean) && rng.Bernoulli(0.3)) m.initial.state[i] = kDirty;
}

// Distractors of other kinds than the task object and the knife, on
// receptacles they may start on (a kind with none in this house lies on any
// receptacle, and is drawn only after every kind that has one).
void AddDistractors(HouseLayout& m, const std::vector<int>& rec_of_kind, int distractors,
                    Rng& rng) {
  std::vector<int> placeable, elsewhere;
  for (int o : rng.Permutation(kNumObjKinds)) {
    if (o == m.task.object || o == kKnifeKind) continue;
    bool here = false;
    for (int s : Objects().starts[o]) here = here || rec_of_kind[s] >= 0;
    (here ? placeable : elsewhere).push_back(o);
  }
  placeable.insert(placeable.end(), elsewhere.begin(), elsewhere.end());
  for (int d = 0; d < distractors; ++d) {
    const int o = placeable[d];
    std::vector<int> recs;
    for (int s : Objects().starts[o])
      if (rec_of_kind[s] >= 0) recs.push_back(rec_of_kind[s]);
    if (recs.empty())
      for (int k = 0; k < m.num_recs(); ++k) recs.push_back(k);
    AddObject(m, o, recs[rng.UniformInt(recs.size())], rng);
  }
}

// The instance's identity: the task and everything drawn, with the attempt.
uint64_t Fingerprint(const HouseLayout& m, uint64_t attempt) {
  const Task& task = m.task;
  uint64_t h = HashCombine(HashBytes("household"), attempt);
  h = HashCombine(h, (task.family * 64 + task.object) * 64 + task.receptacle);
  for (int r : m.room_kind) h = HashCombine(h, r);
  for (int k : m.rec_kind) h = HashCombine(h, k);
  for (int o : m.obj_kind) h = HashCombine(h, o);
  return HashCombine(h, m.lamp + 1);
}

// One attempt at an instance: a family drawn uniformly among the split's
// families, then one of its tasks.
std::shared_ptr<HouseLayout> TryGenerate(const HouseParams& p, const TaskLists& tasks,
                                         uint64_t seed, uint64_t attempt) {
  auto m = std::make_shared<HouseLayout>();
  m->params = p;
  Rng rng = Rng::Stream(seed, "household", attempt);
  const auto& family = tasks[rng.UniformInt(tasks.size())];  // uniform over families
  const Task task = m->task = family[rng.UniformInt(family.size())];
  const auto starts = FeasibleStarts(task, p.rooms);
  const int start = starts[rng.UniformInt(starts.size())];

  const std::vector<int> needed = NeededKinds(task, start, rng);
  DrawRooms(*m, needed, p.rooms, rng);
  const std::vector<int> rec_of_kind = DrawReceptacles(*m, needed, p.receptacles, rng);
  m->target = rec_of_kind[task.receptacle];
  PlaceLamp(*m, rng);

  // Objects: the task object, the knife, then distractors.
  World& w = m->initial;
  AddObject(*m, task.object, rec_of_kind[start], rng);
  if (task.family == kCleanTask) w.state[0] = kDirty;
  if (task.family == kSliceTask) {
    m->knife = m->num_objects;
    AddObject(*m, kKnifeKind, rec_of_kind[needed.back()], rng);
  }
  m->num_core = m->num_objects;
  AddDistractors(*m, rec_of_kind, p.distractors, rng);
  w.room = static_cast<int8_t>(rng.UniformInt(p.rooms));
  m->fingerprint = Fingerprint(*m, attempt);
  return m;
}

// Deterministic regeneration: the first attempt whose constructive solution
// fits the step limit.
std::shared_ptr<const HouseLayout> Generate(const HouseParams& p, const TaskLists& tasks,
                                            uint64_t seed) {
  constexpr int kAttempts = 100;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    auto m = TryGenerate(p, tasks, seed, attempt);
    if (PlanLength(*m) <= p.step_limit) return m;
  }
  throw ConfigError(
      fmt::format("household: no instance for seed {} is solvable within step_limit = {} after "
                  "{} attempts",
                  seed, p.step_limit, kAttempts),
      "raise env.step_limit (a slice task can need 14 steps)");
}

std::string A(const std::string& noun) {
  return (std::string("aeiou").find(noun[0]) != std::string::npos ? "an " : "a ") + noun;
}
std::string Capitalised(std::string s) {
  if (!s.empty()) s[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(s[0])));
  return s;
}

class HouseholdState final : public MenuState, public OracleState, public FactSource {
 public:
  explicit HouseholdState(std::shared_ptr<const HouseLayout> m)
      : MenuState(m->params.step_limit), m_(std::move(m)), w_(m_->initial) {}

  std::string Observation() const override {
    if (m_->Success(w_)) return "Done: " + DoneText() + ".";
    std::string out = fmt::format("Goal: {}.\n", GoalText());
    const int r = w_.room;
    if (w_.at < 0) {
      std::vector<std::string> recs;
      for (int k : m_->room_recs[r]) recs.push_back(A(m_->RecName(k)));
      out += fmt::format("You are in the {}. You see {}.", m_->RoomName(r), ListInWords(recs));
      std::vector<std::string> others;
      for (int o = 0; o < static_cast<int>(m_->room_kind.size()); ++o)
        if (o != r) others.push_back("the " + m_->RoomName(o));
      if (!others.empty()) out += fmt::format("\nOther rooms: {}.", ListInWords(others));
    } else {
      const int k = w_.at;
      out += fmt::format("You are at the {} in the {}. {}", m_->RecName(k), m_->RoomName(r),
                         Contents(k));
      if (k == m_->lamp) out += fmt::format(" The desk lamp is {}.", w_.lamp_on ? "on" : "off");
    }
    out += fmt::format("\nYou hold {}.", Held(/*article=*/true));
    return out;
  }

  // What the last action did and what you hold. Never reveals what the action
  // lets you see (a receptacle's contents, a room's receptacles).
  std::string AfterstateText() const override {
    if (m_->Success(w_)) return Capitalised(DoneText()) + ": goal reached.";
    const std::string hold = fmt::format("You hold {}.", Held(/*article=*/false));
    const ActionId a = last_;
    if (a == kLampOn || a == kLampOff)
      return fmt::format("The desk lamp is {}. {}", w_.lamp_on ? "on" : "off", hold);
    if (a >= kSlice) return fmt::format("You slice the {}. {}", m_->ObjName(a - kSlice), hold);
    if (a >= kClean) return fmt::format("You clean the {}. {}", m_->ObjName(w_.held), hold);
    if (a >= kCool) return fmt::format("You cool the {}. {}", m_->ObjName(w_.held), hold);
    if (a >= kHeat) return fmt::format("You heat the {}. {}", m_->ObjName(w_.held), hold);
    if (a >= kPut) {
      const int i = put_;
      return fmt::format("The {} is {}. {}", m_->Described(i, w_.state[i]), m_->At(a - kPut), hold);
    }
    if (a >= kTake) return hold;
    if (a >= kClose) return fmt::format("The {} is closed. {}", m_->RecName(a - kClose), hold);
    if (a >= kOpen) return fmt::format("The {} is open. {}", m_->RecName(a - kOpen), hold);
    if (a >= kGoRec)
      return fmt::format("You are at the {} in the {}. {}", m_->RecName(w_.at),
                         m_->RoomName(w_.room), hold);
    return fmt::format("You are in the {}. {}", m_->RoomName(w_.room), hold);  // go, or the start
  }

  std::unique_ptr<State> Clone() const override { return std::make_unique<HouseholdState>(*this); }
  const HouseLayout& layout() const { return *m_; }
  uint64_t Hash() const override {
    uint64_t h = HashCombine(m_->fingerprint, static_cast<uint64_t>(w_.room) << 16 |
                                                  static_cast<uint64_t>(w_.at + 1) << 8 |
                                                  static_cast<uint64_t>(w_.held + 2));
    h = HashCombine(h, static_cast<uint64_t>(w_.opened) << 1 | (w_.lamp_on ? 1 : 0));
    for (int i = 0; i < m_->num_objects; ++i)
      h = HashCombine(h, static_cast<uint64_t>(w_.loc[i] + 1) << 8 | w_.state[i]);
    return h;
  }

  std::vector<ActionId> OptimalActions() const override {
    return IsTerminal() ? std::vector<ActionId>{} : ShortestPathActions(*m_, w_, Remaining());
  }
  double OptimalReturn() const override {
    return IsTerminal() ? 0.0 : ShortestPathReturn(*m_, w_, Remaining());
  }

  // What the current place shows: the receptacles of a room (at its entrance),
  // or the objects on/in the receptacle, whether it is closed or empty, the lamp.
  std::vector<std::string> Facts() const override {
    std::vector<std::string> out;
    const int r = w_.room;
    if (w_.at < 0) {
      for (int k : m_->room_recs[r])
        out.push_back(fmt::format("there is {} in the {}", A(m_->RecName(k)), m_->RoomName(r)));
      return out;
    }
    const int k = w_.at;
    const std::string where = fmt::format("the {} in the {}", m_->RecName(k), m_->RoomName(r));
    if (!m_->Accessible(w_, k)) {
      out.push_back(where + " is closed");
    } else {
      bool any = false;
      for (int i = 0; i < m_->num_objects; ++i)
        if (w_.loc[i] == k) {
          out.push_back(fmt::format("the {} is {} {}", m_->Described(i, w_.state[i]),
                                    m_->Kind(k).prep, where));
          any = true;
        }
      if (!any) out.push_back(where + " is empty");
    }
    if (k == m_->lamp)
      out.push_back(fmt::format("the desk lamp on {} is {}", where, w_.lamp_on ? "on" : "off"));
    return out;
  }

 protected:
  std::vector<ActionSpec> Actions() const override {
    return ShortestPathMenu(*m_, w_, [this](ActionId a) { return Spec(a); });
  }

  StepOutcome Transition(ActionId action) override {
    last_ = action;
    if (action >= kPut && action < kHeat) put_ = w_.held;
    return ShortestPathStep(*m_, w_, action);
  }

 private:
  int Remaining() const { return step_limit() - StepCount(); }

  std::string GoalText() const {
    const Task& t = m_->task;
    const std::string obj = kObjKinds[t.object].name;
    if (t.family == kLightTask) return fmt::format("look at {} under the desk lamp", A(obj));
    static constexpr std::array<const char*, 6> kAdjective = {"",      "clean ",  "hot ",
                                                              "cold ", "sliced ", ""};
    return fmt::format("put {} {} the {}", A(kAdjective[t.family] + obj),
                       kRecKinds[t.receptacle].prep, kRecKinds[t.receptacle].name);
  }
  // "the hot egg is on the dining table", "you look at the book under the desk lamp".
  std::string DoneText() const {
    if (m_->task.family == kLightTask)
      return fmt::format("you look at the {} under the desk lamp", m_->ObjName(0));
    const std::string clean = m_->task.family == kCleanTask ? "clean " : "";
    return fmt::format("the {}{} is {}", clean, m_->Described(0, w_.state[0]), m_->At(m_->target));
  }
  std::string Held(bool article) const {
    if (w_.held < 0) return "nothing";
    const std::string d = m_->Described(w_.held, w_.state[w_.held]);
    return article ? A(d) : "the " + d;
  }
  // "On the countertop: a dirty mug and an apple.", "The fridge is closed.", ...
  std::string Contents(int k) const {
    const std::string name = m_->RecName(k);
    if (!m_->Accessible(w_, k)) return fmt::format("The {} is closed.", name);
    std::vector<std::string> here;
    for (int i = 0; i < m_->num_objects; ++i)
      if (w_.loc[i] == k) here.push_back(A(m_->Described(i, w_.state[i])));
    const bool openable = m_->Openable(k);
    if (here.empty())
      return openable ? fmt::format("The {} is open and empty.", name)
                      : fmt::format("The {} is empty.", name);
    if (openable) return fmt::format("The {} is open. In it: {}.", name, ListInWords(here));
    return fmt::format("{} the {}: {}.", Capitalised(m_->Kind(k).prep), name, ListInWords(here));
  }

  ActionSpec Spec(ActionId a) const {
    if (a == kLampOn)
      return {a,
              "turn on the desk lamp",
              {"turn on desk lamp", "switch on the desk lamp", "turn the desk lamp on",
               "use the desk lamp"}};
    if (a == kLampOff)
      return {a,
              "turn off the desk lamp",
              {"turn off desk lamp", "switch off the desk lamp", "turn the desk lamp off"}};
    const std::string held = w_.held >= 0 ? m_->ObjName(w_.held) : "";
    if (a >= kSlice) {
      const std::string o = m_->ObjName(a - kSlice);
      return {a,
              fmt::format("slice the {} with the knife", o),
              {fmt::format("slice {} with knife", o), "slice the " + o, "cut the " + o,
               "cut up the " + o}};
    }
    if (a >= kClean) {
      const std::string r = m_->RecName(a - kClean);
      return {a,
              fmt::format("clean the {} with the {}", held, r),
              {fmt::format("clean {} with {}", held, r), "clean the " + held, "wash the " + held,
               "rinse the " + held}};
    }
    if (a >= kCool) {
      const std::string r = m_->RecName(a - kCool);
      return {a,
              fmt::format("cool the {} with the {}", held, r),
              {fmt::format("cool {} with {}", held, r), "cool the " + held, "chill the " + held}};
    }
    if (a >= kHeat) {
      const std::string r = m_->RecName(a - kHeat);
      return {a,
              fmt::format("heat the {} with the {}", held, r),
              {fmt::format("heat {} with {}", held, r), "heat the " + held, "warm the " + held,
               "heat up the " + held}};
    }
    if (a >= kPut) {
      const int k = a - kPut;
      const std::string r = m_->RecName(k), prep = m_->Kind(k).prep;
      return {a,
              fmt::format("put the {} {} the {}", held, prep, r),
              {fmt::format("put {} {} {}", held, prep, r),
               fmt::format("place the {} {} the {}", held, prep, r), "put down the " + held,
               "drop the " + held}};
    }
    if (a >= kTake) {
      const int i = a - kTake;
      const std::string o = m_->ObjName(i);
      const std::string d = m_->Described(i, w_.state[i]);
      ActionSpec s{a,
                   fmt::format("take the {} from the {}", o, m_->RecName(w_.at)),
                   {"take the " + o, "take " + o, "pick up the " + o, "grab the " + o}};
      if (d != o) s.aliases.push_back("take the " + d);
      return s;
    }
    if (a >= kClose) {
      const std::string r = m_->RecName(a - kClose);
      return {a, "close the " + r, {"close " + r, "shut the " + r}};
    }
    if (a >= kOpen) {
      const std::string r = m_->RecName(a - kOpen);
      return {a, "open the " + r, {"open " + r, "look in the " + r}};
    }
    if (a >= kGoRec) {
      const std::string r = m_->RecName(a - kGoRec);
      return {a, "go to the " + r, {"go to " + r, "walk to the " + r, "approach the " + r}};
    }
    const std::string room = m_->RoomName(a - kGoRoom);
    return {a,
            "go to the " + room,
            {room, "go to " + room, "enter the " + room, "walk to the " + room}};
  }

  std::shared_ptr<const HouseLayout> m_;
  World w_;
  ActionId last_ = kNoAction;  // for AfterstateText only; not part of Hash()
  int put_ = -1;               // the object the last put placed (AfterstateText only)
};

// The env: its facts, its rules, and a state per seed.
std::unique_ptr<Env> MakeHouseholdEnv(const HouseParams& p, std::array<TaskLists, 2> tasks) {
  auto shared = std::make_shared<const std::array<TaskLists, 2>>(std::move(tasks));
  return std::make_unique<SimpleEnv>(
      EnvInfo{"household",
              "ALFWorld-like household: find, clean, heat, cool, slice, examine, place",
              p.step_limit, true},
      "You are in a house. Go to a room to see its receptacles, and go to a receptacle to see "
      "what is on or in it; closed ones must be opened first. You hold one object at a time. "
      "The microwave or stove burner heats what you hold, the fridge cools it, the sink basin "
      "cleans it; with the knife in hand you can slice food where it lies; turn on a desk lamp "
      "to look at what you hold under it. Complete the goal.",
      [p, shared](uint64_t seed) -> std::unique_ptr<State> {
        return std::make_unique<HouseholdState>(
            Generate(p, (*shared)[static_cast<int>(SplitOf(seed))], seed));
      });
}

const BuiltInEnv kRegister(
    "household",
    "ALFWorld-like household: receptacles, object states, one hand; unseen (object, receptacle) "
    "pairs in the test split",
    [](ConfigNode c) {
      HouseParams p;
      c.Get("rooms", p.rooms, "rooms in the house (the kitchen is always one)",
            IntRange{1, kMaxRooms});
      c.Get("receptacles", p.receptacles, "receptacles per room",
            IntRange{kMinRecsPerRoom, kMaxRecsPerRoom});
      c.Get("distractors", p.distractors, "objects besides the task object and the knife",
            IntRange{0, kMaxDistractors});
      c.Get("tasks", p.tasks, "task families to draw from: pick, clean, heat, cool, slice, light");
      c.Get("step_limit", p.step_limit, "episodes are truncated after this many actions",
            IntRange{1, 100000});
      // The oracle assumes the shortest solution is optimal: a positive reward, no step bonus.
      c.Get("success_reward", p.success_reward, "reward for completing the goal",
            Range::Positive());
      c.Get("step_cost", p.step_cost, "cost subtracted on every action", Range::NonNegative());

      const std::vector<std::string> names(kFamilies.begin(), kFamilies.end());
      if (p.tasks.empty())
        throw ConfigError(fmt::format("{}: env.tasks is empty", c.Where("tasks")),
                          fmt::format("list some of: {}", Join(names, ", ")));
      std::vector<int> families;
      for (const auto& t : p.tasks) {
        auto it = std::find(names.begin(), names.end(), t);
        if (it == names.end())
          throw ConfigError(
              fmt::format("{}: unknown task family '{}' in env.tasks", c.Where("tasks"), t),
              fmt::format("{}families: {}", DidYouMean(t, names), Join(names, ", ")));
        const int f = static_cast<int>(it - names.begin());
        if (std::find(families.begin(), families.end(), f) != families.end())
          throw ConfigError(
              fmt::format("{}: task family '{}' is listed twice in env.tasks", c.Where("tasks"), t),
              "list each family once");
        families.push_back(f);
      }
      const bool knife = std::find(families.begin(), families.end(), kSliceTask) != families.end();
      if (MaxMenuSize(p, knife) > kMaxMenuSize)
        throw ConfigError(
            fmt::format("{}: receptacles = {}, rooms = {}, distractors = {}{} can give menus of "
                        "up to {} actions; a menu holds at most {}",
                        c.Where(), p.receptacles, p.rooms, p.distractors,
                        knife ? " (+ the knife of slice tasks)" : "", MaxMenuSize(p, knife),
                        kMaxMenuSize),
            "use fewer receptacles, rooms or distractors");
      auto tasks = TasksBySplit(families, p.rooms);
      for (Split s : {Split::kTrain, Split::kTest})
        if (tasks[static_cast<int>(s)].empty())
          throw ConfigError(
              fmt::format("{}: no {} task of the families [{}] fits in {} room{}", c.Where(),
                          SplitName(s), Join(p.tasks, ", "), p.rooms, p.rooms == 1 ? "" : "s"),
              "use more rooms (the light family needs a living room or bedroom) or more "
              "families");
      return MakeHouseholdEnv(p, std::move(tasks));
    });

}  // namespace

namespace household {
namespace {
const HouseholdState& AsHousehold(const State& s) {
  const auto* h = dynamic_cast<const HouseholdState*>(&s);
  RLID_CHECK(h != nullptr, "not a household state");
  return *h;
}
}  // namespace

TaskInfo TaskOf(const State& s) {
  const Task& t = AsHousehold(s).layout().task;
  return {kFamilies[t.family], kObjKinds[t.object].name, kRecKinds[t.receptacle].name,
          HeldOutPair(t), HeldOutFamily(t)};
}

std::vector<std::pair<std::string, std::string>> HeldOutObjectReceptacle() {
  std::vector<std::pair<std::string, std::string>> out;
  for (auto [o, k] : HeldOut().object_receptacle)
    out.emplace_back(kObjKinds[o].name, kRecKinds[k].name);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::pair<std::string, std::string>> HeldOutFamilyObject() {
  std::vector<std::pair<std::string, std::string>> out;
  for (auto [f, o] : HeldOut().family_object) out.emplace_back(kFamilies[f], kObjKinds[o].name);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<TaskInfo> TasksOf(Split split, int rooms) {
  std::vector<int> all(kNumFamilies);
  for (int f = 0; f < kNumFamilies; ++f) all[f] = f;
  std::vector<TaskInfo> out;
  const auto tasks = TasksBySplit(all, rooms);
  for (const auto& family : tasks[static_cast<int>(split)])
    for (const Task& t : family)
      out.push_back({kFamilies[t.family], kObjKinds[t.object].name, kRecKinds[t.receptacle].name,
                     HeldOutPair(t), HeldOutFamily(t)});
  return out;
}

std::vector<std::pair<std::string, std::string>> AllObjectReceptacle() {
  std::vector<std::pair<std::string, std::string>> out;
  for (int o = 0; o < kNumObjKinds; ++o)
    for (int k : Objects().combos[o]) out.emplace_back(kObjKinds[o].name, kRecKinds[k].name);
  std::sort(out.begin(), out.end());
  return out;
}

size_t OracleStates(const State& s) { return AsHousehold(s).layout().OracleStates(); }

}  // namespace household
}  // namespace rlid::envs

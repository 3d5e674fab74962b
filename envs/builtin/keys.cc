// keys: a TextWorld-like household. Rooms are joined by doors (Boost.Graph: a
// random spanning tree plus extra doors); some doors are locked and open with
// the key of their colour; keys and the goal object lie on floors and surfaces
// or inside closed containers. The goal is to put the object on a surface in
// a goal room. Only the current room is observed, so facts seen earlier (where
// a key lies) matter later. Oracle: the shared backward search
// (envs/api/shortest_path_oracle.h) over the full hidden state.
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/kruskal_min_spanning_tree.hpp>
#include <cmath>
#include <deque>
#include <iterator>
#include <memory>

#include "core/check.h"
#include "core/hash.h"
#include "core/rng.h"
#include "core/strings.h"
#include "envs/api/menu_state.h"
#include "envs/api/shortest_path_oracle.h"
#include "envs/api/simple_env.h"

namespace rlid::envs {
namespace {

struct RoomKind {
  const char* name;
  const char* surface;
};
constexpr std::array<RoomKind, 10> kRooms = {{{"kitchen", "table"},
                                              {"hallway", "bench"},
                                              {"bedroom", "bed"},
                                              {"bathroom", "shelf"},
                                              {"living room", "sofa"},
                                              {"study", "desk"},
                                              {"pantry", "counter"},
                                              {"garage", "workbench"},
                                              {"cellar", "rack"},
                                              {"attic", "stool"}}};
constexpr std::array<const char*, 8> kContainers = {"chest", "drawer",   "box",    "cabinet",
                                                    "crate", "cupboard", "basket", "trunk"};
constexpr std::array<const char*, 6> kColours = {"red",    "blue",   "green",
                                                 "yellow", "purple", "white"};
constexpr std::array<const char*, 8> kObjects = {"apple",  "book",  "mug",   "vase",
                                                 "candle", "clock", "towel", "plate"};
constexpr int kMaxRooms = static_cast<int>(kRooms.size());
constexpr int kMaxLocks = static_cast<int>(kColours.size());
constexpr int kMaxContainers = static_cast<int>(kContainers.size());
constexpr int kMaxItems = kMaxLocks + 1;  // item 0 is the goal object, item 1+k opens lock k

// Action ids: kind base + index (put: item * 16 + target, target 0 = the
// room's surface, 1 + c = container c).
constexpr ActionId kGo = 0, kUnlock = 100, kOpen = 200, kTake = 300, kDrop = 400, kPut = 1000;

struct KeysParams {
  int rooms = 4;         // number of rooms (2..10)
  int extra_doors = 1;   // doors beyond a spanning tree (loops); default 0 for 2 rooms
  int locked_doors = 1;  // doors locked with a colour key (0..6)
  int containers = 2;    // closed containers placed in rooms (0..8)
  int step_limit = 40;   // >= 3x the longest optimal solution at default sizes
  double success_reward = 1.0;
  double step_cost = 0.01;
};

// Upper bound on the menu size for these parameters: every door of a room,
// every container, take-or-drop for each item, and a put per item and target.
int MaxMenuSize(const KeysParams& p) {
  const int items = p.locked_doors + 1;
  return (p.rooms - 1) + p.containers + items * (2 + p.containers);
}

// The mutable part of an instance. Item locations: kCarried, kUsed (a key
// left in its lock), the floor of room r (2 + r), the surface of room r
// (2 + R + r), container c (2 + 2R + c).
constexpr int8_t kCarried = 0, kUsed = 1;
struct World {
  int8_t room = 0;
  uint8_t locked = 0;   // bit k: lock k is still locked
  uint16_t opened = 0;  // bit c: container c is open
  std::array<int8_t, kMaxItems> loc{};

  // Injective in 53 bits: room 4, locked 6, opened 8, 7 items x 5.
  uint64_t Pack() const {
    uint64_t k = static_cast<uint64_t>(room) | static_cast<uint64_t>(locked) << 4 |
                 static_cast<uint64_t>(opened) << 10;
    for (int i = 0; i < kMaxItems; ++i) k |= static_cast<uint64_t>(loc[i]) << (18 + 5 * i);
    return k;
  }
};

struct Door {
  int a = 0, b = 0;
  int lock = -1;  // lock index, -1 for a door that is never locked
  int Other(int room) const { return room == a ? b : a; }
};

// One generated instance; immutable except for the lazily built oracle table.
struct KeysLayout {
  KeysParams params;
  int num_rooms = 0, num_items = 0, num_containers = 0;
  std::vector<int> room_kind;  // index into kRooms
  std::vector<Door> doors;
  std::vector<std::vector<std::pair<int, int>>> adj;  // per room: (other room, door), by room
  std::vector<int> lock_door, lock_colour;            // per lock
  std::vector<int> container_kind, container_room;    // per container
  int object_kind = 0;
  int goal_room = 0;
  World initial;
  uint64_t fingerprint = 0;

  // Oracle: steps to success (-1: none) of every world reachable from
  // `initial`, by its Pack().
  mutable GoalDistances oracle;

  int8_t Floor(int r) const { return static_cast<int8_t>(2 + r); }
  int8_t Surface(int r) const { return static_cast<int8_t>(2 + num_rooms + r); }
  int8_t InContainer(int c) const { return static_cast<int8_t>(2 + 2 * num_rooms + c); }
  int8_t GoalLoc() const { return Surface(goal_room); }
  // Room of a location on a floor, surface or in a container; -1 otherwise.
  int RoomOf(int8_t loc) const {
    if (loc < 2) return -1;
    if (loc < 2 + num_rooms) return loc - 2;
    if (loc < 2 + 2 * num_rooms) return loc - 2 - num_rooms;
    return container_room[loc - 2 - 2 * num_rooms];
  }
  bool Success(const World& w) const { return w.loc[0] == GoalLoc(); }
  bool Visible(const World& w, int8_t loc) const {
    if (RoomOf(loc) != w.room) return false;
    int c = loc - 2 - 2 * num_rooms;
    return c < 0 || ((w.opened >> c) & 1);
  }
  bool DoorOpen(const World& w, const Door& d) const {
    return d.lock < 0 || !((w.locked >> d.lock) & 1);
  }

  std::string RoomName(int r) const { return kRooms[room_kind[r]].name; }
  std::string SurfaceName(int r) const { return kRooms[room_kind[r]].surface; }
  std::string ContainerName(int c) const { return kContainers[container_kind[c]]; }
  std::string ItemName(int i) const {
    return i == 0 ? std::string(kObjects[object_kind])
                  : std::string(kColours[lock_colour[i - 1]]) + " key";
  }
  std::string ColourOfLock(int k) const { return kColours[lock_colour[k]]; }
  // "on the kitchen table", "in the kitchen chest", "on the kitchen floor".
  std::string Where(int8_t loc) const {
    int r = RoomOf(loc);
    if (loc < 2 + num_rooms) return fmt::format("on the {} floor", RoomName(r));
    if (loc < 2 + 2 * num_rooms) return fmt::format("on the {} {}", RoomName(r), SurfaceName(r));
    return fmt::format("in the {} {}", RoomName(r), ContainerName(loc - 2 - 2 * num_rooms));
  }
  std::string GoalText() const {
    return fmt::format("put the {} on the {} {}", ItemName(0), RoomName(goal_room),
                       SurfaceName(goal_room));
  }

  // The legal actions of a non-terminal world in menu order: go, unlock, open,
  // take, drop, put.
  void LegalMoves(const World& w, std::vector<ActionId>& out) const {
    out.clear();
    for (auto [other, d] : adj[w.room])
      if (DoorOpen(w, doors[d])) out.push_back(kGo + other);
    for (auto [other, d] : adj[w.room]) {
      int k = doors[d].lock;
      if (k >= 0 && ((w.locked >> k) & 1) && w.loc[1 + k] == kCarried) out.push_back(kUnlock + k);
    }
    for (int c = 0; c < num_containers; ++c)
      if (container_room[c] == w.room && !((w.opened >> c) & 1)) out.push_back(kOpen + c);
    for (int i = 0; i < num_items; ++i)
      if (Visible(w, w.loc[i])) out.push_back(kTake + i);
    for (int i = 0; i < num_items; ++i)
      if (w.loc[i] == kCarried) out.push_back(kDrop + i);
    for (int i = 0; i < num_items; ++i) {
      if (w.loc[i] != kCarried) continue;
      out.push_back(kPut + i * 16);
      for (int c = 0; c < num_containers; ++c)
        if (container_room[c] == w.room && ((w.opened >> c) & 1))
          out.push_back(kPut + i * 16 + 1 + c);
    }
  }

  // Applies a legal action; returns whether the goal now holds.
  bool ApplyMove(World& w, ActionId a) const {
    if (a >= kPut) {
      int i = (a - kPut) / 16, t = (a - kPut) % 16;
      w.loc[i] = t == 0 ? Surface(w.room) : InContainer(t - 1);
    } else if (a >= kDrop) {
      w.loc[a - kDrop] = Floor(w.room);
    } else if (a >= kTake) {
      w.loc[a - kTake] = kCarried;
    } else if (a >= kOpen) {
      w.opened = static_cast<uint16_t>(w.opened | 1u << (a - kOpen));
    } else if (a >= kUnlock) {
      int k = a - kUnlock;
      w.locked = static_cast<uint8_t>(w.locked & ~(1u << k));
      w.loc[1 + k] = kUsed;
    } else {
      w.room = static_cast<int8_t>(a - kGo);
    }
    return Success(w);
  }

  // Steps to success from a world (-1: never). On the first call, the search
  // over every world reachable from `initial`; built once per instance
  // (thread-safe), shared by clones.
  int Distance(const World& w) const {
    oracle.BuildOnce(
        initial, [](const World& v) { return v.Pack(); },
        [this](const World& v) { return Success(v); },
        [this](const World& v, std::vector<ActionId>& out) { LegalMoves(v, out); },
        [this](World v, ActionId a) {
          ApplyMove(v, a);
          return v;
        });
    return oracle.Distance(w.Pack());
  }
};

// Rooms reachable from `start` through doors that are not locked in `locked`.
std::vector<bool> Region(const KeysLayout& m, int start, uint8_t locked) {
  std::vector<bool> seen(m.num_rooms, false);
  std::deque<int> queue = {start};
  seen[start] = true;
  while (!queue.empty()) {
    int r = queue.front();
    queue.pop_front();
    for (auto [other, d] : m.adj[r]) {
      int k = m.doors[d].lock;
      if (seen[other] || (k >= 0 && ((locked >> k) & 1))) continue;
      seen[other] = true;
      queue.push_back(other);
    }
  }
  return seen;
}

// Shortest walk between rooms through doors not locked in `locked` (-1: none).
int Walk(const KeysLayout& m, int from, int to, uint8_t locked) {
  std::vector<int> d(m.num_rooms, -1);
  std::deque<int> queue = {from};
  d[from] = 0;
  while (!queue.empty()) {
    int r = queue.front();
    queue.pop_front();
    for (auto [other, door] : m.adj[r]) {
      int k = m.doors[door].lock;
      if (d[other] >= 0 || (k >= 0 && ((locked >> k) & 1))) continue;
      d[other] = d[r] + 1;
      queue.push_back(other);
    }
  }
  return d[to];
}

// Room kinds: the first `num_rooms` of a random order of kRooms.
void DrawRoomKinds(KeysLayout& m, Rng& rng) {
  auto kinds = rng.Permutation(kMaxRooms);
  m.room_kind.assign(kinds.begin(), kinds.begin() + m.num_rooms);
}

// Doors: a random spanning tree of the complete graph on rooms (Kruskal
// over distinct random weights) plus extra doors among the other pairs.
void DrawDoors(KeysLayout& m, int extra_doors, Rng& rng) {
  const int R = m.num_rooms;
  using Graph =
      boost::adjacency_list<boost::vecS, boost::vecS, boost::undirectedS, boost::no_property,
                            boost::property<boost::edge_weight_t, int>>;
  using Edge = boost::graph_traits<Graph>::edge_descriptor;
  std::vector<std::pair<int, int>> pairs;
  for (int a = 0; a < R; ++a)
    for (int b = a + 1; b < R; ++b) pairs.emplace_back(a, b);
  std::vector<int> weights = rng.Permutation(static_cast<int>(pairs.size()));
  Graph g(pairs.begin(), pairs.end(), weights.begin(), R);
  std::vector<Edge> tree;
  boost::kruskal_minimum_spanning_tree(g, std::back_inserter(tree));
  std::vector<bool> used(pairs.size(), false);
  for (const Edge& e : tree) {
    int a = static_cast<int>(boost::source(e, g)), b = static_cast<int>(boost::target(e, g));
    m.doors.push_back({std::min(a, b), std::max(a, b), -1});
    used[std::find(pairs.begin(), pairs.end(), std::make_pair(std::min(a, b), std::max(a, b))) -
         pairs.begin()] = true;
  }
  std::vector<std::pair<int, int>> rest;
  for (size_t i = 0; i < pairs.size(); ++i)
    if (!used[i]) rest.push_back(pairs[i]);
  rng.Shuffle(rest);
  for (int i = 0; i < extra_doors; ++i) m.doors.push_back({rest[i].first, rest[i].second, -1});
}

// Locks: the first `locked_doors` doors of a random order, in distinct random
// colours; then each room's (other room, door) list, sorted.
void DrawLocks(KeysLayout& m, int locked_doors, Rng& rng) {
  auto door_order = rng.Permutation(static_cast<int>(m.doors.size()));
  auto colours = rng.Permutation(kMaxLocks);
  for (int k = 0; k < locked_doors; ++k) {
    m.doors[door_order[k]].lock = k;
    m.lock_door.push_back(door_order[k]);
    m.lock_colour.push_back(colours[k]);
  }
  m.adj.assign(m.num_rooms, {});
  for (int d = 0; d < static_cast<int>(m.doors.size()); ++d) {
    m.adj[m.doors[d].a].emplace_back(m.doors[d].b, d);
    m.adj[m.doors[d].b].emplace_back(m.doors[d].a, d);
  }
  for (auto& list : m.adj) std::sort(list.begin(), list.end());
}

// Containers: distinct random kinds, each in a random room.
void DrawContainers(KeysLayout& m, Rng& rng) {
  auto ckinds = rng.Permutation(kMaxContainers);
  for (int c = 0; c < m.num_containers; ++c) {
    m.container_kind.push_back(ckinds[c]);
    m.container_room.push_back(static_cast<int>(rng.UniformInt(m.num_rooms)));
  }
}

// Somewhere in `rooms`: in one of their containers (half the time, if any) or else
// on the floor (keys) / the surface (the object) of one of them.
int8_t Place(const KeysLayout& m, const std::vector<int>& rooms, bool on_surface, Rng& rng) {
  std::vector<int> boxes;
  for (int c = 0; c < m.num_containers; ++c)
    if (std::find(rooms.begin(), rooms.end(), m.container_room[c]) != rooms.end())
      boxes.push_back(c);
  if (!boxes.empty() && rng.Bernoulli(0.5))
    return m.InContainer(boxes[rng.UniformInt(boxes.size())]);
  int r = rooms[rng.UniformInt(rooms.size())];
  return on_surface ? m.Surface(r) : m.Floor(r);
}

// The rooms r with in[r], ascending.
std::vector<int> RoomsWhere(const std::vector<bool>& in) {
  std::vector<int> out;
  for (int r = 0; r < static_cast<int>(in.size()); ++r)
    if (in[r]) out.push_back(r);
  return out;
}

// A walk through the constructive solution, counted in steps.
struct PlanWalk {
  const KeysLayout& m;
  int here = 0;        // the room the walk stands in
  uint8_t locked = 0;  // bit k: lock k is still locked on the walk
  uint8_t opened = 0;  // bit c: the walk has opened container c
  int steps = 0;

  // Walk to room r, then one action there (unlock, take or put).
  void GoAndAct(int r) {
    steps += Walk(m, here, r, locked) + 1;
    here = r;
  }
  // Walk to loc, open its container if needed, take.
  void Fetch(int8_t loc) {
    GoAndAct(m.RoomOf(loc));
    int c = loc - 2 - 2 * m.num_rooms;
    if (c >= 0 && !((opened >> c) & 1)) {
      opened = static_cast<uint8_t>(opened | 1u << c);
      ++steps;
    }
  }
};

// Places the keys in unlock order (each in the region reachable so far,
// bordering a locked door), walking `plan` through fetching each and opening
// its lock. Returns the rooms the latest region-growing unlock added.
std::vector<int> PlaceKeys(KeysLayout& m, PlanWalk& plan, Rng& rng) {
  World& w = m.initial;
  const int locks = static_cast<int>(m.lock_door.size());
  std::vector<bool> region = Region(m, w.room, plan.locked);
  std::vector<int> last_new;
  for (int step = 0; step < locks; ++step) {
    std::vector<int> frontier;
    for (int k = 0; k < locks; ++k) {
      const Door& d = m.doors[m.lock_door[k]];
      if (((plan.locked >> k) & 1) && (region[d.a] || region[d.b])) frontier.push_back(k);
    }
    RLID_CHECK(!frontier.empty(), "no locked door borders the reachable rooms");
    int k = frontier[rng.UniformInt(frontier.size())];
    w.loc[1 + k] = Place(m, RoomsWhere(region), /*on_surface=*/false, rng);
    plan.Fetch(w.loc[1 + k]);
    const Door& d = m.doors[m.lock_door[k]];
    plan.GoAndAct(region[d.a] ? d.a : d.b);
    plan.locked = static_cast<uint8_t>(plan.locked & ~(1u << k));
    auto grown = Region(m, w.room, plan.locked);
    std::vector<int> added;
    for (int r = 0; r < m.num_rooms; ++r)
      if (grown[r] && !region[r]) added.push_back(r);
    if (!added.empty()) last_new = added;
    region = grown;
  }
  return last_new;
}

// Places the goal object in `pool` (every room when empty), then draws the
// goal room (any other room) and the object's kind.
void PlaceObject(KeysLayout& m, std::vector<int> pool, Rng& rng) {
  if (pool.empty())
    for (int r = 0; r < m.num_rooms; ++r) pool.push_back(r);
  m.initial.loc[0] = Place(m, pool, /*on_surface=*/true, rng);
  int object_room = m.RoomOf(m.initial.loc[0]);
  m.goal_room = static_cast<int>(rng.UniformInt(m.num_rooms - 1));
  if (m.goal_room >= object_room) ++m.goal_room;
  m.object_kind = static_cast<int>(rng.UniformInt(kObjects.size()));
}

// The instance's identity: everything drawn, with the attempt.
uint64_t Fingerprint(const KeysLayout& m, uint64_t attempt) {
  uint64_t h = HashCombine(HashBytes("keys"), attempt);
  for (int r : m.room_kind) h = HashCombine(h, r);
  for (const Door& d : m.doors) h = HashCombine(h, (d.a * 16 + d.b) * 16 + d.lock + 1);
  for (int k : m.lock_colour) h = HashCombine(h, k);
  for (int c = 0; c < m.num_containers; ++c)
    h = HashCombine(h, m.container_kind[c] * 16 + m.container_room[c]);
  h = HashCombine(HashCombine(h, m.object_kind), m.goal_room);
  return HashCombine(h, m.initial.Pack());
}

// One attempt at an instance. Keys are placed in unlock order: key k lies in
// the region reachable once locks before it are open, so every instance is
// solvable. The object lies in the last region a lock opened; the goal
// surface is in another room. `plan_steps` is the length of that constructive
// solution, an upper bound on the optimal length. `locks_matter` says whether
// some room is unreachable without keys (false when every lock is bypassed).
std::shared_ptr<KeysLayout> TryGenerate(const KeysParams& p, uint64_t seed, uint64_t attempt,
                                        int& plan_steps, bool& locks_matter) {
  auto m = std::make_shared<KeysLayout>();
  m->params = p;
  m->num_rooms = p.rooms;
  m->num_items = p.locked_doors + 1;
  m->num_containers = p.containers;
  Rng rng = Rng::Stream(seed, "keys", attempt);
  DrawRoomKinds(*m, rng);
  DrawDoors(*m, p.extra_doors, rng);
  DrawLocks(*m, p.locked_doors, rng);
  DrawContainers(*m, rng);

  World& w = m->initial;
  w.room = static_cast<int8_t>(rng.UniformInt(p.rooms));
  w.locked = static_cast<uint8_t>((1u << p.locked_doors) - 1);
  std::vector<bool> region = Region(*m, w.room, w.locked);
  locks_matter = std::find(region.begin(), region.end(), false) != region.end();
  PlanWalk plan{*m, w.room, w.locked};
  PlaceObject(*m, PlaceKeys(*m, plan, rng), rng);
  plan.Fetch(w.loc[0]);
  plan.GoAndAct(m->goal_room);
  plan_steps = plan.steps;
  m->fingerprint = Fingerprint(*m, attempt);
  return m;
}

// Deterministic regeneration: the first attempt whose constructive solution
// fits the step limit and whose locks cut off some room; if the parameters
// rarely allow a cut (many extra doors, few locks), the first that fits.
std::shared_ptr<const KeysLayout> Generate(const KeysParams& p, uint64_t seed) {
  constexpr int kAttempts = 200, kAttemptsForCut = 50;
  std::shared_ptr<const KeysLayout> fallback;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    int plan = 0;
    bool locks_matter = false;
    auto m = TryGenerate(p, seed, attempt, plan, locks_matter);
    if (plan > p.step_limit) continue;
    if (locks_matter || p.locked_doors == 0) return m;
    if (!fallback) fallback = m;
    if (attempt + 1 >= kAttemptsForCut) return fallback;
  }
  if (fallback) return fallback;
  throw ConfigError(fmt::format("keys: no instance for seed {} is solvable within step_limit = {} "
                                "after {} attempts",
                                seed, p.step_limit, kAttempts),
                    "raise env.step_limit or use fewer rooms/locked doors");
}

class KeysState final : public MenuState, public OracleState, public FactSource {
 public:
  explicit KeysState(std::shared_ptr<const KeysLayout> m)
      : MenuState(m->params.step_limit), m_(std::move(m)), w_(m_->initial) {}

  std::string Observation() const override {
    if (m_->Success(w_))
      return fmt::format("Done: the {} is {}.", m_->ItemName(0), m_->Where(w_.loc[0]));
    const int r = w_.room;
    std::string out =
        fmt::format("Goal: {}.\nYou are in the {}. ", m_->GoalText(), m_->RoomName(r));
    auto on = ItemsAt(m_->Surface(r));
    out += on.empty() ? fmt::format("The {} is empty.", m_->SurfaceName(r))
                      : fmt::format("On the {}: {}.", m_->SurfaceName(r), ListInWords(on));
    for (int c = 0; c < m_->num_containers; ++c) {
      if (m_->container_room[c] != r) continue;
      if (!((w_.opened >> c) & 1)) {
        out += fmt::format(" The {} is closed.", m_->ContainerName(c));
      } else {
        auto in = ItemsAt(m_->InContainer(c));
        out += in.empty()
                   ? fmt::format(" The {} is open and empty.", m_->ContainerName(c))
                   : fmt::format(" The {} is open: {}.", m_->ContainerName(c), ListInWords(in));
      }
    }
    if (auto floor = ItemsAt(m_->Floor(r)); !floor.empty())
      out += fmt::format(" On the floor: {}.", ListInWords(floor));
    std::vector<std::string> doors;
    for (auto [other, d] : m_->adj[r]) {
      int k = m_->doors[d].lock;
      bool locked = k >= 0 && ((w_.locked >> k) & 1);
      doors.push_back(
          locked ? fmt::format("the {} ({} door, locked)", m_->RoomName(other), m_->ColourOfLock(k))
                 : "the " + m_->RoomName(other));
    }
    out += fmt::format("\nDoors lead to {}.\nYou carry {}.", ListInWords(doors),
                       ListInWords(Carried()));
    return out;
  }

  // What the last action did, then where you are and what you carry. Never
  // reveals what the action would let you see (the contents of a container
  // or of a room you enter).
  std::string AfterstateText() const override {
    if (m_->Success(w_))
      return fmt::format("The {} is {}: goal reached.", m_->ItemName(0), m_->Where(w_.loc[0]));
    std::string carry = fmt::format("You carry {}.", ListInWords(Carried()));
    const ActionId a = last_;
    if (a >= kPut) {
      int i = (a - kPut) / 16;
      return fmt::format("The {} is {}. {}", m_->ItemName(i), m_->Where(w_.loc[i]), carry);
    }
    if (a >= kDrop)
      return fmt::format("The {} is {}. {}", m_->ItemName(a - kDrop), m_->Where(w_.loc[a - kDrop]),
                         carry);
    if (a >= kTake) return carry;
    if (a >= kOpen) return fmt::format("The {} is open. {}", m_->ContainerName(a - kOpen), carry);
    if (a >= kUnlock) {
      const Door& d = m_->doors[m_->lock_door[a - kUnlock]];
      return fmt::format("The {} door to the {} is unlocked. {}", m_->ColourOfLock(a - kUnlock),
                         m_->RoomName(d.Other(w_.room)), carry);
    }
    return fmt::format("You are in the {}. {}", m_->RoomName(w_.room), carry);  // go, or the start
  }

  std::unique_ptr<State> Clone() const override { return std::make_unique<KeysState>(*this); }
  uint64_t Hash() const override { return HashCombine(m_->fingerprint, w_.Pack()); }

  std::vector<ActionId> OptimalActions() const override {
    return IsTerminal() ? std::vector<ActionId>{} : ShortestPathActions(*m_, w_, Remaining());
  }
  double OptimalReturn() const override {
    return IsTerminal() ? 0.0 : ShortestPathReturn(*m_, w_, Remaining());
  }

  // What the current room shows: item whereabouts, containers, doors.
  std::vector<std::string> Facts() const override {
    std::vector<std::string> out;
    const int r = w_.room;
    for (int i = 0; i < m_->num_items; ++i)
      if (m_->Visible(w_, w_.loc[i]))
        out.push_back(fmt::format("the {} is {}", m_->ItemName(i), m_->Where(w_.loc[i])));
    for (int c = 0; c < m_->num_containers; ++c) {
      if (m_->container_room[c] != r) continue;
      if (!((w_.opened >> c) & 1))
        out.push_back(
            fmt::format("there is a closed {} in the {}", m_->ContainerName(c), m_->RoomName(r)));
      else if (ItemsAt(m_->InContainer(c)).empty())
        out.push_back(fmt::format("the {} {} is empty", m_->RoomName(r), m_->ContainerName(c)));
    }
    for (auto [other, d] : m_->adj[r]) {
      int k = m_->doors[d].lock;
      if (k >= 0 && ((w_.locked >> k) & 1))
        out.push_back(fmt::format("a locked {} door joins the {} and the {}", m_->ColourOfLock(k),
                                  m_->RoomName(r), m_->RoomName(other)));
      else
        out.push_back(
            fmt::format("a door joins the {} and the {}", m_->RoomName(r), m_->RoomName(other)));
    }
    return out;
  }

 protected:
  std::vector<ActionSpec> Actions() const override {
    return ShortestPathMenu(*m_, w_, [this](ActionId a) { return Spec(a); });
  }

  StepOutcome Transition(ActionId action) override {
    last_ = action;
    return ShortestPathStep(*m_, w_, action);
  }

 private:
  int Remaining() const { return step_limit() - StepCount(); }
  std::vector<std::string> ItemsAt(int8_t loc) const {
    std::vector<std::string> out;
    for (int i = 0; i < m_->num_items; ++i)
      if (w_.loc[i] == loc) out.push_back("the " + m_->ItemName(i));
    return out;
  }
  std::vector<std::string> Carried() const { return ItemsAt(kCarried); }

  ActionSpec Spec(ActionId a) const {
    if (a >= kPut) {
      const int i = (a - kPut) / 16, t = (a - kPut) % 16;
      const std::string item = m_->ItemName(i);
      if (t == 0) {
        const std::string s = m_->SurfaceName(w_.room);
        return {
            a,
            fmt::format("put the {} on the {}", item, s),
            {fmt::format("put {} on {}", item, s), fmt::format("place the {} on the {}", item, s),
             fmt::format("put the {} on the {} {}", item, m_->RoomName(w_.room), s)}};
      }
      const std::string c = m_->ContainerName(t - 1);
      return {a,
              fmt::format("put the {} in the {}", item, c),
              {fmt::format("put {} in {}", item, c), fmt::format("place the {} in the {}", item, c),
               fmt::format("put the {} into the {}", item, c)}};
    }
    if (a >= kDrop) {
      const std::string item = m_->ItemName(a - kDrop);
      return {a, "drop the " + item, {"drop " + item, "put down the " + item, "leave the " + item}};
    }
    if (a >= kTake) {
      const std::string item = m_->ItemName(a - kTake);
      return {a,
              "take the " + item,
              {"take " + item, "pick up the " + item, "get the " + item, "grab the " + item}};
    }
    if (a >= kOpen) {
      const std::string c = m_->ContainerName(a - kOpen);
      return {a, "open the " + c, {"open " + c, "look in the " + c}};
    }
    if (a >= kUnlock) {
      const std::string colour = m_->ColourOfLock(a - kUnlock);
      return {a,
              fmt::format("unlock the {} door", colour),
              {fmt::format("unlock {} door", colour), fmt::format("use the {} key", colour),
               fmt::format("open the {} door", colour)}};
    }
    const std::string room = m_->RoomName(a - kGo);
    return {a,
            "go to the " + room,
            {room, "go to " + room, "enter the " + room, "walk to the " + room}};
  }

  std::shared_ptr<const KeysLayout> m_;
  World w_;
  ActionId last_ = kNoAction;  // for AfterstateText only; not part of Hash()
};

// The env: its facts, its rules, and a state per seed.
std::unique_ptr<Env> MakeKeysEnv(const KeysParams& p) {
  return std::make_unique<SimpleEnv>(
      EnvInfo{"keys", "household: find keys, unlock doors, deliver an object", p.step_limit, true},
      "You are in a house. Doors join rooms; a locked door opens with the key of its colour, "
      "which stays in the lock. Open containers to see inside. You see only the room you are "
      "in. "
      "Complete the goal.",
      [p](uint64_t seed) -> std::unique_ptr<State> {
        return std::make_unique<KeysState>(Generate(p, seed));
      });
}

const BuiltInEnv kRegister(
    "keys", "TextWorld-like household: keys, locked doors, containers, deliver an object",
    [](ConfigNode c) {
      KeysParams p;
      c.Get("rooms", p.rooms, "number of rooms", IntRange{2, kMaxRooms});
      const int max_extra = p.rooms * (p.rooms - 1) / 2 - (p.rooms - 1);
      p.extra_doors = std::min(1, max_extra);
      c.Get("extra_doors", p.extra_doors,
            fmt::format("doors beyond a spanning tree of the rooms (loops; {} rooms have at most "
                        "{} beyond a tree)",
                        p.rooms, max_extra),
            IntRange{0, max_extra});
      c.Get("locked_doors", p.locked_doors,
            "doors locked with a colour key (at most one lock per door and 6 colours)",
            IntRange{0, std::min(kMaxLocks, p.rooms - 1 + p.extra_doors)});
      c.Get("containers", p.containers, "closed containers placed in the rooms",
            IntRange{0, kMaxContainers});
      c.Get("step_limit", p.step_limit, "episodes are truncated after this many actions",
            IntRange{1, 100000});
      // The oracle assumes the shortest solution is optimal: a positive reward, no step bonus.
      c.Get("success_reward", p.success_reward, "reward for completing the goal",
            Range::Positive());
      c.Get("step_cost", p.step_cost, "cost subtracted on every action", Range::NonNegative());
      if (MaxMenuSize(p) > kMaxMenuSize)
        throw ConfigError(
            fmt::format("{}: rooms = {}, locked_doors = {}, containers = {} can give menus of "
                        "up to {} actions; a menu holds at most {}",
                        c.Where(), p.rooms, p.locked_doors, p.containers, MaxMenuSize(p),
                        kMaxMenuSize),
            "use fewer rooms, locked doors or containers");
      return MakeKeysEnv(p);
    });

}  // namespace
}  // namespace rlid::envs

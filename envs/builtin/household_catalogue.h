// The household env's catalogue (envs/builtin/household.cc): room, receptacle
// and object kinds, the task families, the fixed split partition of held-out
// (object, receptacle) and (family, object) pairs, and the tasks each split
// draws from. Data and pure functions of it: no seed, no parameter but the
// house size. Internal to envs/builtin.
#pragma once

#include <array>
#include <cstdint>
#include <iterator>
#include <set>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "envs/api/env.h"

namespace rlid::envs::house {

// ---- the catalogue: room kinds, receptacle kinds, object kinds ------------------

constexpr int kKitchen = 0, kLivingRoom = 1, kBedroom = 2, kBathroom = 3;
constexpr std::array<const char*, 4> kRoomNames = {"kitchen", "living room", "bedroom", "bathroom"};
constexpr int kMaxRooms = static_cast<int>(kRoomNames.size());

// Receptacle flags: closed until opened; what it does to the object you hold
// there; whether a desk lamp may stand on it.
constexpr uint8_t kOpenable = 1, kHeats = 2, kCools = 4, kCleans = 8, kLampHost = 16;
struct RecKind {
  const char* name;
  int room;  // the room kind it stands in (each kind appears at most once per house)
  uint8_t flags;
  const char* prep;  // "in" or "on"
};
constexpr RecKind kRecKinds[] = {
    {"fridge", kKitchen, kOpenable | kCools, "in"},
    {"microwave", kKitchen, kOpenable | kHeats, "in"},
    {"stove burner", kKitchen, kHeats, "on"},
    {"sink basin", kKitchen, kCleans, "in"},
    {"coffee machine", kKitchen, 0, "in"},
    {"countertop", kKitchen, 0, "on"},
    {"cabinet", kKitchen, kOpenable, "in"},
    {"drawer", kKitchen, kOpenable, "in"},
    {"dining table", kKitchen, 0, "on"},
    {"garbage can", kKitchen, 0, "in"},
    {"sofa", kLivingRoom, 0, "on"},
    {"coffee table", kLivingRoom, kLampHost, "on"},
    {"tv stand", kLivingRoom, 0, "on"},
    {"side table", kLivingRoom, kLampHost, "on"},
    {"shelf", kLivingRoom, 0, "on"},
    {"armchair", kLivingRoom, 0, "on"},
    {"bed", kBedroom, 0, "on"},
    {"desk", kBedroom, kLampHost, "on"},
    {"dresser", kBedroom, kLampHost, "on"},
    {"nightstand", kBedroom, kLampHost, "on"},
    {"safe", kBedroom, kOpenable, "in"},
    {"laundry hamper", kBedroom, 0, "in"},
    {"toilet", kBathroom, 0, "on"},
    {"bathtub basin", kBathroom, 0, "in"},
    {"towel holder", kBathroom, 0, "on"},
    {"medicine cabinet", kBathroom, kOpenable, "in"},
    {"vanity", kBathroom, 0, "on"},
    {"shower shelf", kBathroom, 0, "on"},
};
constexpr int kNumRecKinds = static_cast<int>(std::size(kRecKinds));
constexpr int kMinRecsPerRoom = 3, kMaxRecsPerRoom = 6;  // every room kind has >= 6 kinds

// What an object kind allows; kTool marks the knife (never a task object).
constexpr uint8_t kCanClean = 1, kCanHeat = 2, kCanCool = 4, kCanSlice = 8, kCanExamine = 16,
                  kTool = 32;
struct ObjKind {
  const char* name;
  uint8_t caps;
  const char* starts;   // receptacle kinds it may lie on/in at the start, '|'-separated
  const char* targets;  // receptacle kinds a task may ask to put it on/in
};
constexpr uint8_t kCHK = kCanClean | kCanHeat | kCanCool;
constexpr ObjKind kObjKinds[] = {
    // kitchen
    {"mug", kCHK, "countertop|cabinet|dining table|sink basin|coffee machine|shelf",
     "coffee machine|cabinet|countertop|dining table|shelf|desk"},
    {"cup", kCHK, "countertop|cabinet|dining table|sink basin|shelf",
     "cabinet|countertop|dining table|shelf|fridge|microwave"},
    {"plate", kCHK, "countertop|cabinet|dining table|sink basin",
     "cabinet|countertop|dining table|fridge|shelf|coffee table"},
    {"bowl", kCHK, "countertop|cabinet|dining table|fridge|shelf",
     "cabinet|countertop|dining table|fridge|shelf|microwave|coffee table"},
    {"pan", kCHK, "stove burner|countertop|cabinet|sink basin",
     "stove burner|countertop|cabinet|dining table|fridge"},
    {"pot", kCHK, "stove burner|countertop|cabinet|dining table",
     "stove burner|countertop|cabinet|dining table|fridge|shelf"},
    {"egg", kCanHeat | kCanCool, "fridge|countertop|dining table|garbage can",
     "countertop|dining table|fridge|garbage can|microwave|sink basin"},
    {"apple", kCHK | kCanSlice, "fridge|countertop|dining table|garbage can|coffee table",
     "countertop|dining table|fridge|garbage can|microwave|coffee table|side table"},
    {"potato", kCHK | kCanSlice, "fridge|countertop|dining table|garbage can|sink basin",
     "countertop|dining table|fridge|garbage can|microwave|stove burner"},
    {"tomato", kCHK | kCanSlice, "fridge|countertop|dining table|sink basin",
     "countertop|dining table|fridge|garbage can|microwave|cabinet"},
    {"bread", kCanHeat | kCanCool | kCanSlice, "countertop|dining table|fridge|cabinet",
     "countertop|dining table|fridge|garbage can|microwave|cabinet"},
    {"lettuce", kCanClean | kCanCool | kCanSlice, "fridge|countertop|dining table|sink basin",
     "countertop|dining table|fridge|garbage can|cabinet"},
    {"spoon", kCanClean, "drawer|countertop|dining table|sink basin",
     "drawer|countertop|dining table|cabinet|sink basin"},
    {"fork", kCanClean, "drawer|countertop|dining table|sink basin",
     "drawer|countertop|dining table|cabinet"},
    {"spatula", kCanClean, "drawer|countertop|stove burner|sink basin",
     "drawer|countertop|dining table|cabinet"},
    {"kettle", kCanClean | kCanHeat, "stove burner|countertop|cabinet",
     "stove burner|countertop|cabinet|dining table|shelf"},
    {"wine bottle", kCanCool, "fridge|countertop|dining table|cabinet",
     "fridge|countertop|dining table|cabinet|garbage can|coffee table"},
    {"dish sponge", kCanClean, "sink basin|countertop|cabinet|bathtub basin",
     "countertop|cabinet|drawer|sink basin|bathtub basin|vanity"},
    // living room and bedroom
    {"book", kCanExamine, "shelf|desk|sofa|coffee table|side table|bed|nightstand|dresser",
     "shelf|desk|side table|coffee table|bed|dresser|sofa|safe"},
    {"alarm clock", kCanExamine, "desk|nightstand|dresser|shelf|side table",
     "desk|dresser|nightstand|shelf|side table|safe"},
    {"cellphone", kCanExamine, "bed|sofa|desk|nightstand|dresser|coffee table|armchair",
     "bed|desk|dresser|sofa|armchair|safe|drawer"},
    {"remote control", kCanExamine, "sofa|armchair|coffee table|tv stand|side table",
     "sofa|armchair|coffee table|tv stand|side table|drawer"},
    {"keychain", kCanExamine, "coffee table|side table|dresser|desk|tv stand|drawer",
     "safe|drawer|dresser|side table|coffee table|desk"},
    {"pen", kCanExamine, "desk|drawer|dresser|side table|shelf",
     "desk|drawer|dresser|shelf|side table|nightstand"},
    {"pencil", kCanExamine, "desk|drawer|dresser|side table|shelf",
     "desk|drawer|dresser|shelf|coffee table|nightstand"},
    {"credit card", kCanExamine, "desk|dresser|coffee table|drawer|countertop",
     "safe|drawer|desk|dresser|countertop|side table"},
    {"cd", kCanExamine, "desk|shelf|drawer|safe|tv stand",
     "safe|desk|shelf|drawer|tv stand|dresser"},
    {"vase", kCanExamine, "shelf|coffee table|side table|tv stand|dining table",
     "shelf|coffee table|side table|tv stand|dining table|dresser"},
    {"laptop", kCanExamine, "bed|desk|sofa|coffee table|armchair",
     "bed|desk|sofa|armchair|coffee table|dining table"},
    {"pillow", 0, "bed|sofa|armchair", "bed|sofa|armchair|laundry hamper"},
    {"newspaper", kCanExamine, "sofa|coffee table|side table|dining table|armchair",
     "sofa|coffee table|side table|armchair|garbage can|dining table"},
    {"watch", kCanExamine, "dresser|nightstand|desk|side table|safe",
     "safe|dresser|nightstand|desk|side table|drawer"},
    {"statue", kCanExamine, "shelf|coffee table|tv stand|side table|dresser",
     "shelf|coffee table|side table|dresser|desk|tv stand"},
    {"shirt", 0, "laundry hamper|bed|armchair|dresser",
     "laundry hamper|bed|dresser|armchair|drawer"},
    // bathroom
    {"soap bar", kCanClean, "bathtub basin|vanity|toilet|shower shelf|medicine cabinet",
     "bathtub basin|vanity|toilet|shower shelf|medicine cabinet|garbage can"},
    {"cloth", kCanClean, "bathtub basin|vanity|towel holder|medicine cabinet|toilet",
     "bathtub basin|vanity|medicine cabinet|towel holder|toilet|drawer"},
    {"towel", 0, "towel holder|bathtub basin|vanity|bed",
     "towel holder|vanity|bathtub basin|laundry hamper|bed"},
    {"toilet paper", 0, "toilet|vanity|medicine cabinet|shower shelf",
     "toilet|vanity|medicine cabinet|shower shelf|garbage can"},
    {"spray bottle", 0, "toilet|vanity|medicine cabinet|cabinet",
     "toilet|vanity|medicine cabinet|cabinet|garbage can"},
    {"soap bottle", 0, "vanity|shower shelf|countertop|sink basin",
     "vanity|shower shelf|countertop|medicine cabinet|bathtub basin"},
    {"candle", kCanExamine, "vanity|toilet|shower shelf|side table|dining table",
     "vanity|toilet|side table|dining table|shelf|coffee table"},
    // the tool of the slice family
    {"knife", kTool, "countertop|drawer|dining table|sink basin", ""},
};
constexpr int kNumObjKinds = static_cast<int>(std::size(kObjKinds));
constexpr int kKnifeKind = kNumObjKinds - 1;
constexpr int kMaxDistractors = 16;
constexpr int kMaxObjects = 2 + kMaxDistractors;  // the task object, the knife, distractors

// Task families, in ALFWorld's order (pick_two is left out: one hand).
constexpr int kPickTask = 0, kCleanTask = 1, kHeatTask = 2, kCoolTask = 3, kSliceTask = 4,
              kLightTask = 5;
constexpr std::array<const char*, 6> kFamilies = {"pick", "clean", "heat",
                                                  "cool", "slice", "light"};
constexpr int kNumFamilies = static_cast<int>(kFamilies.size());
constexpr std::array<uint8_t, 6> kFamilyCap = {0,        kCanClean, kCanHeat,
                                               kCanCool, kCanSlice, kCanExamine};

// Object states (bits); everything starts at room temperature and whole.
constexpr uint8_t kDirty = 1, kHot = 2, kCold = 4, kSliced = 8;
// The state bits the goal of each family reads (the oracle keeps only these).
constexpr std::array<uint8_t, 6> kGoalBits = {0, kDirty, kHot, kCold, kSliced, 0};

int RecKindByName(std::string_view name);

// The object table with receptacle names resolved to kinds (built once).
struct ObjTable {
  std::array<std::vector<int>, kNumObjKinds> starts, targets;
  // (object, receptacle) pairs of the split partition: the targets, plus the
  // lamp hosts for objects one can examine (the receptacle the lamp stands on).
  std::array<std::vector<int>, kNumObjKinds> combos;
};
const ObjTable& Objects();

// ---- the split partition ----------------------------------------------------------

// Held-out pairs, fixed for all time (they name kinds, not seeds): for each
// object kind, its combos sorted by HashBytes("object/receptacle") and the first
// max(1, (n+1)/4) held out; for each family, the object kinds it can use sorted
// by HashBytes("family/object") and the first max(1, (n+2)/5) held out.
struct Partition {
  std::set<std::pair<int, int>> object_receptacle;  // (object kind, receptacle kind)
  std::set<std::pair<int, int>> family_object;      // (family, object kind)
};
bool Supports(int family, int obj);
const Partition& HeldOut();

// One task: "put a hot egg on the dining table" is {kHeatTask, egg, dining table};
// for kLightTask the receptacle is the one the desk lamp stands on.
struct Task {
  int family = kPickTask;
  int object = 0;      // object kind
  int receptacle = 0;  // receptacle kind
  bool operator<(const Task& o) const {
    return std::tie(family, object, receptacle) < std::tie(o.family, o.object, o.receptacle);
  }
};
bool HeldOutPair(const Task& t);
bool HeldOutFamily(const Task& t);

// Receptacle kinds the family's own appliance uses; a task never asks to
// place the object on/in them ("heat an egg and put it in the microwave").
bool ExcludedTarget(int family, int rec_kind);

// Room kinds a house needs for this task with this start receptacle kind.
int RoomsNeeded(const Task& t, int start);
std::vector<int> FeasibleStarts(const Task& t, int rooms);

// Every task of the given families that fits in `rooms` rooms, by split and
// family (families without a task in a split are left out of it): train
// tasks use no held-out pair, test tasks use a held-out (object, receptacle)
// pair.
using TaskLists = std::vector<std::vector<Task>>;  // per family
std::array<TaskLists, 2> TasksBySplit(const std::vector<int>& families, int rooms);

}  // namespace rlid::envs::house

#include "envs/builtin/household_catalogue.h"

#include <fmt/format.h>

#include <algorithm>

#include "core/check.h"
#include "core/hash.h"
#include "core/strings.h"

namespace rlid::envs::house {

int RecKindByName(std::string_view name) {
  for (int k = 0; k < kNumRecKinds; ++k)
    if (name == kRecKinds[k].name) return k;
  RLID_CHECK(false, "household: unknown receptacle kind '{}' in the object table", name);
  return -1;
}

const ObjTable& Objects() {
  static const ObjTable table = [] {
    ObjTable t;
    for (int o = 0; o < kNumObjKinds; ++o) {
      for (const auto& s : rlid::Split(kObjKinds[o].starts, '|'))
        t.starts[o].push_back(RecKindByName(s));
      if (*kObjKinds[o].targets)
        for (const auto& s : rlid::Split(kObjKinds[o].targets, '|'))
          t.targets[o].push_back(RecKindByName(s));
      t.combos[o] = t.targets[o];
      if (kObjKinds[o].caps & kCanExamine)
        for (int k = 0; k < kNumRecKinds; ++k)
          if ((kRecKinds[k].flags & kLampHost) &&
              std::find(t.combos[o].begin(), t.combos[o].end(), k) == t.combos[o].end())
            t.combos[o].push_back(k);
    }
    return t;
  }();
  return table;
}

bool Supports(int family, int obj) {
  const uint8_t caps = kObjKinds[obj].caps;
  return !(caps & kTool) && (family == kPickTask || (caps & kFamilyCap[family]));
}

const Partition& HeldOut() {
  static const Partition part = [] {
    Partition p;
    auto first_by_hash = [](std::vector<std::pair<uint64_t, int>> keyed, size_t n) {
      std::sort(keyed.begin(), keyed.end());
      std::vector<int> out;
      for (size_t i = 0; i < n && i < keyed.size(); ++i) out.push_back(keyed[i].second);
      return out;
    };
    for (int o = 0; o < kNumObjKinds; ++o) {
      const auto& combos = Objects().combos[o];
      if (combos.empty()) continue;
      std::vector<std::pair<uint64_t, int>> keyed;
      for (int k : combos)
        keyed.emplace_back(HashBytes(fmt::format("{}/{}", kObjKinds[o].name, kRecKinds[k].name)),
                           k);
      for (int k : first_by_hash(keyed, std::max<size_t>(1, (combos.size() + 1) / 4)))
        p.object_receptacle.emplace(o, k);
    }
    for (int f = 0; f < kNumFamilies; ++f) {
      std::vector<std::pair<uint64_t, int>> keyed;
      for (int o = 0; o < kNumObjKinds; ++o)
        if (Supports(f, o))
          keyed.emplace_back(HashBytes(fmt::format("{}/{}", kFamilies[f], kObjKinds[o].name)), o);
      for (int o : first_by_hash(keyed, std::max<size_t>(1, (keyed.size() + 2) / 5)))
        p.family_object.emplace(f, o);
    }
    return p;
  }();
  return part;
}

bool HeldOutPair(const Task& t) {
  return HeldOut().object_receptacle.count({t.object, t.receptacle}) > 0;
}

bool HeldOutFamily(const Task& t) {
  return HeldOut().family_object.count({t.family, t.object}) > 0;
}

bool ExcludedTarget(int family, int rec_kind) {
  const uint8_t f = kRecKinds[rec_kind].flags;
  return (family == kCleanTask && (f & kCleans)) || (family == kHeatTask && (f & kHeats)) ||
         (family == kCoolTask && (f & kCools));
}

int RoomsNeeded(const Task& t, int start) {
  std::set<int> rooms = {kKitchen, kRecKinds[t.receptacle].room, kRecKinds[start].room};
  return static_cast<int>(rooms.size());
}

std::vector<int> FeasibleStarts(const Task& t, int rooms) {
  std::vector<int> out;
  for (int s : Objects().starts[t.object])
    if (s != t.receptacle && RoomsNeeded(t, s) <= rooms) out.push_back(s);
  return out;
}

std::array<TaskLists, 2> TasksBySplit(const std::vector<int>& families, int rooms) {
  std::array<TaskLists, 2> out;
  for (int f : families) {
    std::array<std::vector<Task>, 2> of_family;
    for (int o = 0; o < kNumObjKinds; ++o) {
      if (!Supports(f, o)) continue;
      std::vector<int> recs;
      if (f == kLightTask) {
        for (int k = 0; k < kNumRecKinds; ++k)
          if (kRecKinds[k].flags & kLampHost) recs.push_back(k);
      } else {
        recs = Objects().targets[o];
      }
      for (int k : recs) {
        Task t{f, o, k};
        if (ExcludedTarget(f, k) || FeasibleStarts(t, rooms).empty()) continue;
        if (HeldOutPair(t))
          of_family[static_cast<int>(Split::kTest)].push_back(t);
        else if (!HeldOutFamily(t))
          of_family[static_cast<int>(Split::kTrain)].push_back(t);
      }
    }
    for (int s = 0; s < 2; ++s)
      if (!of_family[s].empty()) out[s].push_back(std::move(of_family[s]));
  }
  return out;
}

}  // namespace rlid::envs::house

// What tests and docs need to see of the `household` env (envs/builtin/household.cc)
// beyond the State API: the task behind a state, the fixed split partition of
// (object, receptacle) and (family, object) pairs, and the oracle's table size.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "envs/api/env.h"

namespace rlid::envs::household {

// The task of an instance: "put a hot egg on the dining table" is
// {"heat", "egg", "dining table"}; for "light" the receptacle is the one the
// desk lamp stands on.
struct TaskInfo {
  std::string family, object, receptacle;
  bool held_out_pair = false;    // (object, receptacle) is held out for the test split
  bool held_out_family = false;  // (family, object) is held out for the test split
};
// InternalError unless `s` is a household state.
TaskInfo TaskOf(const State& s);

// The held-out pairs, fixed for all time (they depend on no parameter or seed):
// (object, receptacle) and (family, object), sorted.
std::vector<std::pair<std::string, std::string>> HeldOutObjectReceptacle();
std::vector<std::pair<std::string, std::string>> HeldOutFamilyObject();
// Every task a seed of `split` can draw in a house of `rooms` rooms (all families).
std::vector<TaskInfo> TasksOf(Split split, int rooms);
// Every (object, receptacle) pair some task can use, sorted.
std::vector<std::pair<std::string, std::string>> AllObjectReceptacle();

// Abstract states in the oracle's table (builds it if needed).
size_t OracleStates(const State& s);

}  // namespace rlid::envs::household

// The precision of a copy of the weights: [policy] dtype (frozen copies) and
// [sampler] dtype (the rollout engine). policy/model/device.h maps it to a
// torch dtype.
#pragma once

#include "core/modes.h"

namespace rlid::policy {

enum class Precision { kFloat32, kBFloat16 };
constexpr auto Spellings(Precision) {
  return ModeNames<Precision>({{Precision::kFloat32, "float32"}, {Precision::kBFloat16, "bfloat16"}});
}

}  // namespace rlid::policy

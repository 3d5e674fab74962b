// SimpleEnv: an Env given by its facts, its rules text and a state factory —
// all a built-in environment needs beyond its State class.
#pragma once

#include <functional>
#include <memory>
#include <string>

#include "envs/api/env.h"

namespace rlid::envs {

class SimpleEnv final : public Env {
 public:
  using Factory = std::function<std::unique_ptr<State>(uint64_t seed)>;
  SimpleEnv(EnvInfo info, std::string instructions, Factory make)
      : info_(std::move(info)), instructions_(std::move(instructions)), make_(std::move(make)) {}
  EnvInfo Info() const override { return info_; }
  std::string Instructions() const override { return instructions_; }
  std::unique_ptr<State> NewState(uint64_t seed) const override { return make_(seed); }

 private:
  EnvInfo info_;
  std::string instructions_;
  Factory make_;
};

}  // namespace rlid::envs

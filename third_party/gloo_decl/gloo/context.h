// Declarations only (see ../README.md): ProcessGroupGloo.hpp holds contexts by
// shared_ptr and names setTimeout in an inline method rlid never calls.
#pragma once
#include <chrono>
#include <memory>
namespace gloo {
class Context {
 public:
  void setTimeout(std::chrono::milliseconds timeout);
};
}  // namespace gloo

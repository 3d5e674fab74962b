// Declarations only (see ../../README.md): the virtual interface that
// ProcessGroupGloo's GlooStore overrides (without the v2 extension), so the
// header parses; rlid never makes a GlooStore.
#pragma once
#include <chrono>
#include <string>
#include <vector>
namespace gloo::rendezvous {
class Store {
 public:
  virtual ~Store() = default;
  virtual void set(const std::string& key, const std::vector<char>& data) = 0;
  virtual std::vector<char> get(const std::string& key) = 0;
  virtual void wait(const std::vector<std::string>& keys) = 0;
  virtual void wait(const std::vector<std::string>& keys,
                    const std::chrono::milliseconds& timeout) = 0;
};
}  // namespace gloo::rendezvous

// Registry<Product, Args...>: name -> factory for self-registering components
// (environments, losses, trainers, CLI commands). A component registers itself
// at the bottom of its own .cc file with a static Registrar. Duplicate names
// are rejected; an unknown name is a ConfigError listing the known names.
// The product type may declare `static constexpr const char* kRegistryKind`
// ("environment", "trainer", ...) to make error messages specific.
#pragma once

#include <fmt/format.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "core/strings.h"

namespace rlid {

template <class Product, class... Args>
class Registry {
 public:
  using Factory = std::function<std::unique_ptr<Product>(Args...)>;
  struct Entry {
    std::string name;
    std::string summary;
    Factory factory;
  };

  static Registry& Global() {
    static Registry registry;
    return registry;
  }

  static const char* Kind() {
    if constexpr (requires { Product::kRegistryKind; }) {
      return Product::kRegistryKind;
    } else {
      return "component";
    }
  }

  void Add(std::string name, std::string summary, Factory factory) {
    if (entries_.count(name))
      throw InternalError(fmt::format("{} '{}' registered twice", Kind(), name),
                          "two components use the same registry name; rename one");
    entries_.emplace(name, Entry{name, std::move(summary), std::move(factory)});
  }

  bool Has(std::string_view name) const { return entries_.count(std::string(name)) > 0; }

  const Entry& Get(std::string_view name) const {
    auto it = entries_.find(std::string(name));
    if (it == entries_.end()) {
      auto names = Names();
      throw ConfigError(fmt::format("unknown {} '{}'{}; known: {}", Kind(), name,
                                    DidYouMean(name, names), Join(names, ", ")));
    }
    return it->second;
  }

  std::unique_ptr<Product> Make(std::string_view name, Args... args) const {
    return Get(name).factory(std::forward<Args>(args)...);
  }

  // Sorted names.
  std::vector<std::string> Names() const {
    std::vector<std::string> out;
    for (const auto& [name, _] : entries_) out.push_back(name);
    return out;
  }
  const std::map<std::string, Entry>& entries() const { return entries_; }

 private:
  std::map<std::string, Entry> entries_;
};

// Registers at static-initialisation time:
//   static const Registrar<Registry<Env, const ConfigNode&>> kReg("maze", "summary", factory);
template <class R>
struct Registrar {
  Registrar(std::string name, std::string summary, typename R::Factory factory) {
    R::Global().Add(std::move(name), std::move(summary), std::move(factory));
  }
};

}  // namespace rlid

// Config modes as types. A key with a fixed set of values ("decoupled" |
// "none") becomes an enum class once, when the config is read; code compares
// enum values, never strings. Each mode states its spellings once, next to the
// enum, as a function found by argument-dependent lookup:
//
//   enum class KlPlacement { kLoss, kReward };
//   constexpr auto Spellings(KlPlacement) {
//     return ModeNames<KlPlacement>({{KlPlacement::kLoss, "loss"}, {KlPlacement::kReward, "reward"}});
//   }
//
// ConfigNode::GetEnum reads such a key (an unknown value is a ConfigError
// naming the choices) and NameOf gives a value's spelling back (resolved
// configs, metrics, messages); fmt prints a mode as its spelling.
#pragma once

#include <fmt/format.h>

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

namespace rlid {

template <typename E>
struct ModeName {
  E value;
  std::string_view name;
};

// The spellings of a mode, in the order the config's docs list them.
template <typename E, size_t N>
constexpr std::array<ModeName<E>, N> ModeNames(const ModeName<E> (&names)[N]) {
  std::array<ModeName<E>, N> out{};
  for (size_t i = 0; i < N; ++i) out[i] = names[i];
  return out;
}

// An enum class with Spellings(E) declared beside it.
template <typename E>
concept Mode = std::is_enum_v<E> && requires(E e) { Spellings(e); };

// The config spelling of `value` ("" for a value with no spelling, which only a
// cast can produce).
template <Mode E>
constexpr std::string_view NameOf(E value) {
  for (const auto& m : Spellings(E{}))
    if (m.value == value) return m.name;
  return {};
}

// The value spelt `name`, or nullopt.
template <Mode E>
constexpr std::optional<E> ParseMode(std::string_view name) {
  for (const auto& m : Spellings(E{}))
    if (m.name == name) return m.value;
  return std::nullopt;
}

// Every spelling of E, in declaration order.
template <Mode E>
std::vector<std::string> NamesOf() {
  std::vector<std::string> out;
  for (const auto& m : Spellings(E{})) out.emplace_back(m.name);
  return out;
}

}  // namespace rlid

// fmt::format("{}", mode) prints its spelling.
template <rlid::Mode E>
struct fmt::formatter<E, char> : fmt::formatter<std::string_view, char> {
  template <typename FormatContext>
  auto format(E value, FormatContext& ctx) const {
    return fmt::formatter<std::string_view, char>::format(rlid::NameOf(value), ctx);
  }
};

#pragma once
/// \file core/names.hpp
/// The stable spellings of an enumeration, looked up both ways from one table. Every `*_name` and
/// `*_from_name` pair of the library is one of these tables, so a name cannot drift between the two.

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace normcheck {

/// A fixed table of (value, spelling) pairs.
template <typename Enum, std::size_t N>
class name_table {
public:
  /// The table's entries, in the order messages list them.
  constexpr explicit name_table(std::array<std::pair<Enum, std::string_view>, N> entries) : entries_(entries) {}

  /// The spelling of `value` ("" for a value outside the table).
  constexpr std::string_view name(Enum value) const noexcept {
    for (const auto& [id, spelled] : entries_)
      if (id == value) return spelled;
    return {};
  }

  /// The value spelled `spelled`, if there is one.
  constexpr std::optional<Enum> find(std::string_view spelled) const noexcept {
    for (const auto& [id, name] : entries_)
      if (name == spelled) return id;
    return std::nullopt;
  }

  /// Every spelling for a message: "a, b or c".
  std::string alternatives() const {
    std::string out;
    for (std::size_t i = 0; i < N; ++i) {
      if (i > 0) out += i + 1 == N ? " or " : ", ";
      out += entries_[i].second;
    }
    return out;
  }

  /// Every spelling, in order (what front ends list: `normcheck names`).
  std::vector<std::string_view> spellings() const {
    std::vector<std::string_view> out;
    for (const auto& entry : entries_) out.push_back(entry.second);
    return out;
  }

  /// The entries, in order.
  constexpr const auto& entries() const noexcept { return entries_; }

private:
  std::array<std::pair<Enum, std::string_view>, N> entries_;
};

template <typename Enum, std::size_t N>
name_table(std::array<std::pair<Enum, std::string_view>, N>) -> name_table<Enum, N>;

}  // namespace normcheck

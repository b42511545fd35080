#pragma once
// The grid of count configurations `prove` walks: one axis per count variable, visited in odometer order.
// Not part of the public API.

#include "normcheck/recipes/recipe.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace normcheck::detail {

struct count_axis {
  count_variable variable;
  std::uint64_t low;
  std::uint64_t high;
};

/// The value of `v` at the point `at` of `axes` (0 when no axis is `v`'s).
inline std::uint64_t value_at(const std::vector<count_axis>& axes, const std::vector<std::uint64_t>& at,
                              count_variable v) {
  for (std::size_t i = 0; i < axes.size(); ++i)
    if (axes[i].variable == v) return at[i];
  return 0;
}

/// Moves `at` to the next point of the grid; false once every point has been visited.
inline bool next_point(const std::vector<count_axis>& axes, std::vector<std::uint64_t>& at) {
  for (std::size_t i = 0; i < axes.size(); ++i) {
    if (at[i] < axes[i].high) {
      ++at[i];
      return true;
    }
    at[i] = axes[i].low;
  }
  return false;
}

/// A count in digits grouped by thousands, as the coverage lines print it: "50,386,860".
inline std::string grouped(const std::string& digits) {
  std::string out;
  out.reserve(digits.size() + digits.size() / 3);
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

inline std::string grouped(std::uint64_t value) { return grouped(std::to_string(value)); }

}  // namespace normcheck::detail

#include "normcheck/gate/observed.hpp"

#include <array>
#include <utility>

namespace normcheck {

namespace {
// Each dtype with its name and the number of significand bits p (u = 2^-p); 0 means exact.
constexpr std::array<std::tuple<dtype, std::string_view, unsigned>, 5> dtypes{{
    {dtype::float64, "float64", 53},
    {dtype::float32, "float32", 24},
    {dtype::bfloat16, "bfloat16", 8},
    {dtype::float16, "float16", 11},
    {dtype::exact, "exact", 0},
}};
}  // namespace

std::string_view dtype_name(dtype type) noexcept {
  for (const auto& [t, name, bits] : dtypes)
    if (t == type) return name;
  return "exact";
}

std::optional<dtype> dtype_from_name(std::string_view name) noexcept {
  for (const auto& [t, spelled, bits] : dtypes)
    if (spelled == name) return t;
  return std::nullopt;
}

rational unit_roundoff(dtype type) {
  for (const auto& [t, name, bits] : dtypes) {
    if (t != type) continue;
    if (bits == 0) return rational(0);
    rational u = 1;
    u /= rational(integer(1) << bits);
    return u;
  }
  return rational(0);
}

}  // namespace normcheck

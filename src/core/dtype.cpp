#include "normcheck/core/dtype.hpp"

#include "normcheck/core/names.hpp"

namespace normcheck {

namespace {

constexpr name_table dtype_names{std::array<std::pair<dtype, std::string_view>, 5>{{
    {dtype::float64, "float64"},
    {dtype::float32, "float32"},
    {dtype::bfloat16, "bfloat16"},
    {dtype::float16, "float16"},
    {dtype::exact, "exact"},
}}};

// Bits of the significand p (u = 2^-p); 0 for exact arithmetic.
constexpr unsigned significand_bits(dtype type) noexcept {
  switch (type) {
    case dtype::float64: return 53;
    case dtype::float32: return 24;
    case dtype::bfloat16: return 8;
    case dtype::float16: return 11;
    case dtype::exact: return 0;
  }
  return 0;
}

}  // namespace

std::string_view dtype_name(dtype type) noexcept { return dtype_names.name(type); }

std::optional<dtype> dtype_from_name(std::string_view name) noexcept { return dtype_names.find(name); }

std::string dtype_alternatives() { return dtype_names.alternatives(); }

std::vector<std::string_view> dtype_spellings() { return dtype_names.spellings(); }

rational unit_roundoff(dtype type) {
  const unsigned bits = significand_bits(type);
  if (bits == 0) return rational(0);
  rational u = 1;
  u /= rational(integer(1) << bits);
  return u;
}

}  // namespace normcheck

#include "normcheck/gate/observed.hpp"

#include "normcheck/core/names.hpp"

namespace normcheck {

namespace {

constexpr name_table non_finite_names{std::array<std::pair<non_finite, std::string_view>, 3>{{
    {non_finite::nan, "nan"},
    {non_finite::positive_infinity, "inf"},
    {non_finite::negative_infinity, "-inf"},
}}};

}  // namespace

std::string_view non_finite_name(non_finite value) noexcept { return non_finite_names.name(value); }

std::optional<non_finite> non_finite_from_name(std::string_view name) noexcept { return non_finite_names.find(name); }

std::string to_string(const observed_value& value) {
  if (const rational* number = std::get_if<rational>(&value)) return to_string(*number);
  return std::string(non_finite_name(std::get<non_finite>(value)));
}

}  // namespace normcheck

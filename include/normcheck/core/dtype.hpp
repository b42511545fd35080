#pragma once
/// \file core/dtype.hpp
/// The floating-point types training code computes in, and the unit roundoff of each: what an error
/// bound needs to know about a dtype.

#include "normcheck/core/rational.hpp"

#include <optional>
#include <string_view>
#include <vector>

namespace normcheck {

/// The arithmetic the training code computed in.
enum class dtype { float64, float32, bfloat16, float16, exact };

/// "float64", "float32", "bfloat16", "float16" or "exact".
std::string_view dtype_name(dtype type) noexcept;
/// The dtype spelled `name`, if any.
std::optional<dtype> dtype_from_name(std::string_view name) noexcept;
/// Every spelling, for messages: "float64, float32, bfloat16, float16 or exact".
std::string dtype_alternatives();
/// Every spelling, in order.
std::vector<std::string_view> dtype_spellings();
/// The unit roundoff u of a dtype (2^-53 for float64, 2^-24 float32, 2^-8 bfloat16, 2^-11 float16, 0 exact).
rational unit_roundoff(dtype type);

}  // namespace normcheck

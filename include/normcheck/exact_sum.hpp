#pragma once
/// \file exact_sum.hpp
/// Exact summation of literals without a gcd per addition: decimal and binary literals are
/// integers scaled by 2^a·5^b, so they are added as integers at the smallest scale seen so far
/// and turned into one canonical rational at the end. Fractions p/q are summed as rationals.

#include "normcheck/rational.hpp"

#include <cstdint>

namespace normcheck {

/// A running exact sum of literals.
class exact_sum {
public:
  /// Adds one literal.
  void add(const literal_parts& term);
  /// Adds an exact rational.
  void add(const rational& term);
  /// The exact sum, canonical.
  rational value() const;

private:
  integer scaled_;          // Σ of scaled literals, in units of 2^exp2_ · 5^exp5_
  std::int64_t exp2_ = 0;
  std::int64_t exp5_ = 0;
  bool any_scaled_ = false;
  rational fractions_;
};

}  // namespace normcheck

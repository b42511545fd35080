#pragma once
/// \file core/compact_rational.hpp
/// A rational kept in 16 bytes where it is small: the sums the partition keeps per group, of which a dump of
/// per-group measurements holds hundreds of thousands. A `rational` is the object and two allocations, about
/// a hundred bytes; most of these values have a numerator and a denominator of 64 bits each.

#include "normcheck/core/rational.hpp"

#include <cstdint>

namespace normcheck {

/// An exact value stored compactly: inline when its numerator fits in a signed and its denominator in an
/// unsigned 64-bit integer, on the heap otherwise. Reading it gives the same canonical value it was given;
/// arithmetic is done on that `rational`. Copies are deep.
class compact_rational {
public:
  /// 0.
  compact_rational() noexcept {}
  explicit compact_rational(const rational& value);
  compact_rational(const compact_rational& other);
  compact_rational(compact_rational&& other) noexcept;
  compact_rational& operator=(const compact_rational& other);
  compact_rational& operator=(compact_rational&& other) noexcept;
  ~compact_rational();

  /// The value, canonical.
  rational value() const;
  /// Whether the value is 0 (without reading it).
  bool is_zero() const noexcept { return denominator_ == 1 && numerator_ == 0; }
  /// Whether the value is held inline, without an allocation of its own.
  bool is_inline() const noexcept { return denominator_ != 0; }

  /// The same value: compared field by field where both are inline (every value that fits is held inline, and
  /// canonical values are equal exactly when their parts are).
  friend bool operator==(const compact_rational& a, const compact_rational& b);

private:
  union {
    std::int64_t numerator_ = 0;
    rational* heap_;  // when denominator_ == 0
  };
  std::uint64_t denominator_ = 1;  // 0: the value is *heap_
};

}  // namespace normcheck

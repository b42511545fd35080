#pragma once
/// \file core/counts.hpp
/// Counts of one update (valid tokens, padded positions, sequences, groups) are machine integers, kept exact
/// by one bound: no count and no sum of counts exceeds `max_count`. Every sum of counts goes through
/// `add_counts`, which throws instead of wrapping, so a count is either exact or the update is rejected.

#include <cstdint>

namespace normcheck {

/// The most positions (valid tokens and padding, over all ranks) one update may hold: 2^62. Below it every
/// count, every sum of two counts and every difference of two counts fits a signed 64-bit integer.
inline constexpr std::uint64_t max_count = std::uint64_t{1} << 62;

/// a + b, exactly; throws `error(limit_exceeded)` when the sum exceeds `max_count`.
std::uint64_t add_counts(std::uint64_t a, std::uint64_t b);

}  // namespace normcheck

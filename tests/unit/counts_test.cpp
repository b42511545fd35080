// Counts (core/counts.hpp): add_counts is the exact sum up to 2^62 and limit_exceeded beyond it, for any
// two 64-bit counts, near and past 2^62 and 2^64 included; a wrapping or unchecked add is caught.

#include "normcheck/core/counts.hpp"
#include "normcheck/core/errors.hpp"

#include <doctest/doctest.h>
#include <rapidcheck.h>

#include <cstdint>
#include <functional>
#include <optional>

namespace {

using normcheck::max_count;

// The oracle's width: 128 bits hold any sum of two 64-bit counts (__extension__: a GCC and Clang type).
__extension__ using uint128 = unsigned __int128;

// A count drawn near the bounds that matter (0, 2^62, 2^63, 2^64) as often as anywhere.
rc::Gen<std::uint64_t> counts_near_bounds() {
  return rc::gen::oneOf(rc::gen::arbitrary<std::uint64_t>(), rc::gen::inRange<std::uint64_t>(0, 1000),
                        rc::gen::map(rc::gen::inRange<std::uint64_t>(0, 2000),
                                     [](std::uint64_t d) { return max_count - 1000 + d; }),
                        rc::gen::map(rc::gen::inRange<std::uint64_t>(0, 1000),
                                     [](std::uint64_t d) { return std::uint64_t{1} << 63 | d; }),
                        rc::gen::map(rc::gen::inRange<std::uint64_t>(0, 1000),
                                     [](std::uint64_t d) { return ~std::uint64_t{0} - d; }));
}

// What `add` gives a and b: its sum, or nothing when it threw limit_exceeded.
using adder = std::function<std::uint64_t(std::uint64_t, std::uint64_t)>;
std::optional<std::uint64_t> outcome(const adder& add, std::uint64_t a, std::uint64_t b) {
  try {
    return add(a, b);
  } catch (const normcheck::error& e) {
    RC_ASSERT(e.code() == normcheck::error_code::limit_exceeded);
    return std::nullopt;
  }
}

// The law: the exact sum (computed in 128 bits) when it is at most 2^62, limit_exceeded otherwise.
bool exact_or_rejected(const adder& add) {
  return rc::check("add_counts is exact up to 2^62 and limit_exceeded beyond", [&] {
    const std::uint64_t a = *counts_near_bounds();
    const std::uint64_t b = *counts_near_bounds();
    const uint128 exact = static_cast<uint128>(a) + b;
    const std::optional<std::uint64_t> got = outcome(add, a, b);
    if (exact <= max_count) {
      RC_ASSERT(got.has_value());
      RC_ASSERT(static_cast<uint128>(*got) == exact);
    } else {
      RC_ASSERT(!got.has_value());
    }
  });
}

}  // namespace

TEST_CASE("add_counts is the exact sum up to 2^62 and limit_exceeded beyond, for any two counts") {
  CHECK(exact_or_rejected(normcheck::add_counts));
  CHECK(normcheck::add_counts(max_count - 1, 1) == max_count);
  CHECK_THROWS_AS(normcheck::add_counts(max_count, 1), normcheck::error);
  CHECK_THROWS_AS(normcheck::add_counts(~std::uint64_t{0}, 2), normcheck::error);  // 2^64 + 1 would wrap to 1
}

TEST_CASE("the counts law catches an add that wraps and one that checks only for 64-bit overflow") {
  const adder wrapping = [](std::uint64_t a, std::uint64_t b) { return a + b; };
  const adder overflow_only = [](std::uint64_t a, std::uint64_t b) -> std::uint64_t {
    if (b > ~std::uint64_t{0} - a) throw normcheck::error(normcheck::error_code::limit_exceeded, "overflow");
    return a + b;
  };
  CHECK_FALSE(exact_or_rejected(wrapping));
  CHECK_FALSE(exact_or_rejected(overflow_only));
}

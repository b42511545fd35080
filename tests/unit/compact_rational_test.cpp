// Compact rationals (core/compact_rational.hpp): a value reads back exactly whether it is held inline (both
// parts in 64 bits) or on the heap, copies and moves keep it, and two are equal exactly when their values
// are; a store that keeps 32 bits of the denominator, and an equality that compares heap values by address,
// are caught.

#include "normcheck/core/compact_rational.hpp"

#include <doctest/doctest.h>
#include <rapidcheck.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

namespace {

using normcheck::compact_rational;
using normcheck::integer;
using normcheck::rational;

// A value drawn where the storage has edges: numerators at the ends of 64 bits and past them, denominators
// up to 2^64 − 1 and past it, small fractions, 0.
rc::Gen<rational> compact_rational_values() {
  const auto numerator = rc::gen::oneOf(
      rc::gen::map(rc::gen::arbitrary<std::int64_t>(), [](std::int64_t n) { return integer(n); }),
      rc::gen::map(rc::gen::inRange<std::int64_t>(-50, 50), [](std::int64_t n) { return integer(n); }),
      rc::gen::element(integer(std::numeric_limits<std::int64_t>::min()),
                       integer(std::numeric_limits<std::int64_t>::max()),
                       integer(std::numeric_limits<std::int64_t>::max()) + 1,
                       integer(std::numeric_limits<std::int64_t>::min()) - 1));
  const auto denominator = rc::gen::oneOf(
      rc::gen::map(rc::gen::arbitrary<std::uint64_t>(), [](std::uint64_t d) { return integer(d == 0 ? 1 : d); }),
      rc::gen::map(rc::gen::inRange<std::uint64_t>(1, 50), [](std::uint64_t d) { return integer(d); }),
      rc::gen::element(integer(std::numeric_limits<std::uint64_t>::max()),
                       integer(std::numeric_limits<std::uint64_t>::max()) + 2,
                       integer(std::numeric_limits<std::uint32_t>::max()) + 2));
  return rc::gen::apply([](const integer& p, const integer& q) { return normcheck::fraction(p, q); }, numerator,
                        denominator);
}

// What a store gives back for a value, and whether it calls two stored values equal.
struct rational_store {
  std::function<rational(const rational&)> read_back;
  std::function<bool(const rational&, const rational&)> equal;
};

const rational_store compact_held{
    [](const rational& v) {
      const compact_rational held(v);
      compact_rational copied(held);            // copies and moves keep the value
      compact_rational moved(std::move(copied));
      compact_rational assigned;
      assigned = moved;
      return assigned.value();
    },
    [](const rational& a, const rational& b) { return compact_rational(a) == compact_rational(b); }};

// The laws: every value reads back exactly (canonical), and two stored values are equal exactly when their
// values are.
bool compact_laws_hold(const rational_store& s) {
  return rc::check("a compact rational reads back its value, and == follows the values", [&] {
    const std::vector<rational> pool = *rc::gen::container<std::vector<rational>>(3, compact_rational_values());
    const rational a = *rc::gen::elementOf(pool);
    const rational b = *rc::gen::elementOf(pool);
    const rational read = s.read_back(a);
    RC_ASSERT(read == a);
    RC_ASSERT(normcheck::is_canonical(read));
    RC_ASSERT(s.equal(a, b) == (a == b));
  });
}

}  // namespace

TEST_CASE("a compact rational reads back every value, inline or on the heap, and compares by value") {
  CHECK(compact_laws_hold(compact_held));
  CHECK(compact_rational().is_zero());
  CHECK(compact_rational(rational(3) / 7).is_inline());
  const rational wide = rational(integer(std::numeric_limits<std::uint64_t>::max()) + 2) / 3;
  CHECK_FALSE(compact_rational(wide).is_inline());
  CHECK(compact_rational(wide) == compact_rational(wide));
  CHECK_FALSE(compact_rational(wide) == compact_rational(rational(1) / 3));
}

TEST_CASE("the laws catch a store that keeps 32 bits of the denominator and an equality by address") {
  const rational_store short_denominator{
      [](const rational& v) {
        const integer kept = denominator(v) & integer(std::numeric_limits<std::uint32_t>::max());
        return normcheck::fraction(numerator(v), kept == 0 ? integer(1) : kept);
      },
      compact_held.equal};
  const rational_store by_address{compact_held.read_back, [](const rational& a, const rational& b) {
                           const compact_rational x(a);
                           const compact_rational y(b);
                           return x.is_inline() && y.is_inline() ? x == y : &a == &b;
                         }};
  CHECK_FALSE(compact_laws_hold(short_denominator));
  CHECK_FALSE(compact_laws_hold(by_address));
}

// Observed vectors (gate/observed.hpp): a component reads back as exactly the value stored, whether it is
// held compactly (m·2⁻ᵏ) or whole, and two components are the same exactly when their values are equal; a
// store that goes through a double, or keeps too few bits of the shift, is caught.

#include "normcheck/gate/observed.hpp"

#include <doctest/doctest.h>
#include <rapidcheck.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

namespace {

using normcheck::integer;
using normcheck::non_finite;
using normcheck::observed_value;
using normcheck::observed_vector;
using normcheck::rational;

// 2^k exactly.
integer power_of_two(unsigned k) {
  integer p = 1;
  p <<= k;
  return p;
}

// A value a dump can hold, drawn where the storage has edges: m·2⁻ᵏ with m anywhere in 64 bits (its ends
// included) and k up to 2000, integers past 2⁶³, fractions that are no such value, NaN and the infinities.
rc::Gen<observed_value> observed_values() {
  const auto mantissa = rc::gen::oneOf(
      rc::gen::arbitrary<std::int64_t>(), rc::gen::inRange<std::int64_t>(-1000, 1000),
      rc::gen::element(std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::int64_t>::max()));
  const auto dyadic = rc::gen::apply(
      [](std::int64_t m, unsigned k) -> observed_value { return rational(integer(m)) / rational(power_of_two(k)); },
      mantissa, rc::gen::oneOf(rc::gen::inRange(0u, 70u), rc::gen::inRange(0u, 2001u)));
  const auto wide = rc::gen::apply(
      [](std::int64_t m, unsigned k) -> observed_value {
        return rational(integer(m) * power_of_two(64) + 1) / rational(power_of_two(k));
      },
      rc::gen::arbitrary<std::int64_t>(), rc::gen::inRange(0u, 300u));
  const auto fraction = rc::gen::apply(
      [](std::int64_t p, std::int64_t q) -> observed_value {
        return rational(integer(p)) / rational(integer(q) * 2 + 3);
      },
      rc::gen::inRange<std::int64_t>(-100000, 100000), rc::gen::inRange<std::int64_t>(0, 100000));
  const auto special = rc::gen::element<observed_value>(non_finite::nan, non_finite::positive_infinity,
                                                        non_finite::negative_infinity);
  return rc::gen::oneOf(dyadic, wide, fraction, special);
}

// What a store gives back for the values put in, in order.
using store = std::function<std::vector<observed_value>(const std::vector<observed_value>&)>;

std::vector<observed_value> compact_store(const std::vector<observed_value>& values) {
  observed_vector stored;
  for (const observed_value& v : values) stored.push_back(v);
  return stored.values();
}

// The law: every value reads back exactly, NaN and the infinities as themselves.
bool reads_back(const store& put) {
  return rc::check("an observed vector reads back every value it was given", [&] {
    const std::vector<observed_value> values = *rc::gen::container<std::vector<observed_value>>(observed_values());
    RC_ASSERT(put(values) == values);
  });
}

}  // namespace

TEST_CASE("an observed vector reads back exactly every value it was given") {
  CHECK(reads_back(compact_store));
  observed_vector v;
  v.push_back(rational(-1) / 131072);
  v.push_back(rational(1) / 3);
  v.push_back(non_finite::nan);
  CHECK(v.size() == 3);
  CHECK(v[0] == observed_value(rational(-1) / 131072));
  CHECK(v[1] == observed_value(rational(1) / 3));
  CHECK(v.is_finite(1));
  CHECK_FALSE(v.is_finite(2));
}

TEST_CASE("the reading law catches a store through a double and one that keeps 8 bits of the shift") {
  const store through_double = [](const std::vector<observed_value>& values) {
    std::vector<observed_value> out;
    for (const observed_value& v : values) {
      if (const rational* number = std::get_if<rational>(&v)) out.emplace_back(rational(number->convert_to<double>()));
      else out.push_back(v);
    }
    return out;
  };
  const store short_shift = [](const std::vector<observed_value>& values) {
    std::vector<observed_value> out;
    for (const observed_value& v : values) {
      const rational* number = std::get_if<rational>(&v);
      integer d = number ? denominator(*number) : integer(0);
      if (number && d > 1 && (d & (d - 1)) == 0 && msb(d) >= 256) {
        out.emplace_back(rational(numerator(*number)) / rational(power_of_two(static_cast<unsigned>(msb(d)) % 256)));
      } else {
        out.push_back(v);
      }
    }
    return out;
  };
  CHECK_FALSE(reads_back(through_double));
  CHECK_FALSE(reads_back(short_shift));
}

TEST_CASE("two components are the same exactly when their values are equal") {
  CHECK(rc::check("same_at and == follow the values", [] {
    // Drawn from a few values, so that equal ones meet often.
    const std::vector<observed_value> pool = *rc::gen::container<std::vector<observed_value>>(3, observed_values());
    const auto drawn = rc::gen::container<std::vector<observed_value>>(8, rc::gen::elementOf(pool));
    const std::vector<observed_value> a = *drawn;
    const std::vector<observed_value> b = *drawn;
    observed_vector x;
    observed_vector y;
    for (std::size_t i = 0; i < a.size(); ++i) {
      x.push_back(a[i]);
      y.push_back(b[i]);
    }
    for (std::size_t i = 0; i < a.size(); ++i) RC_ASSERT(x.same_at(i, y) == (a[i] == b[i]));
    RC_ASSERT((x == y) == (a == b));
  }));
}

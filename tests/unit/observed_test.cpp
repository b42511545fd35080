// Observed vectors (gate/observed.hpp): a component reads back as exactly the value stored, whether it is
// held compactly (m·2⁻ᵏ) or whole, and two components are the same exactly when their values are equal; a
// store that goes through a double, or keeps too few bits of the shift, is caught.

#include "normcheck/gate/observed.hpp"

#include "normcheck/core/exact_sum.hpp"
#include "normcheck/documents/field_reader.hpp"

#include <doctest/doctest.h>
#include <rapidcheck.h>

#include <bit>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
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

namespace {

// A component written as float.hex() writes it, or as a short decimal: what a dump holds.
rc::Gen<std::string> component_texts() {
  const auto hex = rc::gen::apply(
      [](bool negative, std::uint64_t m, int e) {
        return std::string(negative ? "-" : "") + "0x" + normcheck::integer(m).str(0, std::ios_base::hex) + "p" +
               std::to_string(e);
      },
      rc::gen::arbitrary<bool>(),
      rc::gen::oneOf(rc::gen::arbitrary<std::uint64_t>(), rc::gen::inRange<std::uint64_t>(0, 64)),
      rc::gen::inRange(-1100, 80));
  const auto decimal = rc::gen::apply([](std::int64_t m, int e) { return std::to_string(m) + "e" + std::to_string(e); },
                                      rc::gen::inRange<std::int64_t>(-1000, 1000), rc::gen::inRange(-5, 5));
  return rc::gen::oneOf(hex, decimal);
}

// How a component's text goes into a vector: appended, and the bits a budget of kept digits counts for it.
using component_reader = std::function<std::uint64_t(const std::string&, observed_vector&)>;

// The fast path: read into machine integers and appended as m·2⁻ᵏ where it is one, else as a rational.
std::uint64_t read_fast(const std::string& text, observed_vector& into) {
  const normcheck::literal_form form = normcheck::literal_form::json_string;
  normcheck::machine_literal fast;
  if (normcheck::scan_machine_literal(text, form, {}, fast))
    if (const std::optional<std::uint64_t> bits = into.push_back(fast)) return *bits;
  const rational value = normcheck::read_number(text, form);
  into.push_back(value);
  return normcheck::exact_budget::kept_bits(value);
}

// The law: the fast path keeps the cell and counts the bits that the rational of the same text gives.
bool reads_as_rationals(const component_reader& read) {
  return rc::check("a component read fast is the component read as a rational, with the same kept bits", [&] {
    const std::vector<std::string> texts = *rc::gen::container<std::vector<std::string>>(component_texts());
    observed_vector fast;
    observed_vector slow;
    for (const std::string& text : texts) {
      const std::uint64_t bits = read(text, fast);
      const rational value = normcheck::read_number(text, normcheck::literal_form::json_string);
      slow.push_back(value);
      RC_ASSERT(bits == normcheck::exact_budget::kept_bits(value));
    }
    RC_ASSERT(fast.values() == slow.values());
    RC_ASSERT(fast == slow);
  });
}

}  // namespace

TEST_CASE("a component read into machine integers is the one read as a rational, and so are its kept bits") {
  CHECK(reads_as_rationals(read_fast));
  // Caught: a reader that counts the bits as written (the significand and the exponent), not canonical.
  const component_reader as_written = [](const std::string& text, observed_vector& into) -> std::uint64_t {
    normcheck::machine_literal fast;
    read_fast(text, into);
    if (!normcheck::scan_machine_literal(text, normcheck::literal_form::json_string, {}, fast)) return 0;
    return static_cast<std::uint64_t>(std::bit_width(fast.significand)) +
           static_cast<std::uint64_t>(fast.exp2 < 0 ? -fast.exp2 : fast.exp2) + 1;
  };
  CHECK_FALSE(reads_as_rationals(as_written));
}

TEST_CASE("the sum of a vector's finite components is exact, whatever its cells hold") {
  const auto law = [](const std::function<rational(const observed_vector&)>& sum) {
    return rc::check("finite_sum adds every number, NaN and the infinities left out", [&] {
      const std::vector<observed_value> values = *rc::gen::container<std::vector<observed_value>>(observed_values());
      observed_vector v;
      rational expected;
      for (const observed_value& value : values) {
        v.push_back(value);
        if (const rational* number = std::get_if<rational>(&value)) expected += *number;
      }
      RC_ASSERT(sum(v) == expected);
    });
  };
  CHECK(law([](const observed_vector& v) { return v.finite_sum(); }));
  // Caught: a sum through doubles.
  CHECK_FALSE(law([](const observed_vector& v) {
    double total = 0;
    for (std::size_t i = 0; i < v.size(); ++i)
      if (v.is_finite(i)) total += std::get<rational>(v[i]).convert_to<double>();
    return rational(total);
  }));
}

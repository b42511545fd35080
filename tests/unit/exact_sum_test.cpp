// Exact summation of literals (exact_sum.hpp), against the sum of the literals read one by one as rationals.

#include "normcheck/core/exact_sum.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace {

using normcheck::integer;
using normcheck::literal_form;
using normcheck::rational;

struct literal {
  std::string text;
  literal_form form;
};

literal bare(std::string text) { return {std::move(text), literal_form::json_number}; }
literal quoted(std::string text) { return {std::move(text), literal_form::json_string}; }

// The exact_sum of the literals, added as literal parts.
rational summed(const std::vector<literal>& terms) {
  normcheck::exact_sum sum;
  for (const literal& term : terms) sum.add(normcheck::parse_literal(term.text, term.form));
  return sum.value();
}

// The oracle: each literal read as a rational, added with rational arithmetic.
rational oracle(const std::vector<literal>& terms) {
  rational total;
  for (const literal& term : terms) total += normcheck::read_number(term.text, term.form);
  return total;
}

integer integer_power(unsigned base, unsigned exponent) {
  integer value = boost::multiprecision::pow(integer(base), exponent);
  return value;
}

}  // namespace

TEST_CASE("an empty sum is zero") {
  normcheck::exact_sum sum;
  CHECK(sum.value() == 0);
  CHECK(normcheck::is_canonical(sum.value()));
}

TEST_CASE("decimals are summed exactly") {
  const std::vector<literal> terms{bare("0.1"), bare("0.2")};
  CHECK(summed(terms) == rational(integer(3), integer(10)));
  CHECK(summed(terms) == oracle(terms));
}

TEST_CASE("decimal, hexadecimal and fractional literals sum to the sum of their values") {
  const std::vector<literal> terms{quoted("0x1.8p+1"), quoted("-3/2"), bare("0.5"), quoted("1/3"),
                                   bare("2.50e+2"),    quoted("-0x1p-3"), quoted("0.1"), quoted("-7/6")};
  // 3 - 3/2 + 1/2 + 1/3 + 250 - 1/8 + 1/10 - 7/6 = 252 - 5/6 - 1/40 = 30137/120
  CHECK(summed(terms) == rational(integer(30137), integer(120)));
  CHECK(summed(terms) == oracle(terms));
  CHECK(normcheck::is_canonical(summed(terms)));
}

TEST_CASE("exponents far apart are summed exactly") {
  const std::vector<literal> terms{bare("1e-300"), bare("1e300")};
  CHECK(summed(terms) == rational(integer_power(10, 600) + 1, integer_power(10, 300)));
  CHECK(summed(terms) == oracle(terms));
  const std::vector<literal> reversed{bare("1e300"), bare("1e-300")};
  CHECK(summed(reversed) == summed(terms));
  const std::vector<literal> binary{quoted("0x1p-1074"), quoted("0x1p+1023"), bare("1e-400"), bare("1e400")};
  CHECK(summed(binary) == oracle(binary));
}

TEST_CASE("negative terms cancel exactly") {
  const std::vector<literal> cancel{bare("-2.5"), quoted("0x1.4p+1"), bare("1e-400"), bare("-1e-400")};
  CHECK(summed(cancel) == 0);
  CHECK(normcheck::to_string(summed(cancel)) == "0");
  const std::vector<literal> negative{bare("-1e-300"), bare("-1e300"), quoted("-1/7"), quoted("-0x1p-60")};
  CHECK(summed(negative) < 0);
  CHECK(summed(negative) == oracle(negative));
}

TEST_CASE("the sum does not depend on the order of the terms") {
  std::vector<literal> terms{bare("1.5e-20"), quoted("0x1.fp-30"), quoted("-5/3"), bare("-7e12"), bare("0"),
                             bare("-0.000001"), quoted("0x7p+40"), bare("123456789012345678901234567890")};
  const rational expected = oracle(terms);
  std::sort(terms.begin(), terms.end(), [](const literal& a, const literal& b) { return a.text < b.text; });
  do {
    REQUIRE(summed(terms) == expected);
  } while (std::next_permutation(terms.begin(), terms.begin() + 5,
                                 [](const literal& a, const literal& b) { return a.text < b.text; }));
}

TEST_CASE("rationals and literals mix in one sum") {
  normcheck::exact_sum sum;
  sum.add(normcheck::parse_literal("0.25", literal_form::json_number));
  sum.add(rational(integer(1), integer(3)));
  sum.add(normcheck::parse_literal("-0x1p-2", literal_form::json_string));
  sum.add(rational(integer(-1), integer(6)));
  CHECK(sum.value() == rational(integer(1), integer(6)));
  CHECK(normcheck::is_canonical(sum.value()));
}

TEST_CASE("zero terms at extreme scales do not change the sum") {
  const std::vector<literal> terms{bare("0e-10000"), bare("3"), quoted("0x0p+10000"), bare("-0.0")};
  CHECK(summed(terms) == 3);
}

TEST_CASE("a tree sum of rationals is their sum for every count of terms") {
  // Counts around powers of two exercise every carry of the binary counter; a tree that dropped or
  // repeated a block would be off by that block, which the distinct denominators expose.
  for (int count : {0, 1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 33, 64, 100}) {
    normcheck::tree_sum tree;
    rational naive;
    std::vector<rational> terms;
    for (int i = 1; i <= count; ++i) {
      const rational term = rational(i % 3 == 0 ? -i : i) / (2 * i + 1);
      tree.add(term);
      naive += term;
      terms.push_back(term);
    }
    CAPTURE(count);
    CHECK(tree.value() == naive);
    CHECK(tree.empty() == (count == 0));
    CHECK(normcheck::sum_of(std::move(terms)) == naive);
  }
}

TEST_CASE("a tree sum may be read and added to again") {
  normcheck::tree_sum tree;
  tree.add(rational(1) / 3);
  CHECK(tree.value() == rational(1) / 3);
  tree.add(rational(1) / 6);
  tree.add(rational(1) / 2);
  CHECK(tree.value() == 1);
}

TEST_CASE("many distinct scales, through the buckets and past them, sum exactly in every order") {
  // Decimal and binary exponents far more numerous than the buckets, signed, some of them beyond 64 bits,
  // given in three orders: the scales spilled out of the buckets meet only when the sum is asked for.
  std::vector<literal> terms;
  for (int e = -300; e <= 300; e += 7) {
    terms.push_back(bare((e % 2 ? "-" : "") + std::to_string(3 + (e + 300) % 11) + "e" + std::to_string(e)));
    terms.push_back(quoted("0x1.8p" + std::to_string(e)));
    terms.push_back(bare("123456789012345678901234567890e" + std::to_string(-e)));
  }
  terms.push_back(quoted("5/7"));
  const rational expected = oracle(terms);
  CHECK(summed(terms) == expected);
  CHECK(normcheck::is_canonical(summed(terms)));
  std::reverse(terms.begin(), terms.end());
  CHECK(summed(terms) == expected);
  std::rotate(terms.begin(), terms.begin() + static_cast<std::ptrdiff_t>(terms.size() / 3), terms.end());
  CHECK(summed(terms) == expected);
}

TEST_CASE("machine literals at every scale from -10000 to 10000 sum to the sum of their values") {
  // The shape that made the common-scale sum quadratic: every exponent, finest first.
  normcheck::exact_sum sum;
  const normcheck::number_limits limits;
  // Σ 10^(e + 10000) over the exponents, in units of 10^-10000: 20001 ones, (10^20001 − 1)/9.
  for (int e = 10000; e >= -10000; e -= 1) {
    normcheck::machine_literal fast;
    const std::string text = "1e" + std::to_string(e);
    REQUIRE(normcheck::scan_machine_literal(text, literal_form::json_number, limits, fast));
    sum.add(fast);
  }
  const integer numerator = (integer_power(10, 20001) - 1) / 9;
  const rational expected = normcheck::fraction(numerator, integer_power(10, 10000));
  CHECK(sum.value() == expected);
}

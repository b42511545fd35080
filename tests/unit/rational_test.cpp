// Literal reading, canonical printing and approximation (rational.hpp). Expected values are built
// independently of the reader: from integer parts and powers, never from the literal's text.

#include "normcheck/core/errors.hpp"
#include "normcheck/core/rational.hpp"

#include <doctest/doctest.h>

#include <chrono>
#include <stdexcept>
#include <string>
#include <vector>

namespace {

using normcheck::error;
using normcheck::integer;
using normcheck::literal_form;
using normcheck::number_limits;
using normcheck::rational;

rational number(std::string_view text) { return normcheck::read_number(text, literal_form::json_number); }
rational string_number(std::string_view text) { return normcheck::read_number(text, literal_form::json_string); }

integer power(unsigned base, unsigned exponent) {
  integer value = boost::multiprecision::pow(integer(base), exponent);
  return value;
}

rational ratio(const integer& p, const integer& q) { return rational(p, q); }

// The code a literal is rejected with, or "accepted".
std::string rejection(std::string_view text, literal_form form, const number_limits& limits = {}) {
  try {
    (void)normcheck::read_number(text, form, limits);
  } catch (const error& e) {
    return std::string(normcheck::code_name(e.code()));
  }
  return "accepted";
}

std::string string_rejection(std::string_view text) { return rejection(text, literal_form::json_string); }
std::string number_rejection(std::string_view text) { return rejection(text, literal_form::json_number); }

}  // namespace

TEST_CASE("integers of any size are read exactly") {
  CHECK(number("0") == 0);
  CHECK(number("-7") == -7);
  CHECK(number("123") == 123);
  CHECK(number("1" + std::string(299, '0')) == rational(power(10, 299)));
  integer nines = power(10, 300) - 1;
  CHECK(number("-" + std::string(300, '9')) == rational(-nines));
  CHECK(string_number("12345678901234567890123456789012345678901234567890") ==
        rational(integer("12345678901234567890123456789012345678901234567890")));
}

TEST_CASE("decimals with exponents are read from their text, never through a double") {
  CHECK(number("0.1") == ratio(1, 10));
  CHECK(number("0.3") == ratio(3, 10));
  rational tenth = number("0.1");
  rational fifth = number("0.2");
  rational sum = tenth + fifth;
  CHECK(sum == number("0.3"));
  CHECK(number("2.50e+2") == 250);
  CHECK(number("2.5E2") == 250);
  CHECK(number("-1.25e-3") == ratio(-1, 800));
  CHECK(number("0.5e1") == 5);
  CHECK(number("1e-400") == ratio(1, power(10, 400)));
  CHECK(number("1e10000") == rational(power(10, 10000)));
  CHECK(number("1e-10000") == ratio(1, power(10, 10000)));
  CHECK(string_number("0.1") == ratio(1, 10));
  CHECK(string_number("-2.5e-1") == ratio(-1, 4));
}

TEST_CASE("fractions are read inside strings and canonicalized") {
  CHECK(string_number("-3/2") == ratio(-3, 2));
  CHECK(string_number("6/4") == ratio(3, 2));
  CHECK(string_number("0/5") == 0);
  CHECK(string_number("7/1") == 7);
  CHECK(normcheck::to_string(string_number("100/10")) == "10");
}

TEST_CASE("hexadecimal floats are read inside strings") {
  CHECK(string_number("0x1.8p+1") == 3);
  CHECK(string_number("-0x1p-3") == ratio(-1, 8));
  CHECK(string_number("0x0p+0") == 0);
  CHECK(string_number("0X1.8P+1") == 3);
  CHECK(string_number("0x1.8p1") == 3);
  CHECK(string_number("0xAp0") == 10);
  // float.hex(0.1): the double nearest 1/10, which is not 1/10.
  rational nearest_tenth = string_number("0x1.999999999999ap-4");
  CHECK(nearest_tenth == ratio(integer("3602879701896397"), integer("36028797018963968")));
  CHECK(nearest_tenth != ratio(1, 10));
  // The largest and the smallest positive double.
  CHECK(string_number("0x1.fffffffffffffp+1023") == rational((power(2, 53) - 1) * power(2, 971)));
  CHECK(string_number("0x1p-1074") == ratio(1, power(2, 1074)));
}

TEST_CASE("a literal is taken apart into significand, denominator and powers") {
  const normcheck::literal_parts decimal = normcheck::parse_literal("2.50e+2", literal_form::json_number);
  CHECK_FALSE(decimal.negative);
  CHECK(decimal.significand == 250);
  CHECK(decimal.denominator == 1);
  CHECK(decimal.exp2 == 0);
  CHECK(decimal.exp5 == 0);

  const normcheck::literal_parts hex = normcheck::parse_literal("-0x1.8p+1", literal_form::json_string);
  CHECK(hex.negative);
  CHECK(hex.significand == 24);
  CHECK(hex.exp2 == -3);
  CHECK(hex.exp5 == 0);

  const normcheck::literal_parts fraction = normcheck::parse_literal("-3/2", literal_form::json_string);
  CHECK(fraction.negative);
  CHECK(fraction.significand == 3);
  CHECK(fraction.denominator == 2);
  CHECK(fraction.exp2 == 0);

  const normcheck::literal_parts tiny = normcheck::parse_literal("1.5e-400", literal_form::json_number);
  CHECK(tiny.significand == 15);
  CHECK(tiny.exp2 == -401);
  CHECK(tiny.exp5 == -401);
}

TEST_CASE("fractions and hexadecimal floats are rejected as bare JSON numbers") {
  CHECK(number_rejection("3/2") == "bad_number");
  CHECK(number_rejection("0x1.8p+1") == "bad_number");
  CHECK(number_rejection("0x0p+0") == "bad_number");
  CHECK(string_rejection("3/2") == "accepted");
  CHECK(string_rejection("0x1.8p+1") == "accepted");
}

TEST_CASE("an empty literal is bad_number") {
  CHECK(number_rejection("") == "bad_number");
  CHECK(string_rejection("") == "bad_number");
  CHECK(string_rejection("-") == "bad_number");
}

TEST_CASE("NaN and infinities are bad_number") {
  for (const char* text : {"NaN", "nan", "-nan", "Infinity", "-Infinity", "inf", "-inf", "INF"}) {
    CAPTURE(text);
    CHECK(number_rejection(text) == "bad_number");
    CHECK(string_rejection(text) == "bad_number");
  }
}

TEST_CASE("zero denominators are bad_number") {
  CHECK(string_rejection("1/0") == "bad_number");
  CHECK(string_rejection("0/0") == "bad_number");
  CHECK(string_rejection("-5/0") == "bad_number");
  CHECK(string_rejection("1/000") == "bad_number");
}

TEST_CASE("malformed decimals are bad_number") {
  for (const char* text : {"01", "-01", "00", "1.", "-1.", ".5", "-.5", "+1", "1e", "1e+", "1e-", "1E",
                           "1.5x", "1 ", " 1", "--1", "1.2.3", "1e5e5", "1e1.5", "0.1.", "１"}) {
    CAPTURE(text);
    CHECK(number_rejection(text) == "bad_number");
    CHECK(string_rejection(text) == "bad_number");
  }
}

TEST_CASE("malformed fractions are bad_number") {
  for (const char* text : {"1/", "/2", "1/2/3", "3/-2", "-3/-2", "1.5/2", "1/2e3", "1/2 ", "+1/2", "1//2"}) {
    CAPTURE(text);
    CHECK(string_rejection(text) == "bad_number");
  }
}

TEST_CASE("fractions with leading zeros are bad_number") {
  // README: leading zeros are rejected; they are in decimals, and must be in fractions too.
  CHECK(string_rejection("01/2") == "bad_number");
  CHECK(string_rejection("1/02") == "bad_number");
  CHECK(string_rejection("-00/3") == "bad_number");
}

TEST_CASE("malformed hexadecimal floats are bad_number") {
  for (const char* text : {"0x1.8", "0x1", "0x", "-0x", "0xp+1", "0x.p1", "0x1.8p", "0x1.8p+", "0x1.8q+1",
                           "0x1.8p+1x", "0x1g", "0x1p1.5", "+0x1p1", "0x-1p1", "0x1p 1"}) {
    CAPTURE(text);
    CHECK(string_rejection(text) == "bad_number");
  }
}

TEST_CASE("trailing junk after a valid literal is bad_number") {
  for (const char* text : {"12abc", "1e5 ", "3/2x", "0x1p1z", "7\n", "1,5"}) {
    CAPTURE(text);
    CHECK(string_rejection(text) == "bad_number");
  }
}

TEST_CASE("a rejection says what is allowed") {
  try {
    (void)string_number("NaN");
    FAIL("NaN was accepted");
  } catch (const error& e) {
    CHECK(e.code() == normcheck::error_code::bad_number);
    CHECK(e.message().find("NaN") != std::string::npos);
    CHECK(e.message().find("p/q") != std::string::npos);
    CHECK(e.message().find("0x1.8p+1") != std::string::npos);
  }
}

TEST_CASE("decimal exponents beyond the limit are number_out_of_range") {
  CHECK(number_rejection("1e10000") == "accepted");
  CHECK(number_rejection("1e-10000") == "accepted");
  CHECK(number_rejection("1e10001") == "number_out_of_range");
  CHECK(number_rejection("1e-10001") == "number_out_of_range");
  CHECK(number_rejection("1e+10001") == "number_out_of_range");
  CHECK(number_rejection("1e999999999") == "number_out_of_range");
  CHECK(number_rejection("1e-" + std::string(100, '9')) == "number_out_of_range");
  CHECK(string_rejection("2.5E20000") == "number_out_of_range");
}

TEST_CASE("binary exponents beyond the limit are number_out_of_range") {
  CHECK(string_rejection("0x1p+10000") == "accepted");
  CHECK(string_rejection("0x1p-10000") == "accepted");
  CHECK(string_rejection("0x1p+10001") == "number_out_of_range");
  CHECK(string_rejection("0x1p-10001") == "number_out_of_range");
  CHECK(string_rejection("0x1p-99999999") == "number_out_of_range");
  CHECK(string_rejection("-0x1.8p+" + std::string(100, '9')) == "number_out_of_range");
}

TEST_CASE("huge exponents are rejected fast, without building the power") {
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < 100; ++i) {
    REQUIRE(number_rejection("1e999999999") == "number_out_of_range");
    REQUIRE(string_rejection("0x1p-99999999") == "number_out_of_range");
    REQUIRE(string_rejection("1e99999999999999999999999999999") == "number_out_of_range");
  }
  const std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - start;
  CHECK(elapsed.count() < 1.0);
}

TEST_CASE("the exponent limit is configurable") {
  number_limits limits;
  limits.max_exponent = 5;
  CHECK(rejection("1e5", literal_form::json_number, limits) == "accepted");
  CHECK(rejection("1e6", literal_form::json_number, limits) == "number_out_of_range");
  CHECK(rejection("0x1p-6", literal_form::json_string, limits) == "number_out_of_range");
}

TEST_CASE("literals with too many digits are number_out_of_range") {
  CHECK(number_rejection(std::string(100000, '7')) == "accepted");
  CHECK(number_rejection(std::string(100001, '7')) == "number_out_of_range");
  CHECK(number_rejection("1." + std::string(100000, '0')) == "number_out_of_range");
  CHECK(string_rejection(std::string(50001, '1') + "/" + std::string(50000, '3')) == "number_out_of_range");
  CHECK(string_rejection("0x" + std::string(100001, 'f') + "p0") == "number_out_of_range");
  number_limits limits;
  limits.max_digits = 3;
  CHECK(rejection("1.234", literal_form::json_number, limits) == "number_out_of_range");
  CHECK(rejection("12.3", literal_form::json_number, limits) == "accepted");
}

TEST_CASE("canonical printing is p/q or p") {
  CHECK(normcheck::to_string(string_number("-3/2")) == "-3/2");
  CHECK(normcheck::to_string(string_number("6/4")) == "3/2");
  CHECK(normcheck::to_string(string_number("-0x1p-3")) == "-1/8");
  CHECK(normcheck::to_string(number("2.50e+2")) == "250");
  CHECK(normcheck::to_string(number("0.1")) == "1/10");
  CHECK(normcheck::to_string(number("-1e-3")) == "-1/1000");
  CHECK(normcheck::to_string(number("1e30")) == "1" + std::string(30, '0'));
}

TEST_CASE("negative zero prints 0") {
  for (const char* text : {"-0", "-0.0", "-0e5", "-0.000e-7"}) {
    CAPTURE(text);
    CHECK(normcheck::to_string(number(text)) == "0");
    CHECK_FALSE(normcheck::parse_literal(text, literal_form::json_number).negative);
  }
  for (const char* text : {"-0x0p+0", "-0x0.000p-3", "-0/5", "-0"}) {
    CAPTURE(text);
    CHECK(normcheck::to_string(string_number(text)) == "0");
    CHECK_FALSE(normcheck::parse_literal(text, literal_form::json_string).negative);
  }
}

TEST_CASE("every value read is canonical") {
  for (const char* text : {"0", "-0", "6/4", "-10/4", "100/10", "0/7", "-0x10p-8", "0x1.8p+1", "2.50e+2", "0.125",
                           "-1e-400", "1e400", "0x1p-1074", "123456789/987654321", "-0x0p+0"}) {
    CAPTURE(text);
    CHECK(normcheck::is_canonical(string_number(text)));
  }
}

TEST_CASE("is_canonical rejects a rational that is not in lowest terms") {
  rational reducible;
  mpq_ptr q = reducible.backend().data();
  mpz_set_ui(mpq_numref(q), 2);
  mpz_set_ui(mpq_denref(q), 4);
  CHECK_FALSE(normcheck::is_canonical(reducible));
  mpz_set_si(mpq_numref(q), 1);
  mpz_set_si(mpq_denref(q), -2);
  CHECK_FALSE(normcheck::is_canonical(reducible));
  mpz_set_si(mpq_denref(q), 2);
  CHECK(normcheck::is_canonical(reducible));
}

TEST_CASE("approximate prints a short correctly rounded decimal") {
  CHECK(normcheck::approximate(ratio(-3, 2)) == "-1.5");
  CHECK(normcheck::approximate(ratio(1, 3)) == "0.333333");
  CHECK(normcheck::approximate(ratio(2, 3)) == "0.666667");
  CHECK(normcheck::approximate(ratio(-2, 3)) == "-0.666667");
  CHECK(normcheck::approximate(0) == "0");
  CHECK(normcheck::approximate(-2) == "-2");
  CHECK(normcheck::approximate(ratio(1, 8)) == "0.125");
  CHECK(normcheck::approximate(number("12345.678")) == "12345.7");
  CHECK(normcheck::approximate(number("0.00001")) == "0.00001");
}

TEST_CASE("approximate uses e-notation for tiny and large values") {
  CHECK(normcheck::approximate(number("1e-400")) == "1e-400");
  CHECK(normcheck::approximate(number("-1.25e-400")) == "-1.25e-400");
  CHECK(normcheck::approximate(number("1e-6")) == "1e-6");
  CHECK(normcheck::approximate(number("1e400")) == "1e400");
  CHECK(normcheck::approximate(number("1e20")) == "1e20");
  CHECK(normcheck::approximate(number("123456789012345678")) == "1.23457e17");
  CHECK(normcheck::approximate(ratio(power(10, 400), 3)) == "3.33333e399");
}

TEST_CASE("approximate rounds half away from zero and carries into the next digit") {
  CHECK(normcheck::approximate(number("999999.5")) == "1000000");
  CHECK(normcheck::approximate(number("0.9999995")) == "1");
  CHECK(normcheck::approximate(ratio(1, 8), 2) == "0.13");
  CHECK(normcheck::approximate(ratio(-1, 8), 2) == "-0.13");
  CHECK(normcheck::approximate(ratio(2, 3), 3) == "0.667");
  CHECK(normcheck::approximate(ratio(2, 3), 1) == "0.7");
}

TEST_CASE("shorten leaves short text alone and cuts long digit runs to their ends") {
  CHECK(normcheck::shorten("-3/2") == "-3/2");
  const std::string numerator = power(2, 200).str();    // 61 digits
  const std::string denominator = power(3, 100).str();  // 48 digits
  REQUIRE(numerator.size() == 61);
  REQUIRE(denominator.size() == 48);
  CHECK(normcheck::shorten("-" + numerator + "/" + denominator) ==
        "-16069380…35301376 (61 digits)/51537752…07522001 (48 digits)");
  const std::string just_long = std::string(70, '5');
  CHECK(normcheck::shorten(just_long) == "55555555…55555555 (70 digits)");
  CHECK(normcheck::shorten(just_long, 100) == just_long);
}

TEST_CASE("fraction builds the canonical rational of a numerator and a denominator") {
  CHECK(normcheck::fraction(2, 4) == ratio(1, 2));
  CHECK(normcheck::is_canonical(normcheck::fraction(2, 4)));
  CHECK(normcheck::to_string(normcheck::fraction(2, 4)) == "1/2");
  CHECK(normcheck::to_string(normcheck::fraction(1, -2)) == "-1/2");
  CHECK(normcheck::to_string(normcheck::fraction(0, -7)) == "0");
  const integer big = power(10, 40);
  CHECK(normcheck::to_string(normcheck::fraction(big * 6, big * 4)) == "3/2");
  CHECK_THROWS_AS(normcheck::fraction(1, 0), std::domain_error);
}

TEST_CASE("the reason for the door: Boost builds a rational from text without canonicalizing it") {
  // Boost 1.74's mpq_rational("2/4") keeps 2/4 (mpq_set_str does not canonicalize); read_number does.
  const rational from_text("2/4");
  const bool boost_canonicalizes = normcheck::is_canonical(from_text);
  MESSAGE("Boost's string constructor " << (boost_canonicalizes ? "canonicalizes" : "does not canonicalize"));
  CHECK(normcheck::is_canonical(string_number("2/4")));
  CHECK(string_number("2/4") == normcheck::fraction(1, 2));
}

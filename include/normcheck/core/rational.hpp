#pragma once
/// \file core/rational.hpp
/// Exact numbers: the one door through which text becomes a rational, and how rationals are printed.
///
/// Invariant, assumed and preserved by every function of normcheck: a `rational` is canonical,
/// that is, numerator and denominator are coprime and the denominator is positive (zero is 0/1).
/// GMP's arithmetic keeps it; building one from a string or from parts does not always (Boost 1.74 keeps
/// `mpq_rational("2/4")` as 2/4, GMP's mpq_set_num/mpq_set_den leave it to the caller). So this file is the
/// one door: text becomes a rational only through `parse_literal`/`read_number`, a numerator and a
/// denominator only through `fraction` (and `to_rational` for a literal's parts), each canonicalizing;
/// tests/architecture/rational_door.py finds any other construction in the library. Name the type
/// (`rational x = a + b;`), never `auto`: Boost.Multiprecision returns expression templates that may
/// refer to temporaries.

#include <boost/multiprecision/gmp.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace normcheck {

/// An integer of any size (GMP mpz).
using integer = boost::multiprecision::mpz_int;
/// An exact rational of any size (GMP mpq), always canonical.
using rational = boost::multiprecision::mpq_rational;

/// Where a literal was written, which decides the syntaxes it may use.
enum class literal_form {
  json_number,  ///< a bare JSON number: integer or decimal with optional exponent
  json_string,  ///< inside a JSON string: also `p/q` fractions and C99 hexadecimal floats
};

/// Explicit bounds that keep a hostile literal from costing unbounded time or memory.
struct number_limits {
  std::int64_t max_exponent = 10000;   ///< largest |exponent| as written, decimal or binary
  std::size_t max_digits = 100000;     ///< most digits in one literal (all parts together)
};

/// An exact literal taken apart: (-1)^negative · significand / denominator · 2^exp2 · 5^exp5.
/// Decimals have exp2 == exp5 (a power of ten), hexadecimal floats exp5 == 0,
/// fractions a denominator other than 1 and no exponents.
struct literal_parts {
  bool negative = false;
  integer significand;
  integer denominator{1};
  std::int64_t exp2 = 0;
  std::int64_t exp5 = 0;
};

/// Takes a literal apart without building a rational; throws `error` (bad_number, number_out_of_range)
/// with a message naming what was expected. Never goes through a double.
literal_parts parse_literal(std::string_view text, literal_form form, const number_limits& limits = {});

/// The canonical rational of a literal's parts.
rational to_rational(const literal_parts& parts);

/// The canonical rational numerator/denominator. A zero denominator is a defect of the caller, not of any
/// input: it throws std::domain_error (an internal error).
rational fraction(const integer& numerator, const integer& denominator);

/// Reads an exact number from text: `to_rational(parse_literal(text, form, limits))`.
rational read_number(std::string_view text, literal_form form, const number_limits& limits = {});

/// Canonical text: "p/q", or "p" for integers; never "-0".
std::string to_string(const rational& value);

/// A short decimal approximation for people, e.g. "-1.5", "0.333333", "1.25e-400".
/// Computed with integers, correctly rounded to `significant` digits.
std::string approximate(const rational& value, int significant = 6);

/// `text` itself when it has at most `max_chars` characters; otherwise each long run of digits
/// is cut to its ends with its length, e.g. "1234…7890 (412 digits)". For screens, never for JSON.
std::string shorten(const std::string& text, std::size_t max_chars = 64);

/// Canonical check used by tests: coprime parts and positive denominator.
bool is_canonical(const rational& value);

}  // namespace normcheck

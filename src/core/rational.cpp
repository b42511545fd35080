#include "normcheck/core/rational.hpp"

#include "normcheck/core/errors.hpp"
#include "normcheck/core/utf8.hpp"

#include <algorithm>
#include <stdexcept>

namespace normcheck {

namespace {

constexpr std::string_view accepted_number =
    "an integer or a decimal as JSON writes it (0.1, -2, 1e-3)";
constexpr std::string_view accepted_string_number =
    "an integer or decimal as JSON writes it (0.1, 1e-3), a fraction p/q (\"-3/2\") "
    "or a hexadecimal float as float.hex() or %a print it (\"0x1.8p+1\")";

std::string quoted(std::string_view text) {
  constexpr std::size_t shown = 40;
  std::string out = "'";
  if (text.size() <= shown) {
    out += printable(text);
  } else {
    // Cut at a character boundary, never inside a multi-byte UTF-8 sequence.
    std::size_t cut = shown;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    out += printable(text.substr(0, cut));
    out += "…";
  }
  return out + "'";
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_hex_digit(char c) {
  return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// Reads text into the parts of one literal; each failure names what was expected.
class literal_scanner {
public:
  literal_scanner(std::string_view text, literal_form form, const number_limits& limits)
      : text_(text), form_(form), limits_(limits) {}

  literal_parts scan() {
    literal_parts parts;
    if (text_.empty()) fail("is empty");
    if (peek() == '-') {
      parts.negative = true;
      ++pos_;
    }
    if (form_ == literal_form::json_string && pos_ + 1 < text_.size() && peek() == '0' &&
        (text_[pos_ + 1] == 'x' || text_[pos_ + 1] == 'X')) {
      pos_ += 2;
      scan_hexadecimal(parts);
    } else {
      scan_decimal_or_fraction(parts);
    }
    if (parts.significand == 0) parts.negative = false;
    return parts;
  }

private:
  char peek() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }

  [[noreturn]] void fail(std::string_view what) const {
    throw error(error_code::bad_number, "number " + quoted(text_) + " " + std::string(what) +
                                            ": expected " +
                                            std::string(form_ == literal_form::json_number
                                                            ? accepted_number
                                                            : accepted_string_number));
  }

  [[noreturn]] void out_of_range(const std::string& what) const {
    throw error(error_code::number_out_of_range, "number " + quoted(text_) + " " + what);
  }

  std::string_view run(bool (*accept)(char)) {
    std::size_t start = pos_;
    while (pos_ < text_.size() && accept(text_[pos_])) ++pos_;
    return text_.substr(start, pos_ - start);
  }

  void require_end() const {
    if (pos_ != text_.size()) fail("has unexpected characters at its end");
  }

  static bool has_leading_zero(std::string_view digits) { return digits.size() > 1 && digits[0] == '0'; }

  // The syntax is checked in full before any limit, so a literal that is both malformed and too
  // long is bad_number; the limits are checked before any integer is built.
  void check_digits(std::size_t digits) const {
    if (digits > limits_.max_digits)
      out_of_range("has more than " + std::to_string(limits_.max_digits) +
                   " digits, the limit for one literal (--max-digits raises it)");
  }

  // "[+-]digits" after an exponent marker: the sign and the digits, syntax only.
  struct exponent_text {
    bool negative = false;
    std::string_view digits;
  };

  exponent_text scan_exponent() {
    exponent_text exponent;
    if (peek() == '+' || peek() == '-') {
      exponent.negative = peek() == '-';
      ++pos_;
    }
    exponent.digits = run(is_digit);
    if (exponent.digits.empty()) fail("has an exponent without digits");
    return exponent;
  }

  // The exponent's value, within the limit, computed without ever building a huge integer.
  std::int64_t exponent_value(const exponent_text& exponent) const {
    std::string_view digits = exponent.digits;
    while (digits.size() > 1 && digits[0] == '0') digits.remove_prefix(1);
    std::int64_t value = 0;
    for (char c : digits) {
      value = value * 10 + (c - '0');
      if (value > limits_.max_exponent)
        out_of_range("has an exponent beyond the limit of ±" + std::to_string(limits_.max_exponent) +
                     " (--max-exponent raises it)");
    }
    return exponent.negative ? -value : value;
  }

  static integer digits_to_integer(std::string_view head, std::string_view tail, int base) {
    std::string buffer;
    buffer.reserve(head.size() + tail.size());
    buffer.append(head).append(tail);
    integer value;
    if (buffer.empty()) return value;
    mpz_set_str(value.backend().data(), buffer.c_str(), base);
    return value;
  }

  void scan_decimal_or_fraction(literal_parts& parts) {
    std::string_view whole = run(is_digit);
    if (whole.empty()) fail("does not start with a digit");
    if (form_ == literal_form::json_string && peek() == '/') {
      ++pos_;
      std::string_view denominator = run(is_digit);
      if (denominator.empty()) fail("has no denominator after '/'");
      require_end();
      if (has_leading_zero(whole) || has_leading_zero(denominator)) fail("has a leading zero");
      if (denominator == "0") fail("has a zero denominator");
      check_digits(whole.size() + denominator.size());
      parts.significand = digits_to_integer(whole, {}, 10);
      parts.denominator = digits_to_integer(denominator, {}, 10);
      return;
    }
    if (has_leading_zero(whole)) fail("has a leading zero");
    std::string_view fraction;
    if (peek() == '.') {
      ++pos_;
      fraction = run(is_digit);
      if (fraction.empty()) fail("has no digit after the decimal point");
    }
    exponent_text exponent;
    if (peek() == 'e' || peek() == 'E') {
      ++pos_;
      exponent = scan_exponent();
    }
    require_end();
    check_digits(whole.size() + fraction.size());
    const std::int64_t scale = exponent_value(exponent) - static_cast<std::int64_t>(fraction.size());
    parts.significand = digits_to_integer(whole, fraction, 10);
    parts.exp2 = parts.exp5 = scale;
  }

  void scan_hexadecimal(literal_parts& parts) {
    std::string_view whole = run(is_hex_digit);
    std::string_view fraction;
    if (peek() == '.') {
      ++pos_;
      fraction = run(is_hex_digit);
    }
    if (whole.empty() && fraction.empty()) fail("has no hexadecimal digits");
    if (peek() != 'p' && peek() != 'P') fail("has no binary exponent (p±digits)");
    ++pos_;
    const exponent_text exponent = scan_exponent();
    require_end();
    check_digits(whole.size() + fraction.size());
    parts.exp2 = exponent_value(exponent) - 4 * static_cast<std::int64_t>(fraction.size());
    parts.significand = digits_to_integer(whole, fraction, 16);
  }

  std::string_view text_;
  literal_form form_;
  const number_limits& limits_;
  std::size_t pos_ = 0;
};

void multiply_power(mpz_t target, unsigned long base, std::int64_t exponent) {
  if (exponent == 0) return;
  if (base == 2) {
    mpz_mul_2exp(target, target, static_cast<mp_bitcnt_t>(exponent));
    return;
  }
  mpz_t power;
  mpz_init(power);
  mpz_ui_pow_ui(power, base, static_cast<unsigned long>(exponent));
  mpz_mul(target, target, power);
  mpz_clear(power);
}

// Number of decimal digits of a positive integer.
std::int64_t decimal_digits(const integer& value) {
  std::int64_t estimate = static_cast<std::int64_t>(mpz_sizeinbase(value.backend().data(), 10));
  integer bound = boost::multiprecision::pow(integer(10), static_cast<unsigned>(estimate - 1));
  return value < bound ? estimate - 1 : estimate;
}

integer power_of_ten(std::int64_t exponent) {
  return boost::multiprecision::pow(integer(10), static_cast<unsigned>(exponent));
}

}  // namespace

literal_parts parse_literal(std::string_view text, literal_form form, const number_limits& limits) {
  return literal_scanner(text, form, limits).scan();
}

rational to_rational(const literal_parts& parts) {
  integer numerator = parts.significand;
  integer denominator = parts.denominator;
  mpz_ptr num = numerator.backend().data();
  mpz_ptr den = denominator.backend().data();
  multiply_power(parts.exp2 >= 0 ? num : den, 2, parts.exp2 >= 0 ? parts.exp2 : -parts.exp2);
  multiply_power(parts.exp5 >= 0 ? num : den, 5, parts.exp5 >= 0 ? parts.exp5 : -parts.exp5);
  if (parts.negative) mpz_neg(num, num);
  rational value;
  mpq_ptr q = value.backend().data();
  mpq_set_num(q, num);
  mpq_set_den(q, den);
  mpq_canonicalize(q);
  return value;
}

rational fraction(const integer& numerator, const integer& denominator) {
  if (denominator == 0) throw std::domain_error("fraction: a zero denominator");
  rational value;
  mpq_ptr q = value.backend().data();
  mpz_set(mpq_numref(q), numerator.backend().data());
  mpz_set(mpq_denref(q), denominator.backend().data());
  mpq_canonicalize(q);
  return value;
}

rational read_number(std::string_view text, literal_form form, const number_limits& limits) {
  return to_rational(parse_literal(text, form, limits));
}

std::string to_string(const rational& value) {
  return value.str();
}

std::string approximate(const rational& value, int significant) {
  if (value == 0) return "0";
  significant = std::max(significant, 1);
  integer a = abs(numerator(value));
  integer b = denominator(value);
  // e = floor(log10(a/b)) is digits(a) - digits(b) or one less.
  std::int64_t exponent = decimal_digits(a) - decimal_digits(b);
  if (a * (exponent >= 0 ? integer(1) : power_of_ten(-exponent)) <
      b * (exponent >= 0 ? power_of_ten(exponent) : integer(1)))
    --exponent;
  // scaled = round(a/b · 10^(significant-1-exponent)), half away from zero.
  auto scaled_of = [&](std::int64_t e) {
    std::int64_t shift = significant - 1 - e;
    integer num = a * (shift >= 0 ? power_of_ten(shift) : integer(1));
    integer den = b * (shift < 0 ? power_of_ten(-shift) : integer(1));
    integer q = (2 * num + den) / (2 * den);
    return q;
  };
  integer scaled = scaled_of(exponent);
  if (scaled >= power_of_ten(significant)) scaled = scaled_of(++exponent);
  std::string digits = scaled.str();
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  std::string out = value < 0 ? "-" : "";
  const auto count = static_cast<std::int64_t>(digits.size());
  if (exponent >= -5 && exponent < 15) {
    if (exponent < 0) {
      out += "0." + std::string(static_cast<std::size_t>(-exponent - 1), '0') + digits;
    } else if (count <= exponent + 1) {
      out += digits + std::string(static_cast<std::size_t>(exponent + 1 - count), '0');
    } else {
      out += digits.substr(0, static_cast<std::size_t>(exponent + 1)) + "." +
             digits.substr(static_cast<std::size_t>(exponent + 1));
    }
  } else {
    out += digits.substr(0, 1);
    if (digits.size() > 1) out += "." + digits.substr(1);
    out += "e" + std::to_string(exponent);
  }
  return out;
}

std::string shorten(const std::string& text, std::size_t max_chars) {
  if (text.size() <= max_chars) return text;
  constexpr std::size_t keep = 8;
  std::string out;
  std::size_t i = 0;
  while (i < text.size()) {
    std::size_t j = i;
    while (j < text.size() && is_digit(text[j])) ++j;
    std::size_t length = j - i;
    if (length > 2 * keep + 4) {
      out.append(text, i, keep).append("…").append(text, j - keep, keep);
      out += " (" + std::to_string(length) + " digits)";
    } else {
      out.append(text, i, length);
    }
    if (j < text.size()) out += text[j++];
    i = j;
  }
  return out;
}

bool is_canonical(const rational& value) {
  mpq_srcptr q = value.backend().data();
  if (mpz_sgn(mpq_denref(q)) <= 0) return false;
  integer g;
  mpz_gcd(g.backend().data(), mpq_numref(q), mpq_denref(q));
  return g == 1;
}

}  // namespace normcheck

#include "normcheck/documents/field_reader.hpp"

#include "normcheck/core/utf8.hpp"

#include <algorithm>

namespace normcheck {

namespace {

// The value of a decimal literal read into machine integers, when it is an integer in [low, high]: the
// common case, taken without building a rational (a trace has millions of counts).
std::optional<std::uint64_t> machine_integer(const machine_literal& literal, std::uint64_t low, std::uint64_t high) {
  if (literal.exp2 != literal.exp5 || literal.exp2 < 0 || literal.exp2 > 19) return std::nullopt;
  if (literal.negative && literal.significand != 0) return std::nullopt;
  std::uint64_t value = literal.significand;
  for (std::int32_t i = 0; i < literal.exp2; ++i) {
    if (value > high / 10) return std::nullopt;
    value *= 10;
  }
  if (value < low || value > high) return std::nullopt;
  return value;
}

// Bits for a number of decimal digits (log2 10 < 3.3220), so that a budget in digits is never under-counted.
std::uint64_t bits_of_digits(std::uint64_t digits) { return digits / 1000 * 3322 + (digits % 1000) * 3322 / 1000 + 1; }

std::uint64_t digits_of_bits(std::uint64_t bits) { return bits * 30103 / 100000 + 1; }

std::uint64_t bits(const integer& value) { return value == 0 ? 1 : boost::multiprecision::msb(abs(value)) + 1; }

}  // namespace

void exact_budget::note_denominator(const integer& denominator, const field_reader& at, std::uint64_t offset) {
  // The factors 2 by one shift and the factors 5 by GMP's mpz_remove (a few divisions by powers of 5):
  // one division per factor would cost a quadratic time on a denominator such as 10^100000.
  integer rest = denominator >> boost::multiprecision::lsb(denominator);
  const integer five = 5;
  mpz_remove(rest.backend().data(), rest.backend().data(), five.backend().data());
  if (rest == 1) return;
  std::string key = rest.str(0, std::ios_base::hex);
  if (!denominators_.insert(std::move(key)).second) return;
  fraction_bits_ += bits(rest);
  if (fraction_bits_ > bits_of_digits(limits_.max_fraction_digits))
    at.fail(
        error_code::limit_exceeded,
        "the distinct denominators of the document's fractions (factors 2 and 5 apart) pass " +
            std::to_string(limits_.max_fraction_digits) +
            " digits: a sum of fractions that share nothing needs them all (--max-fraction-digits raises the limit)",
        offset);
}

std::uint64_t exact_budget::kept_bits(const rational& value) {
  return bits(numerator(value)) + bits(denominator(value));
}

void exact_budget::note_kept(const rational& value, const field_reader& at, std::uint64_t offset) {
  note_kept_bits(kept_bits(value), at, offset);
}

void exact_budget::note_kept_bits(std::uint64_t value_bits, const field_reader& at, std::uint64_t offset) {
  kept_bits_ += value_bits;
  if (kept_bits_ > bits_of_digits(limits_.max_exact_digits))
    at.fail(error_code::limit_exceeded,
            "the exact values the document keeps pass " + std::to_string(limits_.max_exact_digits) +
                " digits (about " + std::to_string(digits_of_bits(kept_bits_)) +
                " so far): a literal such as 1e-10000 is a few characters and a value of ten thousand digits "
                "(--max-exact-digits raises the limit)",
            offset);
}

field_reader::literal_text field_reader::exact_text(std::string_view what) {
  const std::uint64_t offset = value_offset();
  const json_kind kind = peek();
  if (kind != json_kind::number && kind != json_kind::string)
    fail_type(what, "an exact number (a JSON number, or a string such as \"-3/2\" or \"0x1.8p+1\")");
  if (kind == json_kind::number) return {number_text(), literal_form::json_number, offset};
  return {string_value(), literal_form::json_string, offset};
}

literal_parts field_reader::literal(std::string_view what) { return parse(exact_text(what)); }

literal_parts field_reader::parse_at(std::string_view written, literal_form form, std::uint64_t offset) {
  try {
    literal_parts parts = parse_literal(written, form, limits().numbers);
    if (budget_ && parts.denominator != 1) budget_->note_denominator(parts.denominator, *this, offset);
    return parts;
  } catch (error& e) {
    e.locate(locate(offset));
    mark_if_cut_off(e);  // a literal cut by the end of the file says nothing about the document
    throw;
  }
}

rational field_reader::exact(std::string_view what) { return to_rational(literal(what)); }

rational field_reader::non_negative(std::string_view what) {
  const std::uint64_t offset = value_offset();
  rational value = exact(what);
  if (value < 0)
    fail(error_code::schema_error, std::string(what) + " must not be negative, found " + to_string(value), offset);
  return value;
}

std::uint64_t field_reader::integer(std::string_view what, std::uint64_t low, std::uint64_t high, error_code beyond) {
  const std::uint64_t offset = value_offset();
  const std::string expected = low == 0   ? "a non-negative integer"
                               : low == 1 ? "a positive integer"
                                          : "an integer of at least " + std::to_string(low);
  if (peek() != json_kind::number) fail_type(what, expected);
  const std::string_view written = number_text();
  machine_literal fast;
  if (scan_machine_literal(written, literal_form::json_number, limits().numbers, fast))
    if (const std::optional<std::uint64_t> value = machine_integer(fast, low, high)) return *value;
  const rational value = to_rational(parse_at(written, literal_form::json_number, offset));
  if (denominator(value) != 1 || value < low)
    fail(error_code::schema_error, std::string(what) + " must be " + expected + ", found " + to_string(value), offset);
  if (value > high)
    fail(beyond, std::string(what) + " is " + to_string(value) + ", more than the limit of " + std::to_string(high),
         offset);
  return static_cast<std::uint64_t>(numerator(value));
}

std::string_view field_reader::text(std::string_view what) {
  if (peek() != json_kind::string) fail_type(what, "a string");
  return string_value();
}

bool field_reader::flag(std::string_view what) {
  if (peek() != json_kind::boolean) fail_type(what, "true or false");
  return boolean_value();
}

void field_reader::format(std::string_view expected) {
  const std::uint64_t offset = value_offset();
  if (peek() != json_kind::string) fail_type("format", "the string \"" + std::string(expected) + "\"");
  const std::string_view value = string_value();
  if (value != expected)
    fail(error_code::schema_error,
         "unsupported format \"" + std::string(value) + "\": this reader takes \"" + std::string(expected) + "\"",
         offset);
}

error_code field_reader::expected_error() {
  const std::uint64_t offset = value_offset();
  if (peek() != json_kind::string) fail_type("expect_error", "an error code string");
  const std::string_view value = string_value();
  const std::optional<error_code> code = code_from_name(value);
  if (!code || *code == error_code::usage_error || *code == error_code::io_error)
    fail(error_code::schema_error,
         "expect_error \"" + std::string(value) + "\" is not an error code a document can produce", offset);
  return *code;
}

void field_reader::fail_unknown_key(std::string_view key, std::string_view where_and_known) {
  fail(error_code::schema_error, "unknown key \"" + printable(key) + "\" " + std::string(where_and_known),
       key_offset());
}

bool members_seen::has(std::string_view key) const {
  return std::find(keys_.begin(), keys_.end(), key) != keys_.end();
}

bool members_seen::has_all(const std::vector<std::string_view>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [&](std::string_view key) { return has(key); });
}

members_seen field_reader::read_members(const object_shape& shape) {
  begin_object();
  members_seen seen;
  std::string_view key;
  while (next_member(key)) {
    const auto member = std::find_if(shape.members.begin(), shape.members.end(),
                                     [&](const member_reader& m) { return m.key == key; });
    if (member == shape.members.end()) fail_unknown_key(key, shape.unknown);
    seen.keys_.push_back(member->key);
    member->read(member->key);
  }
  return seen;
}

void field_reader::require(const object_shape& shape, const members_seen& seen, std::uint64_t object_offset) const {
  for (const required_members& group : shape.required)
    if (!seen.has_all(group.keys)) fail(error_code::schema_error, group.message, group.offset.value_or(object_offset));
}

members_seen field_reader::read_object(const object_shape& shape) {
  const std::uint64_t offset = value_offset();
  members_seen seen = read_members(shape);
  require(shape, seen, offset);
  return seen;
}

void field_reader::fail_unknown(std::string_view what, std::string_view spelled, std::string_view alternatives,
                                std::uint64_t offset) {
  fail(error_code::schema_error,
       "unknown " + std::string(what) + " \"" + printable(spelled) + "\": expected " + std::string(alternatives),
       offset);
}

}  // namespace normcheck

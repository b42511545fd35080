// The streaming path (literals read straight into machine integers, summed per scale in 128 bits)
// against the general path (parse_literal, to_rational, rational addition), on random literals biased
// toward the corners: significands around 2^64, exponents at the limits, decimal and hexadecimal mixed.

#include "normcheck/core/exact_sum.hpp"
#include "normcheck/core/partition.hpp"
#include "normcheck/documents/partition_reader.hpp"

#include <doctest/doctest.h>
#include <rapidcheck.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace {

using namespace normcheck;

std::string digit_run(std::size_t length, bool hexadecimal, bool nonzero_first) {
  const std::string alphabet = hexadecimal ? "0123456789abcdefABCDEF" : "0123456789";
  std::string out;
  for (std::size_t i = 0; i < length; ++i) {
    const std::size_t from = i == 0 && nonzero_first ? 1 : 0;
    out += alphabet[*rc::gen::inRange<std::size_t>(from, alphabet.size())];
  }
  return out;
}

// Exponents as written: small, near a double's range, near the default limit, or absurd.
std::string exponent_text() {
  const std::int64_t value =
      *rc::gen::oneOf(rc::gen::inRange<std::int64_t>(0, 30), rc::gen::inRange<std::int64_t>(290, 330),
                      rc::gen::inRange<std::int64_t>(9990, 10010), rc::gen::inRange<std::int64_t>(0, 4000000000));
  const std::string zeros(*rc::gen::inRange<std::size_t>(0, 3), '0');
  const std::string sign = *rc::gen::element<std::string>("", "+", "-");
  return sign + zeros + std::to_string(value);
}

// Lengths that straddle what fits in 64 bits (19-20 decimal, 16-17 hexadecimal digits).
std::size_t run_length(bool hexadecimal) {
  return *rc::gen::oneOf(rc::gen::inRange<std::size_t>(0, 4),
                         rc::gen::inRange<std::size_t>(hexadecimal ? 14 : 17, hexadecimal ? 19 : 23),
                         rc::gen::inRange<std::size_t>(0, 45));
}

std::string decimal_literal() {
  std::string text = *rc::gen::element<std::string>("", "-");
  const std::size_t whole = run_length(false);
  text += whole <= 1 ? digit_run(1, false, false) : digit_run(whole, false, true);
  if (*rc::gen::arbitrary<bool>()) text += "." + digit_run(std::max<std::size_t>(1, run_length(false)), false, false);
  if (*rc::gen::arbitrary<bool>()) text += *rc::gen::element<std::string>("e", "E") + exponent_text();
  return text;
}

std::string hexadecimal_literal() {
  std::string text = *rc::gen::element<std::string>("", "-");
  text += *rc::gen::element<std::string>("0x", "0X");
  text += digit_run(run_length(true), true, false);
  if (*rc::gen::arbitrary<bool>()) text += "." + digit_run(run_length(true), true, false);
  text += *rc::gen::element<std::string>("p", "P") + exponent_text();
  return text;
}

// Decimals the short scan (19 digits at most, eight at a time) takes or declines by a digit: 1 to 7 whole
// digits, 17 to 21 in all, and an exponent of 1 to 8 digits or none.
std::string short_scan_literal() {
  std::string text = *rc::gen::element<std::string>("", "-");
  const std::size_t whole = *rc::gen::inRange<std::size_t>(1, 8);
  text += digit_run(whole, false, whole > 1);
  text += "." + digit_run(*rc::gen::inRange<std::size_t>(17, 22) - whole, false, false);
  if (*rc::gen::arbitrary<bool>())
    text += *rc::gen::element<std::string>("e", "E", "e+", "e-") +
            digit_run(*rc::gen::inRange<std::size_t>(1, 9), false, false);
  return text;
}

// A literal, well formed or damaged by one edit (so that rejections are compared too).
std::string any_literal() {
  std::string text = *rc::gen::weightedOneOf<std::string>(
      {{4, rc::gen::exec(decimal_literal)},
       {3, rc::gen::exec(hexadecimal_literal)},
       {1, rc::gen::exec([] {
          return digit_run(run_length(false) + 1, false, true) + "/" + digit_run(run_length(false) + 1, false, true);
        })}});
  if (*rc::gen::inRange(0, 5) == 0 && !text.empty()) {
    const std::size_t at = *rc::gen::inRange<std::size_t>(0, text.size());
    const char edit = *rc::gen::element('.', '-', '+', 'e', 'x', 'p', '0', '/', ' ');
    if (*rc::gen::arbitrary<bool>()) text.insert(text.begin() + static_cast<std::ptrdiff_t>(at), edit);
    else text.erase(at, 1);
  }
  return text;
}

number_limits some_limits() {
  number_limits limits;
  if (*rc::gen::arbitrary<bool>()) {
    limits.max_exponent = 300;
    limits.max_digits = 40;
  }
  return limits;
}

std::optional<literal_parts> general(const std::string& text, literal_form form, const number_limits& limits) {
  try {
    return parse_literal(text, form, limits);
  } catch (const error&) {
    return std::nullopt;
  }
}

using scanner = std::function<bool(std::string_view, literal_form, const number_limits&, machine_literal&)>;

// Why the scanner disagrees with parse_literal on `text`, or nothing when it agrees.
std::optional<std::string> disagreement(const scanner& scan, const std::string& text, literal_form form,
                                        const number_limits& limits) {
  machine_literal fast;
  if (!scan(text, form, limits, fast)) return std::nullopt;
  const std::optional<literal_parts> parts = general(text, form, limits);
  if (!parts) return "the fast path takes '" + text + "', which parse_literal rejects";
  if (to_rational(to_parts(fast)) != to_rational(*parts))
    return "the fast path reads '" + text + "' as " + to_string(to_rational(to_parts(fast))) + ", parse_literal as " +
           to_string(to_rational(*parts));
  return std::nullopt;
}

std::string quoted_value(const std::string& text, bool as_string) { return as_string ? "\"" + text + "\"" : text; }

}  // namespace

TEST_CASE("the machine-integer scan agrees with parse_literal on random literals") {
  CHECK(rc::check("scan_machine_literal takes only what parse_literal accepts, with the same parts", [] {
    const std::string text = any_literal();
    const number_limits limits = some_limits();
    for (literal_form form : {literal_form::json_number, literal_form::json_string}) {
      const std::optional<std::string> why = disagreement(scan_machine_literal, text, form, limits);
      RC_ASSERT(!why.has_value());
      machine_literal fast;
      if (scan_machine_literal(text, form, limits, fast)) {
        const literal_parts parts = parse_literal(text, form, limits);
        const literal_parts from_fast = to_parts(fast);
        RC_ASSERT(from_fast.negative == parts.negative);
        RC_ASSERT(from_fast.significand == parts.significand);
        RC_ASSERT(from_fast.exp2 == parts.exp2);
        RC_ASSERT(from_fast.exp5 == parts.exp5);
      }
      RC_CLASSIFY(scan_machine_literal(text, form, limits, fast), "fast path");
    }
  }));
}

TEST_CASE("the differential catches a fast path that is wrong") {
  // A scanner that drops a significand's last digit when it has 19: the kind of overflow slip the
  // differential exists for.
  const scanner truncating = [](std::string_view text, literal_form form, const number_limits& limits,
                                machine_literal& out) {
    if (!scan_machine_literal(text, form, limits, out)) return false;
    if (out.significand >= 1000000000000000000ull) out.significand /= 10;
    return true;
  };
  const number_limits limits;
  CHECK_FALSE(disagreement(scan_machine_literal, "9999999999999999999", literal_form::json_number, limits));
  CHECK(disagreement(truncating, "9999999999999999999", literal_form::json_number, limits));
}

TEST_CASE("the fast path declines what does not fit and leaves it exact") {
  machine_literal fast;
  const number_limits limits;
  CHECK(scan_machine_literal("18446744073709551615", literal_form::json_number, limits, fast));
  CHECK(fast.significand == 18446744073709551615ull);
  CHECK_FALSE(scan_machine_literal("18446744073709551616", literal_form::json_number, limits, fast));
  CHECK_FALSE(scan_machine_literal("0x1ffffffffffffffff.0p0", literal_form::json_string, limits, fast));
  CHECK_FALSE(scan_machine_literal("1/3", literal_form::json_string, limits, fast));
  CHECK_FALSE(scan_machine_literal("1e10001", literal_form::json_number, limits, fast));
  CHECK_FALSE(scan_machine_literal("0x1p1", literal_form::json_number, limits, fast));
  CHECK(scan_machine_literal("-0.000", literal_form::json_number, limits, fast));
  CHECK_FALSE(fast.negative);
  REQUIRE(scan_machine_literal("-0x1.8p-3", literal_form::json_string, limits, fast));
  CHECK(to_rational(to_parts(fast)) == rational(-3, 16));
}

namespace {

// `text`, the delimiter that ends it as a token of `form`, and `padding` spaces.
std::string delimited(std::string_view text, literal_form form, std::size_t padding) {
  return std::string(text) + (form == literal_form::json_number ? "," : "\"") + std::string(padding, ' ');
}

// The prefix scan where the text goes on (48 spaces after the delimiter): the short scan, which reads eight
// digits at a time and needs 40 bytes ahead, takes the literals it can there; a literal near the text's end
// goes the careful way. True when the whole of `text` was read.
bool padded_scan(std::string_view text, literal_form form, const number_limits& limits, machine_literal& out) {
  return !text.empty() && scan_machine_prefix(delimited(text, form, 48), form, limits, out) == text.size();
}

// Why the prefix scan reads `text` otherwise where the text goes on than where it ends at the delimiter
// (fewer than 40 bytes ahead: the careful way for every literal shorter than 39 characters), if it does.
std::optional<std::string> short_scan_differs(std::string_view text, literal_form form, const number_limits& limits) {
  machine_literal padded;
  machine_literal careful;
  const std::size_t length = scan_machine_prefix(delimited(text, form, 48), form, limits, padded);
  const std::size_t careful_length = scan_machine_prefix(delimited(text, form, 0), form, limits, careful);
  if (length != careful_length)
    return "'" + std::string(text) + "': " + std::to_string(length) + " characters read, " +
           std::to_string(careful_length) + " by the careful scan";
  if (length != 0 && (padded.negative != careful.negative || padded.significand != careful.significand ||
                      padded.exp2 != careful.exp2 || padded.exp5 != careful.exp5))
    return "'" + std::string(text) + "' is taken apart otherwise than by the careful scan";
  return std::nullopt;
}

}  // namespace

TEST_CASE("the short scan agrees with parse_literal and with the careful scan") {
  CHECK(rc::check("a literal the text goes on after is read as parse_literal and the careful scan read it", [] {
    const std::string text = *rc::gen::oneOf(rc::gen::exec(any_literal), rc::gen::exec(short_scan_literal));
    const number_limits limits = some_limits();
    for (literal_form form : {literal_form::json_number, literal_form::json_string}) {
      RC_ASSERT(!disagreement(padded_scan, text, form, limits).has_value());
      RC_ASSERT(!short_scan_differs(text, form, limits).has_value());
      machine_literal fast;
      RC_CLASSIFY(padded_scan(text, form, limits, fast) && text.size() < 39, "taken, compared with the careful scan");
    }
  }));
}

TEST_CASE("the short scan's corners") {
  const number_limits limits;
  // Each read where the text goes on (the short scan) and where it ends (the careful scan), both against
  // parse_literal: digit counts around 19, the eight-digit runs, leading zeros, signs, exponents at the limit.
  for (const char* text :
       {"0", "-0", "-0.0", "-0.000e-0", "0e0", "7", "1234567", "12345678", "1234567.1", "12345678.1", "0.12345678",
        "0.123456789", "1.2345678901234567", "1.234567890123456789", "0.1234567890123456789",
        "9.999999999999999999", "99999999.99999999999", "9.9999999999999999999", "0.0000000000000000001",
        "0.00000000000000000001", "-6.850595", "-6.850595e+00", "1.5E-3", "1e10000", "1e-10000", "1e10001",
        "1.5e+0010000", "1e0000000", "1e00000000", "1e-0000007", "1e9999999", "1E+5", "1e-0", "1e+-5", "1e-+5",
        "9.999999999999999999e-9999", "-6851", "01", "00.5", "1.", "1.e5", ".5", "1e", "1e+", "1e-", "-", "--1",
        "1.5e5.5"}) {
    CAPTURE(text);
    for (literal_form form : {literal_form::json_number, literal_form::json_string}) {
      CHECK_FALSE(disagreement(padded_scan, text, form, limits));
      CHECK_FALSE(short_scan_differs(text, form, limits));
    }
  }
  machine_literal fast;
  CHECK(padded_scan("-0.000", literal_form::json_number, limits, fast));
  CHECK_FALSE(fast.negative);
  CHECK(padded_scan("1.234567890123456789", literal_form::json_number, limits, fast));
  CHECK(fast.significand == 1234567890123456789ull);
  CHECK(fast.exp5 == -18);
  CHECK_FALSE(padded_scan("9.9999999999999999999", literal_form::json_number, limits, fast));  // past 64 bits
  CHECK_FALSE(padded_scan("1e10001", literal_form::json_number, limits, fast));
}

TEST_CASE("the differential catches a short scan that is wrong") {
  // A scan that counts only the first run of eight fraction digits in the scale: the slip a reader of eight
  // digits at a time could make.
  const scanner first_run_only = [](std::string_view text, literal_form form, const number_limits& limits,
                                    machine_literal& out) {
    if (!padded_scan(text, form, limits, out)) return false;
    const std::size_t point = text.find('.');
    if (point != std::string_view::npos && text.size() - point - 1 > 8) out.exp2 = out.exp5 += 8;
    return true;
  };
  const number_limits limits;
  CHECK_FALSE(disagreement(padded_scan, "1.2345678901234567", literal_form::json_number, limits));
  CHECK(disagreement(first_run_only, "1.2345678901234567", literal_form::json_number, limits));
}

TEST_CASE("exact_sum in machine integers equals the rational sum") {
  CHECK(rc::check("Σ through 128-bit buckets and GMP spills equals Σ of rationals", [] {
    // Exponents from a short run (the usual input) or spread wide, so that buckets collide and spill.
    const bool spread = *rc::gen::arbitrary<bool>();
    const auto terms = *rc::gen::container<std::vector<machine_literal>>(rc::gen::exec([spread] {
      machine_literal term;
      term.negative = *rc::gen::arbitrary<bool>();
      term.significand = *rc::gen::oneOf(rc::gen::inRange<std::uint64_t>(0, 1000), rc::gen::arbitrary<std::uint64_t>(),
                                         rc::gen::just(UINT64_MAX));
      const std::int32_t e = spread ? *rc::gen::inRange(-10100, 10100) : *rc::gen::inRange(-24, 4);
      if (*rc::gen::arbitrary<bool>()) {
        term.exp2 = term.exp5 = e;  // decimal
      } else {
        term.exp2 = e;  // binary
        term.exp5 = 0;
      }
      return term;
    }));
    exact_sum fast;
    exact_sum general_sum;
    rational expected;
    for (const machine_literal& term : terms) {
      fast.add(term);
      general_sum.add(to_parts(term));
      expected += to_rational(to_parts(term));
    }
    RC_ASSERT(fast.value() == expected);
    RC_ASSERT(general_sum.value() == expected);
    RC_ASSERT(is_canonical(fast.value()));
  }));
}

TEST_CASE("many terms of one scale stay exact past 64 bits") {
  exact_sum sum;
  machine_literal big;
  big.significand = UINT64_MAX;
  big.exp2 = big.exp5 = -3;
  for (int i = 0; i < 1000; ++i) sum.add(big);
  rational expected = rational(integer(UINT64_MAX) * 1000, integer(1000));
  CHECK(sum.value() == expected);
}

TEST_CASE("the streaming reader agrees with the general path on whole documents") {
  CHECK(rc::check("a microbatch read from a document sums its literals exactly", [] {
    const auto literals = *rc::gen::container<std::vector<std::string>>(
        rc::gen::oneOf(rc::gen::exec(decimal_literal), rc::gen::exec(hexadecimal_literal)));
    std::vector<std::string> accepted;
    rational expected;
    rational expected_abs;
    std::string tokens;
    for (const std::string& text : literals) {
      const bool hexadecimal = text.find_first_of("xX") != std::string::npos;
      const bool as_string = hexadecimal || *rc::gen::arbitrary<bool>();
      const std::optional<literal_parts> parts =
          general(text, as_string ? literal_form::json_string : literal_form::json_number, number_limits{});
      if (!parts) continue;
      const rational value = to_rational(*parts);
      expected += value;
      expected_abs += abs(value);
      tokens += (tokens.empty() ? "" : ", ") + quoted_value(text, as_string);
      if (*rc::gen::inRange(0, 8) == 0) tokens += ", null";
    }
    const std::string document =
        R"({"format": "normcheck/1", "ranks": [{"microbatches": [[)" + tokens + "], [1]]}]}";
    const partition_file file = read_partition(document, "generated");
    const microbatch_stats& first = file.update.ranks.at(0).microbatches.at(0);
    RC_ASSERT(first.target_sum() == expected);
    RC_ASSERT(first.target_abs_sum() == expected_abs);
  }));
}

TEST_CASE("large token arrays read in pieces on two threads sum as on one") {
  CHECK(rc::check("a document above a mebibyte read with two jobs has the sums of its literals", [] {
    // A cycle of random literals repeated over two ranks' arrays until the document passes 1 MiB, so that the
    // arrays go to the pool and are cut into pieces at commas wherever the cycle stands.
    const auto literals = *rc::gen::nonEmpty(rc::gen::container<std::vector<std::string>>(
        rc::gen::oneOf(rc::gen::exec(decimal_literal), rc::gen::exec(hexadecimal_literal))));
    std::vector<std::string> cycle = {"1"};  // a valid token, whatever else is declined
    rational cycle_sum = 1;
    rational cycle_abs = 1;
    std::uint64_t cycle_valid = 1;
    for (const std::string& text : literals) {
      const bool hexadecimal = text.find_first_of("xX") != std::string::npos;
      const bool as_string = hexadecimal || *rc::gen::arbitrary<bool>();
      const std::optional<literal_parts> parts =
          general(text, as_string ? literal_form::json_string : literal_form::json_number, number_limits{});
      if (!parts || parts->denominator != 1 || parts->significand > UINT64_MAX) continue;  // the regular ones
      cycle.push_back(quoted_value(text, as_string));
      cycle_sum += to_rational(*parts);
      cycle_abs += abs(to_rational(*parts));
      ++cycle_valid;
    }
    cycle.push_back("null");
    std::string cycle_text;
    for (const std::string& value : cycle) cycle_text += value + ", ";
    const std::size_t repeats = (700'000 / cycle_text.size()) + 1;
    std::string array = "[";
    for (std::size_t r = 0; r < repeats; ++r) array += cycle_text;
    array += "null]";
    const std::string document =
        R"({"format": "normcheck/1", "ranks": [{"targets": )" + array + R"(}, {"targets": )" + array + "}]}";
    const partition_file one = read_partition(document, "generated", reader_limits{}, {}, 1);
    const partition_file two = read_partition(document, "generated", reader_limits{}, {}, 2);
    for (const partition_file* file : {&one, &two}) {
      for (const rank_stats& rank : file->update.ranks) {
        const microbatch_stats& stats = rank.microbatches.at(0);
        RC_ASSERT(stats.valid_tokens == cycle_valid * repeats);
        RC_ASSERT(stats.padding == repeats + 1);
        RC_ASSERT(stats.target_sum() == cycle_sum * rational(repeats));
        RC_ASSERT(stats.target_abs_sum() == cycle_abs * rational(repeats));
      }
    }
  }));
}

TEST_CASE("a literal the fast path declines is still read exactly in a document") {
  const std::string document =
      R"({"format": "normcheck/1", "ranks": [{"targets": [18446744073709551616, "0x1p-1074", "-1/3", 0.1, 1e-400]}]})";
  const partition_file file = read_partition(document, "declined");
  rational expected = rational(integer(1) << 64);
  expected += rational(integer(1), integer(1) << 1074);
  expected += rational(-1, 3);
  expected += rational(1, 10);
  expected += rational(integer(1), boost::multiprecision::pow(integer(10), 400));
  CHECK(file.update.ranks.at(0).microbatches.at(0).target_sum() == expected);
}

TEST_CASE("weighted tokens read from a document sum their products exactly") {
  CHECK(rc::check("Σw, Σw·y and Σw·|y| of a weighted microbatch equal the rational sums", [] {
    const rc::Gen<std::string> literal =
        rc::gen::oneOf(rc::gen::exec(decimal_literal), rc::gen::exec(hexadecimal_literal));
    const std::size_t count = *rc::gen::inRange<std::size_t>(0, 24);
    rational mass;
    rational weighted_sum;
    rational weighted_abs;
    std::string targets;
    std::string weights;
    for (std::size_t i = 0; i < count; ++i) {
      const std::string target = *literal;
      std::string weight = *literal;
      if (weight.front() == '-') weight.erase(0, 1);  // weights are non-negative
      const bool target_as_string = target.find_first_of("xX") != std::string::npos || *rc::gen::arbitrary<bool>();
      const bool weight_as_string = weight.find_first_of("xX") != std::string::npos || *rc::gen::arbitrary<bool>();
      const std::optional<literal_parts> y =
          general(target, target_as_string ? literal_form::json_string : literal_form::json_number, number_limits{});
      const std::optional<literal_parts> w =
          general(weight, weight_as_string ? literal_form::json_string : literal_form::json_number, number_limits{});
      if (!y || !w) continue;
      const rational y_value = to_rational(*y);
      const rational w_value = to_rational(*w);
      mass += w_value;
      rational term = w_value * y_value;
      weighted_sum += term;
      weighted_abs += abs(term);
      const std::string separator = targets.empty() ? "" : ", ";
      targets += separator + quoted_value(target, target_as_string);
      weights += separator + quoted_value(weight, weight_as_string);
      if (*rc::gen::inRange(0, 8) == 0) {
        targets += ", null";
        weights += ", null";
      }
    }
    const std::string document = R"({"format": "normcheck/1", "objective": "weighted_token_mean", "ranks": [)"
                                 R"({"microbatches": [[)" +
                                 targets + "], [1]], \"weights\": [[" + weights + "], [1]]}]}";
    const partition_file file = read_partition(document, "generated");
    const microbatch_stats& first = file.update.ranks.at(0).microbatches.at(0);
    RC_ASSERT(first.mass() == mass);
    RC_ASSERT(first.weighted_target_sum() == weighted_sum);
    RC_ASSERT(first.weighted_target_abs_sum() == weighted_abs);
  }));
}

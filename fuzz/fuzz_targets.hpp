#pragma once
// The bodies of the fuzz targets, shared by the libFuzzer entry points (fuzz_reader.cpp,
// fuzz_literal.cpp, fuzz_recipe.cpp, fuzz_scenario.cpp) and by the regression replay of the normal test suite
// (tests/hardening/regression_test.cpp). A broken property prints what broke and aborts, which
// libFuzzer records as a crash and the test suite as a failed test.

#include "normcheck/check/check.hpp"
#include "normcheck/core/exact_sum.hpp"
#include "normcheck/core/partition.hpp"
#include "normcheck/core/rational.hpp"
#include "normcheck/documents/partition_reader.hpp"
#include "normcheck/documents/scenario.hpp"
#include "normcheck/recipes/prove.hpp"
#include "normcheck/recipes/recipe.hpp"
#include "normcheck/simulation/expectations.hpp"
#include "normcheck/simulation/simulate.hpp"

#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <regex>
#include <string>
#include <string_view>
#include <vector>

namespace normcheck::fuzz {

/// Prints `what` with the input and aborts when `holds` is false.
inline void require(bool holds, const std::string& what, std::string_view input) {
  if (holds) return;
  std::fprintf(stderr, "fuzz property broken: %s\ninput (%zu bytes): %.*s\n", what.c_str(), input.size(),
               static_cast<int>(input.size() < 400 ? input.size() : 400), input.data());
  std::abort();
}

/// Where the top-level object or array of `text` ends (one past its closing bracket), found by
/// brackets and strings only, so that it is found in documents that are wrong in other ways too;
/// nothing when the text does not start with a bracket or never closes it.
inline std::optional<std::size_t> document_end(std::string_view text) {
  std::size_t i = text.substr(0, 3) == "\xEF\xBB\xBF" ? 3 : 0;
  while (i < text.size() && (text[i] == ' ' || text[i] == '\n' || text[i] == '\t' || text[i] == '\r')) ++i;
  if (i == text.size() || (text[i] != '{' && text[i] != '[')) return std::nullopt;
  std::size_t depth = 0;
  bool in_string = false;
  for (; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      ++depth;
    } else if ((c == '}' || c == ']') && --depth == 0) {
      return i + 1;
    }
  }
  return std::nullopt;
}

/// The reader on any bytes: a verdict or a normcheck::error, never anything else; a document that
/// passes stops passing when it is cut anywhere before its end; every sum is canonical.
inline void reader_one_input(std::string_view text) {
  const file_report report = check_text(text, "fuzz");
  (void)declared_format(text);
  (void)find_expected_error(text);
  if (report.document) {
    for (const rank_stats& rank : report.document->update.ranks) {
      for (const microbatch_stats& m : rank.microbatches) {
        require(is_canonical(m.target_sum()) && is_canonical(m.target_abs_sum()), "a sum is not canonical", text);
        require(m.target_abs_sum() >= 0 && abs(m.target_sum()) <= m.target_abs_sum(), "|Σy| > Σ|y|", text);
      }
    }
  }
  if (report.status != file_status::pass) return;
  const std::optional<std::size_t> end = document_end(text);
  if (!end) return;
  for (std::size_t cut : {*end - 1, *end / 2, std::size_t{0}}) {
    const file_report prefix = check_text(text.substr(0, cut), "fuzz");
    require(prefix.status != file_status::pass,
            "a document cut at byte " + std::to_string(cut) + " of " + std::to_string(*end) + " passed", text);
  }
}

/// What a literal reads as: its value, or the code it is rejected with.
struct literal_outcome {
  std::optional<rational> value;
  std::optional<error_code> rejection;
  bool operator==(const literal_outcome&) const = default;
};

inline std::string describe_outcome(const literal_outcome& outcome) {
  if (outcome.value) return to_string(*outcome.value);
  return outcome.rejection ? std::string(code_name(*outcome.rejection)) : "nothing";
}

/// Whether a run of decimal digits, as written, exceeds `bound` (no integer is built).
inline bool digits_exceed(std::string digits, std::int64_t bound) {
  while (digits.size() > 1 && digits[0] == '0') digits.erase(0, 1);
  const std::string limit = std::to_string(bound);
  return digits.size() != limit.size() ? digits.size() > limit.size() : digits > limit;
}

/// The slow reference conversion, written from the README's grammar and nothing else: a regular
/// expression per accepted form, then the limits, then the value as integer · base^exponent.
inline literal_outcome reference_literal(const std::string& text, literal_form form, const number_limits& limits) {
  static const std::regex decimal(R"(^(-?)(0|[1-9][0-9]*)(?:\.([0-9]+))?(?:[eE]([+-]?)([0-9]+))?$)");
  static const std::regex fraction(R"(^(-?)(0|[1-9][0-9]*)/([1-9][0-9]*)$)");
  static const std::regex hexadecimal(R"(^(-?)0[xX]([0-9a-fA-F]*)(?:\.([0-9a-fA-F]*))?[pP]([+-]?)([0-9]+)$)");
  const auto reject = [](error_code code) { return literal_outcome{std::nullopt, code}; };
  std::smatch m;
  auto to_integer = [](const std::string& digits, int base) {
    integer value;
    if (!digits.empty()) mpz_set_str(value.backend().data(), digits.c_str(), base);
    return value;
  };
  auto power = [](unsigned base, std::int64_t exponent) {
    integer value =
        boost::multiprecision::pow(integer(base), static_cast<unsigned>(exponent < 0 ? -exponent : exponent));
    return value;
  };
  if (std::regex_match(text, m, decimal)) {
    const std::string whole = m[2], decimals = m[3], exponent_sign = m[4], exponent_digits = m[5];
    if (whole.size() + decimals.size() > limits.max_digits) return reject(error_code::number_out_of_range);
    if (!exponent_digits.empty() && digits_exceed(exponent_digits, limits.max_exponent))
      return reject(error_code::number_out_of_range);
    std::int64_t exponent = exponent_digits.empty() ? 0 : std::stoll(exponent_digits);
    if (exponent_sign == "-") exponent = -exponent;
    exponent -= static_cast<std::int64_t>(decimals.size());
    rational value(to_integer(whole + decimals, 10));
    if (exponent >= 0) value *= rational(power(10, exponent));
    else value /= rational(power(10, exponent));
    if (m[1] == "-") value = -value;
    return {value, std::nullopt};
  }
  if (form == literal_form::json_string && std::regex_match(text, m, fraction)) {
    const std::string p = m[2], q = m[3];
    if (p.size() + q.size() > limits.max_digits) return reject(error_code::number_out_of_range);
    rational value(to_integer(p, 10), to_integer(q, 10));
    if (m[1] == "-") value = -value;
    return {value, std::nullopt};
  }
  if (form == literal_form::json_string && std::regex_match(text, m, hexadecimal)) {
    const std::string whole = m[2], digits = m[3], exponent_sign = m[4], exponent_digits = m[5];
    if (whole.empty() && digits.empty()) return reject(error_code::bad_number);
    if (whole.size() + digits.size() > limits.max_digits) return reject(error_code::number_out_of_range);
    if (digits_exceed(exponent_digits, limits.max_exponent)) return reject(error_code::number_out_of_range);
    std::int64_t exponent = std::stoll(exponent_digits);
    if (exponent_sign == "-") exponent = -exponent;
    exponent -= 4 * static_cast<std::int64_t>(digits.size());
    rational value(to_integer(whole + digits, 16));
    if (exponent >= 0) value *= rational(power(2, exponent));
    else value /= rational(power(2, exponent));
    if (m[1] == "-") value = -value;
    return {value, std::nullopt};
  }
  return reject(error_code::bad_number);
}

/// The one door: parse_literal and to_rational.
inline literal_outcome general_literal(std::string_view text, literal_form form, const number_limits& limits) {
  try {
    return {to_rational(parse_literal(text, form, limits)), std::nullopt};
  } catch (const error& e) {
    return {std::nullopt, e.code()};
  }
}

/// The literal as a JSON value in a document: a bare number, or a string with its text escaped.
inline std::optional<std::string> as_json_value(std::string_view text, literal_form form) {
  std::string out;
  if (form == literal_form::json_number) {
    // Only text the reader sees as one number token: it starts a number and has nothing else in it.
    if (text.empty() || !(text[0] == '-' || (text[0] >= '0' && text[0] <= '9'))) return std::nullopt;
    for (char c : text)
      if (!((c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E')) return std::nullopt;
    return std::string(text);
  }
  out += '"';
  for (char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x80) return std::nullopt;  // keep the document valid UTF-8
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20) {
      char escape[8];
      std::snprintf(escape, sizeof escape, "\\u%04x", byte);
      out += escape;
    } else {
      out += c;
    }
  }
  out += '"';
  return out;
}

/// One literal through every exact path: parse_literal, the machine-integer scan (whole and prefix),
/// the document reader's streaming path, exact_sum and microbatch_builder, against the reference.
inline void literal_paths_agree(std::string_view text, literal_form form, const number_limits& limits,
                                std::string_view input, std::vector<literal_parts>& accepted) {
  const literal_outcome reference = reference_literal(std::string(text), form, limits);
  const literal_outcome general = general_literal(text, form, limits);
  require(general == reference, "parse_literal gives " + describe_outcome(general) + ", the reference " +
                                    describe_outcome(reference) + " for '" + std::string(text) + "'", input);
  machine_literal fast;
  if (scan_machine_literal(text, form, limits, fast)) {
    require(general.value.has_value(), "the fast path takes what parse_literal rejects", input);
    const literal_parts parts = parse_literal(text, form, limits);
    const literal_parts from_fast = to_parts(fast);
    require(from_fast.negative == parts.negative && from_fast.significand == parts.significand &&
                from_fast.exp2 == parts.exp2 && from_fast.exp5 == parts.exp5 && parts.denominator == 1,
            "the fast path takes the literal apart differently", input);
    require(to_rational(from_fast) == *general.value, "the fast path reads another value", input);
  }
  // The prefix scan followed by a delimiter reads the same as the whole-token scan.
  std::string delimited(text);
  delimited += form == literal_form::json_number ? ',' : '"';
  machine_literal prefix;
  const std::size_t length = scan_machine_prefix(delimited, form, limits, prefix);
  if (length == text.size() && !text.empty()) {
    require(general.value.has_value() && to_rational(to_parts(prefix)) == *general.value,
            "the prefix scan reads another value", input);
  }
  // Where the text goes on after the delimiter, the short scan (eight digits at a time) reads what it takes
  // there: the same length and the same parts as the careful scan above.
  delimited.append(48, ' ');
  machine_literal padded;
  require(scan_machine_prefix(delimited, form, limits, padded) == length &&
              (length == 0 || (padded.negative == prefix.negative && padded.significand == prefix.significand &&
                               padded.exp2 == prefix.exp2 && padded.exp5 == prefix.exp5)),
          "the prefix scan reads otherwise where the text goes on", input);
  // The document reader, whose token loop takes the streaming path where it can.
  if (const std::optional<std::string> value = as_json_value(text, form)) {
    reader_limits document_limits;
    document_limits.numbers = limits;
    const std::string document = R"({"format": "normcheck/1", "ranks": [{"targets": [)" + *value + "]}]}";
    literal_outcome read;
    try {
      const partition_file file = read_partition(document, "fuzz", document_limits);
      read.value = file.update.ranks.at(0).microbatches.at(0).target_sum();
    } catch (const error& e) {
      read.rejection = e.code();
    }
    require(read == general, "the document reader gives " + describe_outcome(read) + ", parse_literal " +
                                 describe_outcome(general) + " for '" + std::string(text) + "'", input);
  }
  if (general.value) accepted.push_back(parse_literal(text, form, limits));
}

/// The literal target: the input is split into lines, each line is read as a bare JSON number and as a
/// string under two sets of limits, every path must agree with the reference, and the accepted
/// literals summed through exact_sum (fast and general) and microbatch_builder equal their sum as
/// rationals.
inline void literal_one_input(std::string_view input) {
  if (input.size() > 4096) return;  // the reference's regular expressions recurse per character
  number_limits tight;
  tight.max_exponent = 300;
  tight.max_digits = 40;
  for (const number_limits& limits : {number_limits{}, tight}) {
    std::vector<literal_parts> accepted;
    std::string_view rest = input;
    while (true) {
      const std::size_t newline = rest.find('\n');
      const std::string_view line = rest.substr(0, newline);
      for (literal_form form : {literal_form::json_number, literal_form::json_string})
        literal_paths_agree(line, form, limits, input, accepted);
      if (newline == std::string_view::npos) break;
      rest.remove_prefix(newline + 1);
    }
    rational expected;
    exact_sum general_sum;
    exact_sum fast_sum;
    microbatch_builder builder;
    for (const literal_parts& parts : accepted) {
      expected += to_rational(parts);
      general_sum.add(parts);
      builder.add_token(parts);
      machine_literal fast;
      if (parts.denominator == 1 && parts.significand <= UINT64_MAX && parts.exp2 >= INT32_MIN / 2 &&
          parts.exp2 <= INT32_MAX / 2 && parts.exp5 >= INT32_MIN / 2 && parts.exp5 <= INT32_MAX / 2) {
        fast.negative = parts.negative;
        fast.significand = static_cast<std::uint64_t>(parts.significand);
        fast.exp2 = static_cast<std::int32_t>(parts.exp2);
        fast.exp5 = static_cast<std::int32_t>(parts.exp5);
        fast_sum.add(fast);
      } else {
        fast_sum.add(parts);
      }
    }
    require(general_sum.value() == expected, "exact_sum (general) differs from the rational sum", input);
    require(fast_sum.value() == expected, "exact_sum (machine integers) differs from the rational sum", input);
    const microbatch_stats stats = builder.finish();
    require(stats.target_sum() == expected && stats.valid_tokens == accepted.size(),
            "microbatch_builder differs from the rational sum", input);
  }
}

/// The recipe language on any bytes: parsing gives an expression or a recipe_error whose column lies in
/// the text; an expression evaluates at every count vector to a canonical value or a named zero divisor,
/// the same twice; and the prover decides it (or says recipe_error) without anything else escaping.
/// Returns whether the text parsed.
inline bool recipe_one_input(std::string_view text) {
  std::optional<recipe_expression> parsed;
  try {
    parsed = recipe_expression::parse(text);
  } catch (const error& e) {
    require(e.code() == error_code::recipe_error, "a recipe was rejected with " + std::string(code_name(e.code())),
            text);
    const std::optional<location>& where = e.where();
    require(!where || where->column <= text.size() + 1, "a recipe error's column lies beyond the text", text);
    return false;
  }
  require(parsed->text() == text, "the expression does not keep its text", text);
  // All counts 1; uneven counts; every count 0 (a divisor that vanishes); masses that are fractions.
  const std::vector<count_values> points{
      {rational(1), rational(1), rational(1), rational(1), rational(1), rational(1), rational(1), rational(1)},
      {rational(3), rational(10), rational(4), rational(2), rational(2), rational(10), rational(4), rational(2)},
      {rational(0), rational(0), rational(0), rational(0), rational(0), rational(0), rational(0), rational(0)},
      {rational(2), rational(5), rational(3), rational(1), rational(3), rational(7, 2), rational(3, 2), rational(1, 2)},
  };
  for (const count_values& point : points) {
    const recipe_value value = parsed->evaluate(point);
    if (value.value) require(is_canonical(*value.value), "a recipe's value is not canonical", text);
    else require(!value.zero_divisor.empty(), "a division by zero names no divisor", text);
    const recipe_value again = parsed->evaluate(point);
    require(again.value == value.value && again.zero_divisor == value.zero_divisor, "evaluation is not repeatable",
            text);
  }
  for (const reducer_kind reducer : {reducer_kind::mean, reducer_kind::sum}) {
    const recipe r{*parsed, reducer};
    const objective_kind objective = parsed->mass_variable() ? objective_kind::weighted_token_mean
                                                             : objective_kind::token_mean;
    try {
      (void)prove_recipe(r, objective);
    } catch (const error& e) {
      require(e.code() == error_code::recipe_error, "prove failed with " + std::string(code_name(e.code())), text);
    }
  }
  return true;
}

/// The scenario reader and the simulation on any bytes: a run (complete or halted by its faults) whose
/// expectations can be judged, or a normcheck::error; the run's records are as long as the scenario says.
/// Returns whether the text was read as a scenario.
inline bool scenario_one_input(std::string_view text) {
  scenario s;
  try {
    s = read_scenario(text, "fuzz");
  } catch (const error&) {
    return false;
  }
  try {
    const simulation run = simulate(s);
    require(run.steps.size() <= s.steps.size(), "a run has more steps than its scenario", text);
    require(run.stopped || run.steps.size() == s.steps.size(), "a run ended early without a halt", text);
    require(run.start_up.size() == s.world_size(), "start-up states are not one per rank", text);
    for (const step_record& record : run.steps)
      require(record.ranks.size() == s.world_size(), "a step's record is not one per rank", text);
    (void)unmet_expectations(s, run);
  } catch (const error& e) {
    require(e.code() == error_code::limit_exceeded, "a scenario that was read failed to run with " +
                                                        std::string(code_name(e.code())), text);
  }
  return true;
}

}  // namespace normcheck::fuzz

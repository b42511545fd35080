#include "normcheck/gate/gate_section.hpp"

#include "normcheck/documents/partition_reader.hpp"
#include "normcheck/io/json_writer.hpp"
#include "normcheck/io/text.hpp"

#include <algorithm>

namespace normcheck {

namespace {

// A value for a screen: exact and approximated, or NaN or an infinity as it is.
std::string shown(const observed_value& value) {
  if (const rational* number = std::get_if<rational>(&value)) return on_screen(*number) + " (≈ " + approximate(*number) + ")";
  return to_string(value);
}

void print_explanations(std::ostream& out, std::string_view heading, const std::vector<explanation>& list) {
  for (const explanation& e : list) {
    out << "        " << heading << " " << e.name << " = " << shown(e.value) << "\n          what was computed: "
        << e.computed << "\n          why it is wrong: " << e.why_wrong << "\n          instead: " << e.instead << "\n";
  }
}

// An exact number or one of the non-finite values a float dump can hold ("nan", "inf", "-inf").
observed_value read_observed_value(field_reader& in, std::string_view what) {
  if (in.peek() == json_kind::string) {
    const std::uint64_t offset = in.value_offset();
    field_reader probe = in.at(offset);
    if (const std::optional<non_finite> special = non_finite_from_name(probe.string_value())) {
      in.skip_value();
      return *special;
    }
  }
  return in.exact(what);
}

void write_explanations(json_writer& json, const std::vector<explanation>& list) {
  json.begin_array();
  for (const explanation& e : list)
    json.begin_object()
        .member("name", e.name)
        .member("value", to_string(e.value))
        .member("bound", e.bound)
        .member("computed", e.computed)
        .member("why_wrong", e.why_wrong)
        .member("instead", e.instead)
        .end_object();
  json.end_array();
}

// The explanations a verdict gives: the diagnosis of a failure, the mistakes that could hide otherwise.
const std::vector<explanation>& given_explanations(const gate_result& gate) {
  return gate.verdict == gate_verdict::fail ? gate.diagnosis : gate.could_hide;
}

std::vector<std::string> names_of(const std::vector<explanation>& list) {
  std::vector<std::string> names;
  for (const explanation& e : list) names.push_back(e.name);
  return names;
}

}  // namespace

void gate_section::read(std::string_view key, field_reader& in) {
  if (key == "observed") read_observed(in);
  else read_expectation(in);
}

void gate_section::read_observed(field_reader& in) {
  if (in.peek() != json_kind::object) in.fail_type("observed", "an object with gradient or per_rank, and dtype");
  observed_offset_ = in.value_offset();
  in.begin_object();
  observed_result observed;
  bool saw_gradient = false;
  bool saw_dtype = false;
  std::string_view key;
  while (in.next_member(key)) {
    if (key == "gradient") {
      saw_gradient = true;
      observed.per_rank.push_back(read_observed_value(in, "observed.gradient"));
    } else if (key == "per_rank") {
      observed.from_per_rank = true;
      const std::uint64_t list_offset = in.value_offset();
      if (in.peek() != json_kind::array) in.fail_type("observed.per_rank", "an array of exact numbers, one per rank");
      in.begin_array();
      while (in.next_element()) observed.per_rank.push_back(read_observed_value(in, "each per_rank value"));
      if (observed.per_rank.empty())
        in.fail(error_code::schema_error, "observed.per_rank must list every rank's value", list_offset);
    } else if (key == "dtype") {
      observed.type = in.named("dtype", dtype_from_name, dtype_alternatives());
      saw_dtype = true;
    } else if (key == "reduction_dtype") {
      observed.reduction_type = in.named("reduction_dtype", dtype_from_name, dtype_alternatives());
    } else if (key == "tokens") {
      read_tokens(in, observed);
    } else if (key == "mass") {
      read_mass(in, observed);
    } else if (key == "tolerance") {
      read_tolerance(in, observed);
    } else {
      in.fail_unknown_key(key, "in observed (it has gradient or per_rank, dtype, reduction_dtype, tokens, mass, tolerance)");
    }
  }
  if (saw_gradient == observed.from_per_rank)
    in.fail(error_code::schema_error,
            saw_gradient ? "observed has both gradient and per_rank: give exactly one"
                         : "observed needs gradient (the synchronized value) or per_rank (each rank's copy)",
            observed_offset_);
  if (!saw_dtype)
    in.fail(error_code::schema_error,
            "observed needs dtype (" + dtype_alternatives() + "): the error bound depends on it", observed_offset_);
  observed_ = std::move(observed);
}

void gate_section::read_tokens(field_reader& in, observed_result& observed) {
  if (in.peek() != json_kind::object) in.fail_type("observed.tokens", "an object with global and/or per_rank");
  in.begin_object();
  constexpr std::uint64_t most = std::uint64_t{1} << 62;
  std::string_view key;
  while (in.next_member(key)) {
    if (key == "global") {
      observed.global_tokens = in.integer("observed.tokens.global", 0, most);
    } else if (key == "per_rank") {
      if (in.peek() != json_kind::array) in.fail_type("observed.tokens.per_rank", "an array of counts, one per rank");
      const std::uint64_t list_offset = in.value_offset();
      in.begin_array();
      while (in.next_element()) observed.rank_tokens.push_back(in.integer("each per-rank count", 0, most));
      if (observed.rank_tokens.empty())
        in.fail(error_code::schema_error, "observed.tokens.per_rank must list every rank's count", list_offset);
    } else if (key == "divided_by") {
      if (in.peek() != json_kind::array)
        in.fail_type("observed.tokens.divided_by", "an array with one divisor per rank (a number, or one per microbatch)");
      divided_by_offset_ = in.value_offset();
      in.begin_array();
      while (in.next_element()) {
        std::vector<rational>& divisors = observed.divided_by.emplace_back();
        if (in.peek() != json_kind::array) {
          divisors.push_back(in.non_negative("each rank's divisor"));
          continue;
        }
        in.begin_array();
        while (in.next_element()) divisors.push_back(in.non_negative("each microbatch's divisor"));
      }
      if (observed.divided_by.empty())
        in.fail(error_code::schema_error, "observed.tokens.divided_by must list every rank's divisor", divided_by_offset_);
    } else {
      in.fail_unknown_key(key, "in observed.tokens (it has global, per_rank and divided_by)");
    }
  }
}

void gate_section::read_mass(field_reader& in, observed_result& observed) {
  if (in.peek() != json_kind::object) in.fail_type("observed.mass", "an object with global and/or per_rank");
  in.begin_object();
  std::string_view key;
  while (in.next_member(key)) {
    if (key == "global") {
      observed.global_mass = in.non_negative("observed.mass.global");
    } else if (key == "per_rank") {
      if (in.peek() != json_kind::array) in.fail_type("observed.mass.per_rank", "an array of masses, one per rank");
      in.begin_array();
      while (in.next_element()) observed.rank_masses.push_back(in.non_negative("each per-rank mass"));
    } else {
      in.fail_unknown_key(key, "in observed.mass (it has global and per_rank)");
    }
  }
}

void gate_section::read_tolerance(field_reader& in, observed_result& observed) {
  if (in.peek() != json_kind::object) in.fail_type("observed.tolerance", "an object with absolute and/or relative");
  in.begin_object();
  tolerance bound;
  std::string_view key;
  while (in.next_member(key)) {
    if (key == "absolute") bound.absolute = in.non_negative("tolerance.absolute");
    else if (key == "relative") bound.relative = in.non_negative("tolerance.relative");
    else in.fail_unknown_key(key, "in observed.tolerance (it has absolute and relative)");
  }
  observed.explicit_tolerance = std::move(bound);
}

void gate_section::read_expectation(field_reader& in) {
  if (in.peek() != json_kind::object) in.fail_type("expect_gate", "an object with verdict and explanations");
  const std::uint64_t offset = in.value_offset();
  in.begin_object();
  gate_expectation expected;
  bool saw_verdict = false;
  std::string_view key;
  while (in.next_member(key)) {
    if (key == "verdict") {
      expected.verdict = in.named("verdict", verdict_from_name, verdict_alternatives());
      saw_verdict = true;
    } else if (key == "explanations") {
      if (in.peek() != json_kind::array) in.fail_type("expect_gate.explanations", "an array of names");
      in.begin_array();
      while (in.next_element()) expected.explanations.emplace_back(in.text("each explanation"));
    } else {
      in.fail_unknown_key(key, "in expect_gate (it has verdict and explanations)");
    }
  }
  if (!saw_verdict) in.fail(error_code::schema_error, "expect_gate needs a verdict", offset);
  expectation_ = std::move(expected);
}

// Shapes that depend on the number of ranks and on the objective.
void gate_section::settle(const partition_file& document, field_reader& in) {
  if (!observed_) return;
  const observed_result& observed = *observed_;
  const std::uint64_t ranks = document.update.world_size();
  auto one_per_rank = [&](std::size_t given, std::string_view what, std::string_view unit) {
    if (given != 0 && given != ranks)
      in.fail(error_code::schema_error,
              std::string(what) + " has " + std::to_string(given) + " " + std::string(unit) + " for " +
                  std::to_string(ranks) + " ranks: give one per rank",
              observed_offset_);
  };
  if (observed.from_per_rank) one_per_rank(observed.per_rank.size(), "observed.per_rank", "values");
  one_per_rank(observed.rank_masses.size(), "observed.mass.per_rank", "masses");
  if ((observed.global_mass || !observed.rank_masses.empty()) &&
      document.update.objective != objective_kind::weighted_token_mean)
    in.fail(error_code::schema_error, "observed.mass is a weight mass, which only the weighted_token_mean objective has",
            observed_offset_);
  one_per_rank(observed.rank_tokens.size(), "observed.tokens.per_rank", "counts");
  if (!observed.divided_by.empty() && observed.divided_by.size() != ranks)
    in.fail(error_code::schema_error,
            "observed.tokens.divided_by has " + std::to_string(observed.divided_by.size()) + " divisors for " +
                std::to_string(ranks) + " ranks: give one per rank",
            divided_by_offset_);
  for (std::size_t r = 0; r < observed.divided_by.size(); ++r) {
    const std::size_t given = observed.divided_by[r].size();
    const std::size_t microbatches = document.update.ranks[r].microbatches.size();
    if (given != 1 && given != microbatches)
      in.fail(error_code::schema_error,
              "observed.tokens.divided_by gives rank " + std::to_string(r) + " " + std::to_string(given) +
                  " divisors for its " + std::to_string(microbatches) +
                  " microbatches: give one number, or one per microbatch",
              divided_by_offset_);
  }
}

void gate_section::judge(const partition_file& document, const gradient_set&, std::vector<std::string>& failures) {
  if (!observed_) {
    if (expectation_) failures.push_back("expect_gate is given but the file has no observed result to judge");
    return;
  }
  const gate_result& gate = result_.emplace(run_gate(document.update, *observed_));
  if (!expectation_) {
    if (gate.verdict != gate_verdict::pass) failures.push_back("gate: " + std::string(verdict_name(gate.verdict)));
    return;
  }
  std::vector<std::string> found = names_of(given_explanations(gate));
  std::vector<std::string> expected = expectation_->explanations;
  std::sort(found.begin(), found.end());
  std::sort(expected.begin(), expected.end());
  judged_expectation_held_ = gate.verdict == expectation_->verdict && found == expected;
  if (!judged_expectation_held_)
    failures.push_back("expect_gate: verdict " + std::string(verdict_name(expectation_->verdict)) +
                       " with explanations [" + join(expected, "none") + "], but the gate concluded " +
                       std::string(verdict_name(gate.verdict)) + " with [" + join(found, "none") + "]");
}

void gate_section::print_text(std::ostream& out, const partition_file&, const gradient_set&) const {
  if (!result_) return;
  const gate_result& gate = *result_;
  out << "      gate (" << dtype_name(gate.type)
      << (gate.reduction_type ? ", reduced in " + std::string(dtype_name(*gate.reduction_type)) : std::string())
      << "): observed " << shown(gate.observed) << ", objective " << shown(gate.objective) << "\n";
  out << "        bound " << (gate.bound ? on_screen(*gate.bound) + " (≈ " + approximate(*gate.bound) + ")" : "none")
      << (gate.bound_is_explicit ? ", from the file's tolerance"
                                 : ", derived with K = " + std::to_string(gate.rounding_depth) + " roundings")
      << "\n";
  for (const gate_check& check : gate.checks)
    out << "        " << padded(check.name, 18) << (check.passed ? "ok    " : "FAIL  ") << shorten(check.detail, 400) << "\n";
  out << "        verdict: " << verdict_name(gate.verdict) << "\n";
  print_explanations(out, "diagnosis:", gate.diagnosis);
  print_explanations(out, "could hide:", gate.could_hide);
  if (gate.ratio)
    out << "        unexplained: observed / objective = " << on_screen(*gate.ratio) << " (≈ " << approximate(*gate.ratio)
        << "), no known mistake fits\n";
  if (expectation_ && judged_expectation_held_)
    out << "      expect_gate " << verdict_name(expectation_->verdict) << ": holds\n";
}

void gate_section::write_json(json_writer& json, const partition_file&, const gradient_set&) const {
  if (!result_) return;
  const gate_result& gate = *result_;
  json.key("gate")
      .begin_object()
      .member("verdict", verdict_name(gate.verdict))
      .member("dtype", dtype_name(gate.type))
      .member("reduction_dtype", dtype_name(gate.reduction_type.value_or(gate.type)))
      .member("observed", to_string(gate.observed))
      .member("objective", gate.objective)
      .member("bound", gate.bound)
      .member("bound_is_explicit", gate.bound_is_explicit)
      .member("rounding_depth", gate.rounding_depth)
      .key("checks")
      .begin_array();
  for (const gate_check& check : gate.checks)
    json.begin_object().member("name", check.name).member("passed", check.passed).member("detail", check.detail).end_object();
  json.end_array().key("diagnosis");
  write_explanations(json, gate.diagnosis);
  json.key("could_hide");
  write_explanations(json, gate.could_hide);
  json.member("ratio", gate.ratio).end_object();
}

std::optional<std::string> gate_section::failure_summary() const {
  if (!result_ || result_->verdict == gate_verdict::pass) return std::nullopt;
  const gate_result& gate = *result_;
  std::string message(verdict_name(gate.verdict));
  for (const gate_check& check : gate.checks)
    if (!check.passed) message += ": " + check.name + " check failed";
  const std::string names = join(names_of(given_explanations(gate)));
  if (!names.empty()) message += gate.verdict == gate_verdict::fail ? ": diagnosed as " + names : ": could hide " + names;
  else if (gate.ratio) message += ": unexplained, observed/objective = " + to_string(*gate.ratio);
  return message;
}

}  // namespace normcheck

#include "normcheck/gate/gate_section.hpp"

#include "normcheck/documents/partition_reader.hpp"
#include "normcheck/core/utf8.hpp"
#include "normcheck/io/json_writer.hpp"
#include "normcheck/io/text.hpp"

#include <algorithm>
#include <sstream>

namespace normcheck {

namespace {

// A value for a screen: exact and approximated, or NaN or an infinity as it is.
std::string shown(const observed_value& value) {
  if (const rational* number = std::get_if<rational>(&value))
    return on_screen(*number) + " (≈ " + approximate(*number) + ")";
  return to_string(value);
}

// The observed gradient against the objective's, in words and decimals first, exact values after:
// "the gradient is 0.72 times the token_mean objective's (exact: observed -18/25, objective -1, ratio 18/25)".
std::string in_words(const observed_value& observed, const rational& objective, objective_kind declared) {
  const std::string whose = "the " + std::string(objective_name(declared)) + " objective's";
  const rational* number = std::get_if<rational>(&observed);
  if (!number)
    return "the gradient is " + to_string(observed) + " where " + whose + " is " + approximate(objective) +
           " (exact: objective " + on_screen(objective) + ")";
  if (objective == 0)
    return "the gradient is " + approximate(*number) + " where " + whose + " is 0 (exact: observed " +
           on_screen(*number) + ")";
  const rational ratio = *number / objective;
  return "the gradient is " + approximate(ratio, 11) + " times " + whose + ", " + approximate(*number) +
         " against " + approximate(objective) + " (exact: observed " + on_screen(*number) + ", objective " +
         on_screen(objective) + ", ratio " + on_screen(ratio) + ")";
}

void print_explanations(std::ostream& out, std::string_view indent, std::string_view heading,
                        const std::vector<explanation>& list) {
  for (const explanation& e : list) {
    out << indent << heading << " " << e.name << " = " << shown(e.value) << "\n"
        << indent << "  what was computed: " << e.computed << "\n"
        << indent << "  why it is wrong: " << e.why_wrong << "\n"
        << indent << "  instead: " << e.instead << "\n";
    for (const look_alike& other : e.alike)
      out << indent << "  alike here: " << other.name << " fits this update as well; "
          << "a run with " << other.told_apart_by << " tells them apart\n";
  }
}

// An exact number or one of the non-finite values a float dump can hold ("nan", "inf", "-inf"); a number
// counts against the document's digit budget like every value it keeps.
observed_value read_observed_value(field_reader& in, std::string_view what) {
  const std::uint64_t offset = in.value_offset();
  if (in.peek() == json_kind::string) {
    field_reader probe = in.at(offset);
    if (const std::optional<non_finite> special = non_finite_from_name(probe.string_value())) {
      in.skip_value();
      return *special;
    }
  }
  rational value = in.exact(what);
  in.keep(value, offset);
  return value;
}

// A number ≥ 0 the gate keeps (a divisor, a mass), counted against the document's digit budget.
rational kept_non_negative(field_reader& in, std::string_view what) {
  const std::uint64_t offset = in.value_offset();
  rational value = in.non_negative(what);
  in.keep(value, offset);
  return value;
}

// One group's component, appended to `values`: as read_observed_value reads it, but a float's value m·2⁻ᵏ
// straight from its text into the vector, without a rational (a dump holds hundreds of thousands).
void read_component(field_reader& in, observed_vector& values) {
  const field_reader::literal_text text = in.exact_text("each group's value");
  if (text.form == literal_form::json_string)
    if (const std::optional<non_finite> special = non_finite_from_name(text.written)) {
      values.push_back(*special);
      return;
    }
  machine_literal fast;
  if (scan_machine_literal(text.written, text.form, in.limits().numbers, fast))
    if (const std::optional<std::uint64_t> bits = values.push_back(fast)) {
      in.keep_bits(*bits, text.offset);
      return;
    }
  rational value = to_rational(in.parse(text));
  in.keep(value, text.offset);
  values.push_back(value);
}

// A vector of observed values, one per group.
observed_vector read_observed_vector(field_reader& in, std::string_view what) {
  if (in.peek() != json_kind::array) in.fail_type(what, "an array with one value per group of the update");
  in.begin_array();
  observed_vector values;
  while (in.next_element()) read_component(in, values);
  return values;
}

// `per_rank` (or `witness`) given as vectors: one array per rank.
std::vector<observed_vector> read_observed_vectors(field_reader& in, std::string_view what) {
  if (in.peek() != json_kind::array) in.fail_type(what, "an array with one array per rank, one value per group");
  const std::uint64_t offset = in.value_offset();
  in.begin_array();
  std::vector<observed_vector> ranks;
  while (in.next_element()) ranks.push_back(read_observed_vector(in, "each rank's vector"));
  if (ranks.empty()) in.fail(error_code::schema_error, std::string(what) + " must list every rank's vector", offset);
  return ranks;
}

// One rank's value of the scalar probe: the sum of its vector's components (its first NaN or infinity as it is).
observed_value summed(const observed_vector& components) {
  for (std::size_t i = 0; i < components.size(); ++i)
    if (!components.is_finite(i)) return components[i];
  return components.finite_sum();
}

void write_explanations(json_writer& json, const std::vector<explanation>& list) {
  json.begin_array();
  for (const explanation& e : list) {
    json.begin_object()
        .member("name", e.name)
        .member("value", to_string(e.value))
        .member("bound", e.bound)
        .member("computed", e.computed)
        .member("why_wrong", e.why_wrong)
        .member("instead", e.instead)
        .key("alike")
        .begin_array();
    for (const look_alike& other : e.alike)
      json.begin_object().member("name", other.name).member("told_apart_by", other.told_apart_by).end_object();
    json.end_array().end_object();
  }
  json.end_array();
}

// "1/6 (≈ 0.166667)", or what was dumped where the weight is undefined.
std::string weight_text(const std::optional<rational>& value) {
  return value ? on_screen(*value) + " ≈ " + approximate(*value) : std::string("—");
}

// Rank r's coordinate along each mesh dimension that is not a replica dimension, in the mesh's order (its
// replicas hold the same row).
std::vector<std::uint64_t> mesh_coordinates(const partition& update, std::size_t rank) {
  std::vector<std::uint64_t> coords;
  std::uint64_t listed = update.listed_rank(rank);
  for (std::size_t d = update.mesh.size(); d-- > 0;) {
    if (update.mesh[d].role != mesh_role::replica) coords.insert(coords.begin(), listed % update.mesh[d].size);
    listed /= update.mesh[d].size;
  }
  return coords;
}

// "rank 1, mb 0, seq 2"; on a mesh "rank 1 (dp 0, cp 1), mb 0", the rank numbered as in the whole mesh.
std::string place_text(const weight_row& row, const partition& update) {
  std::string coords;
  const std::vector<std::uint64_t> at = mesh_coordinates(update, row.where.rank);
  std::size_t k = 0;
  for (const mesh_dim& dim : update.mesh) {
    if (dim.role == mesh_role::replica) continue;
    coords += (k ? ", " : " (") + dim.name + " " + std::to_string(at[k]);
    ++k;
  }
  if (k) coords += ")";
  return "rank " + std::to_string(update.listed_rank(row.where.rank)) + coords + ", mb " +
         std::to_string(row.where.microbatch) + (row.sequence ? ", seq " + std::to_string(row.where.group) : "");
}

// The weight table of `measurement` for a screen: one row per group, the first ones when there are many.
void print_weights(std::ostream& out, const group_judgement& judgement, const group_measurement& measurement,
                   const partition& update, std::string_view indent) {
  constexpr std::size_t shown_rows = 24;
  const std::vector<weight_row> rows = weight_rows(update, measurement, judgement, shown_rows);
  // The place column is as wide as its widest shown entry (a mesh's coordinates), at least 22.
  std::size_t place_width = 22;
  if (!update.mesh.empty())
    for (const weight_row& row : rows) place_width = std::max(place_width, display_width(place_text(row, update)));
  out << indent << "weights per group (what the code gave a token, what the objective gives it):\n";
  out << indent << "  " << padded("group", 7) << " " << padded("place", place_width) << " " << padded("tokens", 7)
      << " " << padded("code", 26) << " " << padded("objective", 26) << " ratio\n";
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const weight_row& row = rows[i];
    out << indent << "  " << padded(std::to_string(i), 7) << " " << padded(place_text(row, update), place_width) << " "
        << padded(std::to_string(row.tokens), 7) << " "
        << padded(row.code ? weight_text(row.code) : to_string(row.observed), 26) << " "
        << padded(weight_text(row.objective), 26) << " " << weight_text(row.ratio)
        << (row.within_bound ? "" : "  outside its bound") << (row.witness_agrees ? "" : "  varies inside") << "\n";
  }
  const std::size_t kept = judgement.kept_rows();
  if (judgement.groups > shown_rows)
    out << indent << "  … " << judgement.groups - std::min(kept, shown_rows) << " more groups ("
        << (judgement.groups <= kept ? std::string("every one") : "the first " + std::to_string(kept))
        << " in --json)\n";
}

// The weight table as the text report prints it (lines without indent), for front ends that print it too.
std::string weights_text(const group_judgement& judgement, const group_measurement& measurement,
                         const partition& update) {
  std::ostringstream text;
  print_weights(text, judgement, measurement, update, "");
  return text.str();
}

// What a term's objective counts, for its heading: "9 valid tokens", "3 sequences", "mass 5/2", "C = 12".
std::string count_text(const partition& update) {
  const rational total = objective_units(update, update.objective).total();
  switch (update.objective) {
    case objective_kind::token_mean:
      return on_screen(total) + " valid tokens";
    case objective_kind::weighted_token_mean:
      return "weight mass M = " + on_screen(total);
    case objective_kind::sequence_mean:
    case objective_kind::sequence_sum_mean:
      return on_screen(total) + " sequences";
    case objective_kind::constant:
      break;
  }
  return "tokens, normalizer C = " + on_screen(total);
}

// A loss's bound and each of its checks, two spaces in.
void print_bound_and_checks(std::ostream& out, const gate_result& gate) {
  out << "  bound " << (gate.bound ? on_screen(*gate.bound) + " (≈ " + approximate(*gate.bound) + ")" : "none")
      << (gate.bound_is_explicit ? ", from the file's tolerance"
                                 : ", derived with K = " + std::to_string(gate.rounding_depth) + " roundings")
      << "\n";
  for (const gate_check& check : gate.checks)
    out << "  " << padded(check.name, 18) << (check.passed ? "ok    " : "FAIL  ") << shorten(check.detail, 400) << "\n";
}

// An auxiliary term's part of the gate's text, its first line unindented: its weight and count, its gradient
// against its objective's, the bound, the checks, the verdict and its weight table (its explanations are the
// update's, named "term mtp: …").
std::string term_text(const term_judgement& judged, const observed_result& observed, const partition& update) {
  const gate_result& term = judged.gate;
  std::ostringstream out;
  out << "term " << judged.name << " (weight " << on_screen(update.loss_weight) << ", "
      << objective_name(update.objective) << " over its own " << count_text(update)
      << "): " << in_words(term.observed, term.objective, update.objective) << "\n";
  print_bound_and_checks(out, term);
  out << "  verdict: " << verdict_name(term.verdict) << "\n";
  if (term.ratio)
    out << "  unexplained: observed / objective = " << on_screen(*term.ratio) << " (≈ " << approximate(*term.ratio)
        << "), no known mistake fits\n";
  if (term.groups) print_weights(out, *term.groups, *observed.groups, update, "  ");
  return out.str();
}

// The gate's part of the text report, its first line unindented and the rest two spaces in: the gradient
// against the objective's, the bound, the checks, the verdict, what explains it, the weight tables and the
// sites. The text report prints it indented; the JSON report carries it as `gate.text`, which front ends
// print as it is, so that every reader of a verdict reads one wording.
std::string gate_text(const gate_result& gate, const observed_result& observed,
                      std::span<const observed_result> term_observed, const partition_file& document) {
  std::ostringstream out;
  out << "gate (" << dtype_name(gate.type)
      << (gate.reduction_type ? ", reduced in " + std::string(dtype_name(*gate.reduction_type)) : std::string())
      << "): " << in_words(gate.observed, gate.objective, document.update.objective) << "\n";
  print_bound_and_checks(out, gate);
  out << "  verdict: " << verdict_name(gate.verdict);
  if (gate.main_verdict) {  // with terms: the update's verdict, and each loss's
    out << " (the main loss: " << verdict_name(*gate.main_verdict);
    for (const term_judgement& term : gate.terms)
      out << "; term " << term.name << ": " << verdict_name(term.gate.verdict);
    out << ")";
  }
  out << "\n";
  if (gate.verdict == gate_verdict::inconclusive && !gate.could_hide.empty())
    out << "  not a failure, and not a pass: what could hide below fits this update as well as the objective; "
           "counts that tell them apart (normcheck suggest) decide it\n";
  print_explanations(out, "  ", "diagnosis:", gate.diagnosis);
  print_explanations(out, "  ", "could hide:", gate.could_hide);
  if (gate.ratio)
    out << "  unexplained: observed / objective = " << on_screen(*gate.ratio) << " (≈ " << approximate(*gate.ratio)
        << "), no known mistake fits\n";
  if (gate.groups) print_weights(out, *gate.groups, *observed.groups, document.update, "  ");
  for (std::size_t k = 0; k < gate.sites.size(); ++k) {
    const site_result& site = gate.sites[k];
    const bool agrees = !site.replica_difference && site.judgement.matches_objective;
    out << "  site " << printable(site.name) << ": "
        << (agrees      ? "weighs every group as the objective does"
            : site.as_p ? "weighs every group as p does"
                        : "differs")
        << "\n";
    if (agrees || site.as_p) continue;
    if (site.replica_difference) out << "    " << shorten(*site.replica_difference, 400) << "\n";
    out << "    " << shorten(site.judgement.detail, 400) << "\n";
    print_explanations(out, "    ", "diagnosis:", site.judgement.diagnosis);
    print_weights(out, site.judgement, observed.sites[k], document.update, "    ");
  }
  // Each term on its own: its comparison, checks and weight table (its explanations are named above).
  for (std::size_t t = 0; t < gate.terms.size(); ++t) {
    std::istringstream lines(term_text(gate.terms[t], term_observed[t], document.terms[t].update));
    for (std::string line; std::getline(lines, line);) out << "  " << line << "\n";
  }
  return out.str();
}

// `approximate` down one column of the weight table, remembered from the row before: the objective's weight
// repeats down a table, and so do the code's weight and the ratio where groups repeat.
class column_decimals {
public:
  const std::string& operator()(const rational& value) {
    if (!last_ || *last_ != value) {
      last_ = value;
      text_ = approximate(value);
    }
    return text_;
  }

private:
  std::optional<rational> last_;
  std::string text_;
};

// The weight table in JSON: every row the judgement keeps; the rows of an auxiliary term's table name the term
// (`update.loss_name`).
void write_weights(json_writer& json, const group_judgement& judgement, const group_measurement& measurement,
                   const partition& update) {
  json.begin_object()
      .member("groups", static_cast<std::uint64_t>(judgement.groups))
      .member("text", weights_text(judgement, measurement, update))
      .key("rows")
      .begin_array();
  const std::vector<weight_row> rows = weight_rows(update, measurement, judgement, judgement.kept_rows());
  column_decimals code_decimal;
  column_decimals objective_decimal;
  column_decimals ratio_decimal;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    const weight_row& row = rows[i];
    json.begin_object();
    if (!update.loss_name.empty()) json.member("term", update.loss_name);
    json.member("group", static_cast<std::uint64_t>(i))
        .member("rank", update.listed_rank(row.where.rank))
        .member("microbatch", static_cast<std::uint64_t>(row.where.microbatch));
    if (!update.mesh.empty()) {
      json.key("coords").numbers(mesh_coordinates(update, row.where.rank));
    }
    if (row.sequence) json.member("sequence", static_cast<std::uint64_t>(row.where.group));
    else json.key("sequence").null();
    json.member("tokens", row.tokens)
        .member("observed", to_string(row.observed))
        .member("code", row.code)
        .member("code_decimal", row.code ? std::optional<std::string>(code_decimal(*row.code)) : std::nullopt)
        .member("objective", row.objective)
        .member("objective_decimal", objective_decimal(row.objective))
        .member("ratio", row.ratio)
        .member("ratio_decimal", row.ratio ? std::optional<std::string>(ratio_decimal(*row.ratio)) : std::nullopt)
        .member("within_bound", row.within_bound)
        .member("witness_agrees", row.witness_agrees)
        .end_object();
  }
  json.end_array().member("omitted", static_cast<std::uint64_t>(judgement.groups - judgement.kept_rows()));
  json.end_object();
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

// What a measurement holds wherever it stands (the main loss's `observed`, or an entry of `observed.terms`): the
// gradient or each rank's copy of it, numbers or vectors, and the witness beside vectors. `where` names its
// object in messages ("observed", "observed.terms[0]").
struct measurement_reading {
  observed_result observed;
  bool saw_gradient = false;
  std::optional<group_measurement> groups;
  std::optional<std::vector<observed_vector>> witness;
  std::optional<std::uint64_t> witness_offset;
};

namespace {

// Reads `key` into `reading` when it is gradient, per_rank or witness; false for any other key.
bool read_measured(std::string_view key, field_reader& in, measurement_reading& reading, const std::string& where) {
  observed_result& observed = reading.observed;
  if (key == "gradient") {
    reading.saw_gradient = true;
    if (in.peek() == json_kind::array) {
      reading.groups.emplace().per_rank.push_back(read_observed_vector(in, where + ".gradient"));
    } else {
      observed.per_rank.push_back(read_observed_value(in, where + ".gradient"));
    }
  } else if (key == "per_rank") {
    observed.from_per_rank = true;
    const std::uint64_t list_offset = in.value_offset();
    if (in.peek() != json_kind::array)
      in.fail_type(where + ".per_rank", "an array with one value per rank (or one vector per rank)");
    field_reader look = in.at(list_offset);
    look.begin_array();
    if (look.next_element() && look.peek() == json_kind::array) {
      reading.groups.emplace().per_rank = read_observed_vectors(in, where + ".per_rank");
      reading.groups->from_per_rank = true;
      return true;
    }
    in.begin_array();
    while (in.next_element()) {
      if (in.peek() == json_kind::array)
        in.fail(error_code::schema_error,
                where +
                    ".per_rank mixes numbers and vectors: give every rank a number, or every rank a vector "
                    "with one value per group",
                in.value_offset());
      observed.per_rank.push_back(read_observed_value(in, "each per_rank value"));
    }
    if (observed.per_rank.empty())
      in.fail(error_code::schema_error, where + ".per_rank must list every rank's value", list_offset);
  } else if (key == "witness") {
    reading.witness_offset = in.value_offset();
    reading.witness = read_observed_vectors(in, where + ".witness");
  } else {
    return false;
  }
  return true;
}

// Exactly one of gradient and per_rank.
void require_one_source(field_reader& in, const measurement_reading& reading, std::uint64_t offset,
                        const std::string& where) {
  if (reading.saw_gradient == reading.observed.from_per_rank)
    in.fail(error_code::schema_error,
            reading.saw_gradient ? where + " has both gradient and per_rank: give exactly one"
                                 : where + " needs gradient (the synchronized value) or per_rank (each rank's copy)",
            offset);
}

// Exactly one of gradient and per_rank; the witness beside vectors; each rank's scalar value the sum of its vector.
void finish_measured(field_reader& in, measurement_reading& reading, std::uint64_t offset, const std::string& where) {
  observed_result& observed = reading.observed;
  require_one_source(in, reading, offset, where);
  if (reading.witness && !reading.groups)
    in.fail(error_code::schema_error,
            where +
                ".witness goes with a per-group measurement: give per_rank (or gradient) as vectors, one value "
                "per group",
            *reading.witness_offset);
  if (reading.groups) {
    if (reading.witness) reading.groups->witness = std::move(*reading.witness);
    for (const observed_vector& components : reading.groups->per_rank) observed.per_rank.push_back(summed(components));
    observed.groups = std::move(reading.groups);
  }
}

}  // namespace

void gate_section::read_observed(field_reader& in) {
  if (in.peek() != json_kind::object) in.fail_type("observed", "an object with gradient or per_rank, and dtype");
  observed_offset_ = in.value_offset();
  in.begin_object();
  measurement_reading reading;
  observed_result& observed = reading.observed;
  bool saw_dtype = false;
  std::string_view key;
  while (in.next_member(key)) {
    if (read_measured(key, in, reading, "observed")) {
      if (key == "witness") witness_offset_ = reading.witness_offset;
    } else if (key == "sites") {
      read_sites(in, observed);
    } else if (key == "terms") {
      read_term_observations(in);
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
      in.fail_unknown_key(key,
                          "in observed (it has gradient or per_rank, dtype, reduction_dtype, tokens, mass, "
                          "tolerance, witness and sites beside vectors, and terms)");
    }
  }
  require_one_source(in, reading, observed_offset_, "observed");
  if (!saw_dtype)
    in.fail(error_code::schema_error,
            "observed needs dtype (" + dtype_alternatives() + "): the error bound depends on it", observed_offset_);
  if ((reading.witness || !observed.sites.empty()) && !reading.groups)
    in.fail(error_code::schema_error,
            std::string(reading.witness ? "observed.witness" : "observed.sites") +
                " goes with a per-group measurement: give per_rank (or gradient) as vectors, one value per group",
            reading.witness ? *witness_offset_ : observed_offset_);
  finish_measured(in, reading, observed_offset_, "observed");
  // A term's measurement shares the main loss's arithmetic and tolerance.
  for (term_observation& term : term_observed_) {
    term.observed.type = observed.type;
    term.observed.reduction_type = observed.reduction_type;
    term.observed.explicit_tolerance = observed.explicit_tolerance;
  }
  observed_ = std::move(observed);
}

void gate_section::read_term_observations(field_reader& in) {
  if (in.peek() != json_kind::array)
    in.fail_type("observed.terms", "an array with one measurement per term, {\"name\", \"per_rank\"} each");
  in.begin_array();
  while (in.next_element()) {
    const std::uint64_t offset = in.value_offset();
    const std::string where = "observed.terms[" + std::to_string(term_observed_.size()) + "]";
    if (in.peek() != json_kind::object)
      in.fail_type(where, "an object with name, and gradient or per_rank (numbers or vectors), and witness");
    in.begin_object();
    measurement_reading reading;
    std::optional<std::string> name;
    std::string_view key;
    while (in.next_member(key)) {
      if (key == "name")
        name = std::string(in.text("a term's name"));
      else if (!read_measured(key, in, reading, where))
        in.fail_unknown_key(key, "in " + where + " (it has name, gradient or per_rank, and witness beside vectors)");
    }
    if (!name) in.fail(error_code::schema_error, where + " needs name: the term it measures", offset);
    for (const term_observation& other : term_observed_)
      if (other.name == *name)
        in.fail(error_code::schema_error, "observed.terms measures term \"" + printable(*name) + "\" twice", offset);
    finish_measured(in, reading, offset, where);
    term_observed_.push_back({std::move(*name), std::move(reading.observed), offset, reading.witness_offset});
  }
}

void gate_section::read_sites(field_reader& in, observed_result& observed) {
  if (in.peek() != json_kind::array) in.fail_type("observed.sites", "an array of sites, {\"name\", \"per_rank\"} each");
  sites_offset_ = in.value_offset();
  in.begin_array();
  while (in.next_element()) {
    const std::uint64_t offset = in.value_offset();
    if (in.peek() != json_kind::object)
      in.fail_type("each site", "an object with name, and per_rank (or gradient) as vectors, and witness");
    in.begin_object();
    group_measurement site;
    bool saw_name = false;
    bool saw_values = false;
    std::string_view key;
    while (in.next_member(key)) {
      if (key == "name") {
        site.site = std::string(in.text("a site's name"));
        saw_name = true;
      } else if (key == "per_rank" || key == "gradient") {
        if (saw_values)
          in.fail(error_code::schema_error, "a site has both gradient and per_rank: give exactly one", in.key_offset());
        saw_values = true;
        site.from_per_rank = key == "per_rank";
        if (site.from_per_rank) site.per_rank = read_observed_vectors(in, "a site's per_rank");
        else site.per_rank.push_back(read_observed_vector(in, "a site's gradient"));
      } else if (key == "witness") {
        site.witness = read_observed_vectors(in, "a site's witness");
      } else {
        in.fail_unknown_key(key, "in a site (it has name, per_rank or gradient, and witness)");
      }
    }
    if (!saw_name || site.site.empty())
      in.fail(error_code::schema_error, "each site needs a non-empty name: the submodule its probe sat in", offset);
    if (!saw_values)
      in.fail(error_code::schema_error,
              "site \"" + printable(site.site) + "\" needs per_rank (or gradient): its vectors", offset);
    for (const group_measurement& other : observed.sites)
      if (other.site == site.site)
        in.fail(error_code::schema_error, "two sites are named \"" + printable(site.site) + "\": each site once",
                offset);
    observed.sites.push_back(std::move(site));
  }
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
      while (in.next_element()) {
        const std::uint64_t offset = in.value_offset();
        observed.rank_tokens.push_back(in.integer("each per-rank count", 0, most));
        in.keep(rational(observed.rank_tokens.back()), offset);
      }
      if (observed.rank_tokens.empty())
        in.fail(error_code::schema_error, "observed.tokens.per_rank must list every rank's count", list_offset);
    } else if (key == "divided_by") {
      if (in.peek() != json_kind::array)
        in.fail_type("observed.tokens.divided_by",
                     "an array with one divisor per rank (a number, or one per microbatch)");
      divided_by_offset_ = in.value_offset();
      in.begin_array();
      while (in.next_element()) {
        std::vector<rational>& divisors = observed.divided_by.emplace_back();
        if (in.peek() != json_kind::array) {
          divisors.push_back(kept_non_negative(in, "each rank's divisor"));
          continue;
        }
        in.begin_array();
        while (in.next_element()) divisors.push_back(kept_non_negative(in, "each microbatch's divisor"));
      }
      if (observed.divided_by.empty())
        in.fail(error_code::schema_error, "observed.tokens.divided_by must list every rank's divisor",
                divided_by_offset_);
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
      observed.global_mass = kept_non_negative(in, "observed.mass.global");
    } else if (key == "per_rank") {
      if (in.peek() != json_kind::array) in.fail_type("observed.mass.per_rank", "an array of masses, one per rank");
      in.begin_array();
      while (in.next_element()) observed.rank_masses.push_back(kept_non_negative(in, "each per-rank mass"));
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
  const std::uint64_t ranks = document.update.listed_ranks();
  auto one_per_rank = [&](std::size_t given, std::string_view what, std::string_view unit) {
    if (given != 0 && given != ranks)
      in.fail(error_code::schema_error,
              std::string(what) + " has " + std::to_string(given) + " " + std::string(unit) + " for " +
                  std::to_string(ranks) + " ranks: give one per rank",
              observed_offset_);
  };
  if (observed.from_per_rank) one_per_rank(observed.per_rank.size(), "observed.per_rank", "values");
  if (observed.groups) settle_groups(document, in);
  settle_terms(document, in);
  one_per_rank(observed.rank_masses.size(), "observed.mass.per_rank", "masses");
  if ((observed.global_mass || !observed.rank_masses.empty()) &&
      document.update.objective != objective_kind::weighted_token_mean)
    in.fail(error_code::schema_error,
            "observed.mass is a weight mass, which only the weighted_token_mean objective has", observed_offset_);
  one_per_rank(observed.rank_tokens.size(), "observed.tokens.per_rank", "counts");
  if (!observed.divided_by.empty() && observed.divided_by.size() != ranks)
    in.fail(error_code::schema_error,
            "observed.tokens.divided_by has " + std::to_string(observed.divided_by.size()) + " divisors for " +
                std::to_string(ranks) + " ranks: give one per rank",
            divided_by_offset_);
  fold_replicas(document.update, in);
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

void gate_section::fold_replicas(const partition& update, field_reader& in) {
  if (update.mesh_extent(mesh_role::replica) < 2) return;
  observed_result& observed = *observed_;
  auto fold = [&](auto& values, std::string_view what, std::uint64_t offset) {
    if (values.empty()) return;
    for (std::uint64_t q = 0; q < values.size(); ++q) {
      const std::uint64_t first = update.first_replica(q);
      if (values[q] != values[first])
        in.fail(error_code::schema_error,
                std::string(what) + " gives rank " + std::to_string(q) + " another value than rank " +
                    std::to_string(first) + ", its replica along " + update.mesh_names(mesh_role::replica) +
                    ": replicas hold the same tokens, so they count them alike",
                offset);
    }
    std::remove_reference_t<decltype(values)> firsts;
    for (std::size_t r = 0; r < update.ranks.size(); ++r) firsts.push_back(values[update.listed_rank(r)]);
    values = std::move(firsts);
  };
  fold(observed.rank_tokens, "observed.tokens.per_rank", observed_offset_);
  fold(observed.rank_masses, "observed.mass.per_rank", observed_offset_);
  fold(observed.divided_by, "observed.tokens.divided_by", divided_by_offset_);
}

namespace {

// A per-group measurement of `update` (the main loss's, a site's, a term's, named `name`, whose groups are
// `whose`'s): one vector per rank (or one for all), each with one value per group; the witness shaped alike and
// only for unweighted tokens.
void settle_measurement(const partition& update, const group_measurement& m, const std::string& name,
                        std::string_view whose, std::uint64_t offset, std::uint64_t witness_offset, field_reader& in) {
  const std::uint64_t groups = update.group_count();
  const std::uint64_t ranks = update.listed_ranks();
  auto shaped = [&](const std::vector<observed_vector>& vectors, bool per_rank, const std::string& what,
                    std::uint64_t at) {
    if (per_rank && vectors.size() != ranks)
      in.fail(error_code::schema_error,
              what + " has " + std::to_string(vectors.size()) + " vectors for " + std::to_string(ranks) +
                  " ranks: give one per rank",
              at);
    for (std::size_t r = 0; r < vectors.size(); ++r)
      if (vectors[r].size() != groups)
        in.fail(error_code::schema_error,
                what + (per_rank ? " of rank " + std::to_string(r) : std::string()) + " has " +
                    std::to_string(vectors[r].size()) + " values, but " + std::string(whose) + " has " +
                    std::to_string(groups) +
                    " groups (its sequences, or its microbatches where they declare none): give one value per group",
                at);
  };
  shaped(m.per_rank, m.from_per_rank, name, offset);
  if (m.witness.empty()) return;
  if (update.objective == objective_kind::weighted_token_mean)
    in.fail(error_code::schema_error,
            "the witness is defined for unweighted tokens (the j-th valid token's value is j); a weighted step "
            "gives per_rank alone",
            witness_offset);
  if (m.witness.size() != m.per_rank.size())
    in.fail(error_code::schema_error,
            name + "'s witness has " + std::to_string(m.witness.size()) + " vectors beside " +
                std::to_string(m.per_rank.size()) + " in per_rank: shape it like per_rank",
            witness_offset);
  shaped(m.witness, m.from_per_rank, name + "'s witness", witness_offset);
}

}  // namespace

// The main loss's per-group measurement and every site's.
void gate_section::settle_groups(const partition_file& document, field_reader& in) const {
  const observed_result& observed = *observed_;
  settle_measurement(document.update, *observed.groups, "observed.per_rank", "the update", observed_offset_,
                     witness_offset_.value_or(observed_offset_), in);
  for (const group_measurement& site : observed.sites)
    settle_measurement(document.update, site, "site \"" + printable(site.site) + "\"", "the update", sites_offset_,
                       witness_offset_.value_or(sites_offset_), in);
}

void gate_section::settle_terms(const partition_file& document, field_reader& in) {
  for (const term_observation& term : term_observed_)
    if (std::none_of(document.terms.begin(), document.terms.end(),
                     [&](const auxiliary_term& declared) { return declared.name == term.name; }))
      in.fail(error_code::schema_error,
              "observed.terms measures term \"" + printable(term.name) +
                  "\", which the document does not declare (its \"terms\" name the auxiliary terms)",
              term.offset);
  std::vector<term_observation> ordered;
  for (const auxiliary_term& declared : document.terms) {
    const auto found = std::find_if(term_observed_.begin(), term_observed_.end(),
                                    [&](const term_observation& term) { return term.name == declared.name; });
    if (found == term_observed_.end())
      in.fail(error_code::schema_error,
              "observed has no measurement of term " + declared.name +
                  " (observed.terms): the gate judges every loss of the update, and passes only when each passes",
              observed_offset_);
    ordered.push_back(std::move(*found));
  }
  term_observed_ = std::move(ordered);
  for (std::size_t t = 0; t < term_observed_.size(); ++t) {
    const term_observation& term = term_observed_[t];
    const partition& update = document.terms[t].update;
    const std::string where = "the measurement of term " + term.name;
    if (term.observed.from_per_rank && !term.observed.groups && term.observed.per_rank.size() != update.listed_ranks())
      in.fail(error_code::schema_error,
              where + " has " + std::to_string(term.observed.per_rank.size()) + " values for " +
                  std::to_string(update.listed_ranks()) + " ranks: give one per rank",
              term.offset);
    if (term.observed.groups)
      settle_measurement(update, *term.observed.groups, where, "term " + term.name, term.offset,
                         term.witness_offset.value_or(term.offset), in);
  }
}

void gate_section::judge(const partition_file& document, const gradient_set&, std::vector<std::string>& failures) {
  if (!observed_) {
    if (expectation_) failures.push_back("expect_gate is given but the file has no observed result to judge");
    return;
  }
  term_measured_.clear();
  for (const term_observation& term : term_observed_) term_measured_.push_back(term.observed);
  const gate_result& gate =
      result_.emplace(run_update_gate(document.update, *observed_, document.terms, term_measured_));
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

void gate_section::print_text(std::ostream& out, const partition_file& document, const gradient_set&) const {
  if (!result_) return;
  std::istringstream lines(gate_text(*result_, *observed_, term_measured_, document));
  for (std::string line; std::getline(lines, line);) out << "      " << line << "\n";
  if (expectation_ && judged_expectation_held_)
    out << "      expect_gate " << verdict_name(expectation_->verdict) << ": holds\n";
}

namespace {

// The members of one loss's judgement: the verdict, the comparison with its objective, the checks, the
// explanations and the weight table.
void write_loss_gate(json_writer& json, const gate_result& gate, const observed_result& observed,
                     const partition& update, const std::string& text) {
  json.member("verdict", verdict_name(gate.verdict))
      .member("dtype", dtype_name(gate.type))
      .member("reduction_dtype", dtype_name(gate.reduction_type.value_or(gate.type)))
      .member("observed", to_string(gate.observed))
      .member("objective", gate.objective)
      .member("bound", gate.bound)
      .member("bound_is_explicit", gate.bound_is_explicit)
      .member("rounding_depth", gate.rounding_depth)
      .member("in_words", in_words(gate.observed, gate.objective, update.objective))
      .member("text", text)
      .key("checks")
      .begin_array();
  for (const gate_check& check : gate.checks)
    json.begin_object()
        .member("name", check.name)
        .member("passed", check.passed)
        .member("detail", check.detail)
        .end_object();
  json.end_array().key("diagnosis");
  write_explanations(json, gate.diagnosis);
  json.key("could_hide");
  write_explanations(json, gate.could_hide);
  json.member("ratio", gate.ratio);
  if (gate.groups) {
    json.key("weights");
    write_weights(json, *gate.groups, *observed.groups, update);
  }
}

}  // namespace

void gate_section::write_json(json_writer& json, const partition_file& document, const gradient_set&) const {
  if (!result_) return;
  const gate_result& gate = *result_;
  json.key("gate").begin_object();
  write_loss_gate(json, gate, *observed_, document.update, gate_text(gate, *observed_, term_measured_, document));
  if (!gate.sites.empty()) {
    json.key("sites").begin_array();
    for (std::size_t k = 0; k < gate.sites.size(); ++k) {
      const site_result& site = gate.sites[k];
      json.begin_object()
          .member("name", site.name)
          .member("matches_objective", site.judgement.matches_objective && !site.replica_difference)
          .member("replica_difference", site.replica_difference)
          .member("detail", site.judgement.detail)
          .key("diagnosis");
      write_explanations(json, site.judgement.diagnosis);
      json.key("could_hide");
      write_explanations(json, site.judgement.could_hide);
      json.key("weights");
      write_weights(json, site.judgement, observed_->sites[k], document.update);
      json.end_object();
    }
    json.end_array();
  }
  if (gate.main_verdict) {  // with auxiliary terms: the main loss's own verdict, and each term's judgement
    json.member("main_verdict", verdict_name(*gate.main_verdict)).key("terms").begin_array();
    for (std::size_t t = 0; t < gate.terms.size(); ++t) {
      json.begin_object().member("name", gate.terms[t].name);
      write_loss_gate(json, gate.terms[t].gate, term_measured_[t], document.terms[t].update,
                      term_text(gate.terms[t], term_measured_[t], document.terms[t].update));
      json.end_object();
    }
    json.end_array();
  }
  json.end_object();
}

std::optional<std::string> gate_section::failure_summary() const {
  if (!result_ || result_->verdict == gate_verdict::pass) return std::nullopt;
  const gate_result& gate = *result_;
  std::string message(verdict_name(gate.verdict));
  for (const gate_check& check : gate.checks)
    if (!check.passed) message += ": " + check.name + " check failed";
  const std::string names = join(names_of(given_explanations(gate)));
  if (!names.empty())
    message += gate.verdict == gate_verdict::fail ? ": diagnosed as " + names : ": could hide " + names;
  else if (gate.ratio) message += ": unexplained, observed/objective = " + to_string(*gate.ratio);
  for (const site_result& site : gate.sites)
    if (!site.as_p && (site.replica_difference || !site.judgement.matches_objective)) {
      const std::string site_names = join(names_of(site.judgement.diagnosis));
      message += "; site " + printable(site.name) + (site_names.empty() ? " differs" : " diagnosed as " + site_names);
    }
  return message;
}

}  // namespace normcheck

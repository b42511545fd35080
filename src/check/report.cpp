#include "normcheck/check/report.hpp"

#include "normcheck/io/json_writer.hpp"

#include <cstdio>
#include <sstream>

namespace normcheck {

namespace {

std::string exact_for_screen(const std::optional<rational>& value) {
  return value ? shorten(to_string(*value)) : std::string("undefined");
}

std::string padded(std::string_view text, std::size_t width) {
  // Width counts characters, not bytes, so formulas with subscripts line up.
  std::size_t chars = 0;
  for (char c : text)
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++chars;
  std::string out(text);
  if (chars < width) out.append(width - chars, ' ');
  return out;
}

void print_explanations(std::ostream& out, std::string_view heading, const std::vector<explanation>& list) {
  for (const explanation& e : list) {
    out << "        " << heading << " " << e.name << " = " << exact_for_screen(e.value) << " (≈ " << approximate(e.value)
        << ")\n          what was computed: " << e.computed << "\n          why it is wrong: " << e.why_wrong
        << "\n          instead: " << e.instead << "\n";
  }
}

void print_gate(std::ostream& out, const gate_result& gate) {
  out << "      gate (" << dtype_name(gate.type) << "): observed " << exact_for_screen(gate.observed) << " (≈ "
      << approximate(gate.observed) << "), objective " << exact_for_screen(gate.objective) << " (≈ "
      << approximate(gate.objective) << ")\n";
  out << "        bound " << (gate.bound ? exact_for_screen(gate.bound) + " (≈ " + approximate(*gate.bound) + ")" : "none")
      << (gate.bound_is_explicit ? ", from the file's tolerance" : ", derived with K = " + std::to_string(gate.rounding_depth) + " roundings")
      << "\n";
  for (const gate_check& check : gate.checks)
    out << "        " << padded(check.name, 18) << (check.passed ? "ok    " : "FAIL  ") << shorten(check.detail, 400) << "\n";
  out << "        verdict: " << verdict_name(gate.verdict) << "\n";
  print_explanations(out, "diagnosis:", gate.diagnosis);
  print_explanations(out, "could hide:", gate.could_hide);
  if (gate.ratio)
    out << "        unexplained: observed / objective = " << exact_for_screen(gate.ratio) << " (≈ " << approximate(*gate.ratio)
        << "), no known mistake fits\n";
}

void json_explanations(json_writer& json, const std::vector<explanation>& list) {
  json.begin_array();
  for (const explanation& e : list)
    json.begin_object()
        .member("name", e.name)
        .member("value", e.value)
        .member("bound", e.bound)
        .member("computed", e.computed)
        .member("why_wrong", e.why_wrong)
        .member("instead", e.instead)
        .end_object();
  json.end_array();
}

void json_gate(json_writer& json, const gate_result& gate) {
  json.begin_object()
      .member("verdict", verdict_name(gate.verdict))
      .member("dtype", dtype_name(gate.type))
      .member("observed", gate.observed)
      .member("objective", gate.objective)
      .member("bound", gate.bound)
      .member("bound_is_explicit", gate.bound_is_explicit)
      .member("rounding_depth", gate.rounding_depth)
      .key("checks")
      .begin_array();
  for (const gate_check& check : gate.checks)
    json.begin_object().member("name", check.name).member("passed", check.passed).member("detail", check.detail).end_object();
  json.end_array().key("diagnosis");
  json_explanations(json, gate.diagnosis);
  json.key("could_hide");
  json_explanations(json, gate.could_hide);
  json.member("ratio", gate.ratio).end_object();
}

void print_rejection(std::ostream& out, const file_report& report) {
  const error& e = *report.rejection;
  if (report.status == file_status::pass) {
    out << "PASS  " << report.file << "\n      rejected as expected: " << describe(e) << "\n";
    return;
  }
  out << "ERROR " << describe(e) << "\n";
  for (const std::string& failure : report.failures) out << "      " << failure << "\n";
}

}  // namespace

run_summary summarize(const std::vector<file_report>& reports) {
  run_summary summary;
  for (const file_report& r : reports) {
    switch (r.status) {
      case file_status::pass: ++summary.passed; break;
      case file_status::fail: ++summary.failed; break;
      case file_status::error: ++summary.errors; break;
    }
  }
  return summary;
}

void print_text(std::ostream& out, const file_report& report) {
  if (report.rejection) {
    print_rejection(out, report);
    return;
  }
  if (!report.document) {
    out << (report.status == file_status::pass ? "PASS  " : "FAIL  ") << report.file << "\n";
    for (const std::string& line : report.details) out << "      " << line << "\n";
    for (const std::string& failure : report.failures) out << "      " << failure << "\n";
    return;
  }
  const partition_file& document = *report.document;
  const partition& update = document.update;
  out << (report.status == file_status::pass ? "PASS  " : "FAIL  ") << report.file << "\n";
  if (!document.description.empty()) out << "      " << document.description << "\n";
  const bool weighted = update.objective == objective_kind::weighted_token_mean;
  out << "      W = " << update.world_size() << ", reducer " << reducer_name(update.reducer) << ", θ = "
      << shorten(to_string(update.theta)) << ", N = " << update.valid_tokens();
  if (weighted) out << ", objective weighted_token_mean, M = " << shorten(to_string(update.mass()));
  out << "\n";
  constexpr std::size_t shown_ranks = 16;
  for (std::size_t r = 0; r < update.ranks.size(); ++r) {
    if (r == shown_ranks && update.ranks.size() > shown_ranks + 1) {
      out << "      … " << update.ranks.size() - shown_ranks << " more ranks\n";
      break;
    }
    const rank_stats& rank = update.ranks[r];
    out << "      rank " << r << ": n = " << rank.valid_tokens();
    if (rank.padding() > 0) out << " (+" << rank.padding() << " padding)";
    if (weighted) out << ", m = " << shorten(to_string(rank.mass()));
    if (rank.microbatches.size() > 1) out << " in " << rank.microbatches.size() << " microbatches";
    out << ", S = " << shorten(to_string(loss_gradient_sum(rank, update.theta))) << "\n";
  }
  for (std::size_t i = 0; i < all_strategies.size(); ++i) {
    const strategy s = all_strategies[i];
    const std::optional<rational>& value = report.gradients[i];
    out << "      " << padded(strategy_name(s), 16) << padded(strategy_formula(s, update.objective), 19) << "= "
        << padded(exact_for_screen(value), 14) << " ";
    if (value) out << padded("≈ " + approximate(*value), 16);
    else out << padded("", 16);
    if (s == strategy::global_mean) out << "the objective";
    else if (!value) out << "undefined here";
    else out << (equals_objective(report.gradients, s) ? "equals the objective" : "differs from the objective");
    out << "\n";
  }
  if (report.recipe_result) {
    const recipe& r = *document.normalization;
    const std::optional<rational>& value = report.recipe_result->value;
    out << "      " << padded("recipe", 16) << padded("\"" + r.scale.text() + "\" (" + std::string(reducer_name(r.reducer)) + ")", 18)
        << " = ";
    if (value)
      out << padded(exact_for_screen(value), 14) << " " << padded("≈ " + approximate(*value), 16)
          << (*value == *report.gradients[0] ? "equals the objective" : "differs from the objective") << "\n";
    else
      out << "undefined: it divides by zero (" << report.recipe_result->zero_divisor << " is 0)\n";
  }
  if (report.recipe_result && document.expect_recipe && *document.expect_recipe == report.recipe_result->value)
    out << "      expect recipe = " << exact_for_screen(*document.expect_recipe) << ": holds\n";
  if (report.gate) print_gate(out, *report.gate);
  if (report.gate && document.expect_gate && report.status == file_status::pass)
    out << "      expect_gate " << verdict_name(document.expect_gate->verdict) << ": holds\n";
  for (const expectation_result& claim : report.expectations)
    out << "      expect " << strategy_name(claim.name) << " = "
        << exact_for_screen(claim.expected) << ": " << (claim.held ? "holds" : "DOES NOT HOLD") << "\n";
  for (const std::string& failure : report.failures) out << "      " << failure << "\n";
}

void print_summary(std::ostream& out, const run_summary& summary) {
  const std::size_t total = summary.passed + summary.failed + summary.errors;
  out << total << (total == 1 ? " file: " : " files: ") << summary.passed << " passed, " << summary.failed
      << " failed, " << summary.errors << " rejected\n";
}

namespace {

void write_report_json(json_writer& json, const file_report& report) {
  json.begin_object().member("file", report.file).member("kind", report.kind).member("status", status_name(report.status));
  if (report.document) {
    const partition& update = report.document->update;
    json.member("world_size", update.world_size())
        .member("reducer", reducer_name(update.reducer))
        .member("theta", update.theta)
        .member("objective", objective_name(update.objective))
        .member("valid_tokens", update.valid_tokens())
        .member("mass", update.mass())
        .key("ranks")
        .begin_array();
    for (const rank_stats& rank : update.ranks)
      json.begin_object()
          .member("valid_tokens", rank.valid_tokens())
          .member("padding", rank.padding())
          .member("mass", rank.mass())
          .member("microbatches", std::uint64_t{rank.microbatches.size()})
          .member("loss_gradient_sum", loss_gradient_sum(rank, update.theta))
          .end_object();
    json.end_array().key("gradients").begin_object();
    for (std::size_t g = 0; g < all_strategies.size(); ++g) json.member(strategy_name(all_strategies[g]), report.gradients[g]);
    json.end_object().key("denominators").begin_object();
    for (strategy s : all_strategies) json.member(strategy_name(s), strategy_denominator(s, update.objective));
    json.end_object().key("equals_objective").begin_object();
    for (strategy s : all_strategies) json.member(strategy_name(s), equals_objective(report.gradients, s));
    json.end_object().key("expectations").begin_array();
    for (const expectation_result& claim : report.expectations)
      json.begin_object()
          .member("gradient", strategy_name(claim.name))
          .member("expected", claim.expected)
          .member("actual", claim.actual)
          .member("held", claim.held)
          .end_object();
    json.end_array();
    if (report.recipe_result) {
      const recipe& r = *report.document->normalization;
      const std::optional<rational>& value = report.recipe_result->value;
      json.key("recipe")
          .begin_object()
          .member("scale", r.scale.text())
          .member("reducer", reducer_name(r.reducer))
          .member("gradient", value)
          .key("zero_divisor");
      if (value) json.null();
      else json.string(report.recipe_result->zero_divisor);
      json.member("equals_objective", value && *value == *report.gradients[0]);
      if (report.document->expect_recipe) json.member("expected", *report.document->expect_recipe);
      json.end_object();
    }
    if (report.gate) {
      json.key("gate");
      json_gate(json, *report.gate);
    }
  } else {
    json.key("gradients").null();
  }
  if (report.expected_error) json.member("expected_error", code_name(*report.expected_error));
  if (report.rejection) {
    const error& e = *report.rejection;
    json.key("error").begin_object().member("code", code_name(e.code())).member("message", e.message());
    if (e.where() && e.where()->line > 0) json.member("line", e.where()->line).member("column", e.where()->column);
    else json.key("line").null().key("column").null();
    json.end_object();
  }
  if (!report.details.empty()) json.member("details", report.details);
  json.member("failures", report.failures).end_object();
}

}  // namespace

std::string json_report(const std::vector<file_report>& reports) {
  std::string out;
  json_writer json(out);
  json.begin_object().key("reports").begin_array(json_layout::lines);
  for (const file_report& report : reports) write_report_json(json, report);
  const run_summary summary = summarize(reports);
  json.end_array()
      .member("passed", std::uint64_t{summary.passed})
      .member("failed", std::uint64_t{summary.failed})
      .member("errors", std::uint64_t{summary.errors})
      .end_object();
  return out + "\n";
}

void print_json(std::ostream& out, const std::vector<file_report>& reports) { out << json_report(reports); }

}  // namespace normcheck

namespace normcheck {

namespace {

std::string xml_escape(std::string_view text) {
  std::string out;
  for (char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default:
        // XML 1.0 forbids most control characters even when escaped.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t' && c != '\r') out += ' ';
        else out += c;
    }
  }
  return out;
}

// One line that names what went wrong, for the failure message attribute.
std::string failure_message(const file_report& report) {
  if (report.rejection && report.status != file_status::pass) return describe(*report.rejection);
  if (report.gate && report.gate->verdict != gate_verdict::pass) {
    const gate_result& gate = *report.gate;
    const std::vector<explanation>& list = gate.verdict == gate_verdict::fail ? gate.diagnosis : gate.could_hide;
    std::string names;
    for (const explanation& e : list) names += (names.empty() ? "" : ", ") + e.name;
    std::string message = std::string(verdict_name(gate.verdict));
    for (const gate_check& check : gate.checks)
      if (!check.passed) message += ": " + check.name + " check failed";
    if (!names.empty()) message += gate.verdict == gate_verdict::fail ? ": diagnosed as " + names : ": could hide " + names;
    else if (gate.ratio) message += ": unexplained, observed/objective = " + to_string(*gate.ratio);
    return message;
  }
  return report.failures.empty() ? std::string("failed") : report.failures.front();
}

}  // namespace

std::string junit_report(const std::vector<file_report>& reports) {
  const run_summary summary = summarize(reports);
  std::ostringstream out;
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"normcheck\" tests=\"" << reports.size()
      << "\" failures=\"" << summary.failed << "\" errors=\"" << summary.errors << "\">\n"
      << "  <testsuite name=\"normcheck check\" tests=\"" << reports.size() << "\" failures=\"" << summary.failed
      << "\" errors=\"" << summary.errors << "\" skipped=\"0\">\n";
  for (const file_report& report : reports) {
    out << "    <testcase classname=\"normcheck." << xml_escape(report.kind) << "\" name=\"" << xml_escape(report.file) << "\"";
    if (report.status == file_status::pass) {
      out << "/>\n";
      continue;
    }
    std::ostringstream text;
    print_text(text, report);
    const char* element = report.status == file_status::error ? "error" : "failure";
    out << ">\n      <" << element << " message=\"" << xml_escape(failure_message(report)) << "\" type=\""
        << (report.rejection ? code_name(report.rejection->code()) : std::string_view("check_failed")) << "\">"
        << xml_escape(text.str()) << "</" << element << ">\n    </testcase>\n";
  }
  out << "  </testsuite>\n</testsuites>\n";
  return out.str();
}

}  // namespace normcheck

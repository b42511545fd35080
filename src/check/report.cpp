#include "normcheck/check/report.hpp"

#include <cstdio>
#include <sstream>

namespace normcheck {

namespace {

std::string exact_for_screen(const std::optional<rational>& value) {
  return value ? shorten(to_string(*value)) : std::string("undefined");
}

std::string json_value(const std::optional<rational>& value) {
  return value ? json_quote(to_string(*value)) : std::string("null");
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

void json_explanations(std::ostream& out, const std::vector<explanation>& list) {
  out << "[";
  for (std::size_t i = 0; i < list.size(); ++i) {
    const explanation& e = list[i];
    out << (i ? ", " : "") << "{\"name\": " << json_quote(e.name) << ", \"value\": " << json_quote(to_string(e.value))
        << ", \"bound\": " << json_value(e.bound) << ", \"computed\": " << json_quote(e.computed)
        << ", \"why_wrong\": " << json_quote(e.why_wrong) << ", \"instead\": " << json_quote(e.instead) << "}";
  }
  out << "]";
}

void json_gate(std::ostream& out, const gate_result& gate) {
  out << "{\"verdict\": " << json_quote(verdict_name(gate.verdict)) << ", \"dtype\": " << json_quote(dtype_name(gate.type))
      << ", \"observed\": " << json_quote(to_string(gate.observed)) << ", \"objective\": " << json_quote(to_string(gate.objective))
      << ", \"bound\": " << json_value(gate.bound) << ", \"bound_is_explicit\": " << (gate.bound_is_explicit ? "true" : "false")
      << ", \"rounding_depth\": " << gate.rounding_depth << ", \"checks\": [";
  for (std::size_t i = 0; i < gate.checks.size(); ++i)
    out << (i ? ", " : "") << "{\"name\": " << json_quote(gate.checks[i].name)
        << ", \"passed\": " << (gate.checks[i].passed ? "true" : "false") << ", \"detail\": " << json_quote(gate.checks[i].detail) << "}";
  out << "], \"diagnosis\": ";
  json_explanations(out, gate.diagnosis);
  out << ", \"could_hide\": ";
  json_explanations(out, gate.could_hide);
  out << ", \"ratio\": " << json_value(gate.ratio) << "}";
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

std::string json_quote(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buffer[8];
          std::snprintf(buffer, sizeof buffer, "\\u%04x", static_cast<unsigned>(c));
          out += buffer;
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
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

void print_json(std::ostream& out, const std::vector<file_report>& reports) {
  out << "{\"reports\": [";
  for (std::size_t i = 0; i < reports.size(); ++i) {
    const file_report& report = reports[i];
    out << (i ? ",\n  " : "\n  ") << "{\"file\": " << json_quote(report.file)
        << ", \"kind\": " << json_quote(report.kind) << ", \"status\": " << json_quote(status_name(report.status));
    if (report.document) {
      const partition& update = report.document->update;
      out << ", \"world_size\": " << update.world_size() << ", \"reducer\": " << json_quote(reducer_name(update.reducer))
          << ", \"theta\": " << json_quote(to_string(update.theta)) << ", \"objective\": "
          << json_quote(objective_name(update.objective)) << ", \"valid_tokens\": " << update.valid_tokens()
          << ", \"mass\": " << json_quote(to_string(update.mass())) << ", \"ranks\": [";
      for (std::size_t r = 0; r < update.ranks.size(); ++r) {
        const rank_stats& rank = update.ranks[r];
        out << (r ? ", " : "") << "{\"valid_tokens\": " << rank.valid_tokens() << ", \"padding\": " << rank.padding()
            << ", \"mass\": " << json_quote(to_string(rank.mass())) << ", \"microbatches\": " << rank.microbatches.size()
            << ", \"loss_gradient_sum\": " << json_quote(to_string(loss_gradient_sum(rank, update.theta))) << "}";
      }
      out << "], \"gradients\": {";
      for (std::size_t g = 0; g < all_strategies.size(); ++g)
        out << (g ? ", " : "") << json_quote(strategy_name(all_strategies[g])) << ": " << json_value(report.gradients[g]);
      out << "}, \"denominators\": {";
      for (std::size_t g = 0; g < all_strategies.size(); ++g)
        out << (g ? ", " : "") << json_quote(strategy_name(all_strategies[g])) << ": "
            << json_quote(strategy_denominator(all_strategies[g], update.objective));
      out << "}, \"equals_objective\": {";
      for (std::size_t g = 0; g < all_strategies.size(); ++g)
        out << (g ? ", " : "") << json_quote(strategy_name(all_strategies[g])) << ": "
            << (equals_objective(report.gradients, all_strategies[g]) ? "true" : "false");
      out << "}, \"expectations\": [";
      for (std::size_t e = 0; e < report.expectations.size(); ++e) {
        const expectation_result& claim = report.expectations[e];
        out << (e ? ", " : "") << "{\"gradient\": " << json_quote(strategy_name(claim.name))
            << ", \"expected\": " << json_value(claim.expected) << ", \"actual\": " << json_value(claim.actual)
            << ", \"held\": " << (claim.held ? "true" : "false") << "}";
      }
      out << "]";
      if (report.recipe_result) {
        const recipe& r = *report.document->normalization;
        const std::optional<rational>& value = report.recipe_result->value;
        out << ", \"recipe\": {\"scale\": " << json_quote(r.scale.text()) << ", \"reducer\": " << json_quote(reducer_name(r.reducer))
            << ", \"gradient\": " << json_value(value) << ", \"zero_divisor\": "
            << (value ? std::string("null") : json_quote(report.recipe_result->zero_divisor))
            << ", \"equals_objective\": " << (value && *value == *report.gradients[0] ? "true" : "false");
        if (report.document->expect_recipe) out << ", \"expected\": " << json_value(*report.document->expect_recipe);
        out << "}";
      }
      if (report.gate) {
        out << ", \"gate\": ";
        json_gate(out, *report.gate);
      }
    } else {
      out << ", \"gradients\": null";
    }
    if (report.expected_error) out << ", \"expected_error\": " << json_quote(code_name(*report.expected_error));
    if (report.rejection) {
      const error& e = *report.rejection;
      out << ", \"error\": {\"code\": " << json_quote(code_name(e.code())) << ", \"message\": " << json_quote(e.message());
      if (e.where() && e.where()->line > 0)
        out << ", \"line\": " << e.where()->line << ", \"column\": " << e.where()->column;
      else
        out << ", \"line\": null, \"column\": null";
      out << "}";
    }
    if (!report.details.empty()) {
      out << ", \"details\": [";
      for (std::size_t d = 0; d < report.details.size(); ++d) out << (d ? ", " : "") << json_quote(report.details[d]);
      out << "]";
    }
    out << ", \"failures\": [";
    for (std::size_t f = 0; f < report.failures.size(); ++f)
      out << (f ? ", " : "") << json_quote(report.failures[f]);
    out << "]}";
  }
  const run_summary summary = summarize(reports);
  out << (reports.empty() ? "" : "\n") << "], \"passed\": " << summary.passed << ", \"failed\": " << summary.failed
      << ", \"errors\": " << summary.errors << "}\n";
}

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

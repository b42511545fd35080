#include "normcheck/report.hpp"

#include <cstdio>

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
  out << "      W = " << update.world_size() << ", reducer " << reducer_name(update.reducer) << ", θ = "
      << shorten(to_string(update.theta)) << ", N = " << update.valid_tokens() << "\n";
  constexpr std::size_t shown_ranks = 16;
  for (std::size_t r = 0; r < update.ranks.size(); ++r) {
    if (r == shown_ranks && update.ranks.size() > shown_ranks + 1) {
      out << "      … " << update.ranks.size() - shown_ranks << " more ranks\n";
      break;
    }
    const rank_stats& rank = update.ranks[r];
    out << "      rank " << r << ": n = " << rank.valid_tokens();
    if (rank.padding() > 0) out << " (+" << rank.padding() << " padding)";
    if (rank.microbatches.size() > 1) out << " in " << rank.microbatches.size() << " microbatches";
    out << ", S = " << shorten(to_string(loss_gradient_sum(rank, update.theta))) << "\n";
  }
  for (std::size_t i = 0; i < all_strategies.size(); ++i) {
    const strategy s = all_strategies[i];
    const std::optional<rational>& value = report.gradients[i];
    out << "      " << padded(strategy_name(s), 16) << padded(strategy_formula(s), 19) << "= "
        << padded(exact_for_screen(value), 14);
    if (value) out << padded("≈ " + approximate(*value), 16);
    else out << padded("", 16);
    if (s == strategy::global_mean) out << "the objective";
    else if (!value) out << "undefined here";
    else out << (equals_objective(report.gradients, s) ? "equals the objective" : "differs from the objective");
    out << "\n";
  }
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
          << ", \"theta\": " << json_quote(to_string(update.theta)) << ", \"valid_tokens\": " << update.valid_tokens()
          << ", \"ranks\": [";
      for (std::size_t r = 0; r < update.ranks.size(); ++r) {
        const rank_stats& rank = update.ranks[r];
        out << (r ? ", " : "") << "{\"valid_tokens\": " << rank.valid_tokens() << ", \"padding\": " << rank.padding()
            << ", \"microbatches\": " << rank.microbatches.size()
            << ", \"loss_gradient_sum\": " << json_quote(to_string(loss_gradient_sum(rank, update.theta))) << "}";
      }
      out << "], \"gradients\": {";
      for (std::size_t g = 0; g < all_strategies.size(); ++g)
        out << (g ? ", " : "") << json_quote(strategy_name(all_strategies[g])) << ": " << json_value(report.gradients[g]);
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

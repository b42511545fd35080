#include "normcheck/check/check.hpp"
#include "normcheck/io/files.hpp"
#include "normcheck/simulation/simulate.hpp"

#include <algorithm>
#include <system_error>
#include <unistd.h>

namespace normcheck {

namespace {

std::string value_text(const std::optional<rational>& value) {
  return value ? to_string(*value) : std::string("undefined");
}

std::size_t index_of(strategy s) {
  return static_cast<std::size_t>(std::find(all_strategies.begin(), all_strategies.end(), s) - all_strategies.begin());
}

void judge_rejection(file_report& report, const error& e, std::string_view text, const reader_limits& limits) {
  report.rejection = e;
  report.expected_error = text.empty() ? std::nullopt : find_expected_error(text, limits);
  // A cut-off file never meets an expectation: its rejection says nothing about the whole document.
  if (report.expected_error && *report.expected_error == e.code() && !e.truncated()) {
    report.status = file_status::pass;
    return;
  }
  report.status = file_status::error;
  if (report.expected_error)
    report.failures.push_back("expected rejection with " + std::string(code_name(*report.expected_error)) +
                              ", but it was rejected with " + std::string(code_name(e.code())) +
                              (e.truncated() ? " (the document is cut off)" : ""));
}

std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) out += (out.empty() ? "" : ", ") + name;
  return out.empty() ? "none" : out;
}

// Runs the gate on `observed` and decides whether the file's claim about it (or, without a claim, the
// gate's own verdict) holds.
void judge_gate(file_report& report) {
  const partition_file& document = *report.document;
  if (!document.observed) {
    if (document.expect_gate) {
      report.status = file_status::fail;
      report.failures.push_back("expect_gate is given but the file has no observed result to judge");
    }
    return;
  }
  const gate_result& gate = report.gate.emplace(run_gate(document.update, *document.observed));
  if (!document.expect_gate) {
    if (gate.verdict != gate_verdict::pass) {
      report.status = file_status::fail;
      report.failures.push_back("gate: " + std::string(verdict_name(gate.verdict)));
    }
    return;
  }
  const std::vector<explanation>& given = gate.verdict == gate_verdict::fail ? gate.diagnosis : gate.could_hide;
  std::vector<std::string> found;
  for (const explanation& e : given) found.push_back(e.name);
  std::vector<std::string> expected = document.expect_gate->explanations;
  std::sort(found.begin(), found.end());
  std::sort(expected.begin(), expected.end());
  if (gate.verdict != document.expect_gate->verdict || found != expected) {
    report.status = file_status::fail;
    report.failures.push_back("expect_gate: verdict " + std::string(verdict_name(document.expect_gate->verdict)) +
                              " with explanations [" + joined(expected) + "], but the gate concluded " +
                              std::string(verdict_name(gate.verdict)) + " with [" + joined(found) + "]");
  }
}

// Computes the file's recipe and decides whether it is the objective (or, with `expect.recipe`, the claim).
void judge_recipe(file_report& report) {
  const partition_file& document = *report.document;
  if (!document.normalization) {
    if (document.expect_recipe) {
      report.status = file_status::fail;
      report.failures.push_back("expect names a recipe gradient but the file has no recipe");
    }
    return;
  }
  const recipe_value& result = report.recipe_result.emplace(recipe_gradient(document.update, *document.normalization));
  const std::string name = "recipe \"" + document.normalization->scale.text() + "\"";
  if (document.expect_recipe) {
    if (*document.expect_recipe != result.value) {
      report.status = file_status::fail;
      report.failures.push_back("expect " + name + " = " + value_text(*document.expect_recipe) + ", but it is " +
                                value_text(result.value));
    }
    return;
  }
  const std::optional<rational>& objective = report.gradients[index_of(strategy::global_mean)];
  if (!result.value) {
    report.status = file_status::fail;
    report.failures.push_back(name + " divides by zero on this partition: " + result.zero_divisor + " is 0");
  } else if (*result.value != *objective) {
    report.status = file_status::fail;
    report.failures.push_back(name + " gives " + to_string(*result.value) + ", not the objective's " +
                              to_string(*objective));
  }
}

}  // namespace

std::string_view status_name(file_status status) noexcept {
  switch (status) {
    case file_status::pass: return "pass";
    case file_status::fail: return "fail";
    case file_status::error: return "error";
  }
  return "error";
}

bool equals_objective(const gradient_set& gradients, strategy s) {
  const auto& objective = gradients[index_of(strategy::global_mean)];
  const auto& value = gradients[index_of(s)];
  return objective && value && *objective == *value;
}

std::optional<std::string> declared_format(std::string_view text, const reader_limits& limits) {
  try {
    json_reader json(text, "", limits);
    if (json.peek() != json_kind::object) return std::nullopt;
    json.begin_object();
    std::string_view key;
    while (json.next_member(key)) {
      if (key == "format") {
        if (json.peek() != json_kind::string) return std::nullopt;
        return std::string(json.string_value());
      }
      json.skip_value();
    }
  } catch (const error&) {
  }
  return std::nullopt;
}

file_report check_text(std::string_view text, std::string source, const reader_limits& limits) {
  if (std::optional<std::string> format = declared_format(text, limits); format && *format == scenario_format_name)
    return check_scenario(text, std::move(source), limits);
  file_report report;
  report.file = source;
  try {
    partition_file document = read_partition(text, std::move(source), limits);
    report.gradients = compute_gradients(document.update);
    report.expected_error = document.expect_error;
    report.document = std::move(document);
  } catch (const error& e) {
    judge_rejection(report, e, text, limits);
    return report;
  }
  report.status = file_status::pass;
  if (report.expected_error) {
    report.status = file_status::fail;
    report.failures.push_back("expected rejection with " + std::string(code_name(*report.expected_error)) +
                              ", but the document was read without error");
  }
  for (const expectation& claim : report.document->expect) {
    expectation_result result{claim.name, claim.value, report.gradients[index_of(claim.name)], false};
    result.held = result.expected == result.actual;
    if (!result.held) {
      report.status = file_status::fail;
      report.failures.push_back("expect " + std::string(strategy_name(claim.name)) + " = " +
                                value_text(result.expected) + ", but it is " + value_text(result.actual));
    }
    report.expectations.push_back(std::move(result));
  }
  judge_recipe(report);
  judge_gate(report);
  return report;
}

file_report check_path(const std::filesystem::path& path, const reader_limits& limits) {
  std::string text;
  try {
    text = load_file(path, limits);
  } catch (const error& e) {
    file_report report;
    report.file = path.string();
    judge_rejection(report, e, {}, limits);
    return report;
  }
  return check_text(text, path.string(), limits);
}

std::vector<std::filesystem::path> collect_inputs(const std::vector<std::filesystem::path>& paths) {
  namespace fs = std::filesystem;
  std::vector<fs::path> inputs;
  for (const fs::path& path : paths) {
    std::error_code ec;
    if (!fs::is_directory(path, ec)) {
      inputs.push_back(path);
      continue;
    }
    std::vector<fs::path> found;
    fs::recursive_directory_iterator it(path, fs::directory_options::skip_permission_denied, ec), end;
    for (; !ec && it != end; it.increment(ec)) {
      std::error_code type_ec;
      const bool directory = it->is_directory(type_ec);
      if (it->path().extension() == ".json" && !directory) found.push_back(it->path());
      // A subdirectory the walk cannot enter is kept, so that its check reports it instead of its
      // files silently missing from the run.
      else if (directory && !it->is_symlink(type_ec) && ::access(it->path().c_str(), R_OK | X_OK) != 0)
        found.push_back(it->path());
    }
    if (ec) found.push_back(path);  // reported by its check
    std::sort(found.begin(), found.end());
    inputs.insert(inputs.end(), found.begin(), found.end());
  }
  return inputs;
}

}  // namespace normcheck

#include "normcheck/check/scenario_check.hpp"

#include "normcheck/documents/scenario.hpp"
#include "normcheck/simulation/expectations.hpp"
#include "normcheck/simulation/simulation_report.hpp"

namespace normcheck {

file_report check_scenario(std::string_view text, std::string source, const check_options& options) {
  file_report report;
  report.file = source;
  report.kind = document_kind::scenario;
  scenario s;
  simulation run;
  try {
    s = read_scenario(text, std::move(source), options.limits);
    run = simulate(s);  // may stop a run whose values grow beyond the digit-work limit
  } catch (const error& e) {
    judge_rejection(report, e, text, options.limits);
    return report;
  }
  report.details = summarize_simulation(s, run);
  report.expected_error = s.expect_error;
  if (s.expect_error)
    report.failures.push_back("expected rejection with " + std::string(code_name(*s.expect_error)) +
                              ", but the scenario was read without error");
  for (std::string& failure : unmet_expectations(s, run)) report.failures.push_back(std::move(failure));
  if (s.has_expect && report.failures.empty()) report.details.push_back("every expectation holds");
  if (!s.has_expect && report.failures.empty())
    report.details.push_back("no expect: the replicas agree and equal the reference, as claimed by default");
  report.status = report.failures.empty() ? file_status::pass : file_status::fail;
  return report;
}

}  // namespace normcheck

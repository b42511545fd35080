#pragma once
/// \file check/report.hpp
/// Printing check results: a readable text report, or one JSON document for machines.

#include "normcheck/check/check.hpp"

#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace normcheck {

/// Counts of verdicts over a run.
struct run_summary {
  std::size_t passed = 0;
  std::size_t failed = 0;
  std::size_t errors = 0;
};

/// Counts the verdicts of `reports`.
run_summary summarize(const std::vector<file_report>& reports);

/// Writes one file's readable report (long fractions shortened).
void print_text(std::ostream& out, const file_report& report);
/// Writes the closing line, e.g. "25 files: 25 passed, 0 failed, 0 rejected".
void print_summary(std::ostream& out, const run_summary& summary);
/// `{"reports": [...], "passed": n, "failed": n, "errors": n}` (full fractions, canonical), one line per report.
std::string json_report(const std::vector<file_report>& reports);
/// Writes `json_report(reports)`.
void print_json(std::ostream& out, const std::vector<file_report>& reports);

/// JUnit XML for CI test reporters: one test case per file; a failure's message is its diagnosis.
std::string junit_report(const std::vector<file_report>& reports);

}  // namespace normcheck

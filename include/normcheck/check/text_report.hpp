#pragma once
/// \file check/text_report.hpp
/// The readable report of `check`: one block per file, long fractions shortened, and a closing count.

#include "normcheck/check/check.hpp"

#include <ostream>
#include <vector>

namespace normcheck {

/// Writes one file's readable report.
void print_text(std::ostream& out, const file_report& report);
/// Writes one file's report as one line, e.g. "PASS  cases/x.json": how a run of many files shows a pass.
void print_text_line(std::ostream& out, const file_report& report);
/// Writes the closing line, e.g. "25 files: 25 passed, 0 failed, 0 rejected".
void print_summary(std::ostream& out, const run_summary& summary);

}  // namespace normcheck

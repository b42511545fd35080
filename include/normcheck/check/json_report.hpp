#pragma once
/// \file check/json_report.hpp
/// The machine report of `check --json` and `--output`: one JSON document for the whole run, every exact
/// value a canonical "p/q" string.

#include "normcheck/check/check.hpp"

#include <string>
#include <vector>

namespace normcheck {

/// `{"reports": [...], "passed": n, "failed": n, "errors": n}`, one line per report.
std::string json_report(const std::vector<file_report>& reports);

}  // namespace normcheck

#pragma once
/// \file check/json_report.hpp
/// The machine report of `check --json` and `--output`: one JSON document for the whole run, every exact
/// value a canonical "p/q" string.

#include "normcheck/check/check.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace normcheck {

/// The version of the report's layout, its first member; docs/schema/report.schema.json describes it.
inline constexpr std::string_view json_report_format = "normcheck-report/1";

/// `{"format": "normcheck-report/1", "reports": [...], "passed": n, "failed": n, "errors": n}`, one line per report.
std::string json_report(const std::vector<file_report>& reports);

}  // namespace normcheck

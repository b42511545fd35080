#pragma once
/// \file check/junit_report.hpp
/// JUnit XML for CI test reporters: one test case per file; a failure's message is its diagnosis.

#include "normcheck/check/check.hpp"

#include <string>
#include <vector>

namespace normcheck {

/// The run as a JUnit XML document.
std::string junit_report(const std::vector<file_report>& reports);

}  // namespace normcheck

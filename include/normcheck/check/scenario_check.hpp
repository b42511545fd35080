#pragma once
/// \file check/scenario_check.hpp
/// Checking a normcheck-scenario/1 file: simulate it and judge its claims, as one `file_report`.

#include "normcheck/check/check.hpp"

namespace normcheck {

/// Simulates the scenario in `text` and judges its `expect` (or `expect_error`).
file_report check_scenario(std::string_view text, std::string source, const check_options& options = {});

}  // namespace normcheck

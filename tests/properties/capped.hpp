#pragma once
// Runs a law whose cases are costly (each one writes and reads several documents, or judges them through
// the whole gate) with at most a few hundred cases, whatever max_success RC_PARAMS gives: the other laws
// keep CTest's count. NORMCHECK_LAW_CASES=N in the environment raises the cap for a long run (with a
// larger max_success in RC_PARAMS).

#include "laws.hpp"
#include "run_property.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdlib>
#include <string>

namespace normcheck::properties {

/// The most cases a costly law runs: NORMCHECK_LAW_CASES, `most` by default.
inline int costly_law_cases(int most) {
  if (const char* text = std::getenv("NORMCHECK_LAW_CASES")) {
    const int n = std::atoi(text);
    if (n > 0) return n;
  }
  return most;
}

/// Checks `property` like rc::check, with at most costly_law_cases(most) cases; a failure is a doctest
/// failure that prints the counterexample and the RC_PARAMS line that replays it.
inline void check_costly_law(const std::string& name, const law& property, int most = 300) {
  const rc::detail::TestResult result =
      run_property(name, property, std::min(configured_cases(), costly_law_cases(most)));
  rc::detail::SuccessResult success;
  if (result.match(success)) return;
  rc::detail::FailureResult failure;
  if (result.match(failure)) {
    INFO(failure.description);
    INFO(reproduce_params(name, failure));
    FAIL_CHECK(name);
    return;
  }
  rc::detail::Error error;
  if (result.match(error)) FAIL_CHECK((name + ": " + error.description));
  rc::detail::GaveUpResult gave_up;
  if (result.match(gave_up)) FAIL_CHECK((name + ": gave up: " + gave_up.description));
}

}  // namespace normcheck::properties

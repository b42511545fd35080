#pragma once
// One way to run a RapidCheck property outside rc::check, with the configured seed and sizes and a case
// count of one's choosing: a law capped for cost, and a law that must catch a planted mistake, which runs
// its full count even where RC_PARAMS cuts the count (the sanitized tier runs a tenth of the cases, too
// few for a sampled mistake to be drawn).

#include <rapidcheck.h>
#include <rapidcheck/detail/TestListenerAdapter.h>

#include <string>
#include <unordered_map>

namespace normcheck::properties {

/// Runs `property` on `max_success` cases, quietly, replaying a failure RC_PARAMS names under `name`.
template <typename Testable>
rc::detail::TestResult run_property(const std::string& name, Testable&& property, int max_success) {
  rc::detail::TestMetadata metadata;
  metadata.id = name;
  metadata.description = name;
  rc::detail::TestListenerAdapter quiet;
  const rc::detail::Configuration& config = rc::detail::configuration();
  rc::detail::TestParams params = config.testParams;
  params.maxSuccess = max_success;
  std::unordered_map<std::string, rc::detail::Reproduce> reproduce;
  if (const auto it = config.reproduce.find(name); it != config.reproduce.end()) reproduce.insert(*it);
  return rc::detail::checkProperty(rc::detail::toProperty(std::forward<Testable>(property)), metadata, params, quiet,
                                   reproduce);
}

/// The configured number of cases (RC_PARAMS' max_success).
inline int configured_cases() { return rc::detail::configuration().testParams.maxSuccess; }

}  // namespace normcheck::properties

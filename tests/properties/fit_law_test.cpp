// The fit law of the per-group gate: a planted formula (exactly and in float32), and every mistake the gate
// knows on one update. The planted wrong fitters the laws catch are in mutation_test.cpp.

#include "fit_law.hpp"

#include <rapidcheck/detail/TestListenerAdapter.h>

#include <doctest/doctest.h>

#include <algorithm>

using namespace normcheck::properties;

namespace {

// Each case judges several documents through the whole gate: the laws run at most `most` cases whatever
// RC_PARAMS asks (a longer run: RC_PARAMS="max_success=..." with a larger `most` here).
constexpr int most = 300;

void check_law(const std::string& name, const law& property) {
  rc::detail::TestMetadata metadata;
  metadata.id = name;
  metadata.description = name;
  rc::detail::TestListenerAdapter quiet;
  const rc::detail::Configuration& config = rc::detail::configuration();
  rc::detail::TestParams params = config.testParams;
  params.maxSuccess = std::min(params.maxSuccess, most);
  std::unordered_map<std::string, rc::detail::Reproduce> reproduce;
  if (const auto it = config.reproduce.find(name); it != config.reproduce.end()) reproduce.insert(*it);
  const rc::detail::TestResult result =
      rc::detail::checkProperty(rc::detail::toProperty(property), metadata, params, quiet, reproduce);
  rc::detail::FailureResult failure;
  if (result.match(failure)) {
    INFO(failure.description);
    INFO(reproduce_params(name, failure));
    FAIL_CHECK(name);
  }
  rc::detail::Error error;
  if (result.match(error)) FAIL_CHECK(name + ": " + error.description);
  rc::detail::GaveUpResult gave_up;
  if (result.match(gave_up)) FAIL_CHECK(name + ": gave up: " + gave_up.description);
}

}  // namespace

TEST_CASE("the fit law") {
  check_law("the fit law: for random updates and planted per-group weight formulas, exact and in float32, the "
            "gate names the planted formula or one with its table, never passes a table other than the "
            "objective's, and passes the objective's (or says what could hide)",
            fit_law());
}

TEST_CASE("the fit law for each mistake") {
  check_law("the fit law for each mistake: on random updates with sequences, every normalization whose table "
            "differs from the objective's, dumped exactly, is named by the gate",
            fit_each_mistake());
}

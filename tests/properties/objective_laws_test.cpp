// Laws 6, 7 and 9: when the objective does not exist, what it is as a function of θ, and the nine
// reference checks of the derivation as fixed examples.

#include "laws.hpp"

#include "normcheck/teaching/reference.hpp"

#include <doctest/doctest.h>

using namespace normcheck::properties;

TEST_CASE("all-empty rejection") {
  CHECK(rc::check("all-empty rejection: every update with N = 0, for any W and padding, is rejected with "
                  "no_valid_tokens",
                  all_empty_rejection()));
}

TEST_CASE("theta-linearity") {
  CHECK(rc::check("theta-linearity: global_mean is theta minus the mean target at every theta, and the "
                  "compensation agrees",
                  theta_linearity()));
}

TEST_CASE("reference checks") {
  const std::vector<claim> examples = reference_claims();
  CHECK(examples.size() == 9);
  CHECK(
      rc::check("reference checks: the nine facts of the derivation hold as fixed examples", fixed_examples(examples)));
  const std::vector<normcheck::reference_check> checks = normcheck::run_reference_checks();
  CHECK(checks.size() == 9);
  for (const normcheck::reference_check& check : checks) {
    INFO(check.claim);
    CHECK(check.passed);
  }
}

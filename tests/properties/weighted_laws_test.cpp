// The laws of the weighted objective L = Σwᵢℓᵢ / Σwᵢ, and the planted mistakes each one catches.

#include "laws.hpp"
#include "generators.hpp"

#include "normcheck/check.hpp"

#include <doctest/doctest.h>

using namespace normcheck;
using namespace normcheck::properties;

namespace {

// A normalization that leaves the mass out: each rank backpropagates its weighted loss sum Sᵣ.
normalization mass_left_out() { return {"mass left out", strategy::local_sum, strategy::local_sum}; }

// Runs `property` and requires that it fails, with a first failing document `normcheck check` fails.
void require_caught(const std::string& name, const law& property) {
  forget_counterexample();
  const rc::detail::TestResult result = run_law(name, property);
  rc::detail::FailureResult failure;
  INFO(name);
  REQUIRE_MESSAGE(result.match(failure), "the law found no counterexample");
  const counterexample found = last_counterexample();
  INFO(found.report);
  REQUIRE(!found.failing_documents.empty());
  const file_report report = check_text(found.failing_documents.front(), "counterexample.json");
  INFO(found.failing_documents.front());
  CHECK(report.status == file_status::fail);
}

}  // namespace

TEST_CASE("weighted compensation") {
  CHECK(rc::check("the objective is Σw·(θ − y)/Σw", weighted_compensation(objective_gradient())));
  CHECK(rc::check("the compensation gives the weighted objective", weighted_compensation()));
}

TEST_CASE("unit weights give the token mean") {
  CHECK(rc::check("unit weights: objective", unit_weights(objective_gradient())));
  CHECK(rc::check("unit weights: compensation", unit_weights()));
}

TEST_CASE("scaling every weight changes nothing") {
  for (const normalization& n : {objective_gradient(), compensated(), local_means_averaged(), w_factor_dropped(),
                                 w_applied_under_sum(), per_microbatch_denominator()})
    CHECK(rc::check("weight scaling for " + n.name, weight_scaling(n)));
}

TEST_CASE("zero-mass rejection") { CHECK(rc::check("zero-mass rejection", zero_mass_rejection())); }

TEST_CASE("the weighted laws catch planted mistakes") {
  for (const normalization& n : planted_wrong_normalizations()) {
    require_caught("weighted compensation for " + n.name, weighted_compensation(n));
    require_caught("unit weights for " + n.name, unit_weights(n));
  }
  require_caught("weight scaling for " + mass_left_out().name, weight_scaling(mass_left_out()));
  require_caught("zero-mass rejection of updates with mass", zero_mass_rejection(gen_weighted_update()));
}

// Can the laws fail? Each law is run against deliberately wrong normalizations (or a wrong input) and
// must find a counterexample, shrunk to a few tokens on a few ranks, printed as documents that
// `normcheck check` replays as failures.

#include "laws.hpp"
#include "generators.hpp"
#include "oracle.hpp"

#include "normcheck/check/check.hpp"

#include <doctest/doctest.h>

using namespace normcheck;
using namespace normcheck::properties;

namespace {

// A shrunk counterexample a reviewer can read at a glance.
constexpr std::uint64_t most_valid_tokens = 4;
constexpr std::size_t most_ranks = 3;

// Runs `property`, requires a counterexample, and requires it small and printed in the failure report.
counterexample require_small_counterexample(const std::string& name, const law& property) {
  forget_counterexample();
  const rc::detail::TestResult result = run_law(name, property);
  rc::detail::FailureResult failure;
  INFO(name);
  REQUIRE_MESSAGE(result.match(failure), "the law found no counterexample");
  const counterexample found = last_counterexample();
  const std::string reproduce = reproduce_params(name, failure);
  INFO(found.report);
  INFO(reproduce);
  REQUIRE(!found.failing_documents.empty());
  CHECK(failure.description == found.report);
  for (std::size_t i = 0; i < found.failing_tokens.size(); ++i) {
    CHECK(failure.description.find(found.failing_documents[i]) != std::string::npos);
    CHECK(oracle::valid_tokens(found.failing_tokens[i]) <= most_valid_tokens);
    CHECK(found.failing_tokens[i].ranks.size() <= most_ranks);
  }
  return found;
}

// Requires that `normcheck check` judges the first failing document a failure (exit status 1).
void require_replayed_as_failure(const counterexample& found) {
  const file_report report = check_text(found.failing_documents.front(), "counterexample.json");
  INFO(found.failing_documents.front());
  CHECK(report.status == file_status::fail);
}

}  // namespace

TEST_CASE("every planted wrong normalization breaks compensation") {
  for (const normalization_under_test& n : planted_wrong_normalizations()) {
    const counterexample found = require_small_counterexample("compensation for " + n.name, compensation(n));
    require_replayed_as_failure(found);
  }
}

TEST_CASE("the laws parametrized by the normalization catch every planted one") {
  const std::vector<std::pair<std::string, std::function<law(const normalization_under_test&)>>> laws{
      {"wrong scale", [](const normalization_under_test& n) { return wrong_scale(n); }},
      {"empty-rank handling", [](const normalization_under_test& n) { return empty_rank_handling(n); }},
      {"theta-linearity", [](const normalization_under_test& n) { return theta_linearity(n); }},
      {"accumulation", [](const normalization_under_test& n) { return accumulation(n); }},
  };
  for (const auto& [law_name, make] : laws)
    for (const normalization_under_test& n : planted_wrong_normalizations()) {
      const counterexample found = require_small_counterexample(law_name + " for " + n.name, make(n));
      require_replayed_as_failure(found);
    }
}

TEST_CASE("partition invariance catches a rank-weighted objective") {
  require_replayed_as_failure(require_small_counterexample("partition invariance for local means averaged",
                                                           partition_invariance(local_means_averaged())));
}

TEST_CASE("equal-partition control catches a wrong scale and a local mean that weights tokens") {
  require_replayed_as_failure(require_small_counterexample("equal-partition control for W factor dropped",
                                                           equal_partition_control(w_factor_dropped())));
  require_replayed_as_failure(require_small_counterexample("unequal counts for the objective",
                                                           unequal_counts_expose_bias(objective_gradient())));
}

TEST_CASE("the accumulation controls catch a wrong scale and a split-independent gradient") {
  require_replayed_as_failure(require_small_counterexample("equal microbatches for W factor dropped",
                                                           equal_microbatches_control(w_factor_dropped())));
  require_replayed_as_failure(require_small_counterexample("microbatch split for compensated",
                                                           microbatch_split_exposes_bias(compensated())));
}

TEST_CASE("all-empty rejection catches an update that holds a token") {
  require_replayed_as_failure(
      require_small_counterexample("all-empty rejection of updates with tokens", all_empty_rejection(gen_update_with_tokens())));
}

TEST_CASE("the reference checks catch a wrong fact") {
  std::vector<claim> examples = reference_claims();
  REQUIRE(examples.size() > 1);
  // The averaged local means of the unequal partition stated as the objective's value.
  examples[1].expect = examples[0].expect;
  examples[1].expect.front().name = strategy::local_mean;
  require_replayed_as_failure(require_small_counterexample("reference checks with a wrong fact", fixed_examples(examples)));
}

TEST_CASE("the weighted laws catch every planted normalization and a mass left out") {
  for (const normalization_under_test& n : planted_wrong_normalizations()) {
    require_replayed_as_failure(require_small_counterexample("weighted compensation for " + n.name, weighted_compensation(n)));
    require_replayed_as_failure(require_small_counterexample("unit weights for " + n.name, unit_weights(n)));
  }
  // Each rank backpropagates its weighted loss sum Sᵣ: scaling the weights scales the gradient.
  const normalization_under_test mass_left_out{"mass left out", strategy::local_sum, strategy::local_sum};
  require_replayed_as_failure(require_small_counterexample("weight scaling for mass left out", weight_scaling(mass_left_out)));
  require_replayed_as_failure(
      require_small_counterexample("zero-mass rejection of updates with mass", zero_mass_rejection(gen_weighted_update())));
}

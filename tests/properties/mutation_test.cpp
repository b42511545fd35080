// Can the laws fail? Each law is run against deliberately wrong normalizations (or a wrong input) and
// must find a counterexample, shrunk to a few tokens on a few ranks, printed as documents that
// `normcheck check` replays as failures.

#include "fit_law.hpp"
#include "generators.hpp"
#include "grouped_generators.hpp"
#include "grouped_laws.hpp"
#include "grouped_oracle.hpp"
#include "laws.hpp"
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
  require_replayed_as_failure(require_small_counterexample("all-empty rejection of updates with tokens",
                                                           all_empty_rejection(gen_update_with_tokens())));
}

TEST_CASE("the reference checks catch a wrong fact") {
  std::vector<claim> examples = reference_claims();
  REQUIRE(examples.size() > 1);
  // The averaged local means of the unequal partition stated as the objective's value.
  examples[1].expect = examples[0].expect;
  examples[1].expect.front().name = strategy::local_mean;
  require_replayed_as_failure(
      require_small_counterexample("reference checks with a wrong fact", fixed_examples(examples)));
}

TEST_CASE("the weighted laws catch every planted normalization and a mass left out") {
  for (const normalization_under_test& n : planted_wrong_normalizations()) {
    require_replayed_as_failure(
        require_small_counterexample("weighted compensation for " + n.name, weighted_compensation(n)));
    require_replayed_as_failure(require_small_counterexample("unit weights for " + n.name, unit_weights(n)));
  }
  // Each rank backpropagates its weighted loss sum Sᵣ: scaling the weights scales the gradient.
  const normalization_under_test mass_left_out{"mass left out", strategy::local_sum, strategy::local_sum};
  require_replayed_as_failure(
      require_small_counterexample("weight scaling for mass left out", weight_scaling(mass_left_out)));
  require_replayed_as_failure(require_small_counterexample("zero-mass rejection of updates with mass",
                                                           zero_mass_rejection(gen_weighted_update())));
}

// ---- The laws of every declared objective, and the fit law ----------------------------------------------

namespace {

// Runs a grouped law, requires a counterexample, small, printed in the report; where the failure is the
// library's or a value the implementation under test computed, `normcheck check` replays it as a failure.
void require_grouped_counterexample(const std::string& name, const law& property) {
  forget_grouped_counterexample();
  const rc::detail::TestResult result = run_law(name, property);
  rc::detail::FailureResult failure;
  INFO(name);
  REQUIRE_MESSAGE(result.match(failure), "the law found no counterexample");
  const grouped_counterexample found = last_grouped_counterexample();
  INFO(found.report);
  INFO(reproduce_params(name, failure));
  REQUIRE(!found.failing_documents.empty());
  CHECK(failure.description == found.report);
  for (std::size_t i = 0; i < found.failing_documents.size(); ++i) {
    CHECK(failure.description.find(found.failing_documents[i]) != std::string::npos);
    CHECK(oracle::valid_tokens(found.failing_updates[i]) <= 6);
    CHECK(found.failing_updates[i].ranks.size() <= most_ranks);
  }
  bool replayed = false;
  for (std::size_t i = 0; i < found.failing_documents.size() && !replayed; ++i) {
    if (!found.replayable[i]) continue;
    const file_report report = check_text(found.failing_documents[i], "counterexample.json");
    INFO(found.failing_documents[i]);
    CHECK(report.status == file_status::fail);
    replayed = true;
  }
  const bool any_replayable = std::any_of(found.replayable.begin(), found.replayable.end(), [](bool b) { return b; });
  CHECK(replayed == any_replayable);
}

const std::vector<objective_kind> sequence_objectives{objective_kind::sequence_mean, objective_kind::sequence_sum_mean};
const std::vector<objective_kind> not_token_mean{objective_kind::weighted_token_mean, objective_kind::sequence_mean,
                                                 objective_kind::sequence_sum_mean, objective_kind::constant};
const std::vector<objective_kind> all_objectives{objective_kind::token_mean, objective_kind::weighted_token_mean,
                                                 objective_kind::sequence_mean, objective_kind::sequence_sum_mean,
                                                 objective_kind::constant};

}  // namespace

TEST_CASE("the compensation law catches token-mean code, N for C, B with empty sequences, and local means") {
  // Token-mean code where a sequence objective is declared, N where constant declares C, N where the weighted
  // objective wants M.
  for (objective_kind o : not_token_mean)
    require_grouped_counterexample("compensation" + under(o) + " for token-mean code",
                                   grouped_compensation(o, token_mean_code()));
  for (objective_kind o : sequence_objectives)
    require_grouped_counterexample("compensation" + under(o) + " for B with empty sequences",
                                   grouped_compensation(o, empty_sequences_counted()));
  for (objective_kind o : all_objectives)
    require_grouped_counterexample("compensation" + under(o) + " for local means",
                                   grouped_compensation(o, local_means()));
}

TEST_CASE("partition invariance catches a per-rank mean, token-mean code and B with empty sequences") {
  for (objective_kind o : all_objectives)
    require_grouped_counterexample("partition invariance" + under(o) + " for local means",
                                   grouped_partition_invariance(o, local_means()));
  for (objective_kind o : not_token_mean)
    require_grouped_counterexample("partition invariance" + under(o) + " for token-mean code",
                                   grouped_partition_invariance(o, token_mean_code()));
  for (objective_kind o : sequence_objectives)
    require_grouped_counterexample("partition invariance" + under(o) + " for B with empty sequences",
                                   grouped_partition_invariance(o, empty_sequences_counted()));
}

TEST_CASE("the empty-rank law catches a world size that counts only ranks with tokens, and local means") {
  for (objective_kind o : all_objectives) {
    require_grouped_counterexample("empty-rank handling" + under(o) + " for W of ranks with tokens",
                                   grouped_empty_rank(o, ranks_with_units_only()));
    require_grouped_counterexample("empty-rank handling" + under(o) + " for local means",
                                   grouped_empty_rank(o, local_means()));
  }
}

TEST_CASE("all-empty rejection catches an update given 0 and an update that holds a token") {
  // Σℓ/C of no token is 0, but the update has no objective: it must be rejected (not replayable: the library
  // rejects it, as the document says).
  for (objective_kind o : all_objectives)
    require_grouped_counterexample("all-empty rejection" + under(o) + " for 0 without tokens",
                                   grouped_all_empty_rejection(o, zero_for_no_tokens()));
  // A wrong input: updates with a valid token.
  for (objective_kind o : all_objectives)
    require_grouped_counterexample("all-empty rejection" + under(o) + " of updates with tokens",
                                   grouped_all_empty_rejection(o, library_compensation(), gen_grouped_update(o)));
}

namespace {

// Runs a fit law (against a wrong fitter), requires a counterexample printed in the report.
void require_fit_counterexample(const std::string& name, const law& property) {
  const rc::detail::TestResult result = run_law(name, property);
  rc::detail::FailureResult failure;
  INFO(name);
  REQUIRE_MESSAGE(result.match(failure), "the law found no counterexample");
  const fit_counterexample& found = last_fit_counterexample();
  INFO(found.report);
  REQUIRE(!found.failing_documents.empty());
  CHECK(failure.description == found.report);
}

}  // namespace

TEST_CASE("the fit law catches a fitter that sees only group 0 and one that sees the averaged table") {
  // Both are the real gate judging a corrupted observation, so their counterexamples are documents the real
  // gate judges as the law requires: the law's failure is the wrapper's, not replayable by `normcheck check`.
  require_fit_counterexample("the fit law for a fitter of group 0", fit_law(group_zero_fitter()));
  require_fit_counterexample("the fit law for a fitter of the averaged table", fit_law(averaged_table_fitter()));
}

TEST_CASE("the fit law for each mistake catches a fitter without a candidate and one that misreads the scale") {
  const std::vector<std::pair<std::string, fitter>> wrong{
      {"without count_padding", dropped_candidate_fitter("count_padding")},
      {"without local_mean", dropped_candidate_fitter("local_mean")},
      {"without sum_of_microbatch_means", dropped_candidate_fitter("sum_of_microbatch_means")},
      {"reading every component doubled", misscaled_fitter()},
  };
  for (const auto& [what, gate] : wrong)
    require_fit_counterexample("the fit law for each mistake, for a fitter " + what, fit_each_mistake(gate));
  require_fit_counterexample("the fit law for a fitter reading every component doubled", fit_law(misscaled_fitter()));
}

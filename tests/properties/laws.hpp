#pragma once
// The laws of token-mean normalization as RapidCheck properties, and the helper every law reports
// through. A law generates an update, states claims about it (gradients a normcheck/1 document would
// `expect`, or the error it would `expect_error`), and requires them exactly. A failing case prints each
// claim as a complete normcheck/1 document, so the shrunk counterexample is a file `normcheck check`
// replays. Laws are parametrized by the normalization under test, so the same law can be run against
// deliberately wrong normalizations to show that it fails.

#include "normcheck/core/errors.hpp"
#include "normcheck/core/gradients.hpp"
#include "normcheck/core/rational.hpp"
#include "normcheck/documents/partition_reader.hpp"
#include "normcheck/documents/partition_writer.hpp"

#include <rapidcheck.h>

#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace normcheck::properties {

/// A value as the laws' reports write it: its canonical text, or "undefined".
inline std::string show(const std::optional<rational>& value) {
  return value ? to_string(*value) : std::string("undefined");
}

/// A strategy's name, as a string to build a report with.
inline std::string name_of(strategy s) { return std::string(strategy_name(s)); }

/// The correct strategy for the reducer: scaled_sum (W·Sᵣ/N) under the mean reducer, global_share (Sᵣ/N)
/// under the sum reducer.
inline strategy correct_for(reducer_kind reducer) {
  return reducer == reducer_kind::mean ? strategy::scaled_sum : strategy::global_share;
}

/// A normalization under test: the strategy whose gradient is taken under each reducer.
struct normalization_under_test {
  std::string name;
  strategy under_mean;
  strategy under_sum;

  /// The strategy used under `reducer`.
  strategy under(reducer_kind reducer) const { return reducer == reducer_kind::mean ? under_mean : under_sum; }
  /// "name (a under mean, b under sum)".
  std::string describe() const;
};

/// The objective itself: global_mean under either reducer.
normalization_under_test objective_gradient();
/// The compensation: scaled_sum (W·Sᵣ/N) under the mean reducer, global_share (Sᵣ/N) under the sum reducer.
normalization_under_test compensated();
/// Each rank's local mean Sᵣ/nᵣ under either reducer.
normalization_under_test local_means_averaged();
/// Sᵣ/N under either reducer: the W factor is dropped under the mean reducer.
normalization_under_test w_factor_dropped();
/// W·Sᵣ/N under either reducer: the W factor is applied although the sum reducer does not divide.
normalization_under_test w_applied_under_sum();
/// Each microbatch's own mean, averaged: the denominator is the microbatch's count, not the update's N.
normalization_under_test per_microbatch_denominator();
/// The planted wrong normalizations every harness run must catch.
std::vector<normalization_under_test> planted_wrong_normalizations();
/// The normalization named `name` (objective, compensated or a planted one), if any.
std::optional<normalization_under_test> normalization_named(std::string_view name);

/// One claim of a law about one update: the document it makes, and what must hold for it.
struct claim {
  std::string about;                        ///< the law's statement about this update, in words
  token_partition tokens;
  std::vector<expectation> expect;          ///< gradients; a name may repeat with different values
  std::optional<error_code> expect_error;   ///< the rejection every gradient must meet
};

/// Adds `name = value` to a claim, unless the very same entry is already there.
void expect_gradient(claim& c, strategy name, const std::optional<rational>& value);

/// Requires every claim exactly; otherwise fails the current case with a report that holds each claim
/// as a complete normcheck/1 document (a repeated name goes to a further document).
void require_claims(std::string_view law_name, const std::vector<claim>& claims);

/// Requires `a != b`; otherwise fails the current case with `why` and the claims' documents.
void require_distinct(std::string_view law_name, const std::optional<rational>& a, const std::optional<rational>& b,
                      std::string_view why, const std::vector<claim>& context);

/// The last case a law failed (after shrinking, the shrunk counterexample).
struct counterexample {
  std::string law;
  std::string report;                          ///< the text the case failed with
  std::vector<std::string> failing_documents;  ///< documents whose claims do not hold, as printed
  std::vector<token_partition> failing_tokens; ///< their updates
  std::vector<claim> failing_claims;           ///< the claims, split so that no name repeats
};
/// The last counterexample any law produced in this process.
const counterexample& last_counterexample();
/// Forgets the last counterexample.
void forget_counterexample();

/// A law ready for rc::check: each call generates one case and requires its claims.
using law = std::function<void()>;

/// Law 1: `n` (the objective) equals the token mean, and is unchanged by repartition, rank permutation,
/// microbatch split and added padding.
law partition_invariance(const normalization_under_test& n = objective_gradient());
/// Law 2: `n` equals the objective for every update with N > 0, under either reducer.
law compensation(const normalization_under_test& n = compensated());
/// Law 3: under the other reducer `n` is off by exactly W, and local_sum is (N/W)·objective under mean.
law wrong_scale(const normalization_under_test& n = compensated());
/// Law 4, control: with equal non-zero counts on every rank, `n` under the mean reducer equals the objective.
law equal_partition_control(const normalization_under_test& n = local_means_averaged());
/// Law 4, bias: with two different non-zero counts, targets are found on which `n` is the rank-weighted
/// mean and differs from the objective.
law unequal_counts_expose_bias(const normalization_under_test& n = local_means_averaged());
/// Law 5: an added empty rank changes nothing for `n` (with its own W), and local_mean is undefined.
law empty_rank_handling(const normalization_under_test& n = compensated());
/// Law 6: every update of `updates` (by default every update with N = 0) is rejected with no_valid_tokens.
law all_empty_rejection(const rc::Gen<token_partition>& updates);
/// Law 6 on every update with N = 0, any W and any amount of padding.
law all_empty_rejection();
/// Law 7: at every θ, global_mean is θ − mean(y), and so is `n`.
law theta_linearity(const normalization_under_test& n = compensated());
/// Law 8: `n` is unchanged when each rank's tokens are cut into microbatches afresh.
law accumulation(const normalization_under_test& n = compensated());
/// Law 8, control: when every microbatch holds the same count, `n` equals the objective.
law equal_microbatches_control(const normalization_under_test& n = per_microbatch_denominator());
/// Law 8, bias: with unequal microbatch counts, targets are found on which `n` depends on the split.
law microbatch_split_exposes_bias(const normalization_under_test& n = per_microbatch_denominator());
/// Law 9: the fixed examples, each a claim (by default the nine reference checks of the derivation).
law fixed_examples(const std::vector<claim>& examples);
/// The nine reference checks as claims.
std::vector<claim> reference_claims();

/// Weighted law 1: under the weighted objective `n` equals Σw·(θ − y)/Σw, under either reducer.
law weighted_compensation(const normalization_under_test& n = compensated());
/// Weighted law 2: with every weight 1, `n` equals the (unweighted) token mean of θ − y.
law unit_weights(const normalization_under_test& n = compensated());
/// Weighted law 3: multiplying every weight by one k > 0 leaves `n` unchanged.
law weight_scaling(const normalization_under_test& n = compensated());
/// Weighted law 4: every update of `updates` (by default: tokens whose weights are all 0) is rejected
/// with no_valid_tokens.
law zero_mass_rejection(const rc::Gen<token_partition>& updates);
law zero_mass_rejection();

/// Runs a law like rc::check, quietly, and returns RapidCheck's result (for tests of the harness).
/// A `reproduce` entry for `name` in RC_PARAMS replays that case.
rc::detail::TestResult run_law(const std::string& name, const law& property);
/// The RC_PARAMS setting that replays `failure` of the law `name`: RC_PARAMS="reproduce=…".
std::string reproduce_params(const std::string& name, const rc::detail::FailureResult& failure);

}  // namespace normcheck::properties

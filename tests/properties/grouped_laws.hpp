#pragma once
// The laws of every declared objective (token_mean, weighted_token_mean, sequence_mean, sequence_sum_mean,
// constant) on updates with sequences, compact groups, padding and normalizers: partition invariance, the
// compensation law, the empty-rank law and all-empty rejection. A law is run against an implementation of
// the synchronized gradient, by default the library's compensation, and keeps planted wrong ones that it
// must catch. A failing case prints each claim as a complete normcheck/1 document: the library's gradients
// as `expect`, and the value an implementation that is not a library strategy computed as `observed` (dtype
// exact), so that `normcheck check` replays the failure.

#include "grouped.hpp"
#include "laws.hpp"

#include <rapidcheck.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace normcheck::properties {

/// An implementation of the synchronized gradient under test: what a training step's normalization
/// delivers on an update (nullopt where it divides by zero; an `error` where it rejects the update).
struct implementation {
  std::string name;
  /// The library strategy it is under each reducer, when it is one (its claims are then `expect` entries).
  std::optional<strategy> under_mean;
  std::optional<strategy> under_sum;
  std::function<std::optional<rational>(const partition&)> compute;

  /// The library strategy it is under `reducer`, if any.
  std::optional<strategy> as_strategy(reducer_kind reducer) const {
    return reducer == reducer_kind::mean ? under_mean : under_sum;
  }
};

/// The library's compensation in the declared objective's counts: scaled_sum under mean, global_share under sum.
implementation library_compensation();
/// Planted: the token mean's compensation whatever the objective (W·Sᵣ/N, Sᵣ/N): token-mean code under a
/// sequence objective, N where constant declares C, N where the weighted objective wants M.
implementation token_mean_code();
/// Planted: the sequence objectives' compensation with a B that also counts sequences without a valid token.
implementation empty_sequences_counted();
/// Planted: each rank's own mean in the objective's counts (a per-rank sequence mean under sequence_mean).
implementation local_means();
/// Planted: the compensation with a world size that counts only the ranks holding a unit of the objective.
implementation ranks_with_units_only();
/// Planted: an update without any valid token given 0 (Σℓ/C of no token), not rejected.
implementation zero_for_no_tokens();

/// A claim of a grouped law about one update.
struct grouped_claim {
  std::string about;
  grouped_update update;
  std::vector<expectation> expect;          ///< library gradients
  std::optional<error_code> expect_error;   ///< the rejection every gradient, the reader and the implementation meet
  std::optional<implementation> subject;    ///< the implementation the claim is about, if any
  std::optional<rational> subject_value;    ///< what it must deliver (nullopt: undefined)
};

/// The last case a grouped law failed (after shrinking, the shrunk one).
struct grouped_counterexample {
  std::string law;
  std::string report;
  std::vector<std::string> failing_documents;
  std::vector<grouped_update> failing_updates;
  std::vector<bool> replayable;  ///< whether `normcheck check` can show the failure of each failing document
};
const grouped_counterexample& last_grouped_counterexample();
void forget_grouped_counterexample();

/// Requires every claim; otherwise fails the current case with the claims as documents.
void require_grouped_claims(std::string_view law_name, const std::vector<grouped_claim>& claims);

/// Law: `subject` and global_mean equal the objective's gradient (computed from the tokens), and are unchanged
/// by a fresh deal of the objective's atoms (tokens, or whole sequences under the sequence objectives) to
/// any number of ranks and microbatches, a rank permutation, and added padding and empty groups.
law grouped_partition_invariance(objective_kind objective, const implementation& subject = library_compensation());
/// Law: `subject` equals the objective's gradient on every update where it exists, empty ranks, empty
/// microbatches and empty sequences included, under either reducer.
law grouped_compensation(objective_kind objective, const implementation& subject = library_compensation());
/// Law: a rank without a valid token, inserted anywhere, changes neither the objective nor `subject` (with W
/// one larger), and makes local_mean and microbatch_mean undefined.
law grouped_empty_rank(objective_kind objective, const implementation& subject = library_compensation());
/// Law: every update of `updates` (by default any update without a valid token, or under the weighted
/// objective one whose tokens all weigh 0) is rejected with no_valid_tokens by every gradient, the reader
/// and `subject`.
law grouped_all_empty_rejection(objective_kind objective, const implementation& subject = library_compensation());
law grouped_all_empty_rejection(objective_kind objective, const implementation& subject,
                                const rc::Gen<grouped_update>& updates);

/// Law: a written document reads back as the update: the same groups, counts, sums and gradients.
law grouped_round_trip(objective_kind objective);

/// " under <objective>": the words a grouped law's test name gives its objective.
inline std::string under(objective_kind objective) { return " under " + std::string(objective_name(objective)); }

}  // namespace normcheck::properties

#pragma once
/// \file gate/weights.hpp
/// The per-group gate. A probe with one component per group measures, after the synchronizing backward,
/// the weight the code gave each group's tokens: the component divided by the group's derivative sum.
/// This unit turns a measurement into that weight table, compares it with the objective's group by
/// group, and fits it to a formula: a normalization of the table (core/normalization.hpp), one written for
/// another objective, either of them times a factor named in W, G or an integer, a geometric weighting
/// along the microbatch order; what fits nothing is `unexplained`, and the table says why.

#include "normcheck/core/normalization.hpp"
#include "normcheck/core/partition.hpp"
#include "normcheck/gate/mistakes.hpp"
#include "normcheck/gate/observed.hpp"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace normcheck {

/// One group's line of the weight table.
struct weight_row {
  group_ref where;
  bool sequence = false;         ///< the group is a declared sequence (else a whole microbatch)
  std::uint64_t tokens = 0;      ///< its valid tokens
  observed_value observed;       ///< its component as dumped
  std::optional<rational> code;  ///< the weight the code gave: observed / the group's derivative sum
  rational objective;            ///< the weight the objective gives it
  std::optional<rational> ratio; ///< code / objective (nullopt where either is undefined or 0)
  bool within_bound = false;     ///< the component is the objective's within its bound (and so is the witness)
  bool witness_agrees = true;    ///< the witness component agrees with one weight for the whole group
};

/// How many rows of the weight table the reports show: the first groups in group order (the JSON report all
/// of them, the text report the first few). The verdict covers every group.
inline constexpr std::size_t kept_weight_rows = 10000;

/// What the gate concluded about one measurement (the top-level probe or one site).
struct group_judgement {
  std::size_t groups = 0;               ///< the groups judged
  /// Of the first min(groups, kept_weight_rows) groups, the verdicts their rows show: within its bound of the
  /// objective's weight (and so is the witness), and the witness agreeing with one weight for the group. The
  /// rows themselves are made again from the measurement when a report asks (`weight_rows`).
  std::vector<bool> row_within_bound;
  std::vector<bool> row_witness_agrees;
  bool matches_objective = false;       ///< every component within its bound of the objective's
  std::vector<explanation> diagnosis;   ///< what fits when it does not match
  std::vector<explanation> could_hide;  ///< wrong computations that fit as well when it matches
  std::string detail;                   ///< the objective check's words

  /// The rows the reports show: min(groups, kept_weight_rows).
  std::size_t kept_rows() const noexcept { return row_within_bound.size(); }
};

/// The error bound's parts for one update: the relative factor of a term's path (nullopt: the dtype cannot
/// resolve the computation) or an explicit tolerance that replaces it.
struct group_bounds {
  std::optional<rational> factor;
  std::optional<tolerance> explicit_tolerance;
};

/// Judges rank 0's copy of each measurement of `update` (the top-level probe's, every site's) against the
/// update's objective, and fits each one that differs; one judgement per measurement, in order. What the
/// measurements share is found once: the candidate computations, which of their tables coincide on this
/// update, what each one yields. Nothing is kept per group: a group's sums are read from the update and its
/// components from the measurement as it is judged, so a judgement's memory is the candidates and the verdicts
/// of its rows, not the groups.
std::vector<group_judgement> judge_groups(const partition& update,
                                          const std::vector<const group_measurement*>& measurements,
                                          const group_bounds& bounds);

/// The first min(count, judgement.kept_rows()) rows of the weight table of `measurement` judged on `update`.
std::vector<weight_row> weight_rows(const partition& update, const group_measurement& measurement,
                                    const group_judgement& judgement, std::size_t count);

/// A computation the per-group gate compares a measurement with: its name and the weight it gives each group.
struct weight_candidate {
  std::string name;
  std::vector<rational> weights;
};

/// Every computation the per-group gate compares a measurement of `update` with, in its order (the objective's
/// own and the correct one excluded): the normalizations under the declared objective, the diagnosed ones, and
/// those written for every other objective the update can be counted in.
std::vector<weight_candidate> weight_candidates(const partition& update);

/// Whether every rank holds the same vector (and witness); the first difference in words otherwise.
std::optional<std::string> replica_difference(const group_measurement& measurement);

}  // namespace normcheck

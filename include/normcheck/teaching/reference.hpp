#pragma once
/// \file teaching/reference.hpp
/// The nine reference checks of the derivation, and seven for the declared objectives, computed by the library.

#include <string>
#include <vector>

namespace normcheck {

/// One reference check: what it computes, what that shows, and whether it held.
struct reference_check {
  std::string claim;    ///< the equation or statement checked, with the computed values
  std::string shows;    ///< what the check demonstrates
  bool passed = false;
};

/// Runs the nine checks: the unequal partition [[0],[2,2,2]], its equal repartition, an empty rank,
/// θ = 1, the per-rank versus per-token weights, and the all-empty rejection.
std::vector<reference_check> run_reference_checks();

/// The seven checks of the declared objectives on three sequences of one, one and three tokens dealt to two
/// ranks: the sequence mean, its compensated form and the token mean's code that misses it, the compensated form
/// after dealing the sequences again, the mean of sequence sums, a constant normalizer, and the rejection of an
/// update whose every sequence is empty.
std::vector<reference_check> run_objective_checks();

}  // namespace normcheck

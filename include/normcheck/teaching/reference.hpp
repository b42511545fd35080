#pragma once
/// \file teaching/reference.hpp
/// The nine reference checks of the derivation, computed by the library.

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

}  // namespace normcheck

#pragma once
// Deciding a recipe group by group, for every objective: a group is a sequence, or a microbatch that declares
// none (under the token means, unless the recipe reads a sequence count, every group is its microbatch). The
// scope (what the objective weighs and which names it adds) is the one parameter. Not part of the public API.

#include "normcheck/recipes/prove.hpp"

#include <algorithm>

namespace normcheck::detail {

/// What the scopes hold for one recipe and objective.
struct group_scope {
  objective_kind objective = objective_kind::token_mean;  ///< what the recipe must give
  reducer_kind reducer = reducer_kind::mean;              ///< the recipe's reducer
  bool weighted = false;                                  ///< masses beside the counts
  bool constant = false;                                  ///< a declared normalizer C
  bool sequences = false;          ///< groups may be sequences: the recipe or the objective reads them
  bool required = false;           ///< every microbatch with a valid token declares sequences (the sequence objectives)
  std::uint64_t world_size = 0;    ///< W ≤ this in the exhaustive scope
  std::uint64_t microbatches = 0;  ///< G ≤ this in the exhaustive scope
  /// The device mesh the partitions are laid out on (sizes unset), empty without one: at most one dimension of
  /// each role, W = DP·CP.
  std::vector<mesh_dim> mesh;
  std::string term;  ///< the auxiliary term whose group is judged, beside the main loss; empty without one

  bool has(mesh_role role) const {
    return std::any_of(mesh.begin(), mesh.end(), [role](const mesh_dim& d) { return d.role == role; });
  }
};

/// The scopes for `r` under `objective`.
group_scope scope_for(const recipe& r, objective_kind objective);

/// The count variables at a configuration, as `recipe_expression::evaluate` reads them.
count_values values_of(const count_configuration& c);

/// What one configuration shows of a recipe.
enum class outcome { holds, wrong, divides_by_zero };

/// A configuration's outcome and the scale there.
struct judged {
  outcome result = outcome::holds;  ///< whether the recipe gives the objective's weight there
  recipe_value scale;               ///< c at the configuration
};

/// At one configuration: c/d must be the objective's weight of a token wherever the group holds one it weighs,
/// and c must exist.
judged judge(const group_scope& s, const recipe& r, const count_configuration& c);

/// A partition whose rank 0, microbatch 0, first group has the configuration's counts and alone decides the
/// gradient.
token_partition partition_for(const group_scope& s, const count_configuration& c);

/// The counterexample document at `c`, judged `j`.
recipe_counterexample expose(const group_scope& s, const recipe& r, const count_configuration& c, const judged& j);

/// Decides `r` for `objective` on every group of the scopes docs/recipes.md describes.
proof_result prove_by_groups(const recipe& r, objective_kind objective);

}  // namespace normcheck::detail

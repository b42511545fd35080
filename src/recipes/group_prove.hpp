#pragma once
// Deciding a recipe group by group: the part of `prove` for the objectives that count sequences or divide by a
// declared constant, and for recipes that read a sequence count. Not part of the public API.

#include "normcheck/recipes/prove.hpp"

namespace normcheck::detail {

/// Whether `prove_recipe` decides `r` for `objective` here: the objective is sequence_mean, sequence_sum_mean
/// or constant, or the recipe reads B, b_r, b_m or n_s.
bool decided_by_groups(const recipe& r, objective_kind objective);

/// Decides `r` for `objective` on every group of the scopes docs/recipes.md describes.
proof_result prove_by_groups(const recipe& r, objective_kind objective);

}  // namespace normcheck::detail

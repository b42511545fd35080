#pragma once
// The counterexample document the prover hands back: the recipe run on a partition where it is wrong or
// divides by zero, with the objective's gradient expected, so that `normcheck check` fails it. Not part
// of the public API.

#include "normcheck/recipes/prove.hpp"

#include <string>

namespace normcheck::detail {

/// What a wrong recipe's update is not: "the token-mean gradient", "the sequence-mean gradient", ….
std::string gradient_name(objective_kind objective);

/// The counterexample at `where`: `tokens` (rank 0's first microbatch the exposing one) run under the
/// recipe `r`, whose scale there is `scale`; described as dividing by zero when it does, else as not
/// being `objective`'s gradient. On a mesh or beside a term the document also carries what a per-group probe
/// measures (`observed`: the recipe's components, the main loss's correct ones beside a term), so that
/// `normcheck check` names the mistake as well as failing it.
/// The recipe's gradient on the loss it scales in `tokens`: its term where it has one (the main loss's counts
/// beside it), else the main loss.
recipe_value judged_gradient(const token_partition& tokens, const recipe& r);

recipe_counterexample counterexample_at(const recipe& r, const count_configuration& where, const recipe_value& scale,
                                        bool divides_by_zero, token_partition tokens, objective_kind objective);

}  // namespace normcheck::detail

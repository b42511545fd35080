#pragma once
/// \file recipes/prove.hpp
/// Deciding whether a recipe yields the objective's gradient for every partition.
///
/// For the teaching loss every non-empty microbatch's gradient sum Sᵣₘ is free (θ and the targets can
/// make it anything), so a recipe equals the objective on every partition exactly when
/// c/d = 1/N at every non-empty microbatch (d = W under the mean reducer, 1 under sum), and its scale
/// never divides by zero. The identity only sees the counts (W, N, nᵣ, nₘ, G) of the microbatch.
/// Under the weighted token mean the same holds with the masses: c/d = 1/M at every microbatch of
/// positive mass mₘ, where (M, mᵣ, mₘ) are any non-negative weight sums consistent with the counts.

#include "normcheck/recipes/recipe.hpp"
#include "normcheck/documents/partition_writer.hpp"

#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace normcheck {

/// The counts one microbatch sees.
struct count_configuration {
  std::uint64_t world_size = 1;        ///< W
  std::uint64_t valid_tokens = 1;      ///< N
  std::uint64_t rank_tokens = 1;       ///< nᵣ
  std::uint64_t microbatch_tokens = 1; ///< nₘ
  std::uint64_t microbatches = 1;      ///< G
  /// The weight masses (M, mᵣ, mₘ) under the weighted objective; unset under the token mean, where
  /// they are the counts. A mass is 0 wherever its count is.
  std::optional<std::array<rational, 3>> masses;
};

/// "W = 2, N = 3, n_r = 1, n_m = 1, G = 1" (and ", M = …, m_r = …, m_m = …" with masses).
std::string describe(const count_configuration& where);

/// How the question was settled.
enum class proof_verdict {
  proved,           ///< the identity holds for all counts (decided exactly), and no divisor vanished in the scopes checked
  checked,          ///< no counterexample in the scopes checked, but the expression is too large to decide for all counts
  wrong,            ///< a partition where the recipe's gradient is not the objective's
  divides_by_zero,  ///< a partition where the scale divides by zero
};

/// "proved", "checked", "wrong" or "divides_by_zero".
std::string_view verdict_name(proof_verdict verdict) noexcept;

/// The smallest partition found that exposes a wrong recipe, ready to replay.
struct recipe_counterexample {
  count_configuration where;
  std::optional<rational> scale;  ///< c at the exposing microbatch (empty when it divides by zero)
  std::string zero_divisor;       ///< the divisor that vanished, for divides_by_zero
  token_partition tokens;         ///< rank 0's first microbatch is the exposing one
  std::optional<rational> recipe_gradient;
  rational objective;
  std::string document;           ///< a complete normcheck/1 file with the recipe; `check` fails it
};

/// What `prove` found and what it covered.
struct proof_result {
  proof_verdict verdict = proof_verdict::checked;
  std::string coverage;                        ///< what was covered, in words, with counts
  std::optional<recipe_counterexample> counterexample;  ///< for wrong: where the gradient differs; for divides_by_zero: where the scale is undefined
  std::optional<recipe_counterexample> division_risk;   ///< for wrong: also where the scale divides by zero, if found
};

/// Decides the recipe for `objective`: exhaustively over every shape with W ≤ 4, G ≤ 3 and counts ≤ 3
/// (weighted: with the token weights of each group drawn from {0, 1/2, 1, 2}), by random larger scopes,
/// and for all counts and masses by exact evaluation on a grid large enough for the expression's
/// degree. Throws `error(recipe_error)` for a weighted variable under the token mean.
proof_result prove_recipe(const recipe& r, objective_kind objective = objective_kind::token_mean);

}  // namespace normcheck

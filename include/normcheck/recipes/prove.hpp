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
///
/// With sequences a recipe scales each group (a sequence, or a microbatch that declares none), and the identity
/// is c/d = the objective's weight of a token of the group wherever the group holds one: 1/(B·nₛ) under the
/// sequence mean, 1/B under the mean of sequence sums, 1/C under a declared normalizer.

#include "normcheck/recipes/recipe.hpp"
#include "normcheck/documents/partition_writer.hpp"

#include <array>
#include <cstdint>
#include <optional>
#include <string>

namespace normcheck {

/// What a group sees of the sequences, in a scope that has them.
struct sequence_counts {
  bool declared = true;                    ///< its microbatch declares sequences (else the group is the microbatch)
  std::uint64_t group_tokens = 0;          ///< n_s
  std::uint64_t sequences = 0;             ///< B
  std::uint64_t rank_sequences = 0;        ///< b_r
  std::uint64_t microbatch_sequences = 0;  ///< b_m
};

/// What a rank of a device mesh sees of it: the sizes of the dimensions with names (1 for a role without one),
/// and the rank's count reduced over the data dimension only and over the sequence dimension only. W is
/// data·sequence: the replicas of the replica dimension hold the same tokens, and their gradients are reduced
/// over the other dimensions only, not averaged with each other.
struct mesh_counts {
  std::uint64_t data = 1;           ///< DP
  std::uint64_t sequence = 1;       ///< CP
  std::uint64_t replica = 1;        ///< TP
  std::uint64_t over_data = 0;      ///< N_dp: the tokens of the ranks that share the rank's sequence coordinate
  std::uint64_t over_sequence = 0;  ///< N_cp: the tokens of the ranks that share the rank's data coordinate
};

/// Beside an auxiliary term, the main loss's counts (the group judged is the term's).
struct main_loss_counts {
  std::uint64_t valid_tokens = 1;       ///< N
  std::uint64_t rank_tokens = 0;        ///< n_r
  std::uint64_t microbatch_tokens = 0;  ///< n_m
};

/// The counts one group sees (under the token and weighted means without sequences: one microbatch).
struct count_configuration {
  std::uint64_t world_size = 1;        ///< W
  std::uint64_t valid_tokens = 1;      ///< N
  std::uint64_t rank_tokens = 1;       ///< nᵣ
  std::uint64_t microbatch_tokens = 1; ///< nₘ
  std::uint64_t microbatches = 1;      ///< G
  /// The weight masses (M, mᵣ, mₘ) under the weighted objective; unset under the token mean, where
  /// they are the counts. A mass is 0 wherever its count is.
  std::optional<std::array<rational, 3>> masses;
  std::optional<sequence_counts> sequences = std::nullopt;   ///< set in a scope with sequences
  std::optional<rational> group_mass = std::nullopt;         ///< the group's own mass, weighted with sequences
  std::optional<rational> normalizer = std::nullopt;         ///< C, under the constant objective
  std::optional<mesh_counts> mesh = std::nullopt;            ///< set on a device mesh
  std::optional<main_loss_counts> main_loss = std::nullopt;  ///< set where a term's group is judged
};

/// "W = 2, N = 3, n_r = 1, n_m = 1, G = 1" (and ", M = …, m_r = …, m_m = …" with masses, ", n_s = …, B = …,
/// b_r = …, b_m = …" with sequences, ", C = …" with a normalizer, the mesh's and the main loss's counts as
/// `names` spells them: ", DP = 2, CP = 2, N_dp = 2, N_cp = 3"; beside a term "N_mtp = 3, …, N = 4, …").
std::string describe(const count_configuration& where, const recipe_names& names = {});

/// How the question was settled.
enum class proof_verdict {
  proved,   ///< the identity holds for all counts (decided exactly), and no divisor vanished in the scopes checked
  checked,  ///< no counterexample in the scopes checked, but the expression is too large to decide for all counts
  wrong,    ///< a partition where the recipe's gradient is not the objective's
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
  std::string document;  ///< a complete normcheck/1 file with the recipe; `check` fails it
  /// Whether `check` fails `document`: not for a term's scale that divides by zero, which no file can state (a
  /// file's `recipe` scales its main loss, and an undefined scale has no measurement).
  bool check_fails = true;
};

/// What `prove` found and what it covered.
struct proof_result {
  proof_verdict verdict = proof_verdict::checked;
  std::string coverage;                        ///< what was covered, in words, with counts
  std::optional<recipe_counterexample>
      counterexample;  ///< for wrong: where the gradient differs; for divides_by_zero: where the scale is undefined
  std::optional<recipe_counterexample> division_risk;   ///< for wrong: also where the scale divides by zero, if found
};

/// Decides the recipe for `objective`: exhaustively over every shape with W ≤ 4, G ≤ 3 and counts ≤ 3
/// (weighted: with the token weights of each group drawn from {0, 1/2, 1, 2}; with sequences: 1 to 3 of them
/// per microbatch; constant: C from a few values), by random larger scopes, and for all counts and masses by
/// exact evaluation on a grid large enough for the expression's degree (checked, not proved, where that grid
/// would pass a million configurations). With the names of a mesh (`r.scale.names()`), every partition is also
/// laid out on that mesh (W = DP·CP ≤ 4 in every factorization, TP ≤ 3 where the recipe reads it, else 2);
/// with a term's, the group judged is the term's and the main loss's counts are free beside it. Both under the
/// token mean only: `error(recipe_error)` otherwise. One prover serves every objective, each group of tokens the
/// objective weighs alike (a sequence, or a microbatch) judged on its own. Throws `error(recipe_error)` for a weight
/// mass under another objective than the weighted token mean, and for C under another than constant.
proof_result prove_recipe(const recipe& r, objective_kind objective = objective_kind::token_mean);

/// The weight the objective gives a token of a group, in recipe variables: "1/N", "1/M", "1/(B·n_s)", "1/B" or
/// "1/C"; with the names of a term, its own count's spelling ("1/N_mtp").
std::string objective_weight(objective_kind objective, const recipe_names& names = {});

/// The scale each group multiplies its loss sum by for the objective's gradient under `reducer`, as a recipe that
/// `prove_recipe` decides: "W / N" (sum: "1 / N"), "W / M", "W / (B * n_s)", "W / B" or "W / C". Under the
/// sequence mean it divides by n_s, so a sequence without a valid token needs a guard in code.
std::string objective_scale(objective_kind objective, reducer_kind reducer);

}  // namespace normcheck

#pragma once
/// \file core/gradients.hpp
/// The gradient strategies of the report: what DDP delivers when every rank backpropagates a given local
/// scalar and the reducer combines the ranks' gradients ((1/W)Σ for mean, Σ for sum). Each is an entry of
/// the normalization table (core/normalization.hpp), evaluated in the update's objective's units.

#include "normcheck/core/normalization.hpp"
#include "normcheck/core/partition.hpp"

#include <array>
#include <optional>
#include <string_view>

namespace normcheck {

/// A local backward scalar, or the objective itself. Sᵣ is the rank's loss sum in the objective's terms (the
/// weighted sum Σwᵢℓᵢ under the weighted objective, Σₛ Sₛ/nₛ under sequence_mean) and each count takes the
/// objective's units: N → M, nᵣ → mᵣ, nᵣₘ → mᵣₘ under weights; B, bᵣ, bᵣₘ (sequences) under the sequence
/// objectives; the normalizer C for N under constant.
enum class strategy {
  global_mean,      ///< ΣSᵣ/N: the gradient of the (weighted) token-mean objective, whatever the reducer
  local_mean,       ///< each rank Sᵣ/nᵣ (undefined when a rank has no valid token)
  local_sum,        ///< each rank Sᵣ
  scaled_sum,       ///< each rank W·Sᵣ/N (correct under the mean reducer)
  global_share,     ///< each rank Sᵣ/N (correct under the sum reducer)
  microbatch_mean,  ///< each rank (1/Gᵣ)Σₘ Sᵣₘ/nᵣₘ (undefined when a microbatch is empty)
};

/// Every strategy, in report order.
inline constexpr std::array<strategy, 6> all_strategies{
    strategy::global_mean, strategy::local_mean,   strategy::local_sum,
    strategy::scaled_sum,  strategy::global_share, strategy::microbatch_mean};

/// The stable name, e.g. "scaled_sum".
std::string_view strategy_name(strategy s) noexcept;
/// The strategy named `name`, if any.
std::optional<strategy> strategy_from_name(std::string_view name) noexcept;
/// The strategy's entry in the normalization table.
const normalization& normalization_of(strategy s) noexcept;
/// The local scalar each rank backpropagates, e.g. "W·Sᵣ/N" ("W·Sᵣ/M" under the weighted objective, "W·Sᵣ/B"
/// under the sequence objectives, "W·Sᵣ/C" under constant).
std::string strategy_formula(strategy s, objective_kind objective = objective_kind::token_mean);
/// What the strategy divides by: "N", "nᵣ", "nᵣₘ" or "none" under the token mean, the objective's own counts
/// under the others.
std::string strategy_denominator(strategy s, objective_kind objective = objective_kind::token_mean);

/// The synchronized gradient under `p.reducer`, or nullopt where the strategy is undefined (a rank or
/// microbatch whose count, or mass, it divides by is 0).
/// Throws `error(no_valid_tokens)` when N = 0: the update has no objective to compare against.
std::optional<rational> gradient(const partition& p, strategy s);

/// All strategies' gradients, indexed like `all_strategies`.
using gradient_set = std::array<std::optional<rational>, all_strategies.size()>;
/// Computes every strategy; throws `error(no_valid_tokens)` when N = 0.
gradient_set compute_gradients(const partition& p);

/// Throws `error(no_valid_tokens)` when the update holds no valid token, under the weighted objective
/// when every valid token weighs 0 (M = 0), and under the sequence objectives when no sequence holds a
/// valid token (B = 0).
void require_valid_tokens(const partition& p);

}  // namespace normcheck

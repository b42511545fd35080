#include "normcheck/gate/bound.hpp"

#include "normcheck/core/gradients.hpp"

#include <algorithm>

namespace normcheck {

namespace {

// The roundings a term meets on its own rank, before the all-reduce: the target's conversion to the dtype
// and θ − y (2), the microbatch sum (n − 1 additions), the scale (up to two operations, as in W/(N·G))
// and its multiplication (3), accumulation over G microbatches (G − 1 additions). Weighted tokens add the
// weight's conversion and the product w·(θ − y) (2 more), and so does an auxiliary term's weight other than 1
// (its conversion to the dtype and the product with the term's loss).
std::uint64_t local_roundings(const partition& update) {
  std::uint64_t longest_microbatch = 0;
  std::uint64_t most_microbatches = 0;
  for (const rank_stats& rank : update.ranks) {
    most_microbatches = std::max<std::uint64_t>(most_microbatches, rank.microbatches.size());
    for (const microbatch_stats& m : rank.microbatches)
      longest_microbatch = std::max(longest_microbatch, m.valid_tokens);
  }
  const std::uint64_t weighting = update.objective == objective_kind::weighted_token_mean ? 2 : 0;
  const std::uint64_t term_weight = update.loss_weight != 1 ? 2 : 0;
  return longest_microbatch + most_microbatches + 3 + weighting + term_weight;
}

}  // namespace

// K: the most roundings any one term can meet on its way to the synchronized gradient: the local ones and
// the all-reduce's (W − 1 additions and the reducer's division).
std::uint64_t rounding_depth(const partition& update) { return local_roundings(update) + update.world_size(); }

namespace {

// γ_K = K·u / (1 − K·u), the classic bound on K rounding factors (1 + δ) with |δ| ≤ u.
std::optional<rational> gamma(std::uint64_t k, dtype type) {
  rational ku = unit_roundoff(type) * k;
  if (ku >= 1) return std::nullopt;
  rational g = ku / (1 - ku);
  return g;
}

}  // namespace

// The relative error bound of a term's whole path. Reduced in the dtype itself it is γ_K. Reduced in
// another arithmetic (a compressing communication hook), the local roundings are at u and the all-reduce's
// W, with the conversion into the reduction's type and back (2 more), at its u_r: a product of factors
// within γ_a and γ_b of 1 is within γ_a + γ_b + γ_a·γ_b of 1.
std::optional<rational> error_factor(const partition& update, dtype type, std::optional<dtype> reduction_type) {
  if (!reduction_type || *reduction_type == type) return gamma(rounding_depth(update), type);
  const std::optional<rational> local = gamma(local_roundings(update), type);
  const std::optional<rational> reduction = gamma(update.world_size() + 2, *reduction_type);
  if (!local || !reduction) return std::nullopt;
  rational combined = *local + *reduction + *local * *reduction;
  return combined;
}

// The error factor times the sum of every term's magnitude along the strategy's computation:
// Σ_g |c_g|·(m_g·|θ| + Σw·|y|) over the groups, c_g the weight the normalization delivers.
std::optional<rational> strategy_bound(const partition& update, strategy s, dtype type,
                                       std::optional<dtype> reduction_type) {
  const std::optional<rational> g = error_factor(update, type, reduction_type);
  if (!g) return std::nullopt;
  return strategy_bound(objective_units(update, update.objective), s, g);
}

std::optional<rational> strategy_bound(const objective_units& units, strategy s,
                                       const std::optional<rational>& error_factor) {
  if (!error_factor) return std::nullopt;
  const std::optional<weighted_totals> magnitudes = totals(units, normalization_of(s), true);
  if (!magnitudes) return std::nullopt;
  rational total = abs(units.update().theta) * magnitudes->mass;
  total += magnitudes->value;
  rational bound = *error_factor * total;
  return bound;
}

std::optional<rational> objective_bound(const partition& update, dtype type, std::optional<dtype> reduction_type) {
  return strategy_bound(update, strategy::global_mean, type, reduction_type);
}

}  // namespace normcheck

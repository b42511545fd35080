#pragma once
/// \file gate/bound.hpp
/// The gate's error bound: how far a floating-point computation of a normalization may land from its exact
/// value, from the dtype's unit roundoff and the number of roundings on any term's path (docs/gate.md).

#include "normcheck/core/dtype.hpp"
#include "normcheck/core/gradients.hpp"
#include "normcheck/core/normalization.hpp"
#include "normcheck/core/partition.hpp"

#include <cstdint>
#include <optional>

namespace normcheck {

/// K: the most roundings any one term can meet on its way to the synchronized gradient.
std::uint64_t rounding_depth(const partition& update);

/// The relative error bound of a term's whole path at `type`, reduced in `reduction_type` when given
/// (nullopt when the roundings reach 1: K·u ≥ 1).
std::optional<rational> error_factor(const partition& update, dtype type, std::optional<dtype> reduction_type);

/// The bound of a strategy's synchronized gradient: the error factor times Σ_g |c_g|·(m_g·|θ| + Σw·|y|).
std::optional<rational> strategy_bound(const partition& update, strategy s, dtype type,
                                       std::optional<dtype> reduction_type);

/// The same on units built for the update and its error factor (nullopt: no bound), so that the bounds of
/// every strategy read the units' per-rank sums once.
std::optional<rational> strategy_bound(const objective_units& units, strategy s,
                                       const std::optional<rational>& error_factor);

/// The derived bound for the objective's computation at `type`, reduced in `reduction_type` when given
/// (nullopt when the roundings reach 1: K·u ≥ 1).
std::optional<rational> objective_bound(const partition& update, dtype type,
                                        std::optional<dtype> reduction_type = std::nullopt);

}  // namespace normcheck

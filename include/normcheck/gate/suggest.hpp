#pragma once
/// \file gate/suggest.hpp
/// Designing a partition for a CI test: small, exactly representable, and such that every known
/// mistake lands far outside the dtype's error bound, so the gate names it unambiguously.

#include "normcheck/gate/observed.hpp"
#include "normcheck/documents/partition_writer.hpp"

#include <cstdint>
#include <string>

namespace normcheck {

/// A suggested partition and how well it separates the known mistakes.
struct suggestion {
  token_partition tokens;
  dtype type = dtype::float32;
  rational separation;      ///< min over compared pairs of |vᵢ − vⱼ| / max(boundᵢ, boundⱼ); 0 when some pair coincides
  std::string closest_pair;  ///< the pair that attains it, e.g. "local_mean and microbatch_mean"
};

/// Searches small integer partitions with `world_size` ranks of `microbatches` microbatches each and
/// returns the one that separates best: the objective from every known mistake, and the named wrong
/// strategies from each other. Under the weighted objective every token also gets a weight from
/// {1/4, 1/2, 3/4, 1, 3/2, 2} (exact in every dtype), and the mistakes include count_denominator.
/// Deterministic.
suggestion suggest_partition(std::uint64_t world_size, std::uint64_t microbatches, dtype type,
                             objective_kind objective = objective_kind::token_mean);

/// The separation the gate needs a suggestion to reach: 100 bounds.
inline constexpr unsigned required_separation = 100;

}  // namespace normcheck

#pragma once
/// \file gate/observed.hpp
/// What real training code produced for one update, as dumped into a partition file's `observed`
/// object: the synchronized gradient (or each rank's copy of it), its floating-point type, and the
/// token counts the code divided by.

#include "normcheck/core/dtype.hpp"
#include "normcheck/core/rational.hpp"

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace normcheck {

/// An explicit tolerance that replaces the derived bound: |observed − v| ≤ absolute + relative·|v|.
struct tolerance {
  rational absolute;
  rational relative;
};

/// The result a training step produced, exactly as dumped (hex floats keep it exact).
struct observed_result {
  std::vector<rational> per_rank;            ///< each rank's synchronized value (one entry if only `gradient` was given)
  bool from_per_rank = false;                ///< true when the file gave `per_rank`
  dtype type = dtype::exact;
  std::optional<std::uint64_t> global_tokens;  ///< `tokens.global`: the N the code divided by
  std::vector<std::uint64_t> rank_tokens;      ///< `tokens.per_rank`: each rank's nᵣ as the code counted it
  std::optional<rational> global_mass;         ///< `mass.global`: the M the code divided by (weighted objective)
  std::vector<rational> rank_masses;           ///< `mass.per_rank`: each rank's mᵣ as the code summed it
  std::optional<tolerance> explicit_tolerance;
};

}  // namespace normcheck

#pragma once
/// \file gate/consistency.hpp
/// The gate's checks before the objective: do the replicas hold the same value, and did the code count
/// and divide by what the update holds.

#include "normcheck/core/partition.hpp"
#include "normcheck/gate/observed.hpp"

#include <cstdint>
#include <string>

namespace normcheck {

/// One of the ordered checks (replica agreement, denominator, objective) and its outcome.
struct gate_check {
  std::string name;    ///< "replica_agreement", "denominator" or "objective"
  bool passed = false;
  std::string detail;  ///< what was compared, in words, with exact values
};

/// Whether every rank's copy of the synchronized value is the same.
gate_check check_replicas(const observed_result& observed, std::uint64_t world_size);

/// Whether the token counts, weight masses and divisors the code reported match the update.
gate_check check_denominators(const partition& update, const observed_result& observed);

}  // namespace normcheck

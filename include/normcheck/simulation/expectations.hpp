#pragma once
/// \file simulation/expectations.hpp
/// Judging what a scenario claims about its run (`expect`): without one, the claim is that the replicas
/// agree and the run equals the single-process reference.

#include "normcheck/simulation/simulate.hpp"

#include <string>
#include <vector>

namespace normcheck {

/// Each claim of the scenario's expectations that the run does not meet, in words.
std::vector<std::string> unmet_expectations(const scenario& s, const simulation& run);

}  // namespace normcheck

#pragma once
/// \file gate/gate.hpp
/// The CI gate: judges a gradient that real training code produced against the objective, with an
/// error bound derived from the dtype and the sizes of the reductions, and names the mistake.

#include "normcheck/core/gradients.hpp"
#include "normcheck/gate/observed.hpp"
#include "normcheck/core/partition.hpp"

#include <optional>
#include <string>
#include <vector>

namespace normcheck {

/// The gate's conclusion.
enum class gate_verdict {
  pass,          ///< the observed gradient is the objective's, and no known mistake could hide behind it
  fail,          ///< replicas diverged, a denominator is wrong, or the gradient is not the objective's
  inconclusive,  ///< the gradient fits the objective, but so does some known mistake on this data
};

/// "pass", "fail" or "inconclusive".
std::string_view verdict_name(gate_verdict verdict) noexcept;
/// The verdict spelled `name`, if any.
std::optional<gate_verdict> verdict_from_name(std::string_view name) noexcept;
/// Every spelling, for messages: "pass, fail or inconclusive".
std::string verdict_alternatives();

/// One of the ordered checks (replica agreement, denominator, objective) and its outcome.
struct gate_check {
  std::string name;    ///< "replica_agreement", "denominator" or "objective"
  bool passed = false;
  std::string detail;  ///< what was compared, in words, with exact values
};

/// A candidate account of the observed value: a named strategy or the objective scaled by a factor.
struct explanation {
  std::string name;       ///< a strategy name ("local_mean"), a factor ("objective×W") or "mean_of_empty"
  observed_value value;   ///< what that computation yields on this partition (NaN for a mean over nothing)
  std::optional<rational> bound;  ///< its error bound at the dtype (nullopt: the dtype cannot resolve it)
  std::string computed;   ///< what the code computed
  std::string why_wrong;  ///< why that is not the objective's gradient
  std::string instead;    ///< what to backpropagate instead
};

/// Everything the gate found for one file.
struct gate_result {
  gate_verdict verdict = gate_verdict::fail;
  dtype type = dtype::exact;
  std::optional<dtype> reduction_type;  ///< the all-reduce's arithmetic, when it is not `type`
  observed_value observed;            ///< the value judged (rank 0's copy)
  rational objective;                 ///< global_mean, exactly
  std::optional<rational> bound;      ///< |observed − objective| allowed (nullopt: unbounded at this dtype)
  bool bound_is_explicit = false;     ///< true when the file's `tolerance` replaced the derived bound
  std::uint64_t rounding_depth = 0;   ///< K: roundings on any term's path (docs/gate.md)
  std::vector<gate_check> checks;
  std::vector<explanation> diagnosis;   ///< explanations that fit when the objective check fails
  std::vector<explanation> could_hide;  ///< wrong computations within their bound of the observed value
  std::optional<rational> ratio;        ///< observed / objective when nothing explains a failure
};

/// Runs the checks in order: replica agreement, denominator, objective, diagnosis, discrimination.
gate_result run_gate(const partition& update, const observed_result& observed);

/// Every known mistake as a candidate, with its value and bound on `update` at `type`, reduced in
/// `reduction_type` (the correct computation for the reducer and the objective itself are not candidates).
/// A mean over a microbatch or rank without valid tokens (`mean_of_empty`) is a candidate of value NaN.
std::vector<explanation> known_mistakes(const partition& update, dtype type,
                                        std::optional<dtype> reduction_type = std::nullopt);

/// The derived bound for the objective's computation at `type`, reduced in `reduction_type` when given
/// (nullopt when the roundings reach 1: K·u ≥ 1).
std::optional<rational> objective_bound(const partition& update, dtype type,
                                        std::optional<dtype> reduction_type = std::nullopt);

}  // namespace normcheck

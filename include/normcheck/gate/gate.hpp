#pragma once
/// \file gate/gate.hpp
/// The CI gate: judges a gradient that real training code produced against the objective, with an
/// error bound derived from the dtype and the sizes of the reductions, and names the mistake.

#include "normcheck/core/gradients.hpp"
#include "normcheck/core/partition.hpp"
#include "normcheck/gate/bound.hpp"
#include "normcheck/gate/consistency.hpp"
#include "normcheck/gate/mistakes.hpp"
#include "normcheck/gate/observed.hpp"
#include "normcheck/gate/weights.hpp"

#include <optional>
#include <span>
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
/// Every spelling, in order.
std::vector<std::string_view> verdict_spellings();

/// What the gate found at one site: a probe in a submodule, judged like the top-level one.
struct site_result {
  std::string name;
  std::optional<std::string> replica_difference;  ///< set when the ranks' vectors differ
  group_judgement judgement;
  bool as_p = false;  ///< it weighs the groups as the top-level probe does (the same fit, or both the objective)
};

struct term_judgement;

/// Everything the gate found for one loss, and for a file with auxiliary terms the whole update.
struct gate_result {
  /// The loss's verdict; with auxiliary terms the update's: the worst of the main loss's and every term's
  /// (fail, then inconclusive, then pass).
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
  /// The per-group measurement's judgement, with its weight table (absent for a scalar measurement).
  std::optional<group_judgement> groups;
  std::vector<site_result> sites;       ///< one per site, in file order
  /// With auxiliary terms: the main loss's own verdict (nullopt without terms, where `verdict` is it).
  std::optional<gate_verdict> main_verdict;
  /// Each auxiliary term judged on its own tokens, in file order. `diagnosis` (`could_hide`) then also holds
  /// each failing (inconclusive) term's explanations, named "term mtp: local_mean".
  std::vector<term_judgement> terms;
};

/// What the gate found for one auxiliary term: judged as a loss of its own (its tokens, objective and weight).
struct term_judgement {
  std::string name;
  gate_result gate;
};

/// Runs the checks in order: replica agreement, denominator, objective, diagnosis, discrimination.
gate_result run_gate(const partition& update, const observed_result& observed);

/// The main loss and each auxiliary term judged on its own (`term_observed[t]` is what the step measured of
/// `terms[t]`, the same length), the verdicts combined: the update passes only when every loss passes.
gate_result run_update_gate(const partition& update, const observed_result& observed,
                            std::span<const auxiliary_term> terms, std::span<const observed_result> term_observed);

}  // namespace normcheck

#pragma once
/// \file simulation/simulate.hpp
/// Exact simulation of W data-parallel replicas over the steps of a scenario, beside a single-process
/// run on the concatenated global batch; where replicas first differ, whether the run equals that
/// reference, and where it stops (a skipped collective, an undefined local loss).
///
/// One step on rank r, in the order a training loop runs it: faults due before the step act; the
/// rank's learning rate is its scheduler's rate; its local gradient is the gradient of its local
/// scalar (the scenario's `loss_scale`) at its own θ; the all-reduce combines the ranks' local
/// gradients ((1/W)Σ for mean, Σ for sum); clipping acts on the result (decided from the reduced
/// gradient, or from the rank's own local gradient under a `local_clipping` fault); SGD adds λ·θ,
/// updates the momentum buffer (buf ← μ·buf + d, from a zero buffer) and moves θ by −lr·buf; the
/// scheduler steps.
///
/// Clipping by norm is exact: it clips when ‖g‖² > c² (compared exactly) and scales by c/‖g‖. When
/// ‖g‖ is irrational (only possible with several parameters), the scale is c/u with u the smallest
/// multiple of 2⁻ᵏ that is at least ‖g‖, k chosen so that u has at least 64 significant bits: the
/// clipped norm is then at most c and within 2⁻⁶⁴ of it, relatively, and every rank and the reference
/// apply the same rule.

#include "normcheck/documents/scenario.hpp"

#include <optional>
#include <string>
#include <vector>

namespace normcheck {

/// What one replica carries from step to step.
struct replica_state {
  parameter_vector theta;
  parameter_vector momentum;              ///< the momentum buffer (zero until the first step)
  std::uint64_t scheduler_position = 0;   ///< `scheduler.step()` calls so far

  /// Equal states.
  bool operator==(const replica_state&) const = default;
};

/// How clipping treated one gradient.
struct clip_outcome {
  bool clipped = false;         ///< some coordinate or the norm was cut
  bool rounded_norm = false;    ///< the norm was irrational and bounded from above (see the file comment)
  bool local_decision = false;  ///< the decision came from the rank's local gradient (a fault)
  rational scale{1};            ///< the norm clipping factor (1 when the norm was not clipped)
};

/// One rank's step.
struct rank_step {
  replica_state start;                  ///< after the faults due before the step
  std::uint64_t valid_tokens = 0;       ///< nᵣ
  rational learning_rate;
  parameter_vector local_gradient;      ///< the gradient of the rank's local scalar, at its θ
  parameter_vector reduced_gradient;    ///< what the all-reduce returned
  parameter_vector objective_gradient;  ///< the token-mean objective's gradient at the rank's θ
  parameter_vector applied_gradient;    ///< after clipping: what optimizer.step() reads
  clip_outcome clip;
  replica_state end;
};

/// The single-process reference's step: the global token mean on the concatenated batch, no fault.
struct reference_step {
  rational learning_rate;
  parameter_vector gradient;
  parameter_vector applied_gradient;
  clip_outcome clip;
  replica_state end;
};

/// Everything that happened in one step.
struct step_record {
  std::uint64_t step = 0;           ///< 1-based
  std::uint64_t valid_tokens = 0;   ///< N
  std::vector<rank_step> ranks;
  reference_step reference;
};

/// Where and why a run stopped before its last step.
struct halt {
  std::uint64_t step = 0;
  halt_cause cause = halt_cause::skipped_collective;
  std::vector<std::size_t> waiting;  ///< ranks blocked in the collective (skipped_collective)
  std::vector<std::size_t> missing;  ///< ranks that did not call it (skipped_collective)
  std::vector<std::size_t> ranks;    ///< ranks whose local loss is undefined (undefined_local_loss)
};

/// The first place where some rank's state differs from rank 0's (DDP's source of truth: it
/// broadcasts rank 0's parameters at construction).
struct divergence {
  std::uint64_t step = 0;             ///< 0: at start-up
  state_part part = state_part::theta;
  bool after_update = false;          ///< θ or buffer after the step's update, rather than at its start
  std::vector<std::size_t> ranks;     ///< the ranks that differ from rank 0, increasing

  /// The first of them: the rank a report names.
  std::size_t rank() const { return ranks.front(); }
};

/// The first step after which some rank's θ differs from the reference's.
struct reference_difference {
  std::uint64_t step = 0;             ///< 0: at start-up
  std::vector<std::size_t> ranks;
};

/// A whole run.
struct simulation {
  std::vector<replica_state> start_up;   ///< each rank after the initial synchronization (step 0)
  replica_state reference_start;
  std::vector<step_record> steps;        ///< the steps that completed
  std::optional<halt> stopped;
  std::optional<divergence> first_divergence;
  std::optional<reference_difference> first_reference_difference;

  /// Completed, and every rank's state equal to rank 0's at every step.
  bool replicas_agree() const { return !stopped && !first_divergence; }
  /// Completed, and every rank's θ equal to the reference's after every step.
  bool equals_reference() const { return !stopped && !first_reference_difference; }
  /// Each rank's θ after the last completed step.
  std::vector<parameter_vector> final_theta() const;
};

/// Runs a scenario exactly, with its reference.
simulation simulate(const scenario& s);

/// The first divergence among replicas in a run's records (momentum compared when μ ≠ 0, the scheduler
/// when there is one). At each step the parts are compared in the order the step computes them:
/// θ, momentum and scheduler at the step's start, the applied gradient, then momentum and θ after it.
std::optional<divergence> find_first_divergence(const scenario& s, const simulation& run);

/// The first step after which some rank's θ differs from the reference θ.
std::optional<reference_difference> find_reference_difference(const simulation& run);

/// The gradient clipping the optimizer applies to `gradient`, deciding from `decide_from`.
parameter_vector clip(const parameter_vector& gradient, const parameter_vector& decide_from,
                      const optimizer_config& optimizer, clip_outcome& outcome);

/// One SGD step from `state` with the already clipped gradient `applied` at learning rate `lr`: d = applied +
/// λ·θ, then buf ← μ·buf + d and θ ← θ − lr·buf (θ ← θ − lr·d without momentum); the scheduler position
/// advances by one. The one definition of the step: the replicas, the reference and the demos' trajectories
/// all take it.
replica_state sgd_step(const replica_state& state, const parameter_vector& applied, const rational& lr,
                       const optimizer_config& optimizer);

}  // namespace normcheck

#pragma once
/// \file documents/scenario.hpp
/// The scenario format `normcheck-scenario/1`: W replicas trained for several steps on given
/// partitions, with a model, a local loss scale, a reducer, an optimizer and injected faults, plus
/// what the file claims about the run. Tokens are not stored: each microbatch keeps the moments
/// Σ x·xᵀ and Σ y·x that its loss gradient needs.

#include "normcheck/core/errors.hpp"
#include "normcheck/core/gradients.hpp"
#include "normcheck/documents/field_reader.hpp"
#include "normcheck/core/partition.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace normcheck {

/// The format name every scenario file declares.
inline constexpr std::string_view scenario_format_name = "normcheck-scenario/1";

/// Most steps a scenario may have (repeats expanded): a hostile file cannot ask for unbounded work.
inline constexpr std::uint64_t scenario_max_steps = 1000;
/// Most ranks a scenario may have.
inline constexpr std::size_t scenario_max_world_size = 1024;
/// Most parameters a scenario's model may have.
inline constexpr std::size_t scenario_max_dimension = 16;
/// Most work a scenario may ask for: T·Σₜ(microbatches of step t)·d². Exact values grow with every step,
/// so the cost grows with the square of the number of steps T.
inline constexpr std::uint64_t scenario_max_work = 10'000'000;
/// Most digit work a simulation may do: over the steps, the step's operations times L·log²L, L the limbs
/// of the longest number the run then holds. The work limit counts operations before the run; this one
/// counts what they cost as the exact values lengthen, and stops the run in about a second.
inline constexpr std::uint64_t scenario_max_digit_work = 40'000'000;
/// Most memory the record of a simulation may keep (every rank's values at every step), in 64-bit limbs
/// with each rational's own overhead counted: 24 MiB.
inline constexpr std::uint64_t scenario_max_kept_limbs = 3ull << 20;

/// Parameters, gradients and momentum buffers: one exact value per coordinate.
using parameter_vector = std::vector<rational>;

/// One microbatch of one rank: its valid tokens and padding, and the moments of the loss
/// ½(θ·x − y)², whose gradient summed over the microbatch is gram·θ − target_moment.
struct microbatch_moments {
  std::uint64_t valid_tokens = 0;
  std::uint64_t padding = 0;
  std::vector<rational> gram;    ///< Σ x·xᵀ, d×d row-major (for the scalar model: the count n)
  parameter_vector target_moment;  ///< Σ y·x (for the scalar model: Σ y)
};

/// One rank's share of one step, microbatches in order (at least one).
struct rank_batch {
  std::vector<microbatch_moments> microbatches;

  /// nᵣ: valid tokens over the rank's microbatches.
  std::uint64_t valid_tokens() const;
};

/// One optimizer step: every rank's batch, in rank order.
struct step_batch {
  std::vector<rank_batch> ranks;

  /// N: valid tokens of the step over all ranks.
  std::uint64_t valid_tokens() const;
};

/// The learning rate at each scheduler position p (the number of `scheduler.step()` calls so far).
struct lr_schedule {
  std::vector<rational> rates;                 ///< lr at position p is rates[min(p, size − 1)]
  std::optional<std::uint64_t> decay_every;    ///< StepLR: multiply by `gamma` every this many positions
  rational gamma;

  /// Whether the rate depends on the position (a list of rates or a decay): only then is there a scheduler.
  bool has_scheduler() const;
  /// The rate at position `position`.
  rational rate(std::uint64_t position) const;
};

/// SGD as torch.optim.SGD applies it (dampening 0, no Nesterov), after optional gradient clipping.
struct optimizer_config {
  lr_schedule schedule;
  rational momentum;                    ///< μ: buf ← μ·buf + d, θ ← θ − lr·buf (0: θ ← θ − lr·d)
  rational weight_decay;                ///< λ: d = clipped gradient + λ·θ
  std::optional<rational> clip_value;   ///< c: each coordinate clamped to [−c, c]
  std::optional<rational> clip_norm;    ///< c: scaled by c/‖g‖ when ‖g‖ > c (applied after clip_value)
};

/// What can go wrong on one rank.
enum class fault_kind {
  initial_parameters,  ///< the rank starts from other parameters (overwritten when initial sync is on)
  optimizer_state,     ///< before the step, the rank's momentum buffer is restored to another value
  local_clipping,      ///< from the step on, the rank decides clipping from its own local gradient
  scheduler_step,      ///< before the step, the rank's scheduler is stepped once more than the others'
  skipped_collective,  ///< at the step, the rank does not call the gradient all-reduce
};

/// The stable name, e.g. "scheduler_step".
std::string_view fault_name(fault_kind kind) noexcept;

/// One injected fault.
struct fault {
  fault_kind kind = fault_kind::initial_parameters;
  std::size_t rank = 0;
  std::uint64_t step = 0;        ///< 1-based step it acts at (0 for initial_parameters)
  parameter_vector value;        ///< the parameters or momentum buffer it sets, where it sets one
};

/// A part of a replica's state, in the order a step computes it.
enum class state_part {
  theta,      ///< the parameters
  momentum,   ///< the optimizer's momentum buffer
  scheduler,  ///< the scheduler's position (which decides the learning rate)
  gradient,   ///< the gradient the optimizer receives (after the all-reduce and clipping)
};

/// The stable name, e.g. "momentum".
std::string_view state_part_name(state_part part) noexcept;
/// The part named `name`, if any.
std::optional<state_part> state_part_from_name(std::string_view name) noexcept;

/// Why a run stopped before its last step.
enum class halt_cause {
  skipped_collective,    ///< a rank did not call a collective the others wait in: a hang
  undefined_local_loss,  ///< a rank's local loss is 0/0 (a local mean over no token): NaN in floating point
};

/// The stable name, e.g. "skipped_collective".
std::string_view halt_cause_name(halt_cause cause) noexcept;
/// The cause named `name`, if any.
std::optional<halt_cause> halt_cause_from_name(std::string_view name) noexcept;

/// A claimed first divergence among replicas.
struct divergence_claim {
  std::uint64_t step = 0;
  std::size_t rank = 0;
  state_part part = state_part::theta;
};

/// A claimed first difference from the single-process reference run.
struct reference_claim {
  std::uint64_t step = 0;
  std::size_t rank = 0;
};

/// A claimed halt.
struct halt_claim {
  std::uint64_t step = 0;
  halt_cause cause = halt_cause::skipped_collective;
  std::optional<std::vector<std::size_t>> waiting;  ///< ranks that wait in the collective
  std::optional<std::vector<std::size_t>> missing;  ///< ranks that did not come
  std::optional<std::vector<std::size_t>> ranks;    ///< ranks whose local loss is undefined
};

/// What a scenario claims. An outer optional that is unset means "not claimed"; an inner nullopt
/// claims that the thing does not happen (`null` in the file).
struct scenario_expectations {
  std::optional<bool> replicas_agree;
  std::optional<std::optional<divergence_claim>> first_divergence;
  std::optional<bool> equals_reference;
  std::optional<std::optional<reference_claim>> first_reference_difference;
  std::optional<std::optional<halt_claim>> halt;
  std::optional<std::vector<parameter_vector>> final_theta;  ///< one value per rank
};

/// A scenario as read.
struct scenario {
  std::string description;
  std::size_t dimension = 1;          ///< number of parameters
  bool scalar_model = true;           ///< θ written as a number and tokens as target values
  parameter_vector theta;             ///< the model's initial parameters (the reference starts here)
  bool initial_sync = true;           ///< DDP broadcasts rank 0's parameters at construction
  strategy loss_scale = strategy::scaled_sum;
  reducer_kind reducer = reducer_kind::mean;
  optimizer_config optimizer;
  std::vector<step_batch> steps;      ///< steps 1, 2, … in order (repeats expanded)
  std::vector<fault> faults;
  bool has_expect = false;            ///< whether the file has an `expect` object
  scenario_expectations expect;
  std::optional<error_code> expect_error;

  /// W: the ranks of every step.
  std::size_t world_size() const { return steps.empty() ? 0 : steps.front().ranks.size(); }
};

/// Reads a normcheck-scenario/1 document. Throws `error` with the code and location of the first
/// problem: a step without valid tokens is `no_valid_tokens`, a step with another number of ranks
/// `world_size_mismatch`, more steps, ranks, parameters or work than the bounds above `limit_exceeded`.
scenario read_scenario(std::string_view text, std::string source, const reader_limits& limits = {});

}  // namespace normcheck

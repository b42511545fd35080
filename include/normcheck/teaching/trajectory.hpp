#pragma once
/// \file teaching/trajectory.hpp
/// Exact optimizer trajectories in one dimension: gradient descent with optional clipping (by value
/// or by norm), coupled weight decay and heavy-ball momentum, every iterate a canonical rational.
///
/// One step, in the order a training loop applies them: the gradient g is clipped first (it is the
/// gradient that clipping sees), then weight decay adds λ·x, then the momentum buffer takes the
/// result (b ← μ·b + d, with b = d on the first step), and the position moves by −η·b. The clipping and
/// the step are the simulation's (simulation/simulate.hpp: `clip`, `sgd_step`) on a one-parameter replica.

#include "normcheck/core/rational.hpp"

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace normcheck {

/// What an optimizer does to a gradient; unset or zero features are off.
struct optimizer_settings {
  rational learning_rate;               ///< η
  rational weight_decay;                ///< λ: the step uses g + λ·x (0: off)
  rational momentum;                    ///< μ: the buffer b ← μ·b + d (0: plain descent)
  std::optional<rational> clip_value;   ///< c: g is clamped to [−c, c]
  std::optional<rational> clip_norm;    ///< c: g is scaled by min(1, c/|g|), its norm in one dimension
};

/// The gradient of the objective at a position.
using gradient_function = std::function<rational(const rational&)>;

/// The gradient after the settings' clipping (value first, then norm, when both are set).
rational clip_gradient(const rational& gradient, const optimizer_settings& settings);

/// Positions x₀ (= `start`), x₁, …, x_steps. Throws `error(usage_error)` for a negative clipping threshold.
std::vector<rational> trajectory(const gradient_function& gradient, const rational& start,
                                 const optimizer_settings& settings, std::size_t steps);

/// Where two trajectories first differ.
struct parting {
  std::size_t step = 0;  ///< the first t with a[t] ≠ b[t]
  rational gap;          ///< a[t] − b[t] at that step
};

/// The first step where `a` and `b` differ, over their common length; nullopt if they never do.
std::optional<parting> first_parting(const std::vector<rational>& a, const std::vector<rational>& b);

/// A one-line description of the settings, e.g. "η = 1/10, momentum μ = 9/10".
std::string describe(const optimizer_settings& settings);

}  // namespace normcheck

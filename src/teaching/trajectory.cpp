#include "normcheck/teaching/trajectory.hpp"

#include "normcheck/core/errors.hpp"
#include "normcheck/simulation/simulate.hpp"

namespace normcheck {

namespace {

void require_threshold(const std::optional<rational>& threshold, std::string_view what) {
  if (threshold && *threshold < 0)
    throw error(error_code::usage_error, std::string(what) + " threshold " + to_string(*threshold) +
                                             " is negative: expected a number ≥ 0");
}

// The settings as the simulation's optimizer: one constant rate, no scheduler.
optimizer_config optimizer_of(const optimizer_settings& settings) {
  optimizer_config optimizer;
  optimizer.schedule.rates = {settings.learning_rate};
  optimizer.momentum = settings.momentum;
  optimizer.weight_decay = settings.weight_decay;
  optimizer.clip_value = settings.clip_value;
  optimizer.clip_norm = settings.clip_norm;
  return optimizer;
}

}  // namespace

rational clip_gradient(const rational& gradient, const optimizer_settings& settings) {
  // The simulation's clipping on a one-parameter model: there the norm is |g|, which is rational.
  const parameter_vector g{gradient};
  clip_outcome outcome;
  return clip(g, g, optimizer_of(settings), outcome).front();
}

std::vector<rational> trajectory(const gradient_function& gradient, const rational& start,
                                 const optimizer_settings& settings, std::size_t steps) {
  require_threshold(settings.clip_value, "the clipping-by-value");
  require_threshold(settings.clip_norm, "the clipping-by-norm");
  // A one-parameter replica stepped by the simulation's SGD step: the buffer starts at 0, so the first step's
  // buffer is the first direction.
  const optimizer_config optimizer = optimizer_of(settings);
  replica_state state{{start}, {rational(0)}, 0};
  std::vector<rational> positions;
  positions.reserve(steps + 1);
  positions.push_back(start);
  for (std::size_t t = 0; t < steps; ++t) {
    const parameter_vector g{gradient(state.theta.front())};
    clip_outcome outcome;
    state = sgd_step(state, clip(g, g, optimizer, outcome), settings.learning_rate, optimizer);
    positions.push_back(state.theta.front());
  }
  return positions;
}

std::optional<parting> first_parting(const std::vector<rational>& a, const std::vector<rational>& b) {
  const std::size_t common = std::min(a.size(), b.size());
  for (std::size_t t = 0; t < common; ++t) {
    if (a[t] != b[t]) {
      rational gap = a[t] - b[t];
      return parting{t, std::move(gap)};
    }
  }
  return std::nullopt;
}

std::string describe(const optimizer_settings& settings) {
  std::string out = "η = " + to_string(settings.learning_rate);
  if (settings.weight_decay != 0) out += ", weight decay λ = " + to_string(settings.weight_decay);
  if (settings.momentum != 0) out += ", momentum μ = " + to_string(settings.momentum);
  if (settings.clip_value) out += ", gradient clipped to [-c, c] with c = " + to_string(*settings.clip_value);
  if (settings.clip_norm) out += ", gradient norm clipped to c = " + to_string(*settings.clip_norm);
  return out;
}

}  // namespace normcheck

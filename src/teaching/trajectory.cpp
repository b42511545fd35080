#include "normcheck/teaching/trajectory.hpp"

#include "normcheck/core/errors.hpp"

namespace normcheck {

namespace {

void require_threshold(const std::optional<rational>& threshold, std::string_view what) {
  if (threshold && *threshold < 0)
    throw error(error_code::usage_error, std::string(what) + " threshold " + to_string(*threshold) +
                                             " is negative: expected a number ≥ 0");
}

}  // namespace

rational clip_gradient(const rational& gradient, const optimizer_settings& settings) {
  rational clipped = gradient;
  if (settings.clip_value) {
    const rational& c = *settings.clip_value;
    if (clipped > c) clipped = c;
    else if (clipped < -c) clipped = -c;
  }
  if (settings.clip_norm) {
    // In one dimension the norm is |g|; scaling by c/|g| keeps the sign and sets the size to c.
    const rational& c = *settings.clip_norm;
    const rational size = abs(clipped);
    if (size > c) {
      rational scaled = clipped * c / size;
      clipped = scaled;
    }
  }
  return clipped;
}

std::vector<rational> trajectory(const gradient_function& gradient, const rational& start,
                                 const optimizer_settings& settings, std::size_t steps) {
  require_threshold(settings.clip_value, "the clipping-by-value");
  require_threshold(settings.clip_norm, "the clipping-by-norm");
  std::vector<rational> positions;
  positions.reserve(steps + 1);
  positions.push_back(start);
  rational buffer;
  for (std::size_t t = 0; t < steps; ++t) {
    const rational& x = positions.back();
    rational direction = clip_gradient(gradient(x), settings);
    if (settings.weight_decay != 0) direction += settings.weight_decay * x;
    if (settings.momentum != 0) {
      if (t == 0) {
        buffer = direction;
      } else {
        rational carried = settings.momentum * buffer;
        buffer = carried + direction;
      }
      direction = buffer;
    }
    rational next = x - settings.learning_rate * direction;
    positions.push_back(std::move(next));
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

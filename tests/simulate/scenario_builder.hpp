#pragma once
// Building scenarios in code for the tests: tokens become the moments the reader would compute.

#include "normcheck/core/rational.hpp"
#include "normcheck/documents/scenario.hpp"

#include <optional>
#include <utility>
#include <vector>

namespace normcheck::testing {

/// The exact value of a literal as a scenario writes it in a JSON string ("1/10", "9/10"), read through
/// the library's one door.
inline rational q(const char* text) { return read_number(text, literal_form::json_string); }

/// A scalar-model microbatch from target values (nullopt: padding).
inline microbatch_moments scalar_microbatch(const std::vector<std::optional<rational>>& targets) {
  microbatch_moments m;
  m.gram.assign(1, rational(0));
  m.target_moment.assign(1, rational(0));
  for (const std::optional<rational>& y : targets) {
    if (!y) {
      ++m.padding;
      continue;
    }
    ++m.valid_tokens;
    m.gram[0] += 1;
    m.target_moment[0] += *y;
  }
  return m;
}

/// A vector-model microbatch from (x, y) samples of dimension d.
inline microbatch_moments vector_microbatch(const std::vector<std::pair<parameter_vector, rational>>& samples,
                                            std::size_t d) {
  microbatch_moments m;
  m.gram.assign(d * d, rational(0));
  m.target_moment.assign(d, rational(0));
  for (const auto& [x, y] : samples) {
    ++m.valid_tokens;
    for (std::size_t i = 0; i < d; ++i) {
      rational yx = y * x[i];
      m.target_moment[i] += yx;
      for (std::size_t j = 0; j < d; ++j) {
        rational xx = x[i] * x[j];
        m.gram[i * d + j] += xx;
      }
    }
  }
  return m;
}

/// Scalar steps: step → rank → targets, one microbatch per rank.
inline std::vector<step_batch> scalar_steps(const std::vector<std::vector<std::vector<rational>>>& steps) {
  std::vector<step_batch> out;
  for (const auto& ranks : steps) {
    step_batch step;
    for (const auto& targets : ranks) {
      std::vector<std::optional<rational>> tokens(targets.begin(), targets.end());
      step.ranks.push_back(rank_batch{{scalar_microbatch(tokens)}});
    }
    out.push_back(std::move(step));
  }
  return out;
}

/// A scalar scenario with SGD at a constant rate.
inline scenario scalar_scenario(const std::vector<std::vector<std::vector<rational>>>& steps, const rational& theta,
                                strategy loss_scale, const rational& lr,
                                reducer_kind reducer = reducer_kind::mean) {
  scenario s;
  s.dimension = 1;
  s.scalar_model = true;
  s.theta = {theta};
  s.loss_scale = loss_scale;
  s.reducer = reducer;
  s.optimizer.schedule.rates = {lr};
  s.steps = scalar_steps(steps);
  return s;
}

}  // namespace normcheck::testing

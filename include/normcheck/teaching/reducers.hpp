#pragma once
/// \file teaching/reducers.hpp
/// The reducers demo: every local scalar under the mean and the sum reducer, and the factor each
/// mistake produces, or that it has none.

#include "normcheck/core/gradients.hpp"
#include "normcheck/teaching/demo_input.hpp"
#include "normcheck/teaching/document.hpp"

#include <optional>
#include <string>
#include <vector>

namespace normcheck {

/// How a strategy's gradient relates to the objective's.
struct strategy_relation {
  strategy name;
  std::optional<rational> delivered;  ///< at the update's θ
  bool equals_objective = false;
  std::optional<rational> factor;     ///< the fixed ratio to the objective, when there is one
  std::optional<rational> ratio_at_first, ratio_at_second;  ///< the ratios at two θ, when they differ
  rational first_theta, second_theta;
};

/// The numbers of the reducers demo, for one reducer.
struct reducer_facts {
  reducer_kind reducer;
  rational objective;
  std::vector<strategy_relation> relations;  ///< every strategy except global_mean
};

/// Relates every strategy to the objective under `update.reducer`, at θ and at a second θ.
reducer_facts compute_reducer(const partition& update);

/// The names of the count expressions equal to `factor`, e.g. "W" or "N/W" ("" when none is).
std::string factor_in_counts(const rational& factor, const partition& p);
/// The relation of strategy `s` in `facts`.
const strategy_relation& relation_of(const reducer_facts& facts, strategy s);

/// The reducers demo's document: both reducers applied to the ranks of `input`.
demo_document reducers_document(const demo_input& input);

}  // namespace normcheck

#include "normcheck/core/gradients.hpp"

#include "normcheck/core/errors.hpp"

namespace normcheck {

namespace {

// The symbols of an objective's counts without an update to count (formulas are text).
objective_units symbols_of(objective_kind objective) {
  static const partition nothing;
  return objective_units(nothing, objective);
}

}  // namespace

const normalization& normalization_of(strategy s) noexcept {
  return report_normalizations()[static_cast<std::size_t>(s)];
}

std::string_view strategy_name(strategy s) noexcept {
  const std::size_t index = static_cast<std::size_t>(s);
  return index < all_strategies.size() ? normalization_of(s).name : "unknown";
}

std::optional<strategy> strategy_from_name(std::string_view name) noexcept {
  for (strategy s : all_strategies)
    if (normalization_of(s).name == name) return s;
  return std::nullopt;
}

std::string strategy_formula(strategy s, objective_kind objective) {
  return spelled(normalization_of(s).formula, symbols_of(objective));
}

std::string strategy_denominator(strategy s, objective_kind objective) {
  return spelled(normalization_of(s).denominator, symbols_of(objective));
}

void require_valid_tokens(const partition& p) {
  if (p.valid_tokens() == 0)
    throw error(error_code::no_valid_tokens,
                "the update holds no valid token on any rank (N = 0), so the token-mean objective is "
                "undefined; every rank must follow one agreed policy for such an update, such as skipping it");
  if (p.objective == objective_kind::weighted_token_mean && p.mass() == 0)
    throw error(error_code::no_valid_tokens,
                "every valid token of the update weighs 0 (M = 0), so the weighted token-mean objective is "
                "undefined; every rank must follow one agreed policy for such an update, such as skipping it");
  if (counts_sequences(p.objective) && p.sequence_count() == 0)
    throw error(error_code::no_valid_tokens,
                "no sequence of the update holds a valid token (B = 0), so the mean over sequences is "
                "undefined; every rank must follow one agreed policy for such an update, such as skipping it");
}

std::optional<rational> gradient(const partition& p, strategy s) {
  require_valid_tokens(p);
  return synchronized_gradient(objective_units(p, p.objective), normalization_of(s));
}

gradient_set compute_gradients(const partition& p) {
  require_valid_tokens(p);
  const objective_units units(p, p.objective);
  gradient_set values;
  for (std::size_t i = 0; i < all_strategies.size(); ++i)
    values[i] = synchronized_gradient(units, normalization_of(all_strategies[i]));
  return values;
}

}  // namespace normcheck

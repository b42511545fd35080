#include "normcheck/recipes/prove.hpp"

#include "normcheck/core/errors.hpp"

#include "group_prove.hpp"

namespace normcheck {

std::string describe(const count_configuration& c) {
  std::string text = "W = " + std::to_string(c.world_size) + ", N = " + std::to_string(c.valid_tokens) +
                     ", n_r = " + std::to_string(c.rank_tokens) + ", n_m = " + std::to_string(c.microbatch_tokens) +
                     ", G = " + std::to_string(c.microbatches);
  if (c.masses)
    text += ", M = " + to_string((*c.masses)[0]) + ", m_r = " + to_string((*c.masses)[1]) +
            ", m_m = " + to_string((*c.masses)[2]);
  if (c.sequences) {
    const sequence_counts& q = *c.sequences;
    text += ", n_s = " + std::to_string(q.group_tokens) + ", B = " + std::to_string(q.sequences) +
            ", b_r = " + std::to_string(q.rank_sequences) + ", b_m = " + std::to_string(q.microbatch_sequences);
    if (!q.declared) text += " (a microbatch without sequences)";
  }
  if (c.group_mass && c.sequences) text += ", the group's mass " + to_string(*c.group_mass);
  if (c.normalizer) text += ", C = " + to_string(*c.normalizer);
  return text;
}

std::string_view objective_weight(objective_kind objective) noexcept {
  switch (objective) {
    case objective_kind::token_mean: return "1/N";
    case objective_kind::weighted_token_mean: return "1/M";
    case objective_kind::sequence_mean: return "1/(B·n_s)";
    case objective_kind::sequence_sum_mean: return "1/B";
    case objective_kind::constant: return "1/C";
  }
  return "1/N";
}

std::string objective_scale(objective_kind objective, reducer_kind reducer) {
  std::string_view units = "N";
  switch (objective) {
    case objective_kind::token_mean: units = "N"; break;
    case objective_kind::weighted_token_mean: units = "M"; break;
    case objective_kind::sequence_mean: units = "(B * n_s)"; break;
    case objective_kind::sequence_sum_mean: units = "B"; break;
    case objective_kind::constant: units = "C"; break;
  }
  return (reducer == reducer_kind::mean ? "W / " : "1 / ") + std::string(units);
}

std::string_view verdict_name(proof_verdict verdict) noexcept {
  switch (verdict) {
    case proof_verdict::proved: return "proved";
    case proof_verdict::checked: return "checked";
    case proof_verdict::wrong: return "wrong";
    case proof_verdict::divides_by_zero: return "divides_by_zero";
  }
  return "checked";
}

proof_result prove_recipe(const recipe& r, objective_kind objective) {
  if (objective != objective_kind::weighted_token_mean)
    if (const std::optional<count_variable> mass = r.scale.mass_variable())
      throw error(error_code::recipe_error, "the recipe uses " + std::string(variable_name(*mass)) +
                                                ", a weight mass: prove it with --objective weighted_token_mean");
  if (objective != objective_kind::constant && r.scale.uses(count_variable::C))
    throw error(error_code::recipe_error,
                "the recipe uses C, the declared normalizer: prove it with --objective constant");
  return detail::prove_by_groups(r, objective);
}

}  // namespace normcheck

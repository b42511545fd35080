#include "normcheck/recipes/prove.hpp"

#include "normcheck/core/errors.hpp"

#include "group_prove.hpp"

namespace normcheck {

std::string describe(const count_configuration& c, const recipe_names& names) {
  using cv = count_variable;
  auto named = [&](cv v, std::uint64_t value) { return names.spelling(v) + " = " + std::to_string(value); };
  std::string text = named(cv::W, c.world_size) + ", " + named(cv::N, c.valid_tokens) + ", " +
                     named(cv::n_r, c.rank_tokens) + ", " + named(cv::n_m, c.microbatch_tokens) + ", " +
                     named(cv::G, c.microbatches);
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
  if (c.mesh) {
    const mesh_counts& m = *c.mesh;
    for (const auto& [v, value] : {std::pair{cv::data_size, m.data}, std::pair{cv::sequence_size, m.sequence},
                                   std::pair{cv::replica_size, m.replica}, std::pair{cv::over_data, m.over_data},
                                   std::pair{cv::over_sequence, m.over_sequence}})
      if (names.offers(v)) text += ", " + named(v, value);
  }
  if (c.main_loss)
    text += ", " + named(cv::main_N, c.main_loss->valid_tokens) + ", " + named(cv::main_n_r, c.main_loss->rank_tokens) +
            ", " + named(cv::main_n_m, c.main_loss->microbatch_tokens);
  return text;
}

std::string objective_weight(objective_kind objective, const recipe_names& names) {
  switch (objective) {
    case objective_kind::token_mean:
      return "1/" + names.spelling(count_variable::N);
    case objective_kind::weighted_token_mean:
      return "1/M";
    case objective_kind::sequence_mean:
      return "1/(B·n_s)";
    case objective_kind::sequence_sum_mean:
      return "1/B";
    case objective_kind::constant:
      return "1/C";
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
  const recipe_names& names = r.scale.names();
  if ((!names.mesh().empty() || !names.term().empty()) && objective != objective_kind::token_mean)
    throw error(error_code::recipe_error,
                "on a mesh or beside a term, prove decides recipes for the token mean only (this version), not " +
                    std::string(objective_name(objective)));
  if (!names.mesh().empty() && !names.term().empty())
    throw error(error_code::recipe_error,
                "prove decides a recipe on a mesh or beside a term, not both at once (this version)");
  if (!names.mesh().empty() || !names.term().empty())
    if (const std::optional<count_variable> read = r.scale.sequence_variable())
      throw error(error_code::recipe_error, "the recipe uses " + std::string(variable_name(*read)) +
                                                ", a sequence count: on a mesh or beside a term prove decides "
                                                "token-mean recipes without sequences (this version)");
  return detail::prove_by_groups(r, objective);
}

}  // namespace normcheck

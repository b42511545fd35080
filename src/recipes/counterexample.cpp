#include "counterexample.hpp"

#include "normcheck/core/gradients.hpp"
#include "normcheck/documents/partition_writer.hpp"

namespace normcheck::detail {

std::string gradient_name(objective_kind objective) {
  switch (objective) {
    case objective_kind::token_mean: return "the token-mean gradient";
    case objective_kind::weighted_token_mean: return "the weighted token-mean gradient";
    case objective_kind::sequence_mean: return "the sequence-mean gradient";
    case objective_kind::sequence_sum_mean: return "the gradient of the mean of sequence sums";
    case objective_kind::constant: return "the gradient of the loss sum over C";
  }
  return "the objective's gradient";
}

recipe_value judged_gradient(const token_partition& tokens, const recipe& r) {
  const partition main = to_partition(tokens);
  if (tokens.terms.empty()) return recipe_gradient(main, r);
  return recipe_gradient(term_partition(tokens, 0), r, &main);
}

recipe_counterexample counterexample_at(const recipe& r, const count_configuration& where, const recipe_value& scale,
                                        bool divides_by_zero, token_partition tokens, objective_kind objective) {
  recipe_counterexample example;
  example.where = where;
  example.scale = scale.value;
  example.zero_divisor = scale.zero_divisor;
  example.tokens = std::move(tokens);
  example.tokens.reducer = r.reducer;
  const partition update = to_partition(example.tokens);
  const bool term = !example.tokens.terms.empty();
  const partition judged = term ? term_partition(example.tokens, 0) : update;
  example.objective = *gradient(judged, strategy::global_mean);
  example.recipe_gradient = recipe_gradient(judged, r, term ? &update : nullptr).value;
  document_options options;
  options.description =
      "Counterexample from normcheck prove: the recipe \"" + r.scale.text() + "\"" +
      (term ? " for the term " + example.tokens.terms[0].name : std::string()) + " under the " +
      std::string(reducer_name(r.reducer)) + " reducer at " + describe(where, r.scale.names()) +
      (divides_by_zero ? " divides by zero (" + scale.zero_divisor + " is 0)" : " is not " + gradient_name(objective)) +
      ".";
  options.expect.push_back({strategy::global_mean, *gradient(update, strategy::global_mean)});
  options.declare_world_size = example.tokens.mesh.empty();
  if (!term) {  // a file's recipe scales its main loss
    options.recipe_scale = r.scale.text();
    options.recipe_reducer = r.reducer;
  }
  if (term || !example.tokens.mesh.empty()) {
    // What a per-group probe measures: the recipe's components on the loss it scales, the objective's on the main
    // loss beside a term (the objective's own scale, decided by this prover).
    recipe objective_recipe;
    objective_recipe.scale = recipe_expression::parse(objective_scale(objective, r.reducer));
    objective_recipe.reducer = r.reducer;
    const std::optional<recipe_components> measured = recipe_group_components(judged, r, term ? &update : nullptr);
    const std::optional<recipe_components> main = term ? recipe_group_components(update, objective_recipe) : measured;
    if (measured && main) {
      options.observed = document_options::measured_groups{main->components, main->witness};
      if (term) options.observed_terms.push_back({measured->components, measured->witness});
    } else if (term) {
      example.check_fails = false;
    }
  }
  example.document = write_document(example.tokens, options);
  return example;
}

}  // namespace normcheck::detail

#include "counterexample.hpp"

#include "normcheck/core/gradients.hpp"

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

recipe_counterexample counterexample_at(const recipe& r, const count_configuration& where, const recipe_value& scale,
                                        bool divides_by_zero, token_partition tokens, objective_kind objective) {
  recipe_counterexample example;
  example.where = where;
  example.scale = scale.value;
  example.zero_divisor = scale.zero_divisor;
  example.tokens = std::move(tokens);
  example.tokens.reducer = r.reducer;
  const partition update = to_partition(example.tokens);
  example.objective = *gradient(update, strategy::global_mean);
  example.recipe_gradient = recipe_gradient(update, r).value;
  document_options options;
  options.description = "Counterexample from normcheck prove: the recipe \"" + r.scale.text() + "\" under the " +
                        std::string(reducer_name(r.reducer)) + " reducer at " + describe(where) +
                        (divides_by_zero ? " divides by zero (" + scale.zero_divisor + " is 0)"
                                         : " is not " + gradient_name(objective)) +
                        ".";
  options.expect.push_back({strategy::global_mean, example.objective});
  options.declare_world_size = true;
  options.recipe_scale = r.scale.text();
  options.recipe_reducer = r.reducer;
  example.document = write_document(example.tokens, options);
  return example;
}

}  // namespace normcheck::detail

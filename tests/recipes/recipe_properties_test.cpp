// Laws linking prove to the gradients: a recipe prove accepts matches the objective on random
// partitions; one it rejects has a counterexample that really differs. A planted wrong prover is caught.

#include "normcheck/core/gradients.hpp"
#include "normcheck/recipes/prove.hpp"
#include "properties/generators.hpp"

#include <doctest/doctest.h>
#include <rapidcheck.h>

#include <functional>

namespace {

using namespace normcheck;
using namespace normcheck::properties;

struct named_recipe {
  const char* scale;
  reducer_kind reducer;
  objective_kind objective = objective_kind::token_mean;
};

constexpr objective_kind weighted_mean = objective_kind::weighted_token_mean;

// Correct ones written in several forms, and the classic mistakes.
const std::vector<named_recipe> recipes{
    {"W / N", reducer_kind::mean},       {"1 / N", reducer_kind::sum},           {"2 * W / (N + N)", reducer_kind::mean},
    {"W * G / (N * G)", reducer_kind::mean}, {"1 / n_r", reducer_kind::mean},     {"1 / (n_m * G)", reducer_kind::mean},
    {"1 / N", reducer_kind::mean},       {"W / N", reducer_kind::sum},           {"W / (N * G)", reducer_kind::mean},
    {"W / n_m", reducer_kind::mean},     {"(W + 1) / (N + 1)", reducer_kind::mean}, {"W / N - n_r + n_r", reducer_kind::mean},
    // The weighted token mean: right with the mass M, wrong with counts or local masses.
    {"W / M", reducer_kind::mean, weighted_mean},         {"1 / M", reducer_kind::sum, weighted_mean},
    {"W * G / (M * G)", reducer_kind::mean, weighted_mean}, {"W / N", reducer_kind::mean, weighted_mean},
    {"1 / m_r", reducer_kind::mean, weighted_mean},       {"1 / (m_m * G)", reducer_kind::mean, weighted_mean},
    {"W / M", reducer_kind::sum, weighted_mean},          {"W / (M + m_m - m_m)", reducer_kind::mean, weighted_mean},
};

using prover = std::function<proof_verdict(const recipe&, objective_kind)>;

// A random update with at least one valid token; weighted (M > 0) under the weighted objective.
token_partition random_update(objective_kind objective) {
  return objective == weighted_mean ? *gen_weighted_update() : *gen_update_with_tokens();
}

bool accepted_recipes_match(const prover& prove) {
  // Each verdict is decided once; the property then samples recipes and partitions.
  std::vector<proof_verdict> verdicts;
  for (const named_recipe& chosen : recipes)
    verdicts.push_back(prove(recipe{recipe_expression::parse(chosen.scale), chosen.reducer}, chosen.objective));
  return rc::check("a recipe prove accepts equals the objective on every partition", [verdicts] {
    const std::size_t index = *rc::gen::inRange<std::size_t>(0, recipes.size());
    const named_recipe& chosen = recipes[index];
    const recipe r{recipe_expression::parse(chosen.scale), chosen.reducer};
    if (verdicts[index] != proof_verdict::proved) return;
    token_partition tokens = random_update(chosen.objective);
    tokens.reducer = r.reducer;
    const partition update = to_partition(tokens);
    const recipe_value value = recipe_gradient(update, r);
    RC_ASSERT(value.value.has_value());
    RC_ASSERT(*value.value == *gradient(update, strategy::global_mean));
  });
}

}  // namespace

TEST_CASE("a recipe prove accepts equals the objective on every partition") {
  CHECK(accepted_recipes_match([](const recipe& r, objective_kind objective) { return prove_recipe(r, objective).verdict; }));
}

TEST_CASE("a recipe prove rejects has a counterexample that differs from the objective") {
  for (const named_recipe& chosen : recipes) {
    const recipe r{recipe_expression::parse(chosen.scale), chosen.reducer};
    const proof_result result = prove_recipe(r, chosen.objective);
    CAPTURE(chosen.scale);
    CAPTURE(objective_name(chosen.objective));
    if (result.verdict == proof_verdict::proved) continue;
    REQUIRE(result.counterexample);
    const partition update = to_partition(result.counterexample->tokens);
    CHECK(update.objective == chosen.objective);
    const recipe_value value = recipe_gradient(update, r);
    CHECK((!value.value || *value.value != *gradient(update, strategy::global_mean)));
  }
}

TEST_CASE("the acceptance law catches a prover that accepts everything") {
  CHECK_FALSE(accepted_recipes_match([](const recipe&, objective_kind) { return proof_verdict::proved; }));
}

TEST_CASE("the acceptance law catches a prover that ignores the weights") {
  // Judging a weighted recipe as if every weight were 1 (M = N) accepts W / N for the weighted objective.
  CHECK_FALSE(accepted_recipes_match([](const recipe& r, objective_kind objective) {
    if (objective == weighted_mean && !r.scale.mass_variable())
      return prove_recipe(r, objective_kind::token_mean).verdict;
    return prove_recipe(r, objective).verdict;
  }));
}

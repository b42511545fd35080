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
    // The declared objectives: right with B or C, wrong with the token mean's N, and the reverse.
    {"W / B", reducer_kind::mean, objective_kind::sequence_sum_mean},
    {"1 / B", reducer_kind::sum, objective_kind::sequence_sum_mean},
    {"W / N", reducer_kind::mean, objective_kind::sequence_sum_mean},
    {"W / N", reducer_kind::mean, objective_kind::sequence_mean},
    {"1 / n_s", reducer_kind::mean, objective_kind::sequence_mean},
    {"W / (B * n_s)", reducer_kind::mean, objective_kind::sequence_mean},
    {"W / C", reducer_kind::mean, objective_kind::constant},
    {"1 / C", reducer_kind::sum, objective_kind::constant},
    {"W / N", reducer_kind::mean, objective_kind::constant},
    {"1 / C", reducer_kind::mean, objective_kind::constant},
    {"W / (B * n_s)", reducer_kind::mean, objective_kind::token_mean},
};

using prover = std::function<proof_verdict(const recipe&, objective_kind)>;

// The tokens with each microbatch that holds a position cut into sequences of random lengths (at least one
// position each), under `objective`.
token_partition with_sequences(token_partition tokens, objective_kind objective) {
  tokens.objective = objective;
  tokens.sequences.clear();
  for (const std::vector<std::vector<token>>& rank : tokens.ranks) {
    std::vector<std::vector<std::size_t>>& lengths = tokens.sequences.emplace_back();
    for (const std::vector<token>& microbatch : rank) {
      std::vector<std::size_t>& cut = lengths.emplace_back();
      for (std::size_t at = 0; at < microbatch.size();) {
        const std::size_t length = *rc::gen::inRange<std::size_t>(1, microbatch.size() - at + 1);
        cut.push_back(length);
        at += length;
      }
    }
  }
  return tokens;
}

// A random update with at least one valid token; weighted (M > 0) under the weighted objective, with sequences
// under the sequence objectives, with a positive normalizer under the constant one.
token_partition random_update(objective_kind objective) {
  switch (objective) {
    case objective_kind::weighted_token_mean: return *gen_weighted_update();
    case objective_kind::sequence_mean:
    case objective_kind::sequence_sum_mean: return with_sequences(*gen_update_with_tokens(), objective);
    case objective_kind::constant: {
      token_partition tokens = *gen_update_with_tokens();
      tokens.objective = objective;
      tokens.normalizer = rational(*rc::gen::inRange<long>(1, 64)) / *rc::gen::inRange<long>(1, 8);
      return tokens;
    }
    case objective_kind::token_mean: break;
  }
  return *gen_update_with_tokens();
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

TEST_CASE("the acceptance law catches a prover that takes a declared objective for the token mean") {
  // Judging a recipe that reads neither sequences nor C as under the token mean accepts W / N for the mean of
  // sequence sums and for a constant normalizer.
  CHECK_FALSE(accepted_recipes_match([](const recipe& r, objective_kind objective) {
    const bool declared = counts_sequences(objective) || objective == objective_kind::constant;
    if (declared && !r.scale.sequence_variable() && !r.scale.uses(count_variable::C))
      return prove_recipe(r, objective_kind::token_mean).verdict;
    return prove_recipe(r, objective).verdict;
  }));
}

// Laws linking prove to the gradients: a recipe prove accepts matches the objective on random
// partitions; one it rejects has a counterexample that really differs. A planted wrong prover is caught.

#include "normcheck/core/gradients.hpp"
#include "normcheck/recipes/prove.hpp"
#include "properties/generators.hpp"
#include "properties/run_property.hpp"

#include <doctest/doctest.h>
#include <rapidcheck.h>

#include <algorithm>
#include <functional>
#include <random>

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
    {"W / N", reducer_kind::mean},
    {"1 / N", reducer_kind::sum},
    {"2 * W / (N + N)", reducer_kind::mean},
    {"W * G / (N * G)", reducer_kind::mean},
    {"1 / n_r", reducer_kind::mean},
    {"1 / (n_m * G)", reducer_kind::mean},
    {"1 / N", reducer_kind::mean},
    {"W / N", reducer_kind::sum},
    {"W / (N * G)", reducer_kind::mean},
    {"W / n_m", reducer_kind::mean},
    {"(W + 1) / (N + 1)", reducer_kind::mean},
    {"W / N - n_r + n_r", reducer_kind::mean},
    // The weighted token mean: right with the mass M, wrong with counts or local masses.
    {"W / M", reducer_kind::mean, weighted_mean},
    {"1 / M", reducer_kind::sum, weighted_mean},
    {"W * G / (M * G)", reducer_kind::mean, weighted_mean},
    {"W / N", reducer_kind::mean, weighted_mean},
    {"1 / m_r", reducer_kind::mean, weighted_mean},
    {"1 / (m_m * G)", reducer_kind::mean, weighted_mean},
    {"W / M", reducer_kind::sum, weighted_mean},
    {"W / (M + m_m - m_m)", reducer_kind::mean, weighted_mean},
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

// The cases a law that must catch a planted prover runs, wherever RC_PARAMS cuts the count: the dev build's
// count (tests/recipes/CMakeLists.txt), so that the planted mistake is drawn under the sanitizers too.
constexpr int planted_cases = 300;

bool accepted_recipes_match(const prover& prove, int cases = configured_cases()) {
  // Each verdict is decided once; the property then samples recipes and partitions.
  std::vector<proof_verdict> verdicts;
  for (const named_recipe& chosen : recipes)
    verdicts.push_back(prove(recipe{recipe_expression::parse(chosen.scale), chosen.reducer}, chosen.objective));
  const std::string name = "a recipe prove accepts equals the objective on every partition";
  const auto law = [verdicts] {
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
  };
  const rc::detail::TestResult result = run_property(name, law, cases);
  rc::detail::FailureResult failure;
  if (result.match(failure)) MESSAGE(failure.description);
  rc::detail::SuccessResult success;
  return result.match(success);
}

}  // namespace

TEST_CASE("a recipe prove accepts equals the objective on every partition") {
  CHECK(accepted_recipes_match(
      [](const recipe& r, objective_kind objective) { return prove_recipe(r, objective).verdict; }));
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
  CHECK_FALSE(
      accepted_recipes_match([](const recipe&, objective_kind) { return proof_verdict::proved; }, planted_cases));
}

TEST_CASE("the acceptance law catches a prover that ignores the weights") {
  // Judging a weighted recipe as if every weight were 1 (M = N) accepts W / N for the weighted objective.
  CHECK_FALSE(accepted_recipes_match([](const recipe& r, objective_kind objective) {
    if (objective == weighted_mean && !r.scale.mass_variable())
      return prove_recipe(r, objective_kind::token_mean).verdict;
    return prove_recipe(r, objective).verdict;
  }, planted_cases));
}

TEST_CASE("the acceptance law catches a prover that takes a declared objective for the token mean") {
  // Judging a recipe that reads neither sequences nor C as under the token mean accepts W / N for the mean of
  // sequence sums and for a constant normalizer.
  CHECK_FALSE(accepted_recipes_match([](const recipe& r, objective_kind objective) {
    const bool declared = counts_sequences(objective) || objective == objective_kind::constant;
    if (declared && !r.scale.sequence_variable() && !r.scale.uses(count_variable::C))
      return prove_recipe(r, objective_kind::token_mean).verdict;
    return prove_recipe(r, objective).verdict;
  }, planted_cases));
}

namespace {

// A recipe that is right wherever it is defined, times d / d for a divisor d whose zeros in `variable` were
// drawn first (the brute force): every admissible zero is known, so a prover must name one of them.
struct planted_zeros {
  std::string scale;
  objective_kind objective;
  count_variable variable;
  std::vector<rational> zeros;
};

std::vector<planted_zeros> draw_planted_zeros(int count) {
  std::mt19937_64 random(20261203);
  auto below = [&](std::uint64_t n) { return static_cast<std::int64_t>(random() % n); };
  std::vector<planted_zeros> all;
  for (int i = 0; i < count; ++i) {
    const std::int64_t p = 1 + below(3000);
    const std::int64_t q = 1 + below(60);
    const std::string root = std::to_string(q) + "*X - " + std::to_string(p);  // zero at p/q
    const std::string other = std::to_string(1 + below(9)) + "*X + " + std::to_string(1 + below(9));  // none > 0
    const std::string divisor = below(2) == 0 ? root : "(" + root + ") * (" + other + ")";
    const rational zero = fraction(integer(p), integer(q));
    planted_zeros planted;
    switch (i % 4) {
      case 0:
      case 1: planted = {"W / C", objective_kind::constant, count_variable::C, {zero}}; break;
      case 2: planted = {"W / M", weighted_mean, count_variable::M, {zero}}; break;
      default: planted = {"W / B", objective_kind::sequence_sum_mean, count_variable::B, {rational(p)}}; break;
    }
    std::string name(variable_name(planted.variable));
    std::string d = planted.variable == count_variable::B ? "X - " + std::to_string(p) : divisor;
    for (std::size_t at = d.find('X'); at != std::string::npos; at = d.find('X')) d.replace(at, 1, name);
    planted.scale += " * (" + d + ") / (" + d + ")";
    all.push_back(planted);
  }
  return all;
}

// The value of `v` where a prover says the recipe divides by zero; nothing when it says it does not.
using zero_finder = std::function<std::optional<rational>(const recipe&, objective_kind, count_variable)>;

// Each draw is a whole proof: 48, a quarter of them per variable; 16 under the sanitizers, whose build
// runs them about twenty times slower.
#ifdef NORMCHECK_SANITIZED
constexpr int planted_draws = 16;
#else
constexpr int planted_draws = 48;
#endif

// Counts the planted recipes whose zero `find` misses or misplaces.
int missed_zeros(const zero_finder& find) {
  int missed = 0;
  for (const planted_zeros& planted : draw_planted_zeros(planted_draws)) {
    const std::optional<rational> found =
        find(recipe{recipe_expression::parse(planted.scale), reducer_kind::mean}, planted.objective, planted.variable);
    if (!found || std::find(planted.zeros.begin(), planted.zeros.end(), *found) == planted.zeros.end()) ++missed;
  }
  return missed;
}

rational value_of(const count_configuration& where, count_variable v) {
  switch (v) {
    case count_variable::C: return *where.normalizer;
    case count_variable::M: return (*where.masses)[0];
    case count_variable::B: return rational(where.sequences->sequences);
    default: return rational(where.valid_tokens);
  }
}

}  // namespace

TEST_CASE("prove finds every planted zero of a divisor, and check confirms it") {
  CHECK(missed_zeros([](const recipe& r, objective_kind objective, count_variable v) -> std::optional<rational> {
          const proof_result result = prove_recipe(r, objective);
          CAPTURE(r.scale.text());
          if (result.verdict != proof_verdict::divides_by_zero || !result.counterexample) return std::nullopt;
          if (recipe_gradient(to_partition(result.counterexample->tokens), r).value) return std::nullopt;
          return value_of(result.counterexample->where, v);
        }) == 0);
}

TEST_CASE("the planted-zero law catches a prover that only samples") {
  // The values the scopes sample: C = p/q and masses with p ≤ 64, q ≤ 8; counts up to 64.
  CHECK(missed_zeros([](const recipe& r, objective_kind, count_variable v) -> std::optional<rational> {
          for (std::int64_t p = 1; p <= 64; ++p)
            for (std::int64_t q = 1; q <= (v == count_variable::B ? 1 : 8); ++q) {
              count_values values;
              values.fill(rational(1));
              values[static_cast<std::size_t>(v)] = fraction(integer(p), integer(q));
              if (!r.scale.evaluate(values).value) return values[static_cast<std::size_t>(v)];
            }
          return std::nullopt;
        }) > 0);
}

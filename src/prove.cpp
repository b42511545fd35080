#include "normcheck/prove.hpp"

#include "normcheck/errors.hpp"
#include "normcheck/gradients.hpp"

#include "deterministic_random.hpp"

#include <algorithm>

namespace normcheck {

namespace {

constexpr std::uint64_t scope_world_size = 4;
constexpr std::uint64_t scope_microbatches = 3;
constexpr std::uint64_t scope_tokens = 3;  // per microbatch
constexpr unsigned largest_decided_degree = 12;
constexpr int random_configurations = 20000;

count_values values_of(const count_configuration& c) {
  count_values v;
  v[static_cast<std::size_t>(count_variable::W)] = c.world_size;
  v[static_cast<std::size_t>(count_variable::N)] = c.valid_tokens;
  v[static_cast<std::size_t>(count_variable::n_r)] = c.rank_tokens;
  v[static_cast<std::size_t>(count_variable::n_m)] = c.microbatch_tokens;
  v[static_cast<std::size_t>(count_variable::G)] = c.microbatches;
  v[static_cast<std::size_t>(count_variable::M)] = c.valid_tokens;
  v[static_cast<std::size_t>(count_variable::m_r)] = c.rank_tokens;
  v[static_cast<std::size_t>(count_variable::m_m)] = c.microbatch_tokens;
  return v;
}

enum class outcome { holds, wrong, divides_by_zero };

struct judged {
  outcome result = outcome::holds;
  recipe_value scale;
};

// At one configuration: c/d must be 1/N wherever the microbatch holds a token, and c must exist.
judged judge(const recipe& r, const count_configuration& c) {
  judged j;
  j.scale = r.scale.evaluate(values_of(c));
  if (!j.scale.value) {
    j.result = outcome::divides_by_zero;
    return j;
  }
  if (c.microbatch_tokens == 0) return j;
  rational effective = *j.scale.value;
  if (r.reducer == reducer_kind::mean) effective /= c.world_size;
  rational target = 1;
  target /= c.valid_tokens;
  if (effective != target) j.result = outcome::wrong;
  return j;
}

// A partition whose rank 0, microbatch 0 has the configuration's counts; that microbatch's tokens have
// target 1 and all others 0 at θ = 0, so every other microbatch contributes nothing and the exposing
// one alone decides the gradient.
token_partition partition_for(const count_configuration& c) {
  token_partition tokens;
  std::vector<std::vector<token>> first(c.microbatches);
  first[0].assign(c.microbatch_tokens, token(rational(1)));
  for (std::uint64_t i = 0; i < c.rank_tokens - c.microbatch_tokens; ++i)
    first[1 + i % (c.microbatches - 1)].emplace_back(rational(0));
  tokens.ranks.push_back(std::move(first));
  const std::uint64_t others = c.valid_tokens - c.rank_tokens;
  for (std::uint64_t r = 1; r < c.world_size; ++r) {
    std::vector<token> mb;
    const std::uint64_t share = others / (c.world_size - 1) + (r - 1 < others % (c.world_size - 1) ? 1 : 0);
    mb.assign(share, token(rational(0)));
    tokens.ranks.push_back({mb});
  }
  return tokens;
}

recipe_counterexample expose(const recipe& r, const count_configuration& c, const judged& j) {
  recipe_counterexample example;
  example.where = c;
  example.scale = j.scale.value;
  example.zero_divisor = j.scale.zero_divisor;
  example.tokens = partition_for(c);
  example.tokens.reducer = r.reducer;
  const partition update = to_partition(example.tokens);
  example.objective = *gradient(update, strategy::global_mean);
  example.recipe_gradient = recipe_gradient(update, r).value;
  document_options options;
  options.description = "Counterexample from normcheck prove: the recipe \"" + r.scale.text() + "\" under the " +
                        std::string(reducer_name(r.reducer)) + " reducer at " + describe(c) +
                        (j.result == outcome::divides_by_zero ? " divides by zero (" + j.scale.zero_divisor + ")"
                                                              : " is not the token-mean gradient") + ".";
  options.expect.push_back({strategy::global_mean, example.objective});
  options.declare_world_size = true;
  options.recipe_scale = r.scale.text();
  options.recipe_reducer = r.reducer;
  example.document = write_document(example.tokens, options);
  return example;
}

// Every configuration a partition with W ≤ 4, G ≤ 3 and at most 3 tokens per microbatch can show one
// of its microbatches, smallest N first.
std::vector<count_configuration> small_scope() {
  std::vector<count_configuration> all;
  const std::uint64_t most_per_rank = scope_microbatches * scope_tokens;
  for (std::uint64_t n = 1; n <= scope_world_size * most_per_rank; ++n)
    for (std::uint64_t w = 1; w <= scope_world_size; ++w)
      for (std::uint64_t g = 1; g <= scope_microbatches; ++g)
        for (std::uint64_t n_r = 0; n_r <= std::min(n, g * scope_tokens); ++n_r) {
          const std::uint64_t rest = n - n_r;
          if (rest > (w - 1) * most_per_rank) continue;
          for (std::uint64_t n_m = 0; n_m <= std::min(n_r, scope_tokens); ++n_m)
            if (n_r - n_m <= (g - 1) * scope_tokens) all.push_back({w, n, n_r, n_m, g});
        }
  return all;
}

// Partitions in the small scope: ordered ranks, each with 1..3 microbatches of 0..3 tokens, N > 0.
integer small_scope_partitions() {
  integer shapes = 0;
  for (std::uint64_t g = 1; g <= scope_microbatches; ++g)
    shapes += boost::multiprecision::pow(integer(scope_tokens + 1), static_cast<unsigned>(g));
  integer total = 0;
  for (unsigned w = 1; w <= scope_world_size; ++w)
    total += boost::multiprecision::pow(shapes, w) - boost::multiprecision::pow(integer(scope_microbatches), w);
  return total;
}

}  // namespace

std::string describe(const count_configuration& c) {
  return "W = " + std::to_string(c.world_size) + ", N = " + std::to_string(c.valid_tokens) +
         ", n_r = " + std::to_string(c.rank_tokens) + ", n_m = " + std::to_string(c.microbatch_tokens) +
         ", G = " + std::to_string(c.microbatches);
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
  if (objective == objective_kind::token_mean)
    for (count_variable v : {count_variable::M, count_variable::m_r, count_variable::m_m})
      if (r.scale.uses(v))
        throw error(error_code::recipe_error, "the recipe uses " + std::string(variable_name(v)) +
                                                  ", a weight mass: prove it with --objective weighted_token_mean");
  proof_result result;
  std::optional<std::pair<count_configuration, judged>> first_wrong;
  std::optional<std::pair<count_configuration, judged>> first_zero;
  // A wrong configuration is kept only when its replay partition is defined everywhere, so that the
  // counterexample file shows two numbers that differ rather than a division by zero elsewhere.
  auto note = [&](const count_configuration& c, const judged& j) {
    if (j.result == outcome::wrong && !first_wrong) {
      token_partition tokens = partition_for(c);
      tokens.reducer = r.reducer;
      if (recipe_gradient(to_partition(tokens), r).value) first_wrong.emplace(c, j);
    }
    if (j.result == outcome::divides_by_zero && !first_zero) first_zero.emplace(c, j);
  };
  // A wrong gradient is the stronger finding: the recipe fails even where it is defined.
  auto refuted = [&]() -> bool {
    if (!first_wrong && !first_zero) return false;
    if (first_wrong) {
      result.verdict = proof_verdict::wrong;
      result.counterexample = expose(r, first_wrong->first, first_wrong->second);
      if (first_zero) result.division_risk = expose(r, first_zero->first, first_zero->second);
    } else {
      result.verdict = proof_verdict::divides_by_zero;
      result.counterexample = expose(r, first_zero->first, first_zero->second);
    }
    return true;
  };

  const std::vector<count_configuration> scope = small_scope();
  for (const count_configuration& c : scope) note(c, judge(r, c));
  result.coverage = "every partition with W ≤ 4, G ≤ 3 and at most 3 tokens per microbatch (" +
                    small_scope_partitions().str() + " partitions, through the " + std::to_string(scope.size()) +
                    " distinct (W, N, n_r, n_m, G) a microbatch of them can see), smallest N first";
  if (refuted()) return result;

  detail::deterministic_random random(0x2545F4914F6CDD1Dull);
  for (int i = 0; i < random_configurations && !first_wrong && !first_zero; ++i) {
    count_configuration c;
    c.world_size = 1 + random.below(64);
    c.microbatches = 1 + random.below(16);
    c.microbatch_tokens = random.below(1001);
    c.rank_tokens = c.microbatch_tokens + (c.microbatches > 1 ? random.below(1000 * (c.microbatches - 1) + 1) : 0);
    c.valid_tokens = c.rank_tokens + (c.world_size > 1 ? random.below(16000 * (c.world_size - 1) + 1) : 0);
    if (c.valid_tokens == 0) c.valid_tokens = c.rank_tokens = c.microbatch_tokens = 1;
    note(c, judge(r, c));
  }
  result.coverage += "; " + std::to_string(random_configurations) +
                     " random configurations with W ≤ 64, G ≤ 16, up to 1000 tokens per microbatch";
  if (refuted()) return result;

  // F = c·N − d is a rational function; its numerator has total degree at most D, so if F vanishes on
  // a product grid of D + 1 values per variable inside the domain, the numerator is the zero
  // polynomial and the identity holds for all counts.
  const auto [numerator_degree, denominator_degree] = r.scale.degree_bound();
  const unsigned degree = std::max(numerator_degree, denominator_degree) + 1;
  if (degree > largest_decided_degree) {
    result.verdict = proof_verdict::checked;
    result.coverage += "; the expression's degree bound " + std::to_string(degree) +
                       " is too large to decide for all counts, so this is checked, not proved";
    return result;
  }
  const std::uint64_t d = degree;
  auto range_of = [&](count_variable v, std::uint64_t low) {
    const bool varies = r.scale.uses(v) || v == count_variable::N || (v == count_variable::W && r.reducer == reducer_kind::mean);
    return std::pair<std::uint64_t, std::uint64_t>{low, varies ? low + d : low};
  };
  const auto [w_low, w_high] = range_of(count_variable::W, 2);
  const auto [g_low, g_high] = range_of(count_variable::G, 2);
  const auto [m_low, m_high] = range_of(count_variable::n_m, 1);
  const auto [r_low, r_high] = range_of(count_variable::n_r, d + 2);
  const auto [n_low, n_high] = range_of(count_variable::N, 2 * d + 3);
  std::uint64_t points = 0;
  for (std::uint64_t w = w_low; w <= w_high; ++w)
    for (std::uint64_t g = g_low; g <= g_high; ++g)
      for (std::uint64_t n_m = m_low; n_m <= m_high; ++n_m)
        for (std::uint64_t n_r = r_low; n_r <= r_high; ++n_r)
          for (std::uint64_t n = n_low; n <= n_high; ++n) {
            const count_configuration c{w, n, n_r, n_m, g};
            note(c, judge(r, c));
            if (refuted()) return result;
            ++points;
          }
  result.verdict = proof_verdict::proved;
  result.coverage += "; proved for all counts: c·N − d has a numerator of degree at most " + std::to_string(degree) +
                     " and vanishes on a grid of " + std::to_string(points) + " configurations (" +
                     std::to_string(degree + 1) + " values of each count it depends on)";
  return result;
}

}  // namespace normcheck

#include "normcheck/gate/suggest.hpp"

#include "normcheck/gate/gate.hpp"

#include "core/deterministic_random.hpp"

#include <array>

namespace normcheck {

namespace {

struct named_value {
  std::string name;
  rational value;
  std::optional<rational> bound;
};

// The smallest |vᵢ − vⱼ| / max(bᵢ, bⱼ) over the pairs the gate must tell apart.
void measure(suggestion& s) {
  const partition update = to_partition(s.tokens);
  if (update.objective == objective_kind::weighted_token_mean && update.mass() == rational(update.valid_tokens())) {
    // With M = N, dividing by the count is the objective itself: nothing could tell them apart.
    s.separation = 0;
    s.closest_pair = "the objective and count_denominator";
    return;
  }
  const rational objective = *gradient(update, strategy::global_mean);
  std::vector<named_value> wrong_strategies;
  std::vector<named_value> all;
  for (const explanation& e : known_mistakes(update, s.type)) {
    all.push_back({e.name, e.value, e.bound});
    if (strategy_from_name(e.name)) wrong_strategies.push_back(all.back());
  }
  const named_value reference{"the objective", objective, objective_bound(update, s.type)};
  bool first = true;
  auto compare = [&](const named_value& a, const named_value& b) {
    rational ratio;  // 0 unless both bounds exist and the values differ
    if (a.bound && b.bound) {
      const rational& larger = *a.bound > *b.bound ? *a.bound : *b.bound;
      rational distance = abs(a.value - b.value);
      if (larger == 0) ratio = distance == 0 ? rational(0) : rational(integer(1) << 62);
      else ratio = distance / larger;
    }
    if (first || ratio < s.separation) {
      s.separation = ratio;
      s.closest_pair = a.name + " and " + b.name;
      first = false;
    }
  };
  for (const named_value& candidate : all) compare(reference, candidate);
  for (std::size_t i = 0; i < wrong_strategies.size(); ++i)
    for (std::size_t j = i + 1; j < wrong_strategies.size(); ++j) compare(wrong_strategies[i], wrong_strategies[j]);
}

}  // namespace

suggestion suggest_partition(std::uint64_t world_size, std::uint64_t microbatches, dtype type, objective_kind objective) {
  // Weights exact in every dtype, bfloat16 included; none is 0, so every token counts in the mass.
  const std::array<rational, 6> weights{rational(1, 4), rational(1, 2), rational(3, 4),
                                        rational(1),    rational(3, 2), rational(2)};
  const bool weighted = objective == objective_kind::weighted_token_mean;
  constexpr int attempts = 400;
  constexpr std::uint64_t most_tokens = 4;  // per microbatch
  detail::deterministic_random random(0x9E3779B97F4A7C15ull);
  suggestion best;
  bool have_best = false;
  for (int attempt = 0; attempt < attempts; ++attempt) {
    suggestion candidate;
    candidate.type = type;
    for (std::uint64_t r = 0; r < world_size; ++r) {
      std::vector<std::vector<token>> rank;
      std::vector<std::vector<token>> rank_weights;
      for (std::uint64_t m = 0; m < microbatches; ++m) {
        std::vector<token> tokens;
        std::vector<token> token_weights;
        const std::uint64_t count = 1 + random.below(most_tokens);
        for (std::uint64_t i = 0; i < count; ++i) {
          // Small integers: exact in every dtype, bfloat16 included.
          const auto target = static_cast<long>(random.below(11)) - 4;
          tokens.emplace_back(rational(target));
          if (weighted) token_weights.emplace_back(weights[random.below(weights.size())]);
        }
        rank.push_back(std::move(tokens));
        rank_weights.push_back(std::move(token_weights));
      }
      candidate.tokens.ranks.push_back(std::move(rank));
      if (weighted) candidate.tokens.weights.push_back(std::move(rank_weights));
    }
    measure(candidate);
    if (!have_best || candidate.separation > best.separation) {
      best = std::move(candidate);
      have_best = true;
    }
  }
  return best;
}

}  // namespace normcheck

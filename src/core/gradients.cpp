#include "normcheck/core/gradients.hpp"

#include "normcheck/core/errors.hpp"
#include "normcheck/core/exact_sum.hpp"

#include <functional>

namespace normcheck {

namespace {

struct strategy_info {
  strategy id;
  std::string_view name;
  std::string_view formula;           // under the token mean
  std::string_view weighted_formula;  // under the weighted token mean
  std::string_view denominator;       // the count it divides by under the token mean
  std::string_view weighted_denominator;
};

constexpr std::array<strategy_info, all_strategies.size()> infos{{
    {strategy::global_mean, "global_mean", "ΣSᵣ/N", "ΣSᵣ/M", "N", "M"},
    {strategy::local_mean, "local_mean", "Sᵣ/nᵣ", "Sᵣ/mᵣ", "nᵣ", "mᵣ"},
    {strategy::local_sum, "local_sum", "Sᵣ", "Sᵣ", "none", "none"},
    {strategy::scaled_sum, "scaled_sum", "W·Sᵣ/N", "W·Sᵣ/M", "N", "M"},
    {strategy::global_share, "global_share", "Sᵣ/N", "Sᵣ/M", "N", "M"},
    {strategy::microbatch_mean, "microbatch_mean", "(1/Gᵣ)·Σₘ Sᵣₘ/nᵣₘ", "(1/Gᵣ)·Σₘ Sᵣₘ/mᵣₘ", "nᵣₘ", "mᵣₘ"},
}};

const strategy_info& info_of(strategy s) {
  for (const auto& info : infos)
    if (info.id == s) return info;
  return infos.front();
}

// What the reducer delivers when rank r backpropagates local(r); nullopt if any rank's is undefined.
std::optional<rational> reduce(const partition& p,
                               const std::function<std::optional<rational>(const rank_stats&)>& local) {
  tree_sum gradients;
  for (const rank_stats& rank : p.ranks) {
    std::optional<rational> g = local(rank);
    if (!g) return std::nullopt;
    gradients.add(std::move(*g));
  }
  rational total = gradients.value();
  if (p.reducer == reducer_kind::mean) total /= p.world_size();
  return total;
}

}  // namespace

std::string_view strategy_name(strategy s) noexcept {
  for (const auto& info : infos)
    if (info.id == s) return info.name;
  return "unknown";
}

std::optional<strategy> strategy_from_name(std::string_view name) noexcept {
  for (const auto& info : infos)
    if (info.name == name) return info.id;
  return std::nullopt;
}

std::string_view strategy_formula(strategy s, objective_kind objective) noexcept {
  const strategy_info& info = info_of(s);
  return objective == objective_kind::token_mean ? info.formula : info.weighted_formula;
}

std::string_view strategy_denominator(strategy s, objective_kind objective) noexcept {
  const strategy_info& info = info_of(s);
  return objective == objective_kind::token_mean ? info.denominator : info.weighted_denominator;
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
}

std::optional<rational> gradient(const partition& p, strategy s) {
  require_valid_tokens(p);
  const rational& theta = p.theta;
  // The mass: N under the token mean, M = Σw under the weighted one (mass() is the count without weights).
  const rational total_mass = p.mass();
  const rational world_size{p.world_size()};
  switch (s) {
    case strategy::global_mean: {
      // ΣSᵣ/M = θ − Σw·y/M: θ once, the sums of all ranks added in a balanced tree.
      tree_sum sums;
      for (const rank_stats& rank : p.ranks) sums.add(rank.weighted_target_sum());
      rational total = theta;
      total -= sums.value() / total_mass;
      return total;
    }
    case strategy::local_mean:
      return reduce(p, [&](const rank_stats& rank) -> std::optional<rational> {
        const rational mass = rank.mass();
        if (mass == 0) return std::nullopt;
        rational g = loss_gradient_sum(rank, theta) / mass;
        return g;
      });
    case strategy::local_sum:
      return reduce(p, [&](const rank_stats& rank) -> std::optional<rational> {
        return loss_gradient_sum(rank, theta);
      });
    case strategy::scaled_sum:
      return reduce(p, [&](const rank_stats& rank) -> std::optional<rational> {
        rational g = loss_gradient_sum(rank, theta) * world_size / total_mass;
        return g;
      });
    case strategy::global_share:
      return reduce(p, [&](const rank_stats& rank) -> std::optional<rational> {
        rational g = loss_gradient_sum(rank, theta) / total_mass;
        return g;
      });
    case strategy::microbatch_mean:
      return reduce(p, [&](const rank_stats& rank) -> std::optional<rational> {
        // (1/G)·Σₘ (θ·mₘ − Σw·y)/mₘ = θ − (1/G)·Σₘ Σw·y/mₘ.
        tree_sum means;
        for (const microbatch_stats& m : rank.microbatches) {
          const rational mass = m.mass();
          if (mass == 0) return std::nullopt;
          means.add(m.weighted_target_sum() / mass);
        }
        rational total = theta;
        total -= means.value() / rank.microbatches.size();
        return total;
      });
  }
  return std::nullopt;
}

gradient_set compute_gradients(const partition& p) {
  gradient_set values;
  for (std::size_t i = 0; i < all_strategies.size(); ++i) values[i] = gradient(p, all_strategies[i]);
  return values;
}

}  // namespace normcheck

#include "normcheck/gradients.hpp"

#include "normcheck/errors.hpp"

#include <functional>

namespace normcheck {

namespace {

struct strategy_info {
  strategy id;
  std::string_view name;
  std::string_view formula;
};

constexpr std::array<strategy_info, all_strategies.size()> infos{{
    {strategy::global_mean, "global_mean", "ΣSᵣ/N"},
    {strategy::local_mean, "local_mean", "Sᵣ/nᵣ"},
    {strategy::local_sum, "local_sum", "Sᵣ"},
    {strategy::scaled_sum, "scaled_sum", "W·Sᵣ/N"},
    {strategy::global_share, "global_share", "Sᵣ/N"},
    {strategy::microbatch_mean, "microbatch_mean", "(1/Gᵣ)·Σₘ Sᵣₘ/nᵣₘ"},
}};

// What the reducer delivers when rank r backpropagates local(r); nullopt if any rank's is undefined.
std::optional<rational> reduce(const partition& p,
                               const std::function<std::optional<rational>(const rank_stats&)>& local) {
  rational total;
  for (const rank_stats& rank : p.ranks) {
    std::optional<rational> g = local(rank);
    if (!g) return std::nullopt;
    total += *g;
  }
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

std::string_view strategy_formula(strategy s) noexcept {
  for (const auto& info : infos)
    if (info.id == s) return info.formula;
  return "";
}

void require_valid_tokens(const partition& p) {
  if (p.valid_tokens() == 0)
    throw error(error_code::no_valid_tokens,
                "the update holds no valid token on any rank (N = 0), so the token-mean objective is "
                "undefined; every rank must follow one agreed policy for such an update, such as skipping it");
}

std::optional<rational> gradient(const partition& p, strategy s) {
  require_valid_tokens(p);
  const rational& theta = p.theta;
  const rational valid_tokens{p.valid_tokens()};
  const rational world_size{p.world_size()};
  switch (s) {
    case strategy::global_mean: {
      rational total;
      for (const rank_stats& rank : p.ranks) total += loss_gradient_sum(rank, theta);
      total /= valid_tokens;
      return total;
    }
    case strategy::local_mean:
      return reduce(p, [&](const rank_stats& rank) -> std::optional<rational> {
        const std::uint64_t n = rank.valid_tokens();
        if (n == 0) return std::nullopt;
        rational g = loss_gradient_sum(rank, theta) / n;
        return g;
      });
    case strategy::local_sum:
      return reduce(p, [&](const rank_stats& rank) -> std::optional<rational> {
        return loss_gradient_sum(rank, theta);
      });
    case strategy::scaled_sum:
      return reduce(p, [&](const rank_stats& rank) -> std::optional<rational> {
        rational g = loss_gradient_sum(rank, theta) * world_size / valid_tokens;
        return g;
      });
    case strategy::global_share:
      return reduce(p, [&](const rank_stats& rank) -> std::optional<rational> {
        rational g = loss_gradient_sum(rank, theta) / valid_tokens;
        return g;
      });
    case strategy::microbatch_mean:
      return reduce(p, [&](const rank_stats& rank) -> std::optional<rational> {
        rational total;
        for (const microbatch_stats& m : rank.microbatches) {
          if (m.valid_tokens == 0) return std::nullopt;
          rational mean = loss_gradient_sum(m, theta) / m.valid_tokens;
          total += mean;
        }
        total /= rank.microbatches.size();
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

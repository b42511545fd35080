#pragma once
// An independent, deliberately plain computation of what the laws compare against: it walks the
// explicit tokens and adds exact rationals token by token, sharing nothing with the library's
// per-microbatch statistics. The teaching loss ℓ(θ, y) = ½(θ − y)² has derivative θ − y.

#include "normcheck/documents/partition_writer.hpp"

#include <optional>

namespace normcheck::properties::oracle {

/// The number of valid tokens of the update (N).
inline std::uint64_t valid_tokens(const token_partition& tokens) {
  std::uint64_t n = 0;
  for (const auto& rank : tokens.ranks)
    for (const auto& microbatch : rank)
      for (const token& t : microbatch)
        if (t) ++n;
  return n;
}

/// The token mean of the targets, Σy/N; nullopt when N = 0.
inline std::optional<rational> target_mean(const token_partition& tokens) {
  rational sum;
  std::uint64_t n = 0;
  for (const auto& rank : tokens.ranks)
    for (const auto& microbatch : rank)
      for (const token& t : microbatch)
        if (t) {
          sum += *t;
          ++n;
        }
  if (n == 0) return std::nullopt;
  rational mean = sum / n;
  return mean;
}

/// The objective's gradient: the mean over all valid tokens of θ − y; nullopt when N = 0.
inline std::optional<rational> token_mean(const token_partition& tokens) {
  rational sum;
  std::uint64_t n = 0;
  for (const auto& rank : tokens.ranks)
    for (const auto& microbatch : rank)
      for (const token& t : microbatch)
        if (t) {
          rational derivative = tokens.theta - *t;
          sum += derivative;
          ++n;
        }
  if (n == 0) return std::nullopt;
  rational mean = sum / n;
  return mean;
}

/// Averaged local means under the mean reducer: (1/W)·Σᵣ (mean of θ − y on rank r); nullopt when a rank is empty.
inline std::optional<rational> rank_mean(const token_partition& tokens) {
  rational total;
  for (const auto& rank : tokens.ranks) {
    rational sum;
    std::uint64_t n = 0;
    for (const auto& microbatch : rank)
      for (const token& t : microbatch)
        if (t) {
          rational derivative = tokens.theta - *t;
          sum += derivative;
          ++n;
        }
    if (n == 0) return std::nullopt;
    total += sum / n;
  }
  rational mean = total / tokens.ranks.size();
  return mean;
}

/// Per-microbatch means under the mean reducer: (1/W)·Σᵣ (1/Gᵣ)·Σₘ (mean of θ − y on microbatch m);
/// nullopt when a microbatch is empty.
inline std::optional<rational> microbatch_mean(const token_partition& tokens) {
  rational total;
  for (const auto& rank : tokens.ranks) {
    rational rank_total;
    for (const auto& microbatch : rank) {
      rational sum;
      std::uint64_t n = 0;
      for (const token& t : microbatch)
        if (t) {
          rational derivative = tokens.theta - *t;
          sum += derivative;
          ++n;
        }
      if (n == 0) return std::nullopt;
      rank_total += sum / n;
    }
    total += rank_total / rank.size();
  }
  rational mean = total / tokens.ranks.size();
  return mean;
}

/// The weighted objective's gradient, straight from the tokens: Σw·(θ − y) / Σw over the valid tokens;
/// nullopt when the weights sum to 0. Without weights, the token mean.
inline std::optional<rational> weighted_mean(const token_partition& tokens) {
  if (tokens.weights.empty()) return token_mean(tokens);
  rational sum;
  rational mass;
  for (std::size_t r = 0; r < tokens.ranks.size(); ++r)
    for (std::size_t m = 0; m < tokens.ranks[r].size(); ++m)
      for (std::size_t i = 0; i < tokens.ranks[r][m].size(); ++i)
        if (const token& t = tokens.ranks[r][m][i]) {
          const rational& w = *tokens.weights[r][m][i];
          rational term = w * (tokens.theta - *t);
          sum += term;
          mass += w;
        }
  if (mass == 0) return std::nullopt;
  rational mean = sum / mass;
  return mean;
}

}  // namespace normcheck::properties::oracle

#pragma once
// A training step's normalization computed in float or double, in the order of a real reduction:
// per microbatch the loss-gradient sum, times the scale, accumulated over microbatches, summed over
// ranks in rank order, divided by W under the mean reducer. Floats belong here: this is the program
// under test, not the exact path.

#include "normcheck/core/gradients.hpp"
#include "normcheck/core/rational.hpp"
#include "normcheck/documents/partition_writer.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <optional>

namespace normcheck {
/// RapidCheck shows a generated partition as the normcheck/1 document that replays it.
inline void showValue(const token_partition& tokens, std::ostream& os) { os << write_document(tokens); }
}  // namespace normcheck

namespace gate_test {

using namespace normcheck;

/// The exact value of a float, through its %a text and the one door.
template <typename T>
rational exact(T value) {
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%a", static_cast<double>(value));
  return read_number(buffer, literal_form::json_string);
}

/// A rational rounded to T (tests build targets from small decimals; the value the program holds).
template <typename T>
T to_float(const rational& value) {
  return static_cast<T>(value.convert_to<double>());
}

/// `value` rounded to IEEE half precision (11 significant bits, to nearest, ties to even; subnormals below
/// 2^-14, infinity beyond 65504), as a float16 all-reduce holds it.
inline double to_half(double value) {
  if (value == 0 || !std::isfinite(value)) return value;
  int exponent = 0;
  std::frexp(value, &exponent);                   // value = m·2^exponent, 0.5 ≤ |m| < 1
  const int quantum = std::max(exponent - 11, -24);  // the spacing of halves near value
  const double rounded = std::ldexp(std::nearbyint(std::ldexp(value, -quantum)), quantum);
  return std::abs(rounded) > 65504 ? std::copysign(INFINITY, value) : rounded;
}

/// The synchronized gradient the program computes for strategy s; nullopt where it divides by zero. With
/// `half_reduction` the all-reduce is a compressing communication hook's: each rank's gradient cast to
/// float16 and divided by W there, summed there in rank order, cast back (under the mean reducer).
template <typename T>
std::optional<T> run_program(const token_partition& tokens, strategy s, bool half_reduction = false) {
  const T theta = to_float<T>(tokens.theta);
  const std::size_t world = tokens.ranks.size();
  std::size_t total_tokens = 0;
  for (const auto& rank : tokens.ranks)
    for (const auto& mb : rank)
      for (const auto& t : mb) total_tokens += t ? 1 : 0;
  T sum_over_ranks = 0;
  for (const auto& rank : tokens.ranks) {
    std::size_t rank_tokens = 0;
    for (const auto& mb : rank)
      for (const auto& t : mb) rank_tokens += t ? 1 : 0;
    T rank_gradient = 0;
    for (const auto& mb : rank) {
      T sum = 0;
      std::size_t count = 0;
      for (const auto& t : mb) {
        if (!t) continue;
        sum = sum + (theta - to_float<T>(*t));
        ++count;
      }
      T scale;
      switch (s) {
        case strategy::local_mean:
          if (rank_tokens == 0) return std::nullopt;
          scale = T(1) / static_cast<T>(rank_tokens);
          break;
        case strategy::local_sum: scale = 1; break;
        case strategy::scaled_sum: scale = static_cast<T>(world) / static_cast<T>(total_tokens); break;
        case strategy::global_share: scale = T(1) / static_cast<T>(total_tokens); break;
        case strategy::microbatch_mean:
          if (count == 0) return std::nullopt;
          scale = T(1) / (static_cast<T>(count) * static_cast<T>(rank.size()));
          break;
        default: return std::nullopt;
      }
      rank_gradient = rank_gradient + sum * scale;
    }
    if (half_reduction)
      sum_over_ranks =
          static_cast<T>(to_half(sum_over_ranks + to_half(to_half(rank_gradient) / static_cast<double>(world))));
    else
      sum_over_ranks = sum_over_ranks + rank_gradient;
  }
  if (half_reduction) return sum_over_ranks;
  if (tokens.reducer == reducer_kind::mean) sum_over_ranks = sum_over_ranks / static_cast<T>(world);
  return sum_over_ranks;
}

}  // namespace gate_test

#pragma once
// A training step's normalization computed in float or double, in the order of a real reduction:
// per microbatch the loss-gradient sum, times the scale, accumulated over microbatches, summed over
// ranks in rank order, divided by W under the mean reducer. Floats belong here: this is the program
// under test, not the exact path.

#include "normcheck/core/gradients.hpp"
#include "normcheck/core/rational.hpp"
#include "normcheck/documents/partition_writer.hpp"

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

/// The synchronized gradient the program computes for strategy s; nullopt where it divides by zero.
template <typename T>
std::optional<T> run_program(const token_partition& tokens, strategy s) {
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
    sum_over_ranks = sum_over_ranks + rank_gradient;
  }
  if (tokens.reducer == reducer_kind::mean) sum_over_ranks = sum_over_ranks / static_cast<T>(world);
  return sum_over_ranks;
}

}  // namespace gate_test

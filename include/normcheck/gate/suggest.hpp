#pragma once
/// \file gate/suggest.hpp
/// Designing a partition for a CI test: small, exactly representable, and such that every known
/// mistake lands far outside the dtype's error bound, so the gate names it unambiguously.

#include "normcheck/documents/partition_writer.hpp"
#include "normcheck/gate/observed.hpp"
#include "normcheck/io/json_reader.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace normcheck {

/// A suggested partition and how well it separates the known mistakes.
struct suggestion {
  token_partition tokens;
  dtype type = dtype::float32;
  rational separation;      ///< min over compared pairs of |vᵢ − vⱼ| / max(boundᵢ, boundⱼ); 0 when some pair coincides
  std::string closest_pair;  ///< the pair that attains it, e.g. "local_mean and microbatch_mean"
  /// Mistakes that equal the objective whatever the targets on these counts (equal counts hide local_mean):
  /// on them the gate can only conclude `inconclusive`. Left out of `separation`.
  std::vector<std::string> inseparable;
  /// Pairs of wrong strategies that equal each other whatever the targets: the diagnosis names both.
  std::vector<std::string> ambiguous;
};

/// Searches small integer partitions with `world_size` ranks of `microbatches` microbatches each and
/// returns the one that separates best: the objective from every known mistake, and the named wrong
/// strategies from each other. Under the weighted objective every token also gets a weight from
/// {1/4, 1/2, 3/4, 1, 3/2, 2} (exact in every dtype), and the mistakes include count_denominator. Under
/// sequence_mean, sequence_sum_mean and constant every microbatch holds one to three sequences of one to four
/// tokens (constant: the normalizer is the update's sequences times the longest, Dr. GRPO's B·L_max), and the
/// mistakes include every computation the per-group gate knows: code written for another objective (the
/// token mean's W·Sᵣ/N, say), per-rank sequence means, the sum of sequence means, the diagnosed normalizations.
/// On a device mesh (`mesh`, each dimension with its size; then `world_size` must be its data and sequence sizes'
/// product) the partition is laid out on it, a replica holding its first's tokens, and the mistakes include the
/// mesh's (a count reduced over the wrong dimensions, or over the replicas too). Deterministic.
suggestion suggest_partition(std::uint64_t world_size, std::uint64_t microbatches, dtype type,
                             objective_kind objective = objective_kind::token_mean,
                             const std::vector<mesh_dim>& mesh = {});

/// Valid-token counts of an update: counts[r][m] for microbatch m of rank r (ranks may differ in their
/// number of microbatches; a count may be 0).
using update_counts = std::vector<std::vector<std::uint64_t>>;

/// Most ranks, microbatches of a rank, and valid tokens in all that `suggest --counts` accepts.
inline constexpr std::size_t counts_max_ranks = 4096;
inline constexpr std::size_t counts_max_microbatches = 4096;
inline constexpr std::uint64_t counts_max_tokens = 10'000'000;
/// Most microbatches over all ranks that `suggest --counts` accepts: each target it tries costs a pass over
/// all of them, and this many stay within seconds.
inline constexpr std::size_t counts_max_total_microbatches = 16'384;

/// Reads `{"counts": [[n00, n01, ...], [n10, ...], ...]}`. Throws `error` (schema_error, limit_exceeded, …)
/// located at the value.
update_counts read_counts(std::string_view text, std::string source, const reader_limits& limits = {});

/// Chooses integer targets for exactly these counts (θ = 0, no padding): one value per microbatch from
/// [−8, 8] (exact in every dtype), the assignment that separates best among 400 tries (fewer beyond 256
/// microbatches, at least 8), with the mistakes these counts cannot separate whatever the targets listed in
/// `inseparable` and `ambiguous`. Deterministic; time and memory linear in the microbatches for a given
/// number of tries. Throws `error(limit_exceeded)` beyond `counts_max_total_microbatches`.
suggestion suggest_for_counts(const update_counts& counts, dtype type);

/// The separation the gate needs a suggestion to reach: 100 bounds.
inline constexpr unsigned required_separation = 100;

}  // namespace normcheck

#include "normcheck/gate/nearby.hpp"

#include "normcheck/core/counts.hpp"

#include <algorithm>

namespace normcheck {

namespace {

std::uint64_t positions_of(const microbatch_stats& microbatch) { return microbatch.valid_tokens + microbatch.padding; }

// Whether `added` more positions keep the update within the counts kept exact.
bool room_for(const partition& update, std::uint64_t added) { return added <= max_count - update.positions(); }

}  // namespace

std::vector<nearby_update> nearby_updates(const partition& update) {
  std::vector<nearby_update> out;
  if (update.ranks.empty()) return out;
  const std::uint64_t g = update.common_accumulation();

  std::uint64_t added = 0;
  bool every_rank_has_one = true;
  for (const rank_stats& rank : update.ranks) {
    every_rank_has_one = every_rank_has_one && !rank.microbatches.empty();
    if (!rank.microbatches.empty()) added = add_counts(added, positions_of(rank.microbatches.back()));
  }
  if (every_rank_has_one && room_for(update, added)) {
    partition more = update;
    for (rank_stats& rank : more.ranks) rank.microbatches.push_back(rank.microbatches.back());
    const bool equal = g > 1 && g == update.world_size();
    out.push_back({equal ? "G ≠ W (here G = W = " + std::to_string(g) + ")"
                         : "another number of accumulation steps" +
                               (g ? " (here G = " + std::to_string(g) + ")" : std::string()),
                   std::move(more)});
  }

  if (room_for(update, update.ranks.back().valid_tokens() + update.ranks.back().padding())) {
    partition more = update;
    more.ranks.push_back(more.ranks.back());
    out.push_back({"another number of ranks (here W = " + std::to_string(update.world_size()) + ")", std::move(more)});
  }

  const bool weighted = std::any_of(update.ranks.begin(), update.ranks.end(), [](const rank_stats& rank) {
    return std::any_of(rank.microbatches.begin(), rank.microbatches.end(),
                       [](const microbatch_stats& m) { return m.weighted(); });
  });
  if (!weighted && !update.ranks.front().microbatches.empty() && room_for(update, 1)) {
    // One more valid token of target 0 in the first group: the sums stay, one count grows.
    partition more = update;
    microbatch_stats& first = more.ranks.front().microbatches.front();
    first.valid_tokens += 1;
    if (first.sequences) {
      std::vector<group_stats> sequences = *first.sequences;
      sequences.front().valid_tokens += 1;
      first.sequences = std::move(sequences);
    }
    out.push_back({"uneven token counts across ranks, microbatches and sequences (normcheck suggest writes a "
                   "partition that has them)",
                   std::move(more)});
  }
  return out;
}

}  // namespace normcheck

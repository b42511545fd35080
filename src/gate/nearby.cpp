#include "normcheck/gate/nearby.hpp"

#include "normcheck/core/counts.hpp"

#include <algorithm>

namespace normcheck {

namespace {

std::uint64_t positions_of(const microbatch_stats& microbatch) { return microbatch.valid_tokens + microbatch.padding; }

// The slices of the microbatch just repeated on every rank are slices of its sequences' copies: its IDs repeat,
// and the microbatch's number makes them other sequences.
void repeat_last_slices(partition& more) {
  if (more.sequence_ids.empty()) return;
  more.sequence_ids.resize(more.ranks.size());
  for (std::size_t r = 0; r < more.ranks.size(); ++r) {
    auto& rows = more.sequence_ids[r];
    rows.resize(more.ranks[r].microbatches.size() - 1);
    rows.push_back(rows.empty() ? std::vector<std::uint64_t>() : rows.back());
  }
}

// The same for the last `block` ranks just repeated: their data coordinate makes them other sequences.
void repeat_last_slice_ranks(partition& more, std::size_t block) {
  if (more.sequence_ids.empty()) return;
  const std::size_t before = more.ranks.size() - block;
  more.sequence_ids.resize(before);
  for (std::size_t r = before - block; r < before; ++r) more.sequence_ids.push_back(more.sequence_ids[r]);
}

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
    repeat_last_slices(more);
    const bool equal = g > 1 && g == update.world_size();
    out.push_back({equal ? "G ≠ W (here G = W = " + std::to_string(g) + ")"
                         : "another number of accumulation steps" +
                               (g ? " (here G = " + std::to_string(g) + ")" : std::string()),
                   std::move(more)});
  }

  // One more rank, or on a mesh one more coordinate along its first dimension where that is a data
  // dimension: a copy of the last block of ranks, so that the ranks stay row-major in the grown mesh.
  const bool growable = update.mesh.empty() || update.mesh.front().role == mesh_role::data;
  const std::size_t block = update.mesh.empty() ? 1 : update.ranks.size() / update.mesh.front().size;
  std::uint64_t block_positions = 0;
  for (std::size_t r = update.ranks.size() - block; r < update.ranks.size(); ++r)
    block_positions =
        add_counts(block_positions, add_counts(update.ranks[r].valid_tokens(), update.ranks[r].padding()));
  if (growable && room_for(update, block_positions)) {
    partition more = update;
    for (std::size_t r = update.ranks.size() - block; r < update.ranks.size(); ++r)
      more.ranks.push_back(update.ranks[r]);
    repeat_last_slice_ranks(more, block);
    if (!more.mesh.empty()) more.mesh.front().size += 1;
    out.push_back({update.mesh.empty()
                       ? "another number of ranks (here W = " + std::to_string(update.world_size()) + ")"
                       : "another size of " + update.mesh.front().name + " (here " +
                             std::to_string(update.mesh.front().size) + ")",
                   std::move(more)});
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
  if (update.loss_weight != 1) {
    // An auxiliary term's weight twice as large: a weight left out is told from a factor of the same size.
    partition more = update;
    more.loss_weight *= 2;
    out.push_back({"another weight of " + loss_spelled(update) + " (here " + to_string(update.loss_weight) + ")",
                   std::move(more)});
  }
  return out;
}

}  // namespace normcheck

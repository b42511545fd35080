#include "normcheck/core/sequence_join.hpp"

#include "normcheck/core/counts.hpp"

#include <map>
#include <tuple>

namespace normcheck {

namespace {

// The sequence ID of group g of microbatch m on rank r: 0 where it is not a slice.
std::uint64_t slice_id(const partition& update, std::size_t r, std::size_t m, std::size_t g) {
  const auto& ids = update.sequence_ids;
  if (r >= ids.size() || m >= ids[r].size() || g >= ids[r][m].size()) return 0;
  return ids[r][m][g];
}

}  // namespace

sequence_join::sequence_join(const partition& update) : update_(&update) {
  if (!update.has_slices()) {
    sequences_ = 0;
    for (const rank_stats& rank : update.ranks) sequences_ = add_counts(sequences_, rank.sequence_count());
    return;
  }
  // A slice's sequence is its ID within its data coordinates and microbatch.
  std::map<std::tuple<std::uint64_t, std::size_t, std::uint64_t>, std::size_t> named;
  first_.resize(update.ranks.size());
  for (std::size_t r = 0; r < update.ranks.size(); ++r) {
    const rank_stats& rank = update.ranks[r];
    const std::uint64_t data = update.mesh_index(r, mesh_role::data);
    for (std::size_t m = 0; m < rank.microbatches.size(); ++m) {
      const microbatch_stats& microbatch = rank.microbatches[m];
      first_[r].push_back(whole_.size());
      for (std::size_t g = 0; g < microbatch.group_count(); ++g) {
        const std::uint64_t id = slice_id(update, r, m, g);
        std::size_t whole = tokens_.size();
        if (id != 0) {
          whole = named.try_emplace({data, m, id}, whole).first->second;
          ++slices_;
        }
        if (whole == tokens_.size()) tokens_.push_back(0);
        tokens_[whole] = add_counts(tokens_[whole], microbatch.group(g).valid_tokens);
        whole_.push_back(whole);
      }
    }
  }
  for (std::uint64_t n : tokens_)
    if (n > 0) ++sequences_;
  // bᵣₘ: the distinct sequences a microbatch holds a valid token of, marked with the microbatch's number.
  std::vector<std::size_t> marked(tokens_.size(), 0);
  std::size_t mark = 0;
  held_.resize(update.ranks.size());
  for (std::size_t r = 0; r < update.ranks.size(); ++r) {
    const rank_stats& rank = update.ranks[r];
    for (std::size_t m = 0; m < rank.microbatches.size(); ++m) {
      ++mark;
      std::uint64_t held = 0;
      for (std::size_t g = 0; g < rank.microbatches[m].group_count(); ++g) {
        if (rank.microbatches[m].group(g).valid_tokens == 0) continue;
        std::size_t& seen = marked[whole_of(r, m, g)];
        if (seen != mark) ++held;
        seen = mark;
      }
      held_[r].push_back(held);
    }
  }
}

std::uint64_t sequence_join::sequence_tokens(std::size_t r, std::size_t m, std::size_t g) const {
  if (!joins()) return update_->ranks[r].microbatches[m].group(g).valid_tokens;
  return tokens_[whole_of(r, m, g)];
}

std::uint64_t sequence_join::rank_sequences(std::size_t r) const {
  if (!joins()) return update_->ranks[r].sequence_count();
  // A rank holds one sequence's slices in one microbatch: its microbatches' sequences are distinct.
  std::uint64_t total = 0;
  for (std::uint64_t held : held_[r]) total = add_counts(total, held);
  return total;
}

std::uint64_t sequence_join::microbatch_sequences(std::size_t r, std::size_t m) const {
  if (!joins()) return update_->ranks[r].microbatches[m].sequence_count();
  return held_[r][m];
}

}  // namespace normcheck

#pragma once
/// \file core/sequence_join.hpp
/// Sequence slices joined into whole sequences. On a mesh with sequence dimensions (context parallelism) the
/// ranks of one sequence group hold slices of the same sequences; the sequence objectives count a sequence
/// once and divide its tokens by its whole length. The slices with one ID in one microbatch of ranks whose
/// data coordinates agree are one sequence; every group that is not a slice is a sequence of its own. Each
/// slice stays a group: the join says which sequence it belongs to and how many valid tokens that sequence
/// holds over all its slices.

#include "normcheck/core/partition.hpp"

#include <cstddef>
#include <cstdint>
#include <vector>

namespace normcheck {

/// The whole sequences of an update and their counts. Without slices it reads the groups as they are and
/// allocates nothing.
class sequence_join {
public:
  explicit sequence_join(const partition& update);

  /// Whether some group is a slice.
  bool joins() const noexcept { return !tokens_.empty(); }
  /// nₛ: the valid tokens of the whole sequence that group `g` of microbatch `m` on rank `r` belongs to (the
  /// group's own without slices).
  std::uint64_t sequence_tokens(std::size_t r, std::size_t m, std::size_t g) const;
  /// B: the whole sequences that hold a valid token.
  std::uint64_t sequences() const noexcept { return sequences_; }
  /// The groups that are slices.
  std::uint64_t slices() const noexcept { return slices_; }
  /// bᵣ: the whole sequences of which rank r holds a valid token (one per sequence, however many slices).
  std::uint64_t rank_sequences(std::size_t r) const;
  /// bᵣₘ: the same within microbatch m of rank r.
  std::uint64_t microbatch_sequences(std::size_t r, std::size_t m) const;

private:
  std::size_t whole_of(std::size_t r, std::size_t m, std::size_t g) const { return whole_[first_[r][m] + g]; }

  const partition* update_;
  std::vector<std::vector<std::size_t>> first_;   // [r][m]: where microbatch m's groups start in whole_
  std::vector<std::size_t> whole_;                // per group, in group order: its sequence's index
  std::vector<std::uint64_t> tokens_;             // per whole sequence: nₛ
  std::vector<std::vector<std::uint64_t>> held_;  // [r][m]: bᵣₘ
  std::uint64_t sequences_ = 0;
  std::uint64_t slices_ = 0;
};

}  // namespace normcheck

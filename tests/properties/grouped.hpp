#pragma once
// Updates with groups, as the laws of the declared objectives see them: microbatches that may declare
// sequences, groups written as compact groups, padding, a declared objective and its normalizer, and token
// weights. This is the test suite's own model and writer of such documents, written from docs/format.md
// independently of the library's reader, so that a law's counterexample is a normcheck/1 document
// `normcheck check` replays and the reader is tested against a second writer.

#include "normcheck/core/partition.hpp"
#include "normcheck/core/rational.hpp"
#include "normcheck/documents/partition_reader.hpp"

#include <cstdint>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace normcheck::properties {

/// The positions of one group: token values, nullopt for padding. With `compact` it is written as
/// {"count", "value", "padding"}: its valid tokens then share one value and stand before its padding.
/// `weights` (weighted objective only) stands beside `positions`: a weight beside each valid token,
/// nullopt beside padding.
struct group_tokens {
  std::vector<token> positions;
  bool compact = false;
  std::vector<token> weights;

  /// The valid tokens.
  std::uint64_t valid_tokens() const;
  /// The padded positions.
  std::uint64_t padding() const;
};

/// One microbatch: a single group, or declared sequences (at least one), each a group.
struct microbatch_tokens {
  bool sequences = false;
  std::vector<group_tokens> groups;  ///< exactly one without sequences
};

/// One rank: its microbatches, at least one.
using grouped_rank = std::vector<microbatch_tokens>;

/// An update with groups and a declared objective.
struct grouped_update {
  std::vector<grouped_rank> ranks;
  rational theta;
  reducer_kind reducer = reducer_kind::mean;
  objective_kind objective = objective_kind::token_mean;
  rational normalizer;  ///< C under the constant objective (positive); 0 otherwise

  /// W.
  std::size_t world_size() const { return ranks.size(); }
};

/// A microbatch of one group that holds `positions`, written as a token array.
microbatch_tokens plain_microbatch(std::vector<token> positions);
/// A compact group of `count` tokens of value `value` and `padding` padded positions.
group_tokens compact_group(std::uint64_t count, const rational& value, std::uint64_t padding = 0);

/// The library's model of the update (built through its summaries, not through a document).
partition to_partition(const grouped_update& update);

/// Each group's place, in group order (rank-major, microbatches, then sequences).
struct group_place {
  std::size_t rank = 0;
  std::size_t microbatch = 0;
  std::size_t group = 0;
};
std::vector<group_place> group_places(const grouped_update& update);
/// The group at `place`.
const group_tokens& group_at(const grouped_update& update, const group_place& place);

/// What a document says about a per-group (or scalar) measurement under `observed`.
struct observation {
  std::string dtype = "exact";
  /// One value (the scalar probe): written as "gradient".
  std::optional<std::optional<rational>> gradient;  ///< inner nullopt: "nan"
  /// One vector per rank, one component per group (written as "per_rank").
  std::vector<std::vector<rational>> per_rank;
  std::vector<std::vector<rational>> witness;  ///< empty, or shaped like per_rank
};

/// What a document claims the gate concludes.
struct gate_claim {
  std::string verdict;
  std::vector<std::string> explanations;
};

/// Options of a written document.
struct grouped_document_options {
  std::string description;
  std::vector<expectation> expect;
  std::optional<error_code> expect_error;
  std::optional<observation> observed;
  std::optional<gate_claim> expect_gate;
};

/// A complete normcheck/1 document for the update (exact values as integers or "p/q" strings). The
/// objective and normalizer are written when they are not the defaults; ranks of one microbatch use
/// "targets", others "microbatches"; weights stand beside them, shaped like them.
std::string write_grouped_document(const grouped_update& update, const grouped_document_options& options = {});

/// Shows an update in counterexamples: "sequence_mean mean θ=0 [[1, null]; {[2] | 3×1+1p} || []]": ranks split by
/// "||", microbatches by ";", sequences in braces split by "|", a compact group as count×value+padding"p".
void showValue(const grouped_update& update, std::ostream& os);

}  // namespace normcheck::properties

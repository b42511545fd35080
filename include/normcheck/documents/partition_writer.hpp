#pragma once
/// \file documents/partition_writer.hpp
/// Writing normcheck/1 documents from explicit tokens: the inverse of `read_partition`, so that a
/// generated or computed update becomes a file that `normcheck check` replays.

#include "normcheck/core/errors.hpp"
#include "normcheck/core/partition.hpp"
#include "normcheck/documents/partition_reader.hpp"
#include "normcheck/io/json_writer.hpp"

#include <optional>
#include <string>
#include <vector>

namespace normcheck {

/// Explicit tokens of an update: ranks → microbatches → token values (nullopt = padding).
struct token_partition {
  std::vector<std::vector<std::vector<token>>> ranks;
  rational theta;
  reducer_kind reducer = reducer_kind::mean;
  /// Token weights shaped like `ranks` (nullopt beside padding); when given, the objective is the
  /// weighted token mean. Empty: the token mean.
  std::vector<std::vector<std::vector<token>>> weights;
  /// The sequences of each microbatch, shaped ranks → microbatches: sequences[r][m] lists the lengths
  /// (positions, padding included) of microbatch m's sequences in order, which together cover its tokens; an
  /// empty list declares none. Empty: no microbatch declares sequences.
  std::vector<std::vector<std::vector<std::size_t>>> sequences;
  /// The objective when no weights are given: token_mean, sequence_mean, sequence_sum_mean or constant.
  objective_kind objective = objective_kind::token_mean;
  /// C under the constant objective.
  rational normalizer;
  /// The device mesh, dimensions with their sizes, empty without one: `ranks` then holds the first of each set of
  /// replicas, numbered row-major over the other dimensions (as `partition::ranks`), and the document lists every
  /// rank of the mesh with its coordinates, a replica with its first's tokens.
  std::vector<mesh_dim> mesh;
  /// An auxiliary term's tokens, shaped like `ranks` (as many microbatches on each rank), under the token mean.
  struct term_tokens {
    std::string name;
    std::vector<std::vector<std::vector<token>>> ranks;
  };
  /// The auxiliary terms, in order; `to_partition` reads the main loss alone, `term_partition` a term.
  std::vector<term_tokens> terms;
};

/// The partition of term `index` of `tokens`: its tokens on the main loss's ranks, mesh, reducer and θ.
partition term_partition(const token_partition& tokens, std::size_t index);

/// The partition the tokens describe.
partition to_partition(const token_partition& tokens);

/// Options of a written document.
struct document_options {
  std::string description;
  std::vector<expectation> expect;
  std::optional<error_code> expect_error;
  bool declare_world_size = false;
  std::optional<std::string> recipe_scale;           ///< writes a `recipe` with this scale expression
  reducer_kind recipe_reducer = reducer_kind::mean;  ///< the recipe's reducer
  /// A measured gradient, one component per group, and its witness (docs/format.md, "Per-group observations").
  struct measured_groups {
    std::vector<rational> components;
    std::vector<rational> witness;
  };
  /// Writes `observed` (dtype exact): every rank of the mesh holding the main loss's vectors, and each term's in
  /// `observed.terms`, in the order of `token_partition::terms`.
  std::optional<measured_groups> observed;
  std::vector<measured_groups> observed_terms;  ///< one per term, when `observed` is given
};

/// A complete normcheck/1 document (JSON text, canonical exact values: integers as JSON numbers, other
/// rationals as "p/q" strings), readable by read_partition. Ranks with one microbatch are written with
/// "targets", others with "microbatches"; a microbatch with sequences as {"sequences": [...]}; weights, when
/// given, beside them with the weighted objective; the objective and its normalizer when they are not the token
/// mean. Throws `error(schema_error)` for what no document can say (no rank, a rank without a microbatch,
/// sequences that do not cover their microbatch, an objective its counts cannot have, a gradient expected
/// twice, an `expect_error` a document cannot produce) and `error(number_out_of_range)` for a value longer than
/// the reader's default digit limit.
std::string write_document(const token_partition& tokens, const document_options& options = {});
/// The same document as the next value of `json` (e.g. a member of a larger document).
void write_document(json_writer& json, const token_partition& tokens, const document_options& options = {});

}  // namespace normcheck

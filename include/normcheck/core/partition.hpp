#pragma once
/// \file core/partition.hpp
/// A partitioned token set: the valid tokens of one optimizer update, dealt to W ranks and, on each
/// rank, to the microbatches accumulated into the update. The model keeps per microbatch exactly the
/// sums the gradients need, not the tokens, so a reader can build it without storing tokens.

#include "normcheck/core/compact_rational.hpp"
#include "normcheck/core/counts.hpp"
#include "normcheck/core/exact_sum.hpp"
#include "normcheck/core/rational.hpp"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace normcheck {

/// How the gradient all-reduce combines the ranks' gradients.
enum class reducer_kind {
  mean,  ///< sum across ranks, then divide by W (DDP's default)
  sum,   ///< sum across ranks without dividing (e.g. a summing communication hook)
};

/// "mean" or "sum".
std::string_view reducer_name(reducer_kind reducer) noexcept;
/// The reducer spelled `name`, if any.
std::optional<reducer_kind> reducer_from_name(std::string_view name) noexcept;
/// Every spelling, for messages: "mean or sum".
std::string reducer_alternatives();
/// Every spelling, in order.
std::vector<std::string_view> reducer_spellings();

/// What one update's optimizer step minimizes. B counts the update's sequences that hold a valid token,
/// nₛ the valid tokens of sequence s.
enum class objective_kind {
  token_mean,           ///< L = Σℓᵢ / N: every valid token counts once
  weighted_token_mean,  ///< L = Σwᵢℓᵢ / M with M = Σwᵢ: tokens carry exact non-negative weights
  sequence_mean,        ///< L = (1/B)·Σₛ (Σ_{i∈s} ℓᵢ)/nₛ: every sequence counts once, its tokens share its weight
  sequence_sum_mean,    ///< L = (1/B)·Σₛ Σ_{i∈s} ℓᵢ: the mean over sequences of each sequence's loss sum
  constant,             ///< L = Σℓᵢ / C with a declared normalizer C (a fixed budget such as B·L_max)
};

/// Whether the objective is defined over sequences (every microbatch with a valid token declares them).
constexpr bool counts_sequences(objective_kind objective) noexcept {
  return objective == objective_kind::sequence_mean || objective == objective_kind::sequence_sum_mean;
}

/// "token_mean", "weighted_token_mean", "sequence_mean", "sequence_sum_mean" or "constant".
std::string_view objective_name(objective_kind objective) noexcept;
/// The objective spelled `name`, if any.
std::optional<objective_kind> objective_from_name(std::string_view name) noexcept;
/// Every spelling, for messages.
std::string objective_alternatives();
/// Every spelling, in order.
std::vector<std::string_view> objective_spellings();

/// An optional value kept on the heap: one pointer where it is absent, so that the many microbatches of an
/// unweighted update stay small. Copies are deep.
template <typename T>
class boxed {
public:
  boxed() = default;
  boxed(T value) : value_(std::make_unique<T>(std::move(value))) {}  // NOLINT: as std::optional converts
  boxed(const boxed& other) : value_(other.value_ ? std::make_unique<T>(*other.value_) : nullptr) {}
  boxed(boxed&&) noexcept = default;
  boxed& operator=(const boxed& other) {
    if (this != &other) value_ = other.value_ ? std::make_unique<T>(*other.value_) : nullptr;
    return *this;
  }
  boxed& operator=(boxed&&) noexcept = default;

  /// Whether a value is held.
  bool has_value() const noexcept { return value_ != nullptr; }
  explicit operator bool() const noexcept { return has_value(); }
  const T& operator*() const { return *value_; }
  const T* operator->() const { return value_.get(); }

private:
  std::unique_ptr<T> value_;
};

/// The weighted sums of one microbatch's valid tokens.
struct weighted_sums {
  rational mass;             ///< Σ w
  rational target_sum;       ///< Σ w·y
  rational target_abs_sum;   ///< Σ w·|y|
};

/// The target sums of a group's valid tokens.
struct target_sums {
  rational sum;      ///< Σ y
  rational abs_sum;  ///< Σ |y| (for error bounds)
  /// Set when the tokens carry weights (the weighted objective); without weights every token weighs 1.
  boxed<weighted_sums> weighted;
};

/// The tokens of one group, the finest unit the gate measures (a sequence, or a microbatch that declares
/// none): how many valid tokens, how many padded positions, and the target sums. The sums are kept compactly
/// (core/compact_rational.hpp): a group of short literals costs 56 bytes, the weighted sums apart, and a
/// dump of hundreds of thousands of sequences stays within a few MB.
struct group_stats {
  std::uint64_t valid_tokens = 0;
  std::uint64_t padding = 0;

  /// Whether some sum is not 0 (no valid token, say, keeps none).
  bool has_sums() const noexcept { return !sum_.is_zero() || !abs_sum_.is_zero() || weighted_.has_value(); }
  /// Σ y over valid tokens.
  rational target_sum() const { return sum_.value(); }
  /// Σ |y| over valid tokens.
  rational target_abs_sum() const { return abs_sum_.value(); }
  /// Whether the tokens carry weights with a sum other than 0.
  bool weighted() const noexcept { return weighted_.has_value(); }
  /// The weight mass, Σw; the valid-token count when the tokens carry no weights.
  rational mass() const;
  /// Σ w·y (Σ y without weights).
  rational weighted_target_sum() const { return weighted() ? weighted_->target_sum.value() : target_sum(); }
  /// Σ w·|y| (Σ |y| without weights).
  rational weighted_target_abs_sum() const {
    return weighted() ? weighted_->target_abs_sum.value() : target_abs_sum();
  }
  /// Whether `other` holds as many valid tokens with the same sums (its padding aside), compared as they are
  /// kept: every derivative sum of the two groups is then the same.
  bool same_tokens(const group_stats& other) const;
  /// Sets the sums.
  void set_sums(const target_sums& values);

private:
  struct compact_weighted {
    compact_rational mass;
    compact_rational target_sum;
    compact_rational target_abs_sum;
  };
  compact_rational sum_;
  compact_rational abs_sum_;
  boxed<compact_weighted> weighted_;
};

/// One microbatch: its totals over all its tokens and, when it declares sequences, each sequence. Without
/// sequences the microbatch is one group.
struct microbatch_stats : group_stats {
  boxed<std::vector<group_stats>> sequences;  ///< absent: no sequences declared

  /// The groups the gate measures in this microbatch: its sequences, or 1 for the microbatch itself.
  std::size_t group_count() const { return sequences ? sequences->size() : 1; }
  /// Group i (0 ≤ i < group_count()).
  const group_stats& group(std::size_t i) const { return sequences ? (*sequences)[i] : *this; }
  /// The declared sequences that hold a valid token (0 without sequences).
  std::uint64_t sequence_count() const;
};

/// A microbatch made of `sequences` (at least one): its totals are theirs.
microbatch_stats make_sequenced_microbatch(std::vector<group_stats> sequences);

/// One rank's share of the update, microbatches in order (at least one).
struct rank_stats {
  std::vector<microbatch_stats> microbatches;

  /// nᵣ: valid tokens over all microbatches.
  std::uint64_t valid_tokens() const;
  /// Padded positions over all microbatches.
  std::uint64_t padding() const;
  /// Σ y over the rank's valid tokens.
  rational target_sum() const;
  /// Σ w·y over them (Σ y without weights).
  rational weighted_target_sum() const;
  /// Σ w·|y| over them (Σ |y| without weights).
  rational weighted_target_abs_sum() const;
  /// mᵣ: the weight mass over all microbatches (nᵣ without weights).
  rational mass() const;
  /// The rank's declared sequences that hold a valid token.
  std::uint64_t sequence_count() const;
};

/// What the ranks along one mesh dimension hold of the update.
enum class mesh_role {
  data,      ///< different whole sequences
  sequence,  ///< slices of the same sequences (context parallelism)
  replica,   ///< the same tokens (tensor parallelism)
};

/// "data", "sequence" or "replica".
std::string_view mesh_role_name(mesh_role role) noexcept;
/// The role spelled `name`, if any.
std::optional<mesh_role> mesh_role_from_name(std::string_view name) noexcept;
/// Every spelling, for messages: "data, sequence or replica".
std::string mesh_role_alternatives();

/// Whether `name` can name a mesh dimension or an auxiliary term: [a-z][a-z0-9_]*.
bool is_identifier(std::string_view name) noexcept;

/// One dimension of the device mesh: its name, its size and its role.
struct mesh_dim {
  std::string name;
  std::uint64_t size = 1;
  mesh_role role = mesh_role::data;
};

/// Another loss of the same update, as a loss judged beside it sees it: code that divides one loss by another's
/// count divides by this (docs/format.md, "Auxiliary terms").
struct sibling_loss {
  std::string name;  ///< empty for the main loss, else the auxiliary term's name
  rational total;    ///< its count in its own objective's units: N, M, B or C
  /// It counts what this loss counts: the same objective, and every group of the two holds as many valid
  /// tokens (a term over the main loss's own tokens). Dividing by either count is then the same division, not a
  /// mistake the gate names.
  bool same_count = false;
};

/// The update: ranks in rank order, the reducer, the parameter value θ and the objective. Under the
/// weighted objective every microbatch carries `weighted` sums; under the token mean none does. An auxiliary
/// term's tokens are an update of their own (`auxiliary_term`), on the main loss's ranks, mesh, reducer and θ.
struct partition {
  std::vector<rank_stats> ranks;
  reducer_kind reducer = reducer_kind::mean;
  rational theta;
  objective_kind objective = objective_kind::token_mean;
  rational normalizer;  ///< C under the constant objective (positive); 0 otherwise
  /// The nominal accumulation steps the training is configured with (gradient_accumulation_steps), where the
  /// document declares them: every rank holds at most this many microbatches, fewer in a short final window.
  /// 0 where not declared.
  std::uint64_t accumulation_steps = 0;
  /// The device mesh, dimensions in order, ranks numbered row-major; empty without one, which is a mesh of
  /// one data dimension. `ranks` holds the ranks whose replica coordinates are all 0, one per set of
  /// replicas (the replicas hold the same tokens), so the data and sequence sizes multiply to W.
  std::vector<mesh_dim> mesh;
  /// The sequence each group is a slice of (context parallelism), by rank, microbatch and group: 0 for a group
  /// that is not a slice, k > 0 for the k-th sequence ID of the document. Empty without slices, and a row
  /// may be short or empty where its groups are no slices; core/sequence_join joins the slices into whole
  /// sequences. Kept beside the ranks, not in them, so that an update without slices pays nothing per rank.
  std::vector<std::vector<std::vector<std::uint64_t>>> sequence_ids;
  /// The loss's weight in the update's objective, exact and not 0: 1 for the main loss, an auxiliary term's
  /// declared weight. Every normalization's delivered weight carries it (a token of a term weighs weight/N).
  rational loss_weight{1};
  /// The loss's name: empty for the main loss, else the auxiliary term's.
  std::string loss_name;
  /// The update's other losses (the main loss and its auxiliary terms, this one left out), in document order,
  /// the main loss first; empty without terms.
  std::vector<sibling_loss> siblings;

  /// W: the ranks in the reduction.
  std::uint64_t world_size() const { return ranks.size(); }
  /// N: valid tokens of the whole update.
  std::uint64_t valid_tokens() const;
  /// P: padded positions of the whole update.
  std::uint64_t padding() const;
  /// N + P: every position of the update.
  std::uint64_t positions() const;
  /// M: the weight mass of the whole update (N without weights).
  rational mass() const;
  /// B: the update's sequences that hold a valid token, the slices of one sequence counted once.
  std::uint64_t sequence_count() const;
  /// Whether some group is a sequence slice (`sequence_ids` is not empty).
  bool has_slices() const;
  /// The groups of the whole update, over all ranks and microbatches.
  std::uint64_t group_count() const;
  /// Whether some microbatch declares sequences.
  bool has_sequences() const;
  /// G, the microbatches every rank accumulates, or 0 where ranks accumulate different numbers.
  std::uint64_t common_accumulation() const;
  /// The product of the sizes of the mesh dimensions with `role`: W for data and 1 otherwise without a mesh.
  std::uint64_t mesh_extent(mesh_role role) const;
  /// Rank r's coordinates along the dimensions with `role`, as one mixed-radix index below `mesh_extent`
  /// (0 for the replica dimensions: r is the first of its replicas).
  std::uint64_t mesh_index(std::size_t rank, mesh_role role) const;
  /// Every rank of the mesh, replicas included: W times the replica dimensions' size.
  std::uint64_t listed_ranks() const { return world_size() * mesh_extent(mesh_role::replica); }
  /// The number in the whole mesh (as torch numbers it) of rank r of `ranks`: r itself without replicas.
  std::uint64_t listed_rank(std::size_t rank) const;
  /// The first replica of the rank numbered `listed` in the whole mesh: its number with every replica
  /// coordinate 0 (itself without replica dimensions).
  std::uint64_t first_replica(std::uint64_t listed) const;
  /// The names of the dimensions with `role` and a size above 1, joined by " × " ("dp", "dp × pp"); empty
  /// where there is none.
  std::string mesh_names(mesh_role role) const;
};

/// An auxiliary loss term (multi-token prediction, a load-balancing loss): its name and its own tokens, an
/// update with its own objective, `loss_weight` and siblings, on the main loss's ranks, mesh, reducer and θ,
/// microbatches aligned with the main loss's. The update's objective is the main loss's plus Σ weight·(each
/// term's objective over its own tokens).
struct auxiliary_term {
  std::string name;
  partition update;
};

/// "the main loss" or "term mtp": how messages name the loss `update` is.
std::string loss_spelled(const partition& update);

/// The teaching loss ℓ(θ,y) = ½(θ−y)² has derivative θ−y; a microbatch's derivative sum is n·θ − Σy,
/// and with weights Σw·(θ−y) = m·θ − Σw·y.
rational loss_gradient_sum(const group_stats& group, const rational& theta);
/// Sᵣ: a rank's derivative sum over all its microbatches.
rational loss_gradient_sum(const rank_stats& rank, const rational& theta);

/// Accumulates one microbatch token by token, exactly and without storing tokens.
class microbatch_builder {
public:
  /// A builder for unweighted tokens, or with `weighted` for tokens that each carry a weight: `finish`
  /// then reports the weighted sums (all 0 for a microbatch without a valid token).
  explicit microbatch_builder(bool weighted = false) : weighted_(weighted) {}

  /// Adds a valid token given as a literal.
  void add_token(const literal_parts& target);
  /// Adds a valid token read by `scan_machine_literal` (the streaming path: no allocation per token).
  void add_token(const machine_literal& target) {
    ++valid_tokens_;
    machine_literal magnitude = target;
    magnitude.negative = false;
    // The sum is chosen by index, not by a branch: signs are unpredictable.
    exact_sum* const sums[2] = {&positive_, &negative_};
    sums[target.negative]->add(magnitude);
  }
  /// Adds a valid token given as a rational.
  void add_token(const rational& target);
  /// Adds a valid token and its weight (w ≥ 0, checked by the caller) to a weighted builder, whose every
  /// valid token must come with a weight.
  void add_weighted_token(const literal_parts& target, const literal_parts& weight);
  /// The same for values given as rationals.
  void add_weighted_token(const rational& target, const rational& weight);
  /// The same for literals read by `scan_machine_literal`: when the product of the significands fits in 64
  /// bits (short decimals) it is summed in machine integers, with no allocation.
  void add_weighted_token(const machine_literal& target, const machine_literal& weight);
  /// Adds `count` valid unweighted tokens that all have the value `target` (a compact group).
  void add_tokens(const rational& target, std::uint64_t count);
  /// Adds a position that holds no valid token.
  void add_padding() { ++padding_; }
  /// Adds `count` positions that hold no valid token.
  void add_padding(std::uint64_t count) { padding_ = add_counts(padding_, count); }
  /// The microbatch's statistics.
  microbatch_stats finish() const;

private:
  std::uint64_t valid_tokens_ = 0;
  std::uint64_t padding_ = 0;
  exact_sum positive_;  // Σ of the non-negative targets
  exact_sum negative_;  // Σ of |y| over the negative targets
  // Counts a weighted token's weight.
  template <typename Weight>
  void add_weight(const Weight& weight) {
    ++weighted_tokens_;
    mass_.add(weight);
  }

  bool weighted_ = false;
  std::uint64_t weighted_tokens_ = 0;
  exact_sum mass_;               // Σ w
  exact_sum weighted_positive_;  // Σ w·y over the non-negative targets
  exact_sum weighted_negative_;  // Σ w·|y| over the negative targets
};

/// A token value, or nullopt for padding.
using token = std::optional<rational>;

/// Statistics of one microbatch given by its tokens.
microbatch_stats summarize(const std::vector<token>& tokens);

/// A partition with one microbatch per rank, from explicit tokens (tests, demos, reference checks).
partition make_partition(const std::vector<std::vector<token>>& ranks, const rational& theta = 0,
                         reducer_kind reducer = reducer_kind::mean);

/// A partition from explicit microbatches per rank.
partition make_accumulated_partition(const std::vector<std::vector<std::vector<token>>>& ranks,
                                     const rational& theta = 0, reducer_kind reducer = reducer_kind::mean);

/// Tokens with weights, both shaped ranks → microbatches → positions: the weighted objective. A weight
/// stands beside each valid token (nullopt beside padding). Throws `error(schema_error)` when the shapes
/// differ and `error(bad_number)` for a negative weight.
partition make_weighted_partition(const std::vector<std::vector<std::vector<token>>>& ranks,
                                  const std::vector<std::vector<std::vector<token>>>& weights,
                                  const rational& theta = 0, reducer_kind reducer = reducer_kind::mean);

}  // namespace normcheck

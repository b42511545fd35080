#pragma once
/// \file core/normalization.hpp
/// One definition of each normalization. A normalization is the coefficient c a rank multiplies a group's
/// loss sum by before its backward; the reducer then combines the ranks ((1/W)·Σ under mean, Σ under sum),
/// so a token of group g weighs c_g/W or c_g in the synchronized gradient. Every coefficient is written in
/// an objective's units, so that one entry serves every objective: a token counts 1 under token_mean and
/// constant, its weight under weighted_token_mean, 1/nₛ under sequence_mean and 1 under sequence_sum_mean,
/// and the counts divided by are those units' totals (N, M, B or C for the update; nᵣ, mᵣ, bᵣ for a rank;
/// nᵣₘ, mᵣₘ, bᵣₘ for a microbatch). The report's gradients, the gate's bounds and weight tables, the
/// simulation and the demos all evaluate this table; nothing else writes a normalization down.

#include "normcheck/core/partition.hpp"
#include "normcheck/core/sequence_join.hpp"

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace normcheck {

/// Where a group stands: its rank, its microbatch on that rank, and its index within the microbatch.
struct group_ref {
  std::size_t rank = 0;
  std::size_t microbatch = 0;
  std::size_t group = 0;
};

/// A mass and a value summed over groups: Σ c_g·mass_g and Σ c_g·value_g (see `totals`).
struct weighted_totals {
  rational mass;
  rational value;
};

/// An update counted in an objective's units. The objective may differ from the one the update declares:
/// the gate also asks what code written for another objective would have done.
class objective_units {
public:
  /// Requires `applies(update, objective)`.
  objective_units(const partition& update, objective_kind objective);

  /// Whether the update can be counted in the objective's units: the sequence objectives need every
  /// microbatch that holds a valid token to declare sequences, and at least one sequence with a token;
  /// `constant` needs a positive normalizer; weighted_token_mean needs weights (the update's own objective).
  static bool applies(const partition& update, objective_kind objective);

  const partition& update() const noexcept { return *update_; }
  objective_kind objective() const noexcept { return objective_; }
  /// W.
  std::uint64_t world_size() const noexcept { return update_->world_size(); }
  /// The update's units, the objective's denominator: N, M, B or C.
  const rational& total() const noexcept { return total_; }
  /// Rank r's units: nᵣ, mᵣ or bᵣ (nᵣ under constant, whose one count is the declared C).
  rational of_rank(std::size_t r) const;
  /// The units of microbatch m of rank r: nᵣₘ, mᵣₘ or bᵣₘ.
  rational of_microbatch(std::size_t r, std::size_t m) const;
  /// What the objective itself multiplies a token's loss by before any count: 1/nₛ for a token of a
  /// sequence with nₛ valid tokens under sequence_mean, 1 otherwise (0 for a group without valid tokens).
  rational token_factor(const group_ref& where) const;
  /// nₛ of the sequence the group at `where` belongs to: the valid tokens of all its slices where it is a
  /// slice, the group's own otherwise (only the sequence objectives join slices).
  std::uint64_t sequence_tokens(const group_ref& where) const;
  /// Symbols of the three counts, for formulas: {"N", "nᵣ", "nᵣₘ"}, {"M", "mᵣ", "mᵣₘ"}, {"B", "bᵣ", "bᵣₘ"},
  /// {"C", "nᵣ", "nᵣₘ"}.
  std::string_view symbol(std::size_t level_index) const noexcept;
  /// Under a mesh with sequence dimensions: the units of the ranks that share rank r's sequence
  /// coordinates, its count reduced over the data dimensions only (nullopt without such a mesh).
  std::optional<rational> over_data_dims(std::size_t r) const;
  /// The units of the ranks that share rank r's data coordinates, its count reduced over the sequence
  /// dimensions only (nullopt without such a mesh).
  std::optional<rational> over_sequence_dims(std::size_t r) const;
  /// Rank r's mass and Σw·y (`absolute`: Σw·|y|) over its microbatches, unscaled: what every normalization
  /// constant over a rank sums before its coefficient (but under sequence_mean, whose tokens each carry
  /// their sequence's factor). Summed on first use and kept: the normalizations of one update share it.
  const weighted_totals& rank_moments(std::size_t r, bool absolute) const;

private:
  const partition* update_;
  objective_kind objective_;
  rational total_;
  std::shared_ptr<const sequence_join> join_;  // under the sequence objectives where the update has slices
  std::vector<rational> over_data_;            // by sequence coordinates; empty without sequence dimensions
  std::vector<rational> over_sequence_;        // by data coordinates; empty without sequence dimensions
  mutable std::vector<std::optional<weighted_totals>> rank_moments_[2];  // by rank; [1]: absolute
};

/// The level over which a normalization's coefficient is constant: it is computed once per unit of it.
enum class scope { update, rank, microbatch, group };

/// A coefficient: nullopt where it divides by zero (a rank or microbatch without units).
using coefficient_function = std::optional<rational> (*)(const objective_units& units, const group_ref& where);

/// One normalization: its stable name, how it reads, its coefficient, and (where code computes it by mistake)
/// the words the gate gives when it recognizes it: what was computed, why that is wrong, what to do.
struct normalization {
  std::string_view name;
  /// What each rank backpropagates, with {D}, {Dr} and {Drm} standing for the units' symbols.
  std::string_view formula;
  /// What it divides by: "{D}", "{Dr}", "{Drm}" or "none".
  std::string_view denominator;
  scope level = scope::update;
  /// The objective's own weights (global_mean): delivered as they are, not combined by the reducer.
  bool objective_itself = false;
  coefficient_function coefficient = nullptr;
  /// What code that computes it did, for a diagnosis (empty for the objective's own weights).
  std::string_view computed = {};
  /// Why that is not the objective's gradient, under a reducer that divides by W.
  std::string_view why_wrong = {};
  /// Why it is wrong under a summing reducer, where that differs (empty: `why_wrong`).
  std::string_view why_wrong_summed = {};
  /// What to do about it, beyond the correct computation the report states (empty: nothing more).
  std::string_view remedy = {};
};

/// The six normalizations of the report, in report order (global_mean, local_mean, local_sum, scaled_sum,
/// global_share, microbatch_mean); gradients.hpp names them by `strategy`.
std::span<const normalization> report_normalizations() noexcept;

/// Normalizations the gate also recognizes in a measured weight table, beyond the six: code that divides by
/// each microbatch's own count and skips ÷G, counts padding, counts labels before the shift, and so on.
std::span<const normalization> diagnosed_normalizations() noexcept;

/// The normalization named `name` among both lists, if any.
const normalization* find_normalization(std::string_view name) noexcept;

/// Why `n` is wrong under `reducer`, its remedy after a colon where it has one.
std::string why_wrong(const normalization& n, reducer_kind reducer);

/// `formula` or `denominator` with the units' symbols in place, and the mesh's (see `mesh_spelled`).
std::string spelled(std::string_view text, const objective_units& units);

/// A diagnosis's words with the update's mesh in place: {data} and {sequence} the names of its data and
/// sequence dimensions ("dp", "cp"), {mesh} both ("dp × cp"), {CP} the sequence dimensions' size,
/// {replica} and {TP} the replica dimensions' names and size.
std::string mesh_spelled(std::string_view text, const partition& update);

/// The coefficient a rank multiplies group `where`'s loss sum by (before the reducer), the objective's token
/// factor and the loss's weight (`partition::loss_weight`) included; for `objective_itself` the weight the objective
/// gives. Nullopt where it is undefined.
std::optional<rational> local_coefficient(const objective_units& units, const normalization& n, const group_ref& where);

/// What the unit of `n`'s scope that holds `where` delivers before the objective's token factor: its
/// coefficient times the reducer's factor. Group g's weight is this times `units.token_factor(g)`; nullopt
/// where the coefficient is undefined.
std::optional<rational> delivered_unit_weight(const objective_units& units, const normalization& n,
                                              const group_ref& where);

/// The weight each group's tokens get in the synchronized gradient under `n` (the reducer applied), in group
/// order; nullopt where some coefficient is undefined.
std::optional<std::vector<rational>> delivered_weights(const objective_units& units, const normalization& n);

/// Σ_g c_g·mass_g and Σ_g c_g·value_g over every group, c_g the delivered weight (|c_g| when `absolute`),
/// computed once per unit of the normalization's scope. `value` is Σw·y (`absolute`: Σw·|y|).
std::optional<weighted_totals> totals(const objective_units& units, const normalization& n, bool absolute);

/// Sᵣ in the objective's terms: Σ_g a(g)·(mass_g·θ − Σw·y) over rank r's groups, a the objective's token
/// factor (the rank's loss-derivative sum, or under sequence_mean the sum of its sequences' mean derivatives).
rational objective_loss_sum(const objective_units& units, std::size_t rank);

/// Gives the main loss and each auxiliary term (on the main loss's ranks, microbatches aligned) the other losses'
/// counts in their own objectives' units, `partition::siblings`: the main loss first, then the terms in order.
void link_losses(partition& main, std::span<auxiliary_term> terms);

/// The synchronized gradient of the teaching loss ½(θ − y)² under `n`: Σ_g c_g·(mass_g·θ − Σw·y), c_g
/// delivered. Nullopt where a coefficient is undefined.
std::optional<rational> synchronized_gradient(const objective_units& units, const normalization& n);

}  // namespace normcheck

#pragma once
// An independent, plain reading of the objectives and of the named normalizations on a grouped update,
// written from docs/format.md and docs/gate.md: it counts the explicit tokens itself and shares nothing
// with the library's table. A token of group g weighs, in the synchronized gradient, the entry g of a
// table times its own weight w (1 without weights); the gradient is Σ over tokens of entry·w·(θ − y).

#include "grouped.hpp"

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace normcheck::properties::oracle {

/// One weight per group, in group order.
using table = std::vector<rational>;

/// N: valid tokens.
std::uint64_t valid_tokens(const grouped_update& update);
/// Σw over the valid tokens (N without weights).
rational mass(const grouped_update& update);
/// B: sequences (of microbatches that declare them) that hold a valid token.
std::uint64_t sequences(const grouped_update& update);
/// P: padded positions over the whole update.
std::uint64_t padding(const grouped_update& update);

/// Whether the update can be counted in `objective`'s units: the sequence objectives need every microbatch
/// with a valid token to declare sequences and B > 0; constant a declared C > 0; weighted_token_mean weights.
bool countable(const grouped_update& update, objective_kind objective);

/// The update's units under `objective`: N, M, B or C.
rational total_units(const grouped_update& update, objective_kind objective);

/// The weight the declared objective gives each group's tokens; nullopt when the objective does not exist
/// (no valid token, M = 0, B = 0).
std::optional<table> objective_table(const grouped_update& update);

/// The objective's gradient, Σ over tokens of its weight·w·(θ − y); nullopt when it does not exist.
std::optional<rational> objective_gradient(const grouped_update& update);

/// Σ_g table_g·Σ_{i∈g} wᵢ(θ − yᵢ): the gradient a table delivers.
rational gradient_of(const grouped_update& update, const table& weights);

/// Each group's derivative sum Σ w(θ − y).
std::vector<rational> derivative_sums(const grouped_update& update);

/// The normalizations of the report and those the gate diagnoses, by their documented names.
const std::vector<std::string_view>& report_names();
const std::vector<std::string_view>& diagnosed_names();

/// The table the normalization `name` delivers when every rank computes it in `units`' terms and the update's
/// reducer combines the ranks; nullopt where it divides by nothing (a mean over no token), where it is not a
/// mistake of its own on this update (count_padding without padding, empty_microbatches_counted without an
/// empty microbatch, microbatch_global_count without a common G ≥ 2, …) or where `units` cannot count the
/// update.
std::optional<table> normalization_table(const grouped_update& update, std::string_view name, objective_kind units);

}  // namespace normcheck::properties::oracle

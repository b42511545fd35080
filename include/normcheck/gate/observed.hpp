#pragma once
/// \file gate/observed.hpp
/// What real training code produced for one update, as dumped into a partition file's `observed`
/// object: the synchronized gradient (or each rank's copy of it), its floating-point type, and the
/// token counts the code divided by.

#include "normcheck/core/dtype.hpp"
#include "normcheck/core/exact_sum.hpp"
#include "normcheck/core/rational.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace normcheck {

/// What a float can hold besides a number: a dump writes them as float.hex() prints them.
enum class non_finite {
  nan,                ///< "nan": 0/0, for example a mean over a microbatch without valid tokens
  positive_infinity,  ///< "inf"
  negative_infinity,  ///< "-inf"
};

/// "nan", "inf" or "-inf".
std::string_view non_finite_name(non_finite value) noexcept;
/// The value spelled `name` ("nan", "inf", "-inf"), if any.
std::optional<non_finite> non_finite_from_name(std::string_view name) noexcept;

/// A value real training code produced: an exact number, or NaN or an infinity.
using observed_value = std::variant<rational, non_finite>;

/// Whether the value is a number.
inline bool is_finite(const observed_value& value) { return std::holds_alternative<rational>(value); }
/// Canonical text: "p/q", or "nan", "inf", "-inf".
std::string to_string(const observed_value& value);

/// One measurement's components in group order, stored compactly. A dump's values are floats, so almost
/// every one is m·2⁻ᵏ with |m| < 2⁶³: such a value takes 16 bytes here instead of a rational's hundred
/// (the object and two allocations); NaN and the infinities take as much, and any other number is kept
/// whole beside them. Reading a component gives the same exact value that was stored.
class observed_vector {
public:
  std::size_t size() const noexcept { return cells_.size(); }
  bool empty() const noexcept { return cells_.empty(); }
  void reserve(std::size_t n) { cells_.reserve(n); }
  void push_back(const observed_value& value);
  /// Appends a number read by `scan_machine_literal` without making a rational, when it is m·2⁻ᵏ with
  /// |m| < 2⁶³ (a hexadecimal float, a small integer): returns the bits of its canonical numerator and
  /// denominator (what a budget of kept digits counts). Nullopt, appending nothing, for any other number.
  std::optional<std::uint64_t> push_back(const machine_literal& value);

  /// Component i (0 ≤ i < size()).
  observed_value operator[](std::size_t i) const;
  /// Whether component i is a number.
  bool is_finite(std::size_t i) const noexcept {
    return cells_[i].kind == cell_kind::dyadic || cells_[i].kind == cell_kind::other;
  }
  /// Whether component i here and component i of `other` are the same value.
  bool same_at(std::size_t i, const observed_vector& other) const { return same_at(i, other, i); }
  /// Whether component i here and component j of `other` are the same value.
  bool same_at(std::size_t i, const observed_vector& other, std::size_t j) const;
  /// Every component, as values.
  std::vector<observed_value> values() const;
  /// The exact sum of the components that are numbers (NaN and the infinities left out), added without
  /// making a rational of each.
  rational finite_sum() const;

  friend bool operator==(const observed_vector& a, const observed_vector& b);

private:
  enum class cell_kind : std::uint8_t { dyadic, nan, positive_infinity, negative_infinity, other };
  struct cell {
    std::int64_t mantissa = 0;  ///< the numerator m (dyadic), or the index in others_ (other)
    std::uint32_t shift = 0;    ///< k: the denominator is 2^k (dyadic)
    cell_kind kind = cell_kind::dyadic;
  };
  std::vector<cell> cells_;
  std::vector<rational> others_;
};

/// An explicit tolerance that replaces the derived bound: |observed − v| ≤ absolute + relative·|v|.
struct tolerance {
  rational absolute;
  rational relative;
};

/// A probe's measurement per group (docs/format.md): each rank's copy of the synchronized vector, one
/// component per group of the update in group order, and optionally the within-group witness.
struct group_measurement {
  std::string site;  ///< the submodule the probe sat in; empty for the top-level probe
  std::vector<observed_vector> per_rank;  ///< [rank][group] (one rank if only `gradient` was given)
  std::vector<observed_vector> witness;   ///< empty, or shaped like per_rank
  bool from_per_rank = false;                         ///< given as `per_rank` (one vector per rank)
};

/// The result a training step produced, exactly as dumped (hex floats keep it exact).
struct observed_result {
  std::vector<observed_value> per_rank;  ///< each rank's synchronized value (one entry if only `gradient` was given)
  bool from_per_rank = false;                ///< true when the file gave `per_rank`
  dtype type = dtype::exact;
  std::optional<dtype> reduction_type;       ///< `reduction_dtype`: the all-reduce's arithmetic, when not `type`
  std::optional<std::uint64_t> global_tokens;  ///< `tokens.global`: the N the code divided by
  std::vector<std::uint64_t> rank_tokens;      ///< `tokens.per_rank`: each rank's nᵣ as the code counted it
  std::optional<rational> global_mass;         ///< `mass.global`: the M the code divided by (weighted objective)
  std::vector<rational> rank_masses;           ///< `mass.per_rank`: each rank's mᵣ as the code summed it
  /// `tokens.divided_by`: what each rank divided its loss sum by (without the world-size factor), one value
  /// for all its microbatches or one per microbatch.
  std::vector<std::vector<rational>> divided_by;
  std::optional<tolerance> explicit_tolerance;
  /// Set when the values are vectors, one component per group: the per-group measurement. `per_rank` then
  /// holds each rank's sum over the groups (the scalar probe's value).
  std::optional<group_measurement> groups;
  std::vector<group_measurement> sites;  ///< `sites`: the same measurement by probes in submodules
};

}  // namespace normcheck

#pragma once
/// \file core/exact_sum.hpp
/// Exact summation of literals without a gcd per addition: decimal and binary literals are
/// integers scaled by 2^a·5^b, so they are added as integers and turned into one canonical rational
/// at the end. Literals whose significand fits in 64 bits (the usual case) are added in machine
/// integers, one 128-bit sum per scale, and reach GMP only when the sum is asked for; the others in one
/// GMP integer per scale; fractions p/q as rationals. The scales meet only when the sum is asked for,
/// halves first, so that many distinct exponents cost quasi-linear time in the digits of the result.

#include "normcheck/core/rational.hpp"

#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

namespace normcheck {

/// A running exact sum of rationals, added pairwise as a balanced tree over the order of addition. Adding
/// one by one, sums of fractions with unrelated denominators grow at every step, a cost quadratic in their
/// total size; the tree keeps it quasi-linear (GMP's multiplication and gcd are), and holds one partial sum
/// per level (at most 64), never the terms.
class tree_sum {
public:
  /// Adds one term.
  void add(rational term);
  /// The exact sum of the terms added so far (0 for none), canonical.
  rational value() const;
  /// Whether no term has been added.
  bool empty() const noexcept { return levels_.empty(); }

private:
  std::vector<rational> levels_;  // levels_[i]: the sum of a block of 2^i terms, or 0 for none
  std::uint64_t count_ = 0;       // terms added: bit i set exactly when levels_[i] holds a block
};

/// The exact sum of `terms`, added by a `tree_sum`.
rational sum_of(const std::vector<rational>& terms);

/// A decimal or hexadecimal literal taken apart into machine integers:
/// (-1)^negative · significand · 2^exp2 · 5^exp5 (exp2 == exp5 for decimals, exp5 == 0 for hex).
struct machine_literal {
  bool negative = false;
  std::uint64_t significand = 0;
  std::int32_t exp2 = 0;
  std::int32_t exp5 = 0;
};

/// The fast path beside `parse_literal`: reads an ordinary decimal or hexadecimal literal straight into
/// machine integers. Returns false, leaving the literal to `parse_literal`, for anything else: fractions,
/// more than 19 significant decimal (16 hexadecimal) digits, and everything `parse_literal` rejects.
/// Where it returns true, `parse_literal` accepts the text with the same value. Never throws or allocates.
bool scan_machine_literal(std::string_view text, literal_form form, const number_limits& limits,
                          machine_literal& out) noexcept;

/// `scan_machine_literal` on the longest prefix of `text` that can be one literal: reads up to the first
/// character that cannot continue it and returns the length read (0: not taken). A reader that finds a
/// delimiter there has read the same literal, with the same value, as `scan_machine_literal` on the token.
std::size_t scan_machine_prefix(std::string_view text, literal_form form, const number_limits& limits,
                                machine_literal& out) noexcept;

/// The parts `parse_literal` would give for a literal read by `scan_machine_literal`.
literal_parts to_parts(const machine_literal& literal);

/// A running exact sum of literals.
class exact_sum {
public:
  /// Adds one literal.
  void add(const literal_parts& term);
  /// Adds one literal read by `scan_machine_literal`; allocates only when a new scale displaces one.
  void add(const machine_literal& term) {
    if (term.significand == 0) return;
    // The exponents of one input tend to lie in a short run: e ↦ e ^ (e << 4) is one-to-one on any
    // 32 consecutive decimal exponents (exp2 == exp5 == e), and so is e ↦ e on binary ones (exp5 == 0).
    const std::size_t index =
        (static_cast<std::uint32_t>(term.exp2) ^ (static_cast<std::uint32_t>(term.exp5) << 4)) % bucket_count;
    bucket& b = buckets_[index];
    const std::uint32_t bit = std::uint32_t{1} << index;
    if (!(used_ & bit) || b.exp2 != term.exp2 || b.exp5 != term.exp5) {
      if (used_ & bit) spill(b);
      used_ |= bit;
      b = bucket{term.exp2, term.exp5, 0, 0};
    }
    if (term.negative) b.negative += term.significand;
    else b.positive += term.significand;
  }
  /// Adds an exact rational.
  void add(const rational& term);
  /// The exact sum, canonical.
  rational value() const;

private:
  __extension__ typedef unsigned __int128 wide;

  // The machine-integer sums of one scale 2^exp2·5^exp5. Each term is below 2^64 and a sum holds
  // fewer than 2^64 terms, so neither sum can overflow 128 bits.
  // Left uninitialized until its bit in used_ is set: a sum costs nothing to make (a microbatch has several).
  struct bucket {
    std::int32_t exp2;
    std::int32_t exp5;
    wide positive;
    wide negative;
  };
  static constexpr std::size_t bucket_count = 32;

  void spill(const bucket& b);

  std::array<bucket, bucket_count> buckets_;
  std::uint32_t used_ = 0;  // bit i: buckets_[i] holds a scale
  // A literal whose significand passes 64 bits, at its own scale.
  struct large_term {
    integer value;
    std::int64_t exp2;
    std::int64_t exp5;
  };
  static bool finer(std::int64_t a2, std::int64_t a5, std::int64_t b2, std::int64_t b5) noexcept;
  static std::size_t compact(std::vector<bucket>& sums);
  std::size_t compact_large();

  // What no bucket holds, each sum at its own scale: nothing is rescaled until `value`, which brings the
  // scales together in a balanced way. Each list is merged to one entry per scale whenever it has doubled,
  // so that it holds about as many entries as distinct scales, not as many as literals.
  std::vector<bucket> spilled_;  // machine sums displaced from the buckets
  std::size_t spilled_compacted_ = 0;
  std::vector<large_term> large_;
  std::size_t large_compacted_ = 0;
  tree_sum fractions_;
};

}  // namespace normcheck

#include "normcheck/gate/observed.hpp"

#include "normcheck/core/exact_sum.hpp"
#include "normcheck/core/names.hpp"

#include <gmp.h>

#include <bit>
#include <limits>

namespace normcheck {

namespace {

constexpr name_table non_finite_names{std::array<std::pair<non_finite, std::string_view>, 3>{{
    {non_finite::nan, "nan"},
    {non_finite::positive_infinity, "inf"},
    {non_finite::negative_infinity, "-inf"},
}}};

}  // namespace

std::string_view non_finite_name(non_finite value) noexcept { return non_finite_names.name(value); }

std::optional<non_finite> non_finite_from_name(std::string_view name) noexcept { return non_finite_names.find(name); }

std::string to_string(const observed_value& value) {
  if (const rational* number = std::get_if<rational>(&value)) return to_string(*number);
  return std::string(non_finite_name(std::get<non_finite>(value)));
}

void observed_vector::push_back(const observed_value& value) {
  cell c;
  if (const non_finite* special = std::get_if<non_finite>(&value)) {
    c.kind = *special == non_finite::nan                 ? cell_kind::nan
             : *special == non_finite::positive_infinity ? cell_kind::positive_infinity
                                                         : cell_kind::negative_infinity;
    cells_.push_back(c);
    return;
  }
  const rational& number = std::get<rational>(value);
  const mpq_srcptr q = number.backend().data();
  // Canonical, so m·2⁻ᵏ is held exactly one way: the numerator m and the denominator's one set bit.
  if (mpz_fits_slong_p(mpq_numref(q)) && mpz_popcount(mpq_denref(q)) == 1) {
    const mp_bitcnt_t shift = mpz_scan1(mpq_denref(q), 0);
    if (shift <= std::numeric_limits<std::uint32_t>::max()) {
      c.mantissa = mpz_get_si(mpq_numref(q));
      c.shift = static_cast<std::uint32_t>(shift);
      cells_.push_back(c);
      return;
    }
  }
  c.kind = cell_kind::other;
  c.mantissa = static_cast<std::int64_t>(others_.size());
  others_.push_back(number);
  cells_.push_back(c);
}

std::optional<std::uint64_t> observed_vector::push_back(const machine_literal& value) {
  if (value.exp5 != 0 && value.significand != 0) return std::nullopt;  // a decimal fraction or power of ten
  cell c;
  std::uint64_t bits = 2;  // 0 is 0/1
  if (value.significand != 0) {
    // Canonical: an odd numerator over 2^k, or an integer over 1.
    const int zeros = std::countr_zero(value.significand);  // < 64: the significand is not 0
    const std::uint64_t odd = value.significand >> zeros;
    const std::int64_t exponent = std::int64_t{value.exp2} + zeros;
    const std::int64_t width = static_cast<std::int64_t>(std::bit_width(odd));
    if (exponent >= 0) {
      if (width + exponent > 63) return std::nullopt;
      c.mantissa = static_cast<std::int64_t>(odd << exponent);
      bits = static_cast<std::uint64_t>(width + exponent) + 1;
    } else {
      if (width > 63) return std::nullopt;
      c.mantissa = static_cast<std::int64_t>(odd);
      c.shift = static_cast<std::uint32_t>(-exponent);
      bits = static_cast<std::uint64_t>(width) + c.shift + 1;
    }
    if (value.negative) c.mantissa = -c.mantissa;
  }
  cells_.push_back(c);
  return bits;
}

observed_value observed_vector::operator[](std::size_t i) const {
  const cell& c = cells_[i];
  switch (c.kind) {
    case cell_kind::nan: return non_finite::nan;
    case cell_kind::positive_infinity: return non_finite::positive_infinity;
    case cell_kind::negative_infinity: return non_finite::negative_infinity;
    case cell_kind::other: return others_[static_cast<std::size_t>(c.mantissa)];
    case cell_kind::dyadic: break;
  }
  rational value;
  const mpq_ptr q = value.backend().data();
  mpz_set_si(mpq_numref(q), c.mantissa);
  mpz_set_ui(mpq_denref(q), 0);
  mpz_setbit(mpq_denref(q), c.shift);
  return value;
}

bool observed_vector::same_at(std::size_t i, const observed_vector& other, std::size_t j) const {
  const cell& a = cells_[i];
  const cell& b = other.cells_[j];
  if (a.kind != b.kind) return false;
  if (a.kind == cell_kind::other)
    return others_[static_cast<std::size_t>(a.mantissa)] == other.others_[static_cast<std::size_t>(b.mantissa)];
  return a.mantissa == b.mantissa && a.shift == b.shift;
}

std::vector<observed_value> observed_vector::values() const {
  std::vector<observed_value> out;
  out.reserve(size());
  for (std::size_t i = 0; i < size(); ++i) out.push_back((*this)[i]);
  return out;
}

rational observed_vector::finite_sum() const {
  exact_sum dyadic;  // m·2⁻ᵏ as machine integers, added per scale
  tree_sum others;
  for (const cell& c : cells_) {
    if (c.kind == cell_kind::other) {
      others.add(others_[static_cast<std::size_t>(c.mantissa)]);
    } else if (c.kind == cell_kind::dyadic) {
      if (c.shift <= static_cast<std::uint32_t>(std::numeric_limits<std::int32_t>::max())) {
        machine_literal term;
        term.negative = c.mantissa < 0;
        const std::uint64_t bits = static_cast<std::uint64_t>(c.mantissa);
        term.significand = c.mantissa < 0 ? 0 - bits : bits;
        term.exp2 = -static_cast<std::int32_t>(c.shift);
        dyadic.add(term);
      } else {
        dyadic.add(std::get<rational>((*this)[static_cast<std::size_t>(&c - cells_.data())]));
      }
    }
  }
  rational total = dyadic.value();
  if (!others.empty()) total += others.value();
  return total;
}

bool operator==(const observed_vector& a, const observed_vector& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i)
    if (!a.same_at(i, b)) return false;
  return true;
}

}  // namespace normcheck

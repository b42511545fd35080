#include "normcheck/exact_sum.hpp"

namespace normcheck {

namespace {

// value · base^exponent for exponent >= 0, in place.
void scale_up(integer& value, unsigned long base, std::int64_t exponent) {
  if (exponent <= 0 || value == 0) return;
  mpz_ptr z = value.backend().data();
  if (base == 2) {
    mpz_mul_2exp(z, z, static_cast<mp_bitcnt_t>(exponent));
    return;
  }
  integer power;
  mpz_ui_pow_ui(power.backend().data(), base, static_cast<unsigned long>(exponent));
  mpz_mul(z, z, power.backend().data());
}

}  // namespace

void exact_sum::add(const literal_parts& term) {
  if (term.denominator != 1) {
    rational fraction = to_rational(term);
    fractions_ += fraction;
    return;
  }
  if (!any_scaled_) {
    exp2_ = term.exp2;
    exp5_ = term.exp5;
    any_scaled_ = true;
  }
  // Lower the common scale when the term is finer, then add the term at that scale.
  if (term.exp2 < exp2_) {
    scale_up(scaled_, 2, exp2_ - term.exp2);
    exp2_ = term.exp2;
  }
  if (term.exp5 < exp5_) {
    scale_up(scaled_, 5, exp5_ - term.exp5);
    exp5_ = term.exp5;
  }
  integer value = term.significand;
  scale_up(value, 2, term.exp2 - exp2_);
  scale_up(value, 5, term.exp5 - exp5_);
  if (term.negative) scaled_ -= value;
  else scaled_ += value;
}

void exact_sum::add(const rational& term) {
  fractions_ += term;
}

rational exact_sum::value() const {
  literal_parts parts;
  parts.negative = scaled_ < 0;
  parts.significand = abs(scaled_);
  parts.exp2 = exp2_;
  parts.exp5 = exp5_;
  rational total = to_rational(parts);
  total += fractions_;
  return total;
}

}  // namespace normcheck

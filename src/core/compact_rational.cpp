#include "normcheck/core/compact_rational.hpp"

#include <gmp.h>

#include <utility>

namespace normcheck {

compact_rational::compact_rational(const rational& value) {
  const mpq_srcptr q = value.backend().data();
  if (mpz_fits_slong_p(mpq_numref(q)) && mpz_fits_ulong_p(mpq_denref(q))) {
    numerator_ = mpz_get_si(mpq_numref(q));
    denominator_ = mpz_get_ui(mpq_denref(q));
    return;
  }
  heap_ = new rational(value);
  denominator_ = 0;
}

compact_rational::compact_rational(const compact_rational& other) : denominator_(other.denominator_) {
  if (other.is_inline())
    numerator_ = other.numerator_;
  else
    heap_ = new rational(*other.heap_);
}

compact_rational::compact_rational(compact_rational&& other) noexcept : denominator_(other.denominator_) {
  if (other.is_inline()) {
    numerator_ = other.numerator_;
    return;
  }
  heap_ = std::exchange(other.heap_, nullptr);
  other.numerator_ = 0;
  other.denominator_ = 1;
}

compact_rational& compact_rational::operator=(const compact_rational& other) {
  if (this != &other) *this = compact_rational(other);
  return *this;
}

compact_rational& compact_rational::operator=(compact_rational&& other) noexcept {
  if (this == &other) return *this;
  if (!is_inline()) delete heap_;
  denominator_ = other.denominator_;
  if (other.is_inline()) {
    numerator_ = other.numerator_;
    return *this;
  }
  heap_ = std::exchange(other.heap_, nullptr);
  other.numerator_ = 0;
  other.denominator_ = 1;
  return *this;
}

compact_rational::~compact_rational() {
  if (!is_inline()) delete heap_;
}

rational compact_rational::value() const {
  if (!is_inline()) return *heap_;
  // Stored from a canonical value, so the parts are coprime and the denominator positive as they are.
  rational value;
  const mpq_ptr q = value.backend().data();
  mpz_set_si(mpq_numref(q), numerator_);
  mpz_set_ui(mpq_denref(q), denominator_);
  return value;
}

bool operator==(const compact_rational& a, const compact_rational& b) {
  if (a.is_inline() != b.is_inline()) return false;
  if (a.is_inline()) return a.numerator_ == b.numerator_ && a.denominator_ == b.denominator_;
  return *a.heap_ == *b.heap_;
}

}  // namespace normcheck

#include "normcheck/core/exact_sum.hpp"

#include "normcheck/core/machine_scan.hpp"

#include <algorithm>
#include <bit>
#include <cstring>
#include <deque>

namespace normcheck {

namespace {

__extension__ typedef unsigned __int128 uint128;

using detail::digit_run;
using detail::digit_run_value;
using detail::fast_exponent_bound;
using detail::powers_of_ten;
using detail::scan_short_decimal;

bool is_decimal_digit(char c) { return static_cast<unsigned char>(c - '0') < 10; }

// The value of each hexadecimal digit, -1 for every other byte.
constexpr std::array<std::int8_t, 256> hex_values = [] {
  std::array<std::int8_t, 256> table{};
  for (int c = 0; c < 256; ++c) {
    table[static_cast<std::size_t>(c)] = static_cast<std::int8_t>(c >= '0' && c <= '9'   ? c - '0'
                                                                  : c >= 'a' && c <= 'f' ? c - 'a' + 10
                                                                  : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                                                                         : -1);
  }
  return table;
}();

int hex_value(char c) { return hex_values[static_cast<unsigned char>(c)]; }

// The digits that start the eight bytes at p, as one number, and how many there are (0 to 8), read in
// a few multiplications instead of a loop (SWAR): the careful scan's reader of eight digits.
unsigned leading_digits(const char* p, std::uint64_t& value) {
  if constexpr (std::endian::native != std::endian::little) return 0;
  std::uint64_t low;
  const unsigned count = digit_run(p, low);
  if (count != 0) value = digit_run_value(low, count);
  return count;
}

// The largest significand that still takes one more hexadecimal digit without leaving 64 bits.
constexpr std::uint64_t max_before_hex_digit = UINT64_MAX >> 4;

// significand · scale + digits, false when it leaves 64 bits.
bool append_digits(std::uint64_t& significand, std::uint64_t scale, std::uint64_t digits) {
  std::uint64_t shifted;
  return !__builtin_mul_overflow(significand, scale, &shifted) &&
         !__builtin_add_overflow(shifted, digits, &significand);
}

// Reads decimal digits from p into `significand`, stopping at the first non-digit; nullptr when the
// value leaves 64 bits (the caller then leaves the literal to parse_literal).
const char* read_decimal_digits(const char* p, const char* end, std::uint64_t& significand) {
  while (end - p >= 8) {
    std::uint64_t digits = 0;
    const unsigned count = leading_digits(p, digits);
    if (count == 0) return p;
    if (!append_digits(significand, powers_of_ten[count], digits)) return nullptr;
    p += count;
    if (count < 8) return p;
  }
  for (; p != end && is_decimal_digit(*p); ++p)
    if (!append_digits(significand, 10, static_cast<std::uint64_t>(*p - '0'))) return nullptr;
  return p;
}

// Reads hexadecimal digits from p into `significand`, as read_decimal_digits does.
const char* read_hex_digits(const char* p, const char* end, std::uint64_t& significand) {
  for (; p != end; ++p) {
    const int value = hex_value(*p);
    if (value < 0) break;
    if (significand > max_before_hex_digit) return nullptr;
    significand = (significand << 4) | static_cast<std::uint64_t>(value);
  }
  return p;
}

// "[+-]digits" of an exponent; false when malformed or beyond `bound`.
bool read_exponent(const char*& p, const char* end, std::int64_t bound, std::int64_t& exponent) {
  bool negative = false;
  if (p != end && (*p == '+' || *p == '-')) {
    negative = *p == '-';
    ++p;
  }
  if (p == end || !is_decimal_digit(*p)) return false;
  std::int64_t value = 0;
  while (p != end && is_decimal_digit(*p)) {
    value = value * 10 + (*p - '0');
    if (value > bound) return false;
    ++p;
  }
  exponent = negative ? -value : value;
  return true;
}

// The scanners read a literal from p and return where it stops, or nullptr when they do not take it.
// The stop is the first character that cannot continue the literal; the caller decides whether the
// literal may end there.
const char* scan_decimal(const char* p, const char* end, std::int64_t bound, std::size_t max_digits,
                         machine_literal& out) {
  const char* const whole_start = p;
  std::uint64_t significand = 0;
  if (p == end || !is_decimal_digit(*p)) return nullptr;
  if (*p == '0' && p + 1 != end && is_decimal_digit(p[1])) return nullptr;  // a leading zero
  p = read_decimal_digits(p, end, significand);
  if (p == nullptr) return nullptr;
  std::size_t digits = static_cast<std::size_t>(p - whole_start);
  std::int64_t fraction_digits = 0;
  if (p != end && *p == '.') {
    const char* const fraction_start = ++p;
    p = read_decimal_digits(p, end, significand);
    if (p == nullptr || p == fraction_start) return nullptr;
    fraction_digits = p - fraction_start;
    digits += static_cast<std::size_t>(fraction_digits);
  }
  if (digits > max_digits || fraction_digits > fast_exponent_bound) return nullptr;
  std::int64_t exponent = 0;
  if (p != end && (*p == 'e' || *p == 'E')) {
    ++p;
    if (!read_exponent(p, end, bound, exponent)) return nullptr;
  }
  out.significand = significand;
  out.exp2 = out.exp5 = static_cast<std::int32_t>(exponent - fraction_digits);
  return p;
}

const char* scan_hexadecimal(const char* p, const char* end, std::int64_t bound, std::size_t max_digits,
                             machine_literal& out) {
  const char* const whole_start = p;
  std::uint64_t significand = 0;
  p = read_hex_digits(p, end, significand);
  if (p == nullptr) return nullptr;
  std::size_t digits = static_cast<std::size_t>(p - whole_start);
  std::int64_t fraction_digits = 0;
  if (p != end && *p == '.') {
    const char* const fraction_start = ++p;
    p = read_hex_digits(p, end, significand);
    if (p == nullptr) return nullptr;
    fraction_digits = p - fraction_start;
    digits += static_cast<std::size_t>(fraction_digits);
  }
  if (digits == 0 || digits > max_digits || fraction_digits > fast_exponent_bound) return nullptr;
  if (p == end || (*p != 'p' && *p != 'P')) return nullptr;
  ++p;
  std::int64_t exponent = 0;
  if (!read_exponent(p, end, bound, exponent)) return nullptr;
  out.significand = significand;
  out.exp2 = static_cast<std::int32_t>(exponent - 4 * fraction_digits);
  out.exp5 = 0;
  return p;
}

integer to_integer(uint128 value) {
  integer result = static_cast<std::uint64_t>(value >> 64);
  mpz_ptr z = result.backend().data();
  mpz_mul_2exp(z, z, 64);
  mpz_add_ui(z, z, static_cast<unsigned long>(static_cast<std::uint64_t>(value)));
  return result;
}

// One integer at a scale: value · 2^exp2 · 5^exp5.
struct scaled_integer {
  integer value;
  std::int64_t exp2 = 0;
  std::int64_t exp5 = 0;
};

// The powers of 5 one sum needs, each computed once: the halves of a run of exponents differ by the same
// few amounts.
class powers_of_five {
public:
  const integer& operator()(std::int64_t exponent) {
    for (const auto& [known, power] : powers_)
      if (known == exponent) return power;
    integer power;
    mpz_ui_pow_ui(power.backend().data(), 5, static_cast<unsigned long>(exponent));
    powers_.emplace_back(exponent, std::move(power));
    return powers_.back().second;
  }

private:
  std::deque<std::pair<std::int64_t, integer>> powers_;  // a deque: references stay valid as it grows
};

// value · 2^a · 5^b for a, b ≥ 0, in place.
void scale_up(integer& value, std::int64_t a, std::int64_t b, powers_of_five& fives) {
  if (value == 0) return;
  mpz_ptr z = value.backend().data();
  if (b > 0) mpz_mul(z, z, fives(b).backend().data());
  if (a > 0) mpz_mul_2exp(z, z, static_cast<mp_bitcnt_t>(a));
}

// The sum of terms[begin, end) (sorted by scale) at the smallest scale among them, each half summed on its
// own first. Bringing a sum to a finer scale multiplies it by a power of 2 and 5 as large as the scales it
// spans: added one by one from the coarsest, every step would pay for the whole span (quadratic in the
// number of exponents); halving, each level of the recursion pays for the span once.
scaled_integer sum_at_common_scale(std::vector<scaled_integer>& terms, std::size_t begin, std::size_t end,
                                   powers_of_five& fives) {
  if (end - begin == 1) return std::move(terms[begin]);
  const std::size_t middle = begin + (end - begin) / 2;
  scaled_integer low = sum_at_common_scale(terms, begin, middle, fives);
  scaled_integer high = sum_at_common_scale(terms, middle, end, fives);
  const std::int64_t exp2 = std::min(low.exp2, high.exp2);
  const std::int64_t exp5 = std::min(low.exp5, high.exp5);
  scale_up(low.value, low.exp2 - exp2, low.exp5 - exp5, fives);
  scale_up(high.value, high.exp2 - exp2, high.exp5 - exp5, fives);
  low.value += high.value;
  low.exp2 = exp2;
  low.exp5 = exp5;
  return low;
}

}  // namespace

std::size_t scan_machine_prefix(std::string_view text, literal_form form, const number_limits& limits,
                                machine_literal& out) noexcept {
  const char* p = text.data();
  const char* const end = p + text.size();
  out.negative = false;
  if (p != end && *p == '-') {
    out.negative = true;
    ++p;
  }
  const std::int64_t bound = detail::machine_exponent_bound(limits);
  const char* stop;
  if (form == literal_form::json_string && end - p >= 2 && p[0] == '0' && (p[1] == 'x' || p[1] == 'X'))
    stop = scan_hexadecimal(p + 2, end, bound, limits.max_digits, out);
  else if ((stop = scan_short_decimal(p, end, bound, limits.max_digits, out)) == nullptr)
    stop = scan_decimal(p, end, bound, limits.max_digits, out);
  if (stop == nullptr) return 0;
  if (out.significand == 0) out.negative = false;
  return static_cast<std::size_t>(stop - text.data());
}

bool scan_machine_literal(std::string_view text, literal_form form, const number_limits& limits,
                          machine_literal& out) noexcept {
  return !text.empty() && scan_machine_prefix(text, form, limits, out) == text.size();
}

literal_parts to_parts(const machine_literal& literal) {
  literal_parts parts;
  parts.negative = literal.negative;
  parts.significand = literal.significand;
  parts.exp2 = literal.exp2;
  parts.exp5 = literal.exp5;
  return parts;
}

void exact_sum::add(const literal_parts& term) {
  if (term.denominator != 1) {
    fractions_.add(to_rational(term));
    return;
  }
  if (term.significand == 0) return;
  integer value = term.significand;
  if (term.negative) value = -value;
  large_.push_back({std::move(value), term.exp2, term.exp5});
  if (large_.size() >= 2 * large_compacted_ + 64) large_compacted_ = compact_large();
}

// Scales compared in the order the final sum meets them.
bool exact_sum::finer(std::int64_t a2, std::int64_t a5, std::int64_t b2, std::int64_t b5) noexcept {
  return a2 != b2 ? a2 < b2 : a5 < b5;
}

void exact_sum::spill(const bucket& b) {
  spilled_.push_back(b);
  if (spilled_.size() >= 2 * spilled_compacted_ + 1024) spilled_compacted_ = compact(spilled_);
}

std::size_t exact_sum::compact(std::vector<bucket>& sums) {
  // One bucket per scale: the sums of one scale hold fewer than 2^64 terms together, so they still fit.
  std::sort(sums.begin(), sums.end(),
            [](const bucket& a, const bucket& b) { return finer(a.exp2, a.exp5, b.exp2, b.exp5); });
  std::size_t kept = 0;
  for (std::size_t i = 0; i < sums.size(); ++i) {
    if (kept > 0 && sums[kept - 1].exp2 == sums[i].exp2 && sums[kept - 1].exp5 == sums[i].exp5) {
      sums[kept - 1].positive += sums[i].positive;
      sums[kept - 1].negative += sums[i].negative;
    } else {
      sums[kept++] = sums[i];
    }
  }
  sums.resize(kept);
  return kept;
}

std::size_t exact_sum::compact_large() {
  std::sort(large_.begin(), large_.end(),
            [](const large_term& a, const large_term& b) { return finer(a.exp2, a.exp5, b.exp2, b.exp5); });
  std::size_t kept = 0;
  for (std::size_t i = 0; i < large_.size(); ++i) {
    if (kept > 0 && large_[kept - 1].exp2 == large_[i].exp2 && large_[kept - 1].exp5 == large_[i].exp5)
      large_[kept - 1].value += large_[i].value;
    else if (kept != i)
      large_[kept++] = std::move(large_[i]);
    else
      ++kept;
  }
  large_.resize(kept);
  return kept;
}

void exact_sum::add(const rational& term) {
  if (term != 0) fractions_.add(term);
}

rational exact_sum::value() const {
  if (used_ == 0 && spilled_.empty() && large_.empty() && fractions_.empty()) return rational(0);
  // Every scale's machine sums, those still in the buckets with those spilled, one per scale.
  std::vector<bucket> sums = spilled_;
  for (std::size_t i = 0; i < bucket_count; ++i)
    if (used_ & (std::uint32_t{1} << i)) sums.push_back(buckets_[i]);
  compact(sums);
  std::vector<scaled_integer> terms;
  terms.reserve(sums.size() + large_.size());
  for (const bucket& b : sums) {
    integer sum = to_integer(b.positive);
    sum -= to_integer(b.negative);
    if (sum != 0) terms.push_back({std::move(sum), b.exp2, b.exp5});
  }
  for (const large_term& term : large_)
    if (term.value != 0) terms.push_back({term.value, term.exp2, term.exp5});
  std::sort(terms.begin(), terms.end(), [](const scaled_integer& a, const scaled_integer& b) {
    return finer(a.exp2, a.exp5, b.exp2, b.exp5);
  });
  rational total = fractions_.value();
  if (terms.empty()) return total;
  powers_of_five fives;
  const scaled_integer sum = sum_at_common_scale(terms, 0, terms.size(), fives);
  literal_parts parts;
  parts.negative = sum.value < 0;
  parts.significand = abs(sum.value);
  parts.exp2 = sum.exp2;
  parts.exp5 = sum.exp5;
  total += to_rational(parts);
  return total;
}

void tree_sum::add(rational term) {
  // A binary counter: a block of 2^i terms meets the block of 2^i before it, carrying upwards.
  std::size_t level = 0;
  for (std::uint64_t count = count_; count & 1; count >>= 1, ++level) {
    term += levels_[level];
    levels_[level] = 0;
  }
  if (level == levels_.size()) levels_.push_back(std::move(term));
  else levels_[level] = std::move(term);
  ++count_;
}

rational tree_sum::value() const {
  rational total;
  for (const rational& block : levels_) total += block;  // the small blocks first
  return total;
}

rational sum_of(const std::vector<rational>& terms) {
  tree_sum total;
  for (const rational& term : terms) total.add(term);
  return total.value();
}

}  // namespace normcheck

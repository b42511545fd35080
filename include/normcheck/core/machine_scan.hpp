#pragma once
/// \file core/machine_scan.hpp
/// The usual case of `scan_machine_prefix`, inline for the loops that read token arrays: a decimal literal
/// of at most 19 digits read eight digits at a time (SWAR), with no division and no overflow check. Only
/// exact_sum.cpp, which falls back on its careful scan, and the token loops include it.

#include "normcheck/core/exact_sum.hpp"

#include <bit>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace normcheck {

namespace detail {

/// Exponents and digit counts beyond this are left to parse_literal, so that every exponent the machine
/// scan produces fits comfortably in 32 bits.
constexpr std::int64_t fast_exponent_bound = 1 << 29;

constexpr std::uint64_t powers_of_ten[9] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000, 100000000};

/// How many digits start the eight bytes at p (0 to 8), and those bytes less '0' (`low`, meaningful up to
/// the first non-digit). Digits neither borrow nor carry between bytes, so the first non-digit is found
/// exactly.
inline unsigned digit_run(const char* p, std::uint64_t& low) noexcept {
  std::uint64_t chunk;
  std::memcpy(&chunk, p, 8);
  low = chunk - 0x3030303030303030ull;
  const std::uint64_t non_digits = (low | (chunk + 0x4646464646464646ull)) & 0x8080808080808080ull;
  return non_digits == 0 ? 8u : static_cast<unsigned>(std::countr_zero(non_digits)) / 8;
}

/// The number the first `count` (1 to 8) bytes of `low` spell: they move to the high bytes (the low digits
/// of an eight-digit number), zeros fill the rest, and three multiplications add them up.
inline std::uint64_t digit_run_value(std::uint64_t low, unsigned count) noexcept {
  std::uint64_t chunk = count == 8 ? low : low << (64 - 8 * count);
  chunk = (chunk * 10) + (chunk >> 8);
  return (((chunk & 0x000000FF000000FFull) * 0x000F424000000064ull) +
          (((chunk >> 16) & 0x000000FF000000FFull) * 0x0000271000000001ull)) >> 32;
}

/// Bytes the short scan may read from where a literal's digits start: at most 19 digits, a point, an 'e'
/// and a sign, then a run of eight; or three digits, a point and three runs of eight.
constexpr std::ptrdiff_t short_scan_reach = 40;

/// The short scan of the unsigned decimal literal at p: at most 19 digits (its significand cannot leave
/// 64 bits, so no overflow is checked) and an exponent of at most seven digits, read a run of eight
/// digits at a time. Sets every part of `out` but the sign and returns where the literal stops; nullptr
/// leaves it to the careful scan, which then takes or declines it: anything longer, too near the end of
/// the text, or not well formed. Where it returns a stop, the careful scan returns the same stop and the
/// same parts.
inline const char* scan_short_decimal(const char* p, const char* end, std::int64_t bound, std::size_t max_digits,
                                      machine_literal& out) noexcept {
  if constexpr (std::endian::native != std::endian::little) return nullptr;
  if (end - p < short_scan_reach) return nullptr;
  std::uint64_t low;
  const unsigned whole = digit_run(p, low);
  if (whole == 0 || whole == 8 || (whole > 1 && *p == '0')) return nullptr;
  std::uint64_t significand = whole == 1 ? low & 0xF : digit_run_value(low, whole);
  p += whole;
  unsigned digits = whole;
  std::int64_t fraction_digits = 0;
  if (*p == '.') {
    ++p;
    unsigned run = 8;
    while (run == 8) {
      run = digit_run(p, low);
      if (run == 0) break;
      digits += run;
      if (digits > 19) return nullptr;
      significand = significand * powers_of_ten[run] + digit_run_value(low, run);
      p += run;
    }
    fraction_digits = static_cast<std::int64_t>(digits - whole);
    if (fraction_digits == 0) return nullptr;
  }
  if (digits > max_digits) return nullptr;
  std::int64_t exponent = 0;
  if (*p == 'e' || *p == 'E') {
    ++p;
    const bool negative = *p == '-';
    if (negative || *p == '+') ++p;
    const unsigned written = digit_run(p, low);
    if (written == 0 || written == 8) return nullptr;
    exponent = static_cast<std::int64_t>(digit_run_value(low, written));
    if (exponent > bound) return nullptr;
    if (negative) exponent = -exponent;
    p += written;
  }
  out.significand = significand;
  out.exp2 = out.exp5 = static_cast<std::int32_t>(exponent - fraction_digits);
  return p;
}

/// The largest exponent the machine scan takes under `limits`.
constexpr std::int64_t machine_exponent_bound(const number_limits& limits) noexcept {
  return limits.max_exponent < fast_exponent_bound ? limits.max_exponent : fast_exponent_bound;
}

}  // namespace detail

/// `scan_machine_prefix` on a JSON number token (literal_form::json_number), the same result, its usual
/// case without a call.
inline std::size_t scan_machine_number(std::string_view text, const number_limits& limits,
                                       machine_literal& out) noexcept {
  const char* const start = text.data();
  const char* const end = start + text.size();
  const bool negative = start != end && *start == '-';
  if (const char* stop = detail::scan_short_decimal(start + negative, end, detail::machine_exponent_bound(limits),
                                                    limits.max_digits, out)) {
    // Without a branch: the signs of a token array follow no pattern a predictor could learn.
    out.negative = static_cast<bool>(static_cast<unsigned>(negative) & static_cast<unsigned>(out.significand != 0));
    return static_cast<std::size_t>(stop - start);
  }
  return scan_machine_prefix(text, literal_form::json_number, limits, out);
}

}  // namespace normcheck

#pragma once
/// \file documents/field_reader.hpp
/// The typed fields every document kind is made of: exact numbers, counts, names from a fixed list,
/// `format` and `expect_error`. Each read checks the value where it stands and fails with the
/// stable code, the value's line:column and what was expected, so that the normcheck/1 reader, the
/// scenario reader and the trace reader say the same thing about the same mistake.

#include "normcheck/core/errors.hpp"
#include "normcheck/core/exact_sum.hpp"
#include "normcheck/core/rational.hpp"
#include "normcheck/io/json_reader.hpp"

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

namespace normcheck {

class field_reader;

/// What a document's exact values cost, counted while it is read, against `reader_limits`: the digits of
/// the values it keeps (`max_exact_digits`) and of the distinct fraction denominators it holds, factors 2
/// and 5 apart (`max_fraction_digits`). Beyond either the document is `limit_exceeded` at once, naming the
/// option that raises the limit, instead of costing more time and memory than its size.
class exact_budget {
public:
  explicit exact_budget(const reader_limits& limits) : limits_(limits) {}

  /// Counts a fraction literal's denominator once per distinct value (its factors 2 and 5 apart: their
  /// powers add nothing to a common denominator beyond the largest).
  void note_denominator(const integer& denominator, const field_reader& at, std::uint64_t offset);
  /// Counts the digits of a value the document keeps.
  void note_kept(const rational& value, const field_reader& at, std::uint64_t offset);
  /// The same for a value kept without a rational: `bits` of its numerator and denominator together, as
  /// `kept_bits` counts them.
  void note_kept_bits(std::uint64_t bits, const field_reader& at, std::uint64_t offset);
  /// What a kept value counts: the bits of its numerator and of its denominator (a 0 counts one bit).
  static std::uint64_t kept_bits(const rational& value);

private:
  reader_limits limits_;
  std::uint64_t kept_bits_ = 0;
  std::uint64_t fraction_bits_ = 0;
  std::set<std::string, std::less<>> denominators_;  // distinct odd-and-not-5 parts, in base 32
};

/// One member an object may have: its key, and what reads its value (called with the key, the reader
/// standing at the value).
struct member_reader {
  std::string_view key;
  std::function<void(std::string_view key)> read;
};

/// Keys an object must have together, and the schema_error when one of them is missing.
struct required_members {
  std::vector<std::string_view> keys;
  std::string message;
  std::optional<std::uint64_t> offset;  ///< where the error points; the object's own offset when empty
};

/// An object with known keys, said once: its members, what an unknown key's message says after the key
/// (where it is and which keys it has: "in a step (a step has ranks and repeat)"), and the keys it needs.
struct object_shape {
  std::vector<member_reader> members;
  std::string unknown;
  std::vector<required_members> required;  ///< checked in order, once every member is read
};

/// The members `read_members` met, by key.
class members_seen {
public:
  /// Whether the member `key` was present.
  bool has(std::string_view key) const;
  /// Whether every one of `keys` was present.
  bool has_all(const std::vector<std::string_view>& keys) const;

private:
  friend class field_reader;
  std::vector<std::string_view> keys_;  // the shape's own spellings, which outlive the reader's buffers
};

/// A json_reader with the typed reads of a document's fields.
class field_reader : public json_reader {
public:
  using json_reader::json_reader;
  /// Reads on from where `json` stands.
  explicit field_reader(json_reader json) : json_reader(std::move(json)) {}

  /// A second reader over the same text at `offset` (see json_reader::at), counting against the same budget.
  field_reader at(std::uint64_t offset) const {
    field_reader other(json_reader::at(offset));
    other.budget_ = budget_;
    return other;
  }

  /// Counts the fraction literals read from now on against `budget` (none: not counted).
  void count_against(exact_budget* budget) noexcept { budget_ = budget; }
  /// Counts the digits of a value the document keeps, read at `offset`, against the budget (if any).
  void keep(const rational& value, std::uint64_t offset) {
    if (budget_) budget_->note_kept(value, *this, offset);
  }
  /// The same for a value kept without a rational, of `bits` as `exact_budget::kept_bits` counts them.
  void keep_bits(std::uint64_t bits, std::uint64_t offset) {
    if (budget_) budget_->note_kept_bits(bits, *this, offset);
  }

  /// An exact number, taken apart: a JSON number, or a string holding a fraction, hexadecimal float or
  /// decimal. Literal errors (bad_number, number_out_of_range) are located at the value.
  literal_parts literal(std::string_view what);
  /// An exact number.
  rational exact(std::string_view what);
  /// The text of an exact number, read past: a JSON number's, or a string's (its form tells which), for a
  /// caller that reads many of them fast (`scan_machine_literal`) and the rest with `parse`.
  struct literal_text {
    std::string_view written;  ///< lives until the next string read
    literal_form form = literal_form::json_number;
    std::uint64_t offset = 0;
  };
  literal_text exact_text(std::string_view what);
  /// `text` taken apart as `literal` takes a literal apart, its errors located at its offset.
  literal_parts parse(const literal_text& text) { return parse_at(text.written, text.form, text.offset); }
  /// An exact number ≥ 0.
  rational non_negative(std::string_view what);
  /// A JSON integer in [low, high]: below `low` or not an integer is a schema_error, above `high` is
  /// `beyond` (a schema_error unless the caller names a limit).
  std::uint64_t integer(std::string_view what, std::uint64_t low, std::uint64_t high,
                        error_code beyond = error_code::schema_error);
  /// A string (the view lives until the next string read).
  std::string_view text(std::string_view what);
  /// true or false.
  bool flag(std::string_view what);
  /// A name from a fixed list: `find` maps a spelling to its value, `alternatives` lists them for the
  /// message ("unknown reducer \"avg\": expected mean or sum").
  template <typename Find>
  auto named(std::string_view what, Find find, std::string_view alternatives) {
    const std::uint64_t offset = value_offset();
    const std::string_view spelled = text(what);
    const auto value = find(spelled);
    if (!value) fail_unknown(what, spelled, alternatives, offset);
    return *value;
  }
  /// The `format` member: the string `expected`, or a schema_error saying which format this reader takes.
  void format(std::string_view expected);
  /// The `expect_error` member: an error code a document can produce.
  error_code expected_error();

  /// Fails with a schema_error at the key last read: an unknown key, and the keys `where` has.
  [[noreturn]] void fail_unknown_key(std::string_view key, std::string_view where_and_known);

  /// Reads the members of the object that is the next value (the caller has made sure it is an object) as
  /// `shape` says: each known key by its reader, any other key `fail_unknown_key(key, shape.unknown)`, a
  /// key written twice the JSON reader's schema_error. Returns what it met; `require` then checks it.
  members_seen read_members(const object_shape& shape);
  /// Checks `shape.required` against what `read_members` met in the object at `object_offset`: the first
  /// group with a missing key fails with its message.
  void require(const object_shape& shape, const members_seen& seen, std::uint64_t object_offset) const;
  /// `read_members` then `require`, for the object at the reader's position; returns what it met.
  members_seen read_object(const object_shape& shape);

private:
  exact_budget* budget_ = nullptr;

  literal_parts parse_at(std::string_view written, literal_form form, std::uint64_t offset);
  [[noreturn]] void fail_unknown(std::string_view what, std::string_view spelled, std::string_view alternatives,
                                 std::uint64_t offset);
};

}  // namespace normcheck

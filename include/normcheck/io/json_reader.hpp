#pragma once
/// \file io/json_reader.hpp
/// A pull reader for one JSON document held in memory. It hands over the literal text of numbers
/// (never a double), validates strings (UTF-8, escapes, surrogates), rejects duplicate keys,
/// bounds nesting depth and reports every error with file:line:column. Nothing is allocated per
/// array element.

#include "normcheck/core/errors.hpp"
#include "normcheck/core/exact_sum.hpp"
#include "normcheck/core/rational.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <set>
#include <vector>

namespace normcheck {

/// The reader's explicit limits; each rejection names the limit it hit.
struct reader_limits {
  std::size_t max_depth = 64;                       ///< deepest nesting of arrays and objects
  std::uint64_t max_file_size = 1ull << 30;         ///< largest input in bytes (1 GiB)
  number_limits numbers;                            ///< exponent and digit limits of literals
  /// Most microbatches of one update, over all ranks (a rank has at least one): each costs memory however
  /// short it is written (`[]` is two bytes; one with tokens keeps its sums, about 300 bytes).
  std::uint64_t max_microbatches = 200'000;
  /// Most digits the exact values a document keeps may take together (every microbatch's sums): `1e-10000`
  /// is eight characters and a ten-thousand-digit value.
  std::uint64_t max_exact_digits = 64'000'000;
  /// Most digits of the distinct denominators of fraction literals (p/q), factors 2 and 5 apart: a sum of
  /// fractions whose denominators share nothing has them all in its own, and costs accordingly.
  std::uint64_t max_fraction_digits = 100'000;
};

/// Whether `c` belongs to a number token: `json_reader::number_text` takes every such character into one.
constexpr bool is_number_char(char c) noexcept {
  return (c >= '0' && c <= '9') || c == '-' || c == '+' || c == '.' || c == 'e' || c == 'E';
}

/// The kind of the next JSON value.
enum class json_kind { object, array, string, number, boolean, null };

/// The spelling of a kind for messages: "an object", "a string", ...
std::string_view kind_name(json_kind kind) noexcept;

/// Reads one JSON document value by value. Strings and keys returned as views stay valid
/// until the next call that reads a string.
class json_reader {
public:
  /// Reads `text`, naming it `source` in errors. A leading UTF-8 byte-order mark is skipped.
  json_reader(std::string_view text, std::string source, const reader_limits& limits = {});

  /// A second reader over the same text, at `offset` with no bracket open: it re-reads a value this reader
  /// has already read (and so validated), e.g. to pair two arrays element by element.
  json_reader at(std::uint64_t offset) const;

  /// The kind of the next value; parse_error if there is none.
  json_kind peek();
  /// Byte offset where the next value starts (after whitespace).
  std::uint64_t value_offset();

  /// Enters an object.
  void begin_object();
  /// Advances to the next member of the innermost object and sets `key`; false at its end.
  bool next_member(std::string_view& key);
  /// Offset of the key last returned by `next_member`.
  std::uint64_t key_offset() const noexcept { return key_offset_; }
  /// Enters an array.
  void begin_array();
  /// Advances to the next element of the innermost array; false at its end.
  bool next_element();

  /// Reads a string value (decoded).
  std::string_view string_value();
  /// Reads a number token and returns its text as written.
  std::string_view number_text();
  /// The streaming path: reads the next value straight into machine integers when it is a number, or a
  /// string holding a literal, that `scan_machine_literal` takes; otherwise reads nothing and returns false.
  bool machine_value(machine_literal& out);
  /// Reads true or false.
  bool boolean_value();
  /// Reads null.
  void null_value();
  /// Skips the next value, validating it.
  void skip_value();
  /// Goes on after a value that was read elsewhere: the value at the current position ends just before
  /// `end`, an offset the caller found in the same text.
  void skip_to(std::uint64_t end) noexcept { pos_ = end; }
  /// Goes on inside the innermost array after elements that were read elsewhere: the last of them ends just
  /// before `end`, an offset the caller found in the same text (the current position: none were read).
  void skip_elements_to(std::uint64_t end) noexcept {
    if (end == pos_) return;
    pos_ = end;
    levels_.back().first = false;
  }
  /// Requires that only whitespace follows the document.
  void finish();

  /// The source name given at construction.
  const std::string& source() const noexcept { return source_; }
  /// The limits in force.
  const reader_limits& limits() const noexcept { return limits_; }
  /// The arrays and objects open where the reader stands (entering one more beyond `limits().max_depth`
  /// is limit_exceeded).
  std::size_t depth() const noexcept { return levels_.size(); }
  /// Line and column of a byte offset.
  location locate(std::uint64_t offset) const;
  /// Throws `error(code, message)` located at `offset`, marked `truncated()` when the input is cut off.
  [[noreturn]] void fail(error_code code, std::string message, std::uint64_t offset) const;
  /// True when the input ends inside the document: inside a string, with a bracket still open, or
  /// before any value. Counts brackets and strings only, so nothing else that is wrong before the end
  /// hides a cut. Costs one pass over the text.
  bool cut_off() const;
  /// Marks `e` as caused by input that ended early when the input is cut off: an error met before the
  /// end of a cut-off file never meets an expectation (see `error::truncated`).
  void mark_if_cut_off(error& e) const;
  /// Throws a wrong-type schema_error for the next value: "`what` must be `expected`, found ...".
  [[noreturn]] void fail_type(std::string_view what, std::string_view expected);

private:
  struct level {
    bool is_object;
    bool first;
    std::set<std::string, std::less<>> keys;  // keys seen so far in this object
  };

  void skip_whitespace();
  char current() const { return pos_ < text_.size() ? text_[pos_] : '\0'; }
  bool at_end() const { return pos_ >= text_.size(); }
  void expect_char(char c, std::string_view context);
  void enter(bool is_object);
  std::string_view read_string(std::string_view context);
  void read_word(std::string_view word);
  [[noreturn]] void fail_unexpected(std::string_view expected);

  std::string_view text_;
  std::string source_;
  reader_limits limits_;
  std::size_t pos_ = 0;
  std::uint64_t key_offset_ = 0;
  std::vector<level> levels_;
  std::string scratch_;
};

}  // namespace normcheck

#pragma once
/// \file core/errors.hpp
/// The one error type of normcheck: a stable code, where it happened, and what was wrong.

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

namespace normcheck {

/// Stable error codes. Their spelling (see `code_name`) is part of the file format and the JSON report.
enum class error_code {
  parse_error,          ///< the text is not well-formed JSON
  schema_error,         ///< well-formed JSON that is not a normcheck/1 document
  bad_number,           ///< a literal that is not an exact finite number of an accepted form
  number_out_of_range,  ///< a literal whose exponent or length is beyond the stated limits
  world_size_mismatch,  ///< `world_size` differs from the number of ranks
  no_valid_tokens,      ///< the update holds no valid token, so the objective is undefined
  limit_exceeded,       ///< the document is deeper or larger than the reader's limits
  recipe_error,         ///< a normalization recipe that does not parse, names an unknown count, or divides by zero
  io_error,             ///< the path cannot be read as a regular file
  usage_error,          ///< the command line is wrong
};

/// The stable spelling of a code, e.g. "bad_number".
std::string_view code_name(error_code code) noexcept;

/// The code spelled `name`, if there is one.
std::optional<error_code> code_from_name(std::string_view name) noexcept;

/// A position in a source: 1-based line and column (columns count characters, not bytes).
struct location {
  std::string file;
  std::uint64_t line = 0;    ///< 0 when the error has no position in the text
  std::uint64_t column = 0;
  std::uint64_t offset = 0;  ///< byte offset of the position
};

/// Every failure normcheck reports. The message says what was wrong and what is allowed.
class error : public std::runtime_error {
public:
  error(error_code code, std::string message, std::optional<location> where = std::nullopt);

  /// The message, as `message()` (kept current by `mark_cut_off_later`).
  const char* what() const noexcept override { return message_.c_str(); }
  /// The stable code.
  error_code code() const noexcept { return code_; }
  /// The message without location.
  const std::string& message() const noexcept { return message_; }
  /// Where it happened, when known.
  const std::optional<location>& where() const noexcept { return where_; }
  /// True when the input ended inside the document (a cut-off file).
  bool truncated() const noexcept { return truncated_; }
  /// Marks the error as caused by input that ended early.
  error& mark_truncated() noexcept { truncated_ = true; return *this; }
  /// Marks an error met before the end of an input that is also cut off: truncated, and the message says
  /// so, since the error's own code would not.
  error& mark_cut_off_later();
  /// Attaches a location unless one is already known.
  void locate(location where);

private:
  error_code code_;
  std::string message_;
  std::optional<location> where_;
  bool truncated_ = false;
};

/// "file:line:column: code: message", the form every rejection is printed in.
std::string describe(const error& e);

}  // namespace normcheck

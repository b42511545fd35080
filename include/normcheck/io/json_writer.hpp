#pragma once
/// \file io/json_writer.hpp
/// The one JSON writer: every report and document normcheck prints as JSON is written through it.
///
/// Its output is valid JSON and valid UTF-8 whatever bytes it is given, and no string it writes decodes to
/// a lone surrogate. In strings, `"` and `\` are escaped, and so are controls (C0, DEL, C1) and
/// non-characters, as \uXXXX. A byte that does not begin well-formed UTF-8 is shown as the four characters
/// `\xNN`. Names (a file name is any bytes) are written with `name`, reversibly: as `escaped_name` gives
/// them (the text report's spelling: every backslash of the name doubled, a byte that is not UTF-8 as
/// `\xNN`, a control as `\n`, `\t`, `\r` or `\xNN`, a non-character as `\u{XXXX}`), so that undoing those
/// escapes gives the original bytes back. Exact numbers are written as canonical strings ("-3/2"), never as
/// JSON floats.

#include "normcheck/core/rational.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace normcheck {

/// Where the JSON will stand, which decides what else its strings escape.
enum class json_context {
  document,        ///< a file or a stream of its own
  script_element,  ///< inside an HTML <script> element: <, > and & are escaped too, so it cannot close early
};

/// How a container places its elements.
enum class json_layout {
  inline_,  ///< `{"a": 1, "b": [2, 3]}` on one line
  lines,    ///< one element per line, indented two spaces per enclosing `lines` container
};

/// A member value to be written with `json_writer::name`: `member("file", json_name{path})`.
struct json_name {
  std::string_view bytes;
};

/// Writes one JSON value (usually an object) into a string, token by token. Misuse (a member without
/// a key, an unclosed container) is a programming error and asserts.
class json_writer {
public:
  /// Writes into `out`, appending, for `context`.
  explicit json_writer(std::string& out, json_context context = json_context::document)
      : out_(out), context_(context) {}

  /// Opens an object.
  json_writer& begin_object(json_layout layout = json_layout::inline_);
  /// Closes the innermost object.
  json_writer& end_object();
  /// Opens an array.
  json_writer& begin_array(json_layout layout = json_layout::inline_);
  /// Closes the innermost array.
  json_writer& end_array();
  /// Writes the key of the next member of the innermost object.
  json_writer& key(std::string_view name);

  /// A string, escaped as the file comment says.
  json_writer& string(std::string_view text);
  /// A name that may hold any bytes (a file name), written reversibly as `escaped_name` spells it.
  json_writer& name(std::string_view text);
  /// An unsigned integer.
  json_writer& number(std::uint64_t value);
  /// A boolean.
  json_writer& boolean(bool value);
  /// null.
  json_writer& null();
  /// An exact value as its canonical string, e.g. "-3/2".
  json_writer& exact(const rational& value);
  /// An exact value, or null when there is none (an undefined gradient).
  json_writer& exact(const std::optional<rational>& value);
  /// An exact value as a document literal: an integer as a JSON number, anything else as a "p/q" string.
  json_writer& literal(const rational& value);
  /// An array of strings, inline.
  json_writer& strings(const std::vector<std::string>& texts);
  /// An array of unsigned integers, inline (rank lists).
  json_writer& numbers(const std::vector<std::uint64_t>& values);

  /// `key(name)` followed by the value, for the common case.
  template <typename Value>
  json_writer& member(std::string_view name, const Value& value) {
    key(name);
    return write(value);
  }

private:
  json_writer& write(std::string_view text) { return string(text); }
  json_writer& write(const char* text) { return string(text); }
  json_writer& write(const std::string& text) { return string(text); }
  json_writer& write(const json_name& text) { return name(text.bytes); }
  json_writer& write(bool value) { return boolean(value); }
  json_writer& write(std::uint64_t value) { return number(value); }
  json_writer& write(std::uint32_t value) { return number(value); }
  json_writer& write(int value) = delete;  // say which: number(std::uint64_t{...}) or boolean
  json_writer& write(const rational& value) { return exact(value); }
  json_writer& write(const std::optional<rational>& value) { return exact(value); }
  json_writer& write(const std::optional<std::string>& text) { return text ? string(*text) : null(); }
  json_writer& write(const std::vector<std::string>& texts) { return strings(texts); }
  json_writer& write(const std::vector<std::uint64_t>& values) { return numbers(values); }

  struct level {
    json_layout layout;
    bool empty = true;
  };
  void before_value();
  void open(char bracket, json_layout layout);
  void close(char bracket);
  void newline(std::size_t depth);

  std::string& out_;
  json_context context_;
  std::vector<level> levels_;
  bool after_key_ = false;
};

/// `text` as a JSON string literal, quotes included (the writer's escaping).
std::string json_quote(std::string_view text, json_context context = json_context::document);

}  // namespace normcheck

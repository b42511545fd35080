#include "normcheck/io/json_reader.hpp"

#include "normcheck/core/utf8.hpp"

#include <cstdio>

namespace normcheck {

namespace {

std::string show_char(char c) {
  auto byte = static_cast<unsigned char>(c);
  if (byte >= 0x20 && byte < 0x7f) return std::string("'") + c + "'";
  char buffer[16];
  std::snprintf(buffer, sizeof buffer, "byte 0x%02X", byte);
  return buffer;
}

}  // namespace

std::string_view kind_name(json_kind kind) noexcept {
  switch (kind) {
    case json_kind::object: return "an object";
    case json_kind::array: return "an array";
    case json_kind::string: return "a string";
    case json_kind::number: return "a number";
    case json_kind::boolean: return "a boolean";
    case json_kind::null: return "null";
  }
  return "a value";
}

json_reader::json_reader(std::string_view text, std::string source, const reader_limits& limits)
    : text_(text), source_(std::move(source)), limits_(limits) {
  if (text_.substr(0, 3) == "\xEF\xBB\xBF") pos_ = 3;
}

json_reader json_reader::at(std::uint64_t offset) const {
  json_reader other(text_, source_, limits_);
  other.pos_ = offset;
  return other;
}

location json_reader::locate(std::uint64_t offset) const {
  location where;
  where.file = source_;
  where.offset = offset;
  where.line = 1;
  std::uint64_t column = 1;
  const std::uint64_t end = offset < text_.size() ? offset : text_.size();
  // Columns count characters after a leading byte-order mark, as editors show them.
  const std::uint64_t start = text_.substr(0, 3) == "\xEF\xBB\xBF" && end >= 3 ? 3 : 0;
  for (std::uint64_t i = start; i < end; ++i) {
    const auto byte = static_cast<unsigned char>(text_[i]);
    if (byte == '\n' || (byte == '\r' && (i + 1 == text_.size() || text_[i + 1] != '\n'))) {  // LF, CRLF, lone CR
      ++where.line;
      column = 1;
    } else if ((byte & 0xC0) != 0x80) {
      ++column;
    }
  }
  where.column = column;
  return where;
}

void json_reader::fail(error_code code, std::string message, std::uint64_t offset) const {
  error e(code, std::move(message), locate(offset));
  if (offset >= text_.size()) e.mark_truncated();  // the message is about the end
  else if (cut_off()) e.mark_cut_off_later();
  throw e;
}

bool json_reader::cut_off() const {
  // Brackets and strings only, so that whatever else is wrong before the end does not hide it.
  std::uint64_t depth = 0;
  bool in_string = false;
  bool any_value = false;
  const std::size_t start = text_.substr(0, 3) == "\xEF\xBB\xBF" ? 3 : 0;
  for (std::size_t i = start; i < text_.size(); ++i) {
    const char c = text_[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == ' ' || c == '\n' || c == '\t' || c == '\r') continue;
    any_value = true;
    if (c == '"') in_string = true;
    else if (c == '{' || c == '[') ++depth;
    else if ((c == '}' || c == ']') && depth > 0) --depth;
  }
  return in_string || depth > 0 || !any_value;
}

void json_reader::mark_if_cut_off(error& e) const {
  if (cut_off()) e.mark_cut_off_later();
}

void json_reader::fail_unexpected(std::string_view expected) {
  if (at_end())
    fail(error_code::parse_error, "the document ends early: expected " + std::string(expected), pos_);
  fail(error_code::parse_error,
       "expected " + std::string(expected) + ", found " + show_char(current()), pos_);
}

void json_reader::fail_type(std::string_view what, std::string_view expected) {
  const json_kind found = peek();
  fail(error_code::schema_error,
       std::string(what) + " must be " + std::string(expected) + ", found " + std::string(kind_name(found)),
       pos_);
}

void json_reader::skip_whitespace() {
  while (pos_ < text_.size()) {
    const char c = text_[pos_];
    if (c != ' ' && c != '\n' && c != '\t' && c != '\r') return;
    ++pos_;
  }
}

void json_reader::expect_char(char c, std::string_view context) {
  skip_whitespace();
  if (current() != c || at_end()) fail_unexpected(std::string("'") + c + "' " + std::string(context));
  ++pos_;
}

json_kind json_reader::peek() {
  skip_whitespace();
  switch (current()) {
    case '{': return json_kind::object;
    case '[': return json_kind::array;
    case '"': return json_kind::string;
    case 't':
    case 'f': return json_kind::boolean;
    case 'n': return json_kind::null;
    case '-':
    case '0': case '1': case '2': case '3': case '4':
    case '5': case '6': case '7': case '8': case '9': return json_kind::number;
    default: break;
  }
  fail_unexpected("a value (object, array, string, number, true, false or null)");
}

std::uint64_t json_reader::value_offset() {
  skip_whitespace();
  return pos_;
}

void json_reader::enter(bool is_object) {
  if (levels_.size() >= limits_.max_depth)
    fail(error_code::limit_exceeded,
         "nesting deeper than " + std::to_string(limits_.max_depth) +
             " levels, the limit of this reader (--max-depth raises it)",
         pos_);
  ++pos_;
  levels_.push_back(level{is_object, true, {}});
}

void json_reader::begin_object() {
  if (peek() != json_kind::object) fail_unexpected("'{' to open an object");
  enter(true);
}

void json_reader::begin_array() {
  if (peek() != json_kind::array) fail_unexpected("'[' to open an array");
  enter(false);
}

bool json_reader::next_member(std::string_view& key) {
  level& top = levels_.back();
  skip_whitespace();
  if (current() == '}' && !at_end()) {
    ++pos_;
    levels_.pop_back();
    return false;
  }
  if (!top.first) {
    if (current() != ',' || at_end()) fail_unexpected("',' or '}' after an object member");
    ++pos_;
    skip_whitespace();
  }
  top.first = false;
  if (current() != '"' || at_end()) fail_unexpected("a string key in double quotes");
  key_offset_ = pos_;
  key = read_string("object key");
  if (top.keys.count(key) != 0)
    fail(error_code::schema_error,
         "duplicate key \"" + printable(key) + "\" in one object: a second value would hide the first",
         key_offset_);
  top.keys.emplace(key);
  expect_char(':', "after an object key");
  return true;
}

bool json_reader::next_element() {
  level& top = levels_.back();
  skip_whitespace();
  if (current() == ']' && !at_end()) {
    ++pos_;
    levels_.pop_back();
    return false;
  }
  if (!top.first) {
    if (current() != ',' || at_end()) fail_unexpected("',' or ']' after an array element");
    ++pos_;
    skip_whitespace();
  }
  top.first = false;
  return true;
}

std::string_view json_reader::read_string(std::string_view context) {
  ++pos_;  // opening quote
  const std::size_t start = pos_;
  bool escaped = false;
  while (true) {
    if (at_end()) fail(error_code::parse_error, "the document ends inside a string", pos_);
    const auto byte = static_cast<unsigned char>(text_[pos_]);
    if (byte == '"') break;
    if (byte == '\\') {
      escaped = true;
      pos_ += 2;
      continue;
    }
    if (byte < 0x20)
      fail(error_code::parse_error, "control character " + show_char(text_[pos_]) + " in a string: write it escaped",
           pos_);
    if (byte < 0x80) {
      ++pos_;
      continue;
    }
    const utf8_step step = decode_utf8(text_, pos_);
    if (!step.valid) fail(error_code::parse_error, "invalid UTF-8 in a string", pos_);
    pos_ += step.length;
  }
  const std::size_t close = pos_;
  ++pos_;
  if (!escaped) return text_.substr(start, close - start);

  scratch_.clear();
  for (std::size_t i = start; i < close; ++i) {
    if (text_[i] != '\\') {
      scratch_ += text_[i];
      continue;
    }
    const std::size_t escape_at = i;
    const char kind = text_[++i];
    switch (kind) {
      case '"': scratch_ += '"'; break;
      case '\\': scratch_ += '\\'; break;
      case '/': scratch_ += '/'; break;
      case 'b': scratch_ += '\b'; break;
      case 'f': scratch_ += '\f'; break;
      case 'n': scratch_ += '\n'; break;
      case 'r': scratch_ += '\r'; break;
      case 't': scratch_ += '\t'; break;
      case 'u': {
        auto hex4 = [&](std::size_t at) -> std::uint32_t {
          std::uint32_t value = 0;
          for (std::size_t k = 0; k < 4; ++k) {
            const char c = at + k < close ? text_[at + k] : '\0';
            value <<= 4;
            if (c >= '0' && c <= '9') value |= static_cast<std::uint32_t>(c - '0');
            else if (c >= 'a' && c <= 'f') value |= static_cast<std::uint32_t>(c - 'a' + 10);
            else if (c >= 'A' && c <= 'F') value |= static_cast<std::uint32_t>(c - 'A' + 10);
            else fail(error_code::parse_error, "\\u must be followed by four hexadecimal digits", escape_at);
          }
          return value;
        };
        std::uint32_t code_point = hex4(i + 1);
        i += 4;
        if (code_point >= 0xDC00 && code_point <= 0xDFFF)
          fail(error_code::parse_error, "lone low surrogate \\u escape in a string", escape_at);
        if (code_point >= 0xD800 && code_point <= 0xDBFF) {
          if (i + 2 >= close || text_[i + 1] != '\\' || text_[i + 2] != 'u')
            fail(error_code::parse_error, "lone high surrogate \\u escape in a string", escape_at);
          const std::uint32_t low = hex4(i + 3);
          if (low < 0xDC00 || low > 0xDFFF)
            fail(error_code::parse_error, "high surrogate not followed by a low surrogate", escape_at);
          code_point = 0x10000 + ((code_point - 0xD800) << 10) + (low - 0xDC00);
          i += 6;
        }
        append_utf8(scratch_, static_cast<char32_t>(code_point));
        break;
      }
      default:
        fail(error_code::parse_error, "unknown escape in " + std::string(context) + ": " + show_char(kind), escape_at);
    }
  }
  return scratch_;
}

std::string_view json_reader::string_value() {
  if (peek() != json_kind::string) fail_unexpected("a string");
  return read_string("string");
}

std::string_view json_reader::number_text() {
  if (peek() != json_kind::number) fail_unexpected("a number");
  const std::size_t start = pos_;
  while (pos_ < text_.size() && is_number_char(text_[pos_])) ++pos_;
  return text_.substr(start, pos_ - start);
}

bool json_reader::machine_value(machine_literal& out) {
  skip_whitespace();
  const char c = current();
  if (c == '"') {
    // Only a literal's own characters are read, so no escape or multi-byte character is passed over:
    // when the closing quote follows, the string's text is exactly the literal read.
    const std::size_t length =
        scan_machine_prefix(text_.substr(pos_ + 1), literal_form::json_string, limits_.numbers, out);
    const std::size_t close = pos_ + 1 + length;
    if (length == 0 || close >= text_.size() || text_[close] != '"') return false;
    pos_ = close + 1;
    return true;
  }
  if (c == '-' || (c >= '0' && c <= '9')) {
    // `number_text` would take every number character; the literal read is that token only when the
    // next character is not one.
    const std::size_t length = scan_machine_prefix(text_.substr(pos_), literal_form::json_number, limits_.numbers, out);
    const std::size_t stop = pos_ + length;
    if (length == 0 || (stop < text_.size() && is_number_char(text_[stop]))) return false;
    pos_ = stop;
    return true;
  }
  return false;
}

void json_reader::read_word(std::string_view word) {
  const std::size_t start = pos_;
  for (char c : word) {
    if (at_end()) fail(error_code::parse_error, "the document ends early inside '" + std::string(word) + "'", pos_);
    if (text_[pos_] != c)
      fail(error_code::parse_error, "expected '" + std::string(word) + "', found " + show_char(text_[pos_]), start);
    ++pos_;
  }
}

bool json_reader::boolean_value() {
  if (peek() != json_kind::boolean) fail_unexpected("true or false");
  if (current() == 't') {
    read_word("true");
    return true;
  }
  read_word("false");
  return false;
}

void json_reader::null_value() {
  if (peek() != json_kind::null) fail_unexpected("null");
  read_word("null");
}

void json_reader::skip_value() {
  // Iterative, so that the depth a user allows (--max-depth) can never exhaust the stack.
  const std::size_t outer = levels_.size();
  do {
    if (levels_.size() > outer) {
      std::string_view key;
      const bool more = levels_.back().is_object ? next_member(key) : next_element();
      if (!more) continue;  // the innermost container closed
    }
    switch (peek()) {
      case json_kind::object: begin_object(); break;
      case json_kind::array: begin_array(); break;
      case json_kind::string: string_value(); break;
      case json_kind::number: number_text(); break;
      case json_kind::boolean: boolean_value(); break;
      case json_kind::null: null_value(); break;
    }
  } while (levels_.size() > outer);
}

void json_reader::finish() {
  skip_whitespace();
  if (!at_end())
    fail(error_code::parse_error, "content after the end of the document, starting with " + show_char(current()), pos_);
}

}  // namespace normcheck

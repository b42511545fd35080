#include "normcheck/io/json_writer.hpp"

#include "normcheck/core/utf8.hpp"

#include <cassert>

namespace normcheck {

namespace {

constexpr char hex_digits[] = "0123456789abcdef";

void append_u_escape(std::string& out, char32_t unit) {
  out += "\\u";
  for (int shift = 12; shift >= 0; shift -= 4) out += hex_digits[(unit >> shift) & 0xF];
}

// Whether the byte is printable ASCII that a JSON string holds as it is, in every context.
bool plain_byte(char c) {
  return c >= ' ' && c <= '~' && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&';
}

void append_escaped(std::string& out, std::string_view text, json_context context) {
  out += '"';
  for (std::size_t i = 0; i < text.size();) {
    std::size_t plain = i;  // a run of plain bytes is appended at once
    while (plain < text.size() && plain_byte(text[plain])) ++plain;
    if (plain > i) {
      out.append(text.substr(i, plain - i));
      i = plain;
      continue;
    }
    const utf8_step step = decode_utf8(text, i);
    const char32_t c = step.code_point;
    if (!step.valid) {
      out += "\\\\x";  // the byte shown as \xNN, as `printable` shows it: valid UTF-8, no lone surrogate
      out += hex_digits[(c >> 4) & 0xF];
      out += hex_digits[c & 0xF];
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (is_control(c) || is_noncharacter(c) ||
               (context == json_context::script_element && (c == '<' || c == '>' || c == '&'))) {
      if (c < 0x10000) {
        append_u_escape(out, c);
      } else {  // a supplementary non-character, as its surrogate pair
        append_u_escape(out, 0xD800 + ((c - 0x10000) >> 10));
        append_u_escape(out, 0xDC00 + ((c - 0x10000) & 0x3FF));
      }
    } else {
      out.append(text.substr(i, step.length));
    }
    i += step.length;
  }
  out += '"';
}

}  // namespace

std::string json_quote(std::string_view text, json_context context) {
  std::string out;
  append_escaped(out, text, context);
  return out;
}

void json_writer::newline(std::size_t depth) {
  out_ += '\n';
  out_.append(2 * depth, ' ');
}

void json_writer::before_value() {
  if (after_key_) {
    after_key_ = false;
    return;
  }
  if (levels_.empty()) return;
  level& innermost = levels_.back();
  if (!innermost.empty) out_ += innermost.layout == json_layout::lines ? "," : ", ";
  if (innermost.layout == json_layout::lines) {
    std::size_t depth = 0;
    for (const level& l : levels_) depth += l.layout == json_layout::lines ? 1 : 0;
    newline(depth);
  }
  innermost.empty = false;
}

void json_writer::open(char bracket, json_layout layout) {
  before_value();
  out_ += bracket;
  levels_.push_back({layout});
}

void json_writer::close(char bracket) {
  assert(!levels_.empty() && !after_key_);
  const level closing = levels_.back();
  levels_.pop_back();
  if (closing.layout == json_layout::lines && !closing.empty) {
    std::size_t depth = 0;
    for (const level& l : levels_) depth += l.layout == json_layout::lines ? 1 : 0;
    newline(depth);
  }
  out_ += bracket;
}

json_writer& json_writer::begin_object(json_layout layout) {
  open('{', layout);
  return *this;
}

json_writer& json_writer::end_object() {
  close('}');
  return *this;
}

json_writer& json_writer::begin_array(json_layout layout) {
  open('[', layout);
  return *this;
}

json_writer& json_writer::end_array() {
  close(']');
  return *this;
}

json_writer& json_writer::key(std::string_view name) {
  assert(!levels_.empty() && !after_key_);
  before_value();
  append_escaped(out_, name, context_);
  out_ += ": ";
  after_key_ = true;
  return *this;
}

json_writer& json_writer::string(std::string_view text) {
  before_value();
  append_escaped(out_, text, context_);
  return *this;
}

json_writer& json_writer::name(std::string_view text) { return string(escaped_name(text)); }

json_writer& json_writer::number(std::uint64_t value) {
  before_value();
  out_ += std::to_string(value);
  return *this;
}

json_writer& json_writer::boolean(bool value) {
  before_value();
  out_ += value ? "true" : "false";
  return *this;
}

json_writer& json_writer::null() {
  before_value();
  out_ += "null";
  return *this;
}

json_writer& json_writer::exact(const rational& value) { return string(to_string(value)); }

json_writer& json_writer::exact(const std::optional<rational>& value) { return value ? exact(*value) : null(); }

json_writer& json_writer::literal(const rational& value) {
  if (denominator(value) != 1) return exact(value);
  before_value();
  out_ += to_string(value);
  return *this;
}

json_writer& json_writer::strings(const std::vector<std::string>& texts) {
  begin_array();
  for (const std::string& text : texts) string(text);
  return end_array();
}

json_writer& json_writer::numbers(const std::vector<std::uint64_t>& values) {
  begin_array();
  for (std::uint64_t value : values) number(value);
  return end_array();
}

}  // namespace normcheck

#include "normcheck/core/utf8.hpp"

#include <cstdio>

namespace normcheck {

utf8_step decode_utf8(std::string_view text, std::size_t at) noexcept {
  auto byte = [&](std::size_t i) -> char32_t { return i < text.size() ? static_cast<unsigned char>(text[i]) : 0u; };
  auto continuation = [&](std::size_t i) { return (byte(i) & 0xC0) == 0x80; };
  const char32_t lead = byte(at);
  const utf8_step invalid{lead, 1, false};
  if (lead < 0x80) return {lead, 1, true};
  if (lead >= 0xC2 && lead <= 0xDF) {
    if (!continuation(at + 1)) return invalid;
    return {((lead & 0x1F) << 6) | (byte(at + 1) & 0x3F), 2, true};
  }
  if (lead >= 0xE0 && lead <= 0xEF) {
    const char32_t second = byte(at + 1);
    if (lead == 0xE0 && second < 0xA0) return invalid;   // overlong
    if (lead == 0xED && second >= 0xA0) return invalid;  // a UTF-16 surrogate
    if (!continuation(at + 1) || !continuation(at + 2)) return invalid;
    return {((lead & 0x0F) << 12) | ((second & 0x3F) << 6) | (byte(at + 2) & 0x3F), 3, true};
  }
  if (lead >= 0xF0 && lead <= 0xF4) {
    const char32_t second = byte(at + 1);
    if (lead == 0xF0 && second < 0x90) return invalid;   // overlong
    if (lead == 0xF4 && second >= 0x90) return invalid;  // above U+10FFFF
    if (!continuation(at + 1) || !continuation(at + 2) || !continuation(at + 3)) return invalid;
    return {((lead & 0x07) << 18) | ((second & 0x3F) << 12) | ((byte(at + 2) & 0x3F) << 6) | (byte(at + 3) & 0x3F), 4,
            true};
  }
  return invalid;
}

void append_utf8(std::string& out, char32_t code_point) {
  if (code_point < 0x80) {
    out += static_cast<char>(code_point);
  } else if (code_point < 0x800) {
    out += static_cast<char>(0xC0 | (code_point >> 6));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  } else if (code_point < 0x10000) {
    out += static_cast<char>(0xE0 | (code_point >> 12));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (code_point >> 18));
    out += static_cast<char>(0x80 | ((code_point >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((code_point >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (code_point & 0x3F));
  }
}

namespace {

std::string escape(std::string_view text, bool keep_line_breaks, bool double_backslashes) {
  std::string out;
  out.reserve(text.size());
  char buffer[16];
  for (std::size_t i = 0; i < text.size();) {
    const utf8_step step = decode_utf8(text, i);
    const char32_t c = step.code_point;
    if (!step.valid) {
      std::snprintf(buffer, sizeof buffer, "\\x%02x", static_cast<unsigned>(c));
      out += buffer;
    } else if (c == '\n' || c == '\t' || c == '\r') {
      if (keep_line_breaks) out += static_cast<char>(c);
      else out += c == '\n' ? "\\n" : c == '\t' ? "\\t" : "\\r";
    } else if (is_control(c)) {
      std::snprintf(buffer, sizeof buffer, "\\x%02x", static_cast<unsigned>(c));
      out += buffer;
    } else if (is_noncharacter(c)) {
      std::snprintf(buffer, sizeof buffer, "\\u{%x}", static_cast<unsigned>(c));
      out += buffer;
    } else if (c == '\\' && double_backslashes) {
      out += "\\\\";
    } else {
      out.append(text.substr(i, step.length));
    }
    i += step.length;
  }
  return out;
}

}  // namespace

std::string printable(std::string_view text, bool keep_line_breaks) { return escape(text, keep_line_breaks, false); }

std::string escaped_name(std::string_view text) { return escape(text, false, true); }

}  // namespace normcheck

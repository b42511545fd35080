#include "normcheck/io/markup.hpp"

#include "normcheck/io/utf8.hpp"

#include <cstdio>

namespace normcheck {

namespace {

bool allowed_in_xml(char32_t c) {
  if (c < 0x20) return c == '\t' || c == '\n' || c == '\r';
  return c != 0xFFFE && c != 0xFFFF;
}

}  // namespace

std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (std::size_t i = 0; i < text.size();) {
    const utf8_step step = decode_utf8(text, i);
    const char32_t c = step.code_point;
    char buffer[16];
    if (!step.valid || (c < 0x20 && !allowed_in_xml(c))) {
      std::snprintf(buffer, sizeof buffer, "\\x%02x", static_cast<unsigned>(c));
      out += buffer;
    } else if (!allowed_in_xml(c)) {
      std::snprintf(buffer, sizeof buffer, "\\u{%x}", static_cast<unsigned>(c));
      out += buffer;
    } else {
      switch (c) {
        case '&': out += "&amp;"; break;
        case '<': out += "&lt;"; break;
        case '>': out += "&gt;"; break;
        case '"': out += "&quot;"; break;
        case '\'': out += "&apos;"; break;
        default: out.append(text.substr(i, step.length));
      }
    }
    i += step.length;
  }
  return out;
}

}  // namespace normcheck

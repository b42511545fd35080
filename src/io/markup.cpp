#include "normcheck/io/markup.hpp"

#include "normcheck/core/utf8.hpp"

namespace normcheck {

std::string xml_escape(std::string_view text) {
  // What XML 1.0 cannot hold (most controls, U+FFFE, U+FFFF, stray bytes) is already visible text here.
  const std::string shown = printable(text, true);
  std::string out;
  out.reserve(shown.size());
  for (char c : shown) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace normcheck

#pragma once
/// \file core/utf8.hpp
/// UTF-8 as the reader accepts it and the writers escape it: well-formed sequences (RFC 3629: no
/// overlong forms, no encoded surrogates, nothing above U+10FFFF), and the code points a report must
/// not show raw (controls, non-characters).

#include <cstddef>
#include <string>
#include <string_view>

namespace normcheck {

/// One step through a text: the code point at a position and the bytes it takes, or a byte that does
/// not start a well-formed sequence (`valid` false, `length` 1, `code_point` the byte itself).
struct utf8_step {
  char32_t code_point = 0;
  std::size_t length = 1;
  bool valid = true;
};

/// Decodes the sequence that starts at `text[at]` (`at` < `text.size()`).
utf8_step decode_utf8(std::string_view text, std::size_t at) noexcept;

/// Appends the UTF-8 encoding of a code point (at most U+10FFFF, not a surrogate).
void append_utf8(std::string& out, char32_t code_point);

/// True for the 66 non-characters: U+FDD0..U+FDEF and the last two code points of every plane.
constexpr bool is_noncharacter(char32_t c) noexcept {
  return (c >= 0xFDD0 && c <= 0xFDEF) || (c & 0xFFFE) == 0xFFFE;
}

/// True for C0 controls, DEL and C1 controls: what a terminal may act on instead of showing.
constexpr bool is_control(char32_t c) noexcept { return c < 0x20 || (c >= 0x7F && c <= 0x9F); }

/// Text from an input, safe to show on a terminal or inside a message: controls (line feed, carriage
/// return and tab too, unless `keep_line_breaks`), non-characters and bytes that are not UTF-8 are written
/// visibly, as "\n", "\x1b", "\u{fffe}". Everything else, backslashes included, stays as it is.
std::string printable(std::string_view text, bool keep_line_breaks = false);

/// A name (a file name is any bytes) written reversibly: as `printable`, with every backslash doubled, so
/// that the escapes cannot be confused with the name's own characters.
std::string escaped_name(std::string_view text);

}  // namespace normcheck

#pragma once
/// \file io/markup.hpp
/// Text inside XML (JUnit reports, SVG figures): the one escaping function, whose output is well-formed
/// XML 1.0 character data or attribute value whatever bytes it is given.

#include <string>
#include <string_view>

namespace normcheck {

/// `text` with & < > " ' written as entities. What XML 1.0 cannot hold even as a character reference
/// (C0 controls other than tab, line feed and carriage return, U+FFFE, U+FFFF, bytes that are not UTF-8)
/// is written visibly instead: "\x1b" for a control or a stray byte, "\u{fffe}" for a non-character.
std::string xml_escape(std::string_view text);

}  // namespace normcheck

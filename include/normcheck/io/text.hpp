#pragma once
/// \file io/text.hpp
/// Text for people: widths counted in characters (so columns with subscripts line up), exact values
/// shortened for a screen, lists of ranks joined the same way by every report.

#include "normcheck/core/rational.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace normcheck {

/// The width of UTF-8 text in characters (code points), as a terminal column count.
std::size_t display_width(std::string_view text) noexcept;

/// `text` padded with spaces to `width` characters (unchanged when it is as wide already).
std::string padded(std::string_view text, std::size_t width);

/// An exact value for a screen: canonical, with long runs of digits shortened (see `shorten`).
std::string on_screen(const rational& value);
/// The same, or "undefined".
std::string on_screen(const std::optional<rational>& value);
/// The canonical text of a value ("p/q", never shortened), or "undefined".
std::string canonical_or_undefined(const std::optional<rational>& value);
/// `text`, or "—" where it is empty (a column of a table).
std::string or_dash(const std::string& text);

/// "a, b, c" (`none` when the list is empty).
std::string join(const std::vector<std::string>& items, std::string_view none = "");

/// "0, 2, 5".
std::string join_ranks(const std::vector<std::uint64_t>& ranks);
/// "rank 1" or "ranks 0, 2".
std::string ranks_phrase(const std::vector<std::uint64_t>& ranks);

}  // namespace normcheck

#pragma once
/// \file teaching/page.hpp
/// The teaching page: every demo with its figures, and the lab, in one self-contained HTML file.
/// Every number on it is computed by the library when it is generated; the lab on it computes exactly
/// in the browser, with every text and limit taken from the C++ lab.

#include "normcheck/teaching/demo.hpp"

#include <optional>
#include <string>

namespace normcheck {

/// What the page's lab script needs from the C++ lab, as one JSON object: the banner, the limits and the
/// help lines, every message text (`lab_messages`), the texts of the literal reader's failures as the lab
/// shows them, and the numeric limits (steps per command, digits and exponent of a literal, quoted length,
/// significant digits of an approximation). Safe to embed in a <script> element.
std::string lab_page_data();

/// The whole page on `input` (each demo's built-in example when nullopt): HTML with inline CSS, inline SVG
/// and one inline script, referring to nothing outside itself. Throws what the demos throw for an input
/// they reject.
std::string teaching_page(const std::optional<demo_input>& input);

}  // namespace normcheck

#pragma once
/// \file teaching/svg.hpp
/// A tiny SVG writer for the teaching figures. Coordinates are rationals, written rounded to two
/// decimals with integer arithmetic, so no float is involved even in the drawing.

#include "normcheck/core/rational.hpp"

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace normcheck {

/// A coordinate or length as SVG text, rounded half away from zero to two decimals ("12.5", "-3", "0.33").
std::string svg_number(const rational& value);

/// The affine map that sends [from_low, from_high] to [to_low, to_high]; a zero-width domain maps to the middle.
class linear_scale {
public:
  linear_scale(rational from_low, rational from_high, rational to_low, rational to_high);
  /// The image of `value`.
  rational operator()(const rational& value) const;

private:
  rational from_low_, from_high_, to_low_, to_high_;
};

/// Where a text's anchor point sits.
enum class text_anchor { start, middle, end };

/// A point of a polyline.
using svg_point = std::pair<rational, rational>;

/// An SVG document built shape by shape, on a white background.
class svg_canvas {
public:
  /// A canvas of `width` × `height` user units with a title (the SVG <title>).
  svg_canvas(std::uint32_t width, std::uint32_t height, std::string_view title);

  /// A filled rectangle.
  void rect(const rational& x, const rational& y, const rational& width, const rational& height, std::string_view fill);
  /// A straight line; `dashed` draws it in dashes.
  void line(const rational& x1, const rational& y1, const rational& x2, const rational& y2, std::string_view stroke,
            const rational& width, bool dashed = false);
  /// An open polyline through `points`.
  void polyline(const std::vector<svg_point>& points, std::string_view stroke, const rational& width,
                bool dashed = false);
  /// A filled circle.
  void circle(const rational& cx, const rational& cy, const rational& radius, std::string_view fill);
  /// A line of text with its baseline at y.
  void text(const rational& x, const rational& y, std::string_view content, unsigned size,
            text_anchor anchor = text_anchor::start, std::string_view fill = "#222222");

  /// The complete document.
  std::string str() const;

private:
  std::uint32_t width_;
  std::uint32_t height_;
  std::string title_;
  std::string body_;
};

}  // namespace normcheck

#include "normcheck/teaching/svg.hpp"

#include "normcheck/core/errors.hpp"
#include "normcheck/io/markup.hpp"



namespace normcheck {

std::string svg_number(const rational& value) {
  // Round |value|·100 to the nearest integer, halves away from zero: ⌊(2·|p|·100 + q) / (2q)⌋.
  const integer p = abs(boost::multiprecision::numerator(value));
  const integer q = boost::multiprecision::denominator(value);
  const integer doubled = p * 200 + q;
  const integer hundredths = doubled / (q * 2);
  const integer whole = hundredths / 100;
  const integer fraction = hundredths % 100;
  std::string out = (value < 0 && hundredths != 0) ? "-" : "";
  out += whole.str();
  if (fraction != 0) {
    std::string digits = fraction.str();
    if (digits.size() < 2) digits.insert(0, "0");
    if (digits.back() == '0') digits.pop_back();
    out += "." + digits;
  }
  return out;
}

linear_scale::linear_scale(rational from_low, rational from_high, rational to_low, rational to_high)
    : from_low_(std::move(from_low)), from_high_(std::move(from_high)), to_low_(std::move(to_low)),
      to_high_(std::move(to_high)) {}

rational linear_scale::operator()(const rational& value) const {
  if (from_high_ == from_low_) {
    rational middle = (to_low_ + to_high_) / 2;
    return middle;
  }
  rational image = to_low_ + (value - from_low_) * (to_high_ - to_low_) / (from_high_ - from_low_);
  return image;
}

svg_canvas::svg_canvas(std::uint32_t width, std::uint32_t height, std::string_view title)
    : width_(width), height_(height), title_(title) {}

void svg_canvas::rect(const rational& x, const rational& y, const rational& width, const rational& height,
                      std::string_view fill) {
  body_ += "  <rect x=\"" + svg_number(x) + "\" y=\"" + svg_number(y) + "\" width=\"" + svg_number(width) +
           "\" height=\"" + svg_number(height) + "\" fill=\"" + xml_escape(fill) + "\"/>\n";
}

void svg_canvas::line(const rational& x1, const rational& y1, const rational& x2, const rational& y2,
                      std::string_view stroke, const rational& width, bool dashed) {
  body_ += "  <line x1=\"" + svg_number(x1) + "\" y1=\"" + svg_number(y1) + "\" x2=\"" + svg_number(x2) +
           "\" y2=\"" + svg_number(y2) + "\" stroke=\"" + xml_escape(stroke) + "\" stroke-width=\"" +
           svg_number(width) + "\"" + (dashed ? " stroke-dasharray=\"6 4\"" : "") + "/>\n";
}

void svg_canvas::polyline(const std::vector<svg_point>& points, std::string_view stroke, const rational& width,
                          bool dashed) {
  std::string coordinates;
  for (const svg_point& point : points) {
    if (!coordinates.empty()) coordinates += ' ';
    coordinates += svg_number(point.first) + "," + svg_number(point.second);
  }
  body_ += "  <polyline points=\"" + coordinates + "\" fill=\"none\" stroke=\"" + xml_escape(stroke) +
           "\" stroke-width=\"" + svg_number(width) + "\"" + (dashed ? " stroke-dasharray=\"6 4\"" : "") +
           " stroke-linejoin=\"round\"/>\n";
}

void svg_canvas::circle(const rational& cx, const rational& cy, const rational& radius, std::string_view fill) {
  body_ += "  <circle cx=\"" + svg_number(cx) + "\" cy=\"" + svg_number(cy) + "\" r=\"" + svg_number(radius) +
           "\" fill=\"" + xml_escape(fill) + "\"/>\n";
}

void svg_canvas::text(const rational& x, const rational& y, std::string_view content, unsigned size,
                      text_anchor anchor, std::string_view fill) {
  const char* anchor_name = anchor == text_anchor::start ? "start" : anchor == text_anchor::middle ? "middle" : "end";
  body_ += "  <text x=\"" + svg_number(x) + "\" y=\"" + svg_number(y) + "\" font-size=\"" + std::to_string(size) +
           "\" text-anchor=\"" + anchor_name + "\" fill=\"" + xml_escape(fill) + "\">" + xml_escape(content) +
           "</text>\n";
}

std::string svg_canvas::str() const {
  const std::string width = std::to_string(width_);
  const std::string height = std::to_string(height_);
  return "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
         "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + width + "\" height=\"" + height +
         "\" viewBox=\"0 0 " + width + " " + height + "\" font-family=\"DejaVu Sans, sans-serif\">\n"
         "  <title>" + xml_escape(title_) + "</title>\n"
         "  <rect x=\"0\" y=\"0\" width=\"" + width + "\" height=\"" + height + "\" fill=\"#ffffff\"/>\n" +
         body_ + "</svg>\n";
}

}  // namespace normcheck

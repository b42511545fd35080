// The SVG writer: numbers rounded with integers, escaping, scales, whole-file replacement, and the figures.

#include "normcheck/teaching/demo.hpp"
#include "normcheck/core/errors.hpp"
#include "normcheck/teaching/svg.hpp"

#include <doctest/doctest.h>


using normcheck::rational;

namespace {

rational coordinate(std::string_view text) {
  return normcheck::read_number(text, normcheck::literal_form::json_string);
}

std::size_t count(const std::string& text, std::string_view part) {
  std::size_t n = 0;
  for (std::size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

}  // namespace

TEST_CASE("svg_number rounds to two decimals, halves away from zero") {
  CHECK(normcheck::svg_number(0) == "0");
  CHECK(normcheck::svg_number(100) == "100");
  CHECK(normcheck::svg_number(coordinate("12.5")) == "12.5");
  CHECK(normcheck::svg_number(coordinate("1/3")) == "0.33");
  CHECK(normcheck::svg_number(coordinate("2/3")) == "0.67");
  CHECK(normcheck::svg_number(coordinate("1/200")) == "0.01");
  CHECK(normcheck::svg_number(coordinate("-1/200")) == "-0.01");
  CHECK(normcheck::svg_number(coordinate("-1/1000")) == "0");
  CHECK(normcheck::svg_number(coordinate("-7.05")) == "-7.05");
  CHECK(normcheck::svg_number(coordinate("0.999")) == "1");
}

TEST_CASE("linear_scale maps the ends and the middle") {
  const normcheck::linear_scale scale(coordinate("-1"), coordinate("3"), 200, 0);
  CHECK(scale(-1) == 200);
  CHECK(scale(3) == 0);
  CHECK(scale(1) == 100);
  const normcheck::linear_scale flat(2, 2, 0, 50);
  CHECK(flat(2) == 25);
}

TEST_CASE("a canvas is a complete SVG document on a white background") {
  normcheck::svg_canvas canvas(100, 50, "a <title>");
  canvas.rect(1, 2, 3, 4, "#ff0000");
  canvas.line(0, 0, 10, 10, "#00ff00", 2, true);
  canvas.polyline({{0, 0}, {coordinate("1/3"), 5}}, "#0000ff", 1);
  canvas.circle(5, 5, 1, "#000000");
  canvas.text(1, 1, "x < y", 10, normcheck::text_anchor::middle);
  const std::string svg = canvas.str();
  CHECK(svg.rfind("<?xml", 0) == 0);
  CHECK(svg.find("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"100\" height=\"50\"") != std::string::npos);
  CHECK(svg.find("<title>a &lt;title&gt;</title>") != std::string::npos);
  CHECK(svg.find("fill=\"#ffffff\"") != std::string::npos);
  CHECK(svg.find("stroke-dasharray") != std::string::npos);
  CHECK(svg.find("points=\"0,0 0.33,5\"") != std::string::npos);
  CHECK(svg.find(">x &lt; y</text>") != std::string::npos);
  CHECK(svg.substr(svg.size() - 7) == "</svg>\n");
}

TEST_CASE("the derivation figure draws two bars per rank in each panel") {
  const std::string svg =
      normcheck::derivation_figure(normcheck::compute_derivation(normcheck::builtin_input("derivation")));
  // Two legend swatches, then for two ranks: 2 panels × 2 ranks × 2 bars.
  CHECK(count(svg, "fill=\"#c0392b\"") == 1 + 4);
  CHECK(count(svg, "fill=\"#1f6f8b\"") == 1 + 4);
  CHECK(svg.find(">1/6</text>") != std::string::npos);
}

TEST_CASE("the disguise figure draws both runs of every optimizer") {
  const normcheck::disguise_facts facts =
      normcheck::compute_disguise(normcheck::builtin_input("disguise"), normcheck::default_disguise_parameters());
  const std::string svg = normcheck::disguise_figure(facts);
  CHECK(count(svg, "<polyline") == 2 * facts.runs.size());
  std::size_t parted = 0;
  for (const normcheck::disguise_run& run : facts.runs) parted += run.parts ? 1 : 0;
  CHECK(count(svg, "stroke=\"#999999\"") == parted);
  CHECK(svg.find("never parts") != std::string::npos);
}

// XML escaping (io/markup.hpp): markup characters become entities, and what XML 1.0 cannot hold at all
// is written visibly, so a JUnit report or an SVG figure is well-formed whatever its text holds.

#include "normcheck/io/markup.hpp"

#include <doctest/doctest.h>

TEST_CASE("xml_escape writes markup characters as entities") {
  CHECK(normcheck::xml_escape("a<b & \"c\">") == "a&lt;b &amp; &quot;c&quot;&gt;");
  CHECK(normcheck::xml_escape("it's") == "it&apos;s");
  CHECK(normcheck::xml_escape("tab\tline\nreturn\r") == "tab\tline\nreturn\r");
  CHECK(normcheck::xml_escape("θ = ½(θ − y)²") == "θ = ½(θ − y)²");
}

TEST_CASE("xml_escape writes what XML cannot hold visibly") {
  CHECK(normcheck::xml_escape("\x1b[31m") == "\\x1b[31m");
  CHECK(normcheck::xml_escape(std::string("a\0b", 3)) == "a\\x00b");
  CHECK(normcheck::xml_escape("\xEF\xBF\xBE") == "\\u{fffe}");
  CHECK(normcheck::xml_escape("\xEF\xBF\xBF") == "\\u{ffff}");
  CHECK(normcheck::xml_escape("\xFF\xFE.json") == "\\xff\\xfe.json");
}

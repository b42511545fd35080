// XML escaping (io/markup.hpp): markup characters become entities, and what XML 1.0 cannot hold at all
// is written visibly, so a JUnit report or an SVG figure is well-formed whatever its text holds.

#include "normcheck/io/markup.hpp"
#include "normcheck/core/utf8.hpp"

#include <doctest/doctest.h>
#include <rapidcheck.h>

#include <string>
#include <utility>
#include <vector>

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

namespace {

// The inverse of xml_escape's entities, for the round-trip law.
std::string unescape_entities(const std::string& text) {
  std::string out;
  for (std::size_t i = 0; i < text.size();) {
    bool matched = false;
    for (const auto& [entity, c] : {std::pair<std::string, char>{"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'},
                                    {"&quot;", '"'}, {"&apos;", '\''}}) {
      if (text.compare(i, entity.size(), entity) == 0) {
        out += c;
        i += entity.size();
        matched = true;
        break;
      }
    }
    if (!matched) out += text[i++];
  }
  return out;
}

}  // namespace

TEST_CASE("xml_escape leaves no raw markup and nothing XML cannot hold, whatever the bytes") {
  CHECK(rc::check("no raw <, >, quote, apostrophe, forbidden control or stray byte", [](const std::string& bytes) {
    const std::string escaped = normcheck::xml_escape(bytes);
    RC_ASSERT(escaped.find_first_of("<>\"'") == std::string::npos);
    for (std::size_t i = 0; i < escaped.size();) {
      const normcheck::utf8_step step = normcheck::decode_utf8(escaped, i);
      RC_ASSERT(step.valid);
      RC_ASSERT(
          !(step.code_point < 0x20 && step.code_point != '\t' && step.code_point != '\n' && step.code_point != '\r'));
      RC_ASSERT(step.code_point != 0xFFFE);
      RC_ASSERT(step.code_point != 0xFFFF);
      i += step.length;
    }
  }));
}

TEST_CASE("xml_escape unescapes to its input on text without controls or non-characters") {
  CHECK(rc::check("entities undone give the text back", [] {
    const auto code_points = *rc::gen::container<std::vector<char32_t>>(
        rc::gen::oneOf(rc::gen::element<char32_t>('\t', '\n', '\r', '&', '<', '>', '"', '\''),
                       rc::gen::inRange<char32_t>(0x20, 0xD800), rc::gen::inRange<char32_t>(0xE000, 0xFFFE),
                       rc::gen::inRange<char32_t>(0x10000, 0x110000)));
    std::string text;
    for (char32_t c : code_points) {
      // Controls and non-characters are what xml_escape writes visibly; every other character it keeps.
      const bool kept =
          c == '\t' || c == '\n' || c == '\r' || !(normcheck::is_control(c) || normcheck::is_noncharacter(c));
      normcheck::append_utf8(text, kept ? c : U'x');
    }
    RC_ASSERT(unescape_entities(normcheck::xml_escape(text)) == text);
  }));
}

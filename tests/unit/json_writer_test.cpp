// The JSON writer (io/json_writer.hpp) and the UTF-8 steps under it (io/utf8.hpp): valid JSON whatever
// bytes a string holds, controls and non-characters escaped, bytes that are not UTF-8 written reversibly.

#include "normcheck/io/json_writer.hpp"
#include "normcheck/core/utf8.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>
#include <rapidcheck.h>

#include <string>

namespace {

using normcheck::json_layout;
using normcheck::json_quote;
using normcheck::json_writer;

}  // namespace

TEST_CASE("json_quote escapes quotes, backslashes and control characters") {
  CHECK(json_quote("plain") == "\"plain\"");
  CHECK(json_quote("a\"b\\c\nd\te\x01") == R"("a\"b\\c\nd\te\u0001")");
  CHECK(json_quote("caf\xC3\xA9") == "\"caf\xC3\xA9\"");
}

TEST_CASE("json_quote escapes what a terminal or a strict consumer must not see raw") {
  SUBCASE("DEL and the C1 controls, such as the one-byte CSI") {
    CHECK(json_quote("\x7F") == R"("\u007f")");
    CHECK(json_quote("\xC2\x9B" "31m") == R"("\u009b31m")");
    CHECK(json_quote("\x1B[31m") == R"("\u001b[31m")");
  }
  SUBCASE("non-characters, in the BMP and beyond") {
    CHECK(json_quote("\xEF\xBF\xBE") == R"("\ufffe")");
    CHECK(json_quote("\xEF\xBF\xBF") == R"("\uffff")");
    CHECK(json_quote("\xEF\xB7\x90") == R"("\ufdd0")");
    CHECK(json_quote("\xF0\x9F\xBF\xBE") == R"("\ud83f\udffe")");
  }
  SUBCASE("other characters pass as they are") {
    CHECK(json_quote("\xE2\x80\xA8 \xF0\x9F\x98\x80 \xEF\xBF\xBD") == "\"\xE2\x80\xA8 \xF0\x9F\x98\x80 \xEF\xBF\xBD\"");
  }
}

TEST_CASE("bytes that are not UTF-8 are shown as backslash-x and two hex digits, never as lone surrogates") {
  CHECK(json_quote("\xFF\xFE") == R"("\\xff\\xfe")");
  CHECK(json_quote("a\xC3") == R"("a\\xc3")");                 // a sequence cut short
  CHECK(json_quote("\xC0\xAF") == R"("\\xc0\\xaf")");          // an overlong '/'
  CHECK(json_quote("\xED\xA0\x80") == R"("\\xed\\xa0\\x80")");  // an encoded surrogate
  CHECK(json_quote("\xF4\x90\x80\x80") == R"("\\xf4\\x90\\x80\\x80")");  // above U+10FFFF
  CHECK(json_quote("\xFF").find("\\ud") == std::string::npos);
}

TEST_CASE("a name is written reversibly: its own backslashes doubled, its bytes that are not UTF-8 escaped") {
  auto written = [](std::string_view name) {
    std::string out;
    normcheck::json_writer(out).begin_object().member("file", normcheck::json_name{name}).end_object();
    return out;
  };
  CHECK(written("cases/a.json") == R"({"file": "cases/a.json"})");
  CHECK(written("a\xFF.json") == R"({"file": "a\\xff.json"})");
  // The name that is spelled with a backslash, an x and two hexadecimal digits stays apart from it.
  CHECK(written("a\\xff.json") == R"({"file": "a\\\\xff.json"})");
  CHECK(written("tab\there") == R"({"file": "tab\\there"})");
}

TEST_CASE("decode_utf8 takes well-formed sequences and refuses the rest a byte at a time") {
  const normcheck::utf8_step e_acute = normcheck::decode_utf8("\xC3\xA9", 0);
  CHECK(e_acute.valid);
  CHECK(e_acute.code_point == 0xE9);
  CHECK(e_acute.length == 2);
  const normcheck::utf8_step emoji = normcheck::decode_utf8("\xF0\x9F\x98\x80", 0);
  CHECK(emoji.code_point == 0x1F600);
  CHECK(emoji.length == 4);
  const normcheck::utf8_step cut = normcheck::decode_utf8("\xE2\x82", 0);
  CHECK_FALSE(cut.valid);
  CHECK(cut.length == 1);
  CHECK(normcheck::is_noncharacter(0xFFFE));
  CHECK(normcheck::is_noncharacter(0x10FFFF));
  CHECK_FALSE(normcheck::is_noncharacter(0xFFFD));
  CHECK(normcheck::is_control(0x9F));
  CHECK_FALSE(normcheck::is_control(0xA0));
}

TEST_CASE("the writer lays out containers inline or one element per line") {
  std::string out;
  json_writer json(out);
  json.begin_object(json_layout::lines)
      .member("format", "normcheck/1")
      .key("ranks")
      .begin_array(json_layout::lines)
      .begin_object()
      .key("targets")
      .begin_array()
      .literal(0)
      .literal(normcheck::rational(3, 2))
      .null()
      .end_array()
      .end_object()
      .begin_array(json_layout::lines)
      .end_array()
      .end_array()
      .member("theta", normcheck::rational(-1, 4))
      .member("ok", true)
      .member("count", std::uint64_t{7})
      .end_object();
  CHECK(out ==
        "{\n"
        "  \"format\": \"normcheck/1\",\n"
        "  \"ranks\": [\n"
        "    {\"targets\": [0, \"3/2\", null]},\n"
        "    []\n"
        "  ],\n"
        "  \"theta\": \"-1/4\",\n"
        "  \"ok\": true,\n"
        "  \"count\": 7\n"
        "}");
  nlohmann::json parsed;
  CHECK_NOTHROW(parsed = nlohmann::json::parse(out));
  CHECK(parsed["ranks"][0]["targets"][1] == "3/2");
}

TEST_CASE("an undefined exact value is null, a defined one its canonical string") {
  std::string out;
  json_writer json(out);
  json.begin_array()
      .exact(std::optional<normcheck::rational>{})
      .exact(std::optional<normcheck::rational>{normcheck::rational(normcheck::rational(-6) / 4)})
      .numbers({0, 2})
      .strings({"a", "b"})
      .end_array();
  CHECK(out == R"([null, "-3/2", [0, 2], ["a", "b"]])");
}

TEST_CASE("inside a script element, a JSON string cannot close the element and parses back") {
  CHECK(json_quote("</script><!-- & \"q\" \\ \n\t\x01", normcheck::json_context::script_element) ==
        "\"\\u003c/script\\u003e\\u003c!-- \\u0026 \\\"q\\\" \\\\ \\n\\t\\u0001\"");
  CHECK(rc::check("no <, > or &, and the same text back", [] {
    const auto code_points = *rc::gen::container<std::vector<char32_t>>(rc::gen::oneOf(
        rc::gen::inRange<char32_t>(0, 0x80), rc::gen::inRange<char32_t>(0x80, 0xD800),
        rc::gen::inRange<char32_t>(0xE000, 0x110000)));
    std::string text;
    for (char32_t c : code_points) normcheck::append_utf8(text, c);
    const std::string quoted = json_quote(text, normcheck::json_context::script_element);
    RC_ASSERT(quoted.find_first_of("<>&") == std::string::npos);
    const nlohmann::json parsed = nlohmann::json::parse(quoted, nullptr, false);
    RC_ASSERT(!parsed.is_discarded());
    RC_ASSERT(parsed.get<std::string>() == text);
  }));
}

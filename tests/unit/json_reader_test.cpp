// The pull JSON reader (json_reader.hpp): structure, strings, limits, and where each error is reported.

#include "normcheck/io/json_reader.hpp"

#include <doctest/doctest.h>

#include <string>
#include <string_view>

namespace {

using normcheck::error;
using normcheck::json_kind;
using normcheck::json_reader;
using normcheck::reader_limits;

// "ok", or "code at line:column" for the first problem in a whole document.
std::string outcome(std::string_view text, const reader_limits& limits = {}) {
  try {
    json_reader json(text, "test.json", limits);
    json.skip_value();
    json.finish();
  } catch (const error& e) {
    REQUIRE(e.where().has_value());
    return std::string(normcheck::code_name(e.code())) + " at " + std::to_string(e.where()->line) + ":" +
           std::to_string(e.where()->column);
  }
  return "ok";
}

// Whether reading the whole document fails with an error marked as truncated.
bool truncated(std::string_view text) {
  try {
    json_reader json(text, "test.json");
    json.skip_value();
    json.finish();
  } catch (const error& e) {
    return e.truncated();
  }
  return false;
}

// The decoded value of a document that is one string.
std::string decoded(std::string_view text) {
  json_reader json(text, "test.json");
  std::string value(json.string_value());
  json.finish();
  return value;
}

}  // namespace

TEST_CASE("nested objects and arrays are read value by value") {
  json_reader json(R"({"a": [1, {"b": [true, false, null]}], "c": "x", "d": {}})", "test.json");
  std::string_view key;
  REQUIRE(json.peek() == json_kind::object);
  json.begin_object();
  REQUIRE(json.next_member(key));
  CHECK(key == "a");
  REQUIRE(json.peek() == json_kind::array);
  json.begin_array();
  REQUIRE(json.next_element());
  CHECK(json.peek() == json_kind::number);
  CHECK(json.number_text() == "1");
  REQUIRE(json.next_element());
  json.begin_object();
  REQUIRE(json.next_member(key));
  CHECK(key == "b");
  json.begin_array();
  REQUIRE(json.next_element());
  CHECK(json.boolean_value() == true);
  REQUIRE(json.next_element());
  CHECK(json.boolean_value() == false);
  REQUIRE(json.next_element());
  CHECK(json.peek() == json_kind::null);
  json.null_value();
  CHECK_FALSE(json.next_element());
  CHECK_FALSE(json.next_member(key));
  CHECK_FALSE(json.next_element());
  REQUIRE(json.next_member(key));
  CHECK(key == "c");
  CHECK(json.string_value() == "x");
  REQUIRE(json.next_member(key));
  CHECK(key == "d");
  json.begin_object();
  CHECK_FALSE(json.next_member(key));
  CHECK_FALSE(json.next_member(key));
  CHECK_NOTHROW(json.finish());
}

TEST_CASE("number text is handed over exactly as written") {
  json_reader json("[-1.50e+3, 0.1, 123456789012345678901234567890]", "test.json");
  json.begin_array();
  REQUIRE(json.next_element());
  CHECK(json.number_text() == "-1.50e+3");
  REQUIRE(json.next_element());
  CHECK(json.number_text() == "0.1");
  REQUIRE(json.next_element());
  CHECK(json.number_text() == "123456789012345678901234567890");
  CHECK_FALSE(json.next_element());
}

TEST_CASE("offsets of values and keys are byte offsets") {
  json_reader json(R"({"a": 1, "bc":   2})", "test.json");
  std::string_view key;
  json.begin_object();
  REQUIRE(json.next_member(key));
  CHECK(json.key_offset() == 1);
  CHECK(json.value_offset() == 6);
  json.skip_value();
  REQUIRE(json.next_member(key));
  CHECK(json.key_offset() == 9);
  CHECK(json.value_offset() == 17);
}

TEST_CASE("simple escapes are decoded") {
  CHECK(decoded(R"("a\"b\\c\/d\be\ff\ng\rh\ti")") == "a\"b\\c/d\be\ff\ng\rh\ti");
  CHECK(decoded(R"("\u0041\u0000z")") == std::string("A\0z", 3));
}

TEST_CASE("unicode escapes and surrogate pairs are decoded to UTF-8") {
  CHECK(decoded(R"("caf\u00e9")") == "caf\xC3\xA9");
  CHECK(decoded(R"("\u20AC")") == "\xE2\x82\xAC");
  CHECK(decoded(R"("\ud83d\ude00")") == "\xF0\x9F\x98\x80");
  CHECK(decoded(R"("\uD834\uDD1E!")") == "\xF0\x9D\x84\x9E!");
  CHECK(decoded("\"caf\xC3\xA9 \xF0\x9F\x98\x80\"") == "caf\xC3\xA9 \xF0\x9F\x98\x80");
}

TEST_CASE("lone surrogates are parse errors") {
  CHECK(outcome(R"(["\ud800"])") == "parse_error at 1:3");
  CHECK(outcome(R"(["\udc00"])") == "parse_error at 1:3");
  CHECK(outcome(R"(["ab\ud800\u0041"])") == "parse_error at 1:5");
  CHECK(outcome(R"(["\ud800x"])") == "parse_error at 1:3");
  CHECK(outcome(R"(["\ude00\ud83d"])") == "parse_error at 1:3");
}

TEST_CASE("bad escapes are parse errors") {
  CHECK(outcome(R"(["ab\q"])") == "parse_error at 1:5");
  CHECK(outcome(R"(["\u12"])") == "parse_error at 1:3");
  CHECK(outcome(R"(["\u12g4"])") == "parse_error at 1:3");
  CHECK(outcome(R"(["\x41"])") == "parse_error at 1:3");
}

TEST_CASE("invalid UTF-8 is a parse error") {
  CHECK(outcome("[\"\xFF\"]") == "parse_error at 1:3");
  CHECK(outcome("[\"ok\xC3\"]") == "parse_error at 1:5");                // cut-off sequence
  CHECK(outcome("[\"\xC0\x80\"]") == "parse_error at 1:3");               // overlong NUL
  CHECK(outcome("[\"\xE0\x80\xAF\"]") == "parse_error at 1:3");           // overlong '/'
  CHECK(outcome("[\"\xED\xA0\x80\"]") == "parse_error at 1:3");           // an encoded surrogate
  CHECK(outcome("[\"\xF4\x90\x80\x80\"]") == "parse_error at 1:3");       // beyond U+10FFFF
  CHECK(outcome("[\"\x80\"]") == "parse_error at 1:3");                   // a lone continuation byte
  CHECK(outcome("{\"k\xFF\": 1}") == "parse_error at 1:4");               // in a key
}

TEST_CASE("control characters in strings are parse errors") {
  CHECK(outcome("[\"a\nb\"]") == "parse_error at 1:4");
  CHECK(outcome("[\"a\tb\"]") == "parse_error at 1:4");
  CHECK(outcome(std::string_view("[\"a\0b\"]", 7)) == "parse_error at 1:4");
  CHECK(outcome("[\"\x1F\"]") == "parse_error at 1:3");
  CHECK(outcome("[\"\x7F\"]") == "ok");
}

TEST_CASE("duplicate keys are schema errors at the second key") {
  CHECK(outcome(R"({"a": 1, "a": 2})") == "schema_error at 1:10");
  CHECK(outcome(R"({"a": 1, "\u0061": 2})") == "schema_error at 1:10");
  CHECK(outcome("{\"x\": {\"a\": 1,\n \"b\": 2, \"a\": 3}}") == "schema_error at 2:10");
  CHECK(outcome(R"({"a": {"a": 1}, "b": {"a": 2}})") == "ok");
  CHECK(outcome(R"([{"a": 1}, {"a": 2}])") == "ok");
}

TEST_CASE("content after the document is a parse error") {
  CHECK(outcome("{} x") == "parse_error at 1:4");
  CHECK(outcome("[1] [2]") == "parse_error at 1:5");
  CHECK(outcome("{}\n\n}") == "parse_error at 3:1");
  CHECK(outcome("{} \n\t\r\n ") == "ok");
  CHECK_FALSE(truncated("{} x"));
}

TEST_CASE("only JSON whitespace separates tokens") {
  CHECK(outcome("[1,\f2]") == "parse_error at 1:4");
  CHECK(outcome("[1,\v2]") == "parse_error at 1:4");
  CHECK(outcome("\t[1,\r\n 2 ]\n") == "ok");
}

TEST_CASE("a leading byte-order mark is skipped, anywhere else it is an error") {
  CHECK(outcome("\xEF\xBB\xBF{\"a\": 1}") == "ok");
  CHECK(outcome("[1, \xEF\xBB\xBF 2]") != "ok");
}

TEST_CASE("a skipped byte-order mark does not count as a column") {
  CHECK(outcome("\xEF\xBB\xBF[1 2]") == "parse_error at 1:4");
  CHECK(outcome("\xEF\xBB\xBF[1,\n 2 x]") == "parse_error at 2:4");
}

TEST_CASE("malformed structure is a parse error where it is met") {
  CHECK(outcome("[1 2]") == "parse_error at 1:4");
  CHECK(outcome("[1,]") == "parse_error at 1:4");
  CHECK(outcome(R"({"a": 1,})") == "parse_error at 1:9");
  CHECK(outcome(R"({"a" 1})") == "parse_error at 1:6");
  CHECK(outcome(R"({a: 1})") == "parse_error at 1:2");
  CHECK(outcome("[True]") == "parse_error at 1:2");
  CHECK(outcome("[nulx]") == "parse_error at 1:2");
  CHECK(outcome("[1}") == "parse_error at 1:3");
  CHECK(outcome("]") == "parse_error at 1:1");
}

TEST_CASE("the depth limit is limit_exceeded at the first container too deep") {
  const std::string deepest_allowed = std::string(64, '[') + std::string(64, ']');
  CHECK(outcome(deepest_allowed) == "ok");
  const std::string too_deep = std::string(65, '[') + std::string(65, ']');
  CHECK(outcome(too_deep) == "limit_exceeded at 1:65");
  std::string objects;
  for (int i = 0; i < 65; ++i) objects += "{\"a\": ";
  objects += "1" + std::string(65, '}');
  CHECK(outcome(objects) == "limit_exceeded at 1:" + std::to_string(64 * 6 + 1));
  reader_limits shallow;
  shallow.max_depth = 2;
  CHECK(outcome("[[1]]", shallow) == "ok");
  CHECK(outcome("[{\"a\": [1]}]", shallow) == "limit_exceeded at 1:8");
}

TEST_CASE("input that ends inside the document is marked truncated") {
  for (const char* text : {"", "   ", "{", "{\"a\"", "{\"a\":", "{\"a\": [1, 2", "[1,", "\"abc", "[\"a\\", "tru",
                           "[nul", "{\"a\": 1"}) {
    CAPTURE(text);
    CHECK(truncated(text));
    CHECK(outcome(text).rfind("parse_error", 0) == 0);
  }
}

TEST_CASE("errors before the end of the input are not marked truncated") {
  for (const char* text : {"[1 2]", "{} x", "[1,]", "{\"a\": 1, \"a\": 2}", "[\"\\ud800\"]", "[\"\xFF\"]"}) {
    CAPTURE(text);
    CHECK_FALSE(truncated(text));
  }
}

TEST_CASE("lines and columns count characters, not bytes") {
  CHECK(outcome("{\n  \"a\": x}") == "parse_error at 2:8");
  CHECK(outcome("[\"\xC3\xA9\", x]") == "parse_error at 1:7");           // é is one character
  CHECK(outcome("[\"\xF0\x9F\x98\x80\", x]") == "parse_error at 1:7");   // so is an emoji
  CHECK(outcome("[\"\xE6\x97\xA5\xE6\x9C\xAC\", x]") == "parse_error at 1:8");
  CHECK(outcome("[\"\xC3\xA9\xC3\xA9\x01\"]") == "parse_error at 1:5");
  CHECK(outcome("[1,\r\n x]") == "parse_error at 2:2");
}

TEST_CASE("locate maps a byte offset to line and column") {
  json_reader json("ab\n\xC3\xA9z\n", "where.json");
  const normcheck::location start = json.locate(0);
  CHECK(start.file == "where.json");
  CHECK(start.line == 1);
  CHECK(start.column == 1);
  const normcheck::location z = json.locate(5);
  CHECK(z.line == 2);
  CHECK(z.column == 2);
  CHECK(z.offset == 5);
}

TEST_CASE("fail_type names what was expected and what was found") {
  json_reader json(R"({"theta": [1]})", "test.json");
  std::string_view key;
  json.begin_object();
  REQUIRE(json.next_member(key));
  try {
    json.fail_type("theta", "an exact number");
    FAIL("fail_type returned");
  } catch (const error& e) {
    CHECK(e.code() == normcheck::error_code::schema_error);
    CHECK(e.message() == "theta must be an exact number, found an array");
    REQUIRE(e.where().has_value());
    CHECK(e.where()->column == 11);
  }
}

TEST_CASE("kinds have names for messages") {
  CHECK(normcheck::kind_name(json_kind::object) == "an object");
  CHECK(normcheck::kind_name(json_kind::array) == "an array");
  CHECK(normcheck::kind_name(json_kind::string) == "a string");
  CHECK(normcheck::kind_name(json_kind::number) == "a number");
  CHECK(normcheck::kind_name(json_kind::boolean) == "a boolean");
  CHECK(normcheck::kind_name(json_kind::null) == "null");
}

TEST_CASE("asking for the wrong kind of value is a parse error") {
  json_reader json("[true]", "test.json");
  json.begin_array();
  REQUIRE(json.next_element());
  CHECK_THROWS_AS((void)json.string_value(), error);
}

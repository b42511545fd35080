// The rejection rules of README "Hostile input and limits", each checked in-process through check_text,
// the function `normcheck check` runs on every file.

#include "fuzz_targets.hpp"

#include "normcheck/check/check.hpp"
#include "normcheck/io/json_reader.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace {

using namespace normcheck;

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::vector<std::filesystem::path> bundled_cases() {
  std::vector<std::filesystem::path> cases;
  for (const auto& entry : std::filesystem::recursive_directory_iterator(NORMCHECK_CASES_DIR))
    if (entry.is_regular_file() && entry.path().extension() == ".json") cases.push_back(entry.path());
  std::sort(cases.begin(), cases.end());
  return cases;
}

const std::string good = R"({"format": "normcheck/1", "ranks": [{"targets": [0]}, {"targets": [2, 2, 2]}], )"
                         R"("expect": {"global_mean": "-3/2"}})";

// The code a document is rejected with, "pass" or "fail".
std::string verdict(std::string_view text, const reader_limits& limits = {}) {
  const file_report report = check_text(text, "test", {limits});
  if (report.status == file_status::pass) return "pass";
  if (report.status == file_status::fail) return "fail";
  return report.rejection ? std::string(code_name(report.rejection->code())) : "error";
}

std::string message(std::string_view text, const reader_limits& limits = {}) {
  const file_report report = check_text(text, "test", {limits});
  return report.rejection ? describe(*report.rejection) : "";
}

// A document with `targets` as the tokens of its one rank.
std::string with_targets(const std::string& targets) {
  return R"({"format": "normcheck/1", "ranks": [{"targets": [)" + targets + "]}]}";
}

// The bytes before `stop` a document is cut at: every one, or with a `stride`, `first` + k * stride
// (modulo the stride) and each of the last stride * 8, where a document ends and a cut is likeliest to
// leave something whole.
std::vector<std::size_t> cut_positions(std::size_t stop, std::size_t stride, std::size_t first) {
  std::vector<std::size_t> cuts;
  const std::size_t every_byte_from = stop > stride * 8 ? stop - stride * 8 : 0;
  for (std::size_t cut = 0; cut < stop; ++cut)
    if (cut >= every_byte_from || cut % stride == first % stride) cuts.push_back(cut);
  return cuts;
}

// Cuts `text` before the end of its document at cut_positions and returns the cuts that pass.
std::vector<std::size_t> passing_cuts(const std::string& text, std::size_t stride = 1, std::size_t first = 0) {
  std::vector<std::size_t> passing;
  const std::optional<std::size_t> end = fuzz::document_end(text);
  for (const std::size_t cut : cut_positions(end ? *end : text.size(), stride, first))
    if (check_text(std::string_view(text).substr(0, cut), "cut").status == file_status::pass) passing.push_back(cut);
  return passing;
}

// The sanitized build reads about ten times slower and the cuts cost the square of a case's size: there
// each case is cut at every eighth byte, the cases starting at the eight offsets in turn, so that every
// offset is cut in some case (and every byte of each case's last 64).
#ifdef NORMCHECK_SANITIZED
constexpr std::size_t cut_stride = 8;
#else
constexpr std::size_t cut_stride = 1;
#endif

}  // namespace

TEST_CASE("every bundled case cut at every byte before its end never passes") {
  const std::vector<std::filesystem::path> cases = bundled_cases();
  REQUIRE(cases.size() >= 9);
  std::size_t bytes = 0;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const std::string text = read_text(cases[i]);
    CAPTURE(cases[i].string());
    // A case that does not hold whole fails its own test ("cases: ..."); its cuts must not pass either.
    if (check_text(text, cases[i].string()).status != file_status::pass)
      MESSAGE("does not pass whole: " << cases[i].string());
    CHECK(passing_cuts(text, cut_stride, i).empty());
    bytes += text.size();
  }
  MESSAGE(cases.size() << " cases, " << bytes << " bytes, cut at every " << cut_stride << " byte(s)");
}

TEST_CASE("a strided cut visits its offset in every stride and every byte of the end") {
  CHECK(cut_positions(5, 1, 0) == std::vector<std::size_t>{0, 1, 2, 3, 4});
  CHECK(cut_positions(20, 2, 1) == std::vector<std::size_t>{1, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17,
                                                             18, 19});
  CHECK(cut_positions(40, 3, 5) == std::vector<std::size_t>{2, 5, 8, 11, 14, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25,
                                                             26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39});
  CHECK(cut_positions(3, 8, 2).size() == 3);
}

TEST_CASE("a valid document cut before its closing brace is a truncated parse_error") {
  const std::string text = good;
  for (std::size_t cut = 0; cut + 1 < text.size(); ++cut) {
    CAPTURE(cut);
    const file_report report = check_text(std::string_view(text).substr(0, cut), "cut");
    REQUIRE(report.rejection.has_value());
    CHECK(report.rejection->code() == error_code::parse_error);
    CHECK(report.rejection->truncated());
  }
}

TEST_CASE("an expected error met before the cut does not make a cut document pass") {
  // Found by fuzz_reader: the rejection of theta came before the end, so the cut went unnoticed.
  const std::string text =
      R"({"format": "normcheck/1", "expect_error": "bad_number", "ranks": [{"targets": [1]}], "theta": "1/0"})";
  CHECK(verdict(text) == "pass");
  CHECK(passing_cuts(text).empty());
  CHECK(verdict(text.substr(0, text.size() - 1)) == "bad_number");
}

TEST_CASE("the truncation check finds a cut that passes") {
  // Trailing whitespace is not part of the document: cutting it leaves a passing file, and
  // passing_cuts must report such cuts when they are inside its range.
  const std::string text = good + "\n\n";
  std::vector<std::size_t> cuts;
  for (std::size_t cut = good.size(); cut < text.size(); ++cut)
    if (check_text(std::string_view(text).substr(0, cut), "cut").status == file_status::pass) cuts.push_back(cut);
  CHECK(cuts.size() == 2);
}

TEST_CASE("duplicate keys anywhere are schema_error") {
  CHECK(verdict(R"({"format": "normcheck/1", "format": "normcheck/1", "ranks": [{"targets": [1]}]})") ==
        "schema_error");
  CHECK(verdict(R"({"format": "normcheck/1", "ranks": [{"targets": [1]}], "ranks": [{"targets": [2]}]})") ==
        "schema_error");
  CHECK(verdict(R"({"format": "normcheck/1", "ranks": [{"targets": [1], "targets": [1]}]})") == "schema_error");
  CHECK(verdict(R"({"format": "normcheck/1", "ranks": [{"targets": [1]}], )"
                R"("expect": {"global_mean": 1, "global_mean": 1}})") == "schema_error");
  // Keys are compared after decoding escapes: "\u0066ormat" is "format".
  CHECK(verdict(R"({"format": "normcheck/1", "\u0066ormat": "normcheck/1", "ranks": [{"targets": [1]}]})") ==
        "schema_error");
  CHECK(message(R"({"format": "normcheck/1", "ranks": [{"targets": [1]}], "ranks": []})")
            .find("duplicate key \"ranks\"") != std::string::npos);
  // The same key in two different objects is fine.
  CHECK(verdict(R"({"format": "normcheck/1", "ranks": [{"targets": [1]}, {"targets": [1]}]})") == "pass");
}

TEST_CASE("duplicate keys are rejected in skipped values too") {
  json_reader json(R"({"a": {"b": 1, "b": 2}})", "test");
  CHECK_THROWS_AS(json.skip_value(), error);
}

TEST_CASE("content after the document is parse_error") {
  CHECK(verdict(good) == "pass");
  CHECK(verdict(good + "\n\t \r\n") == "pass");
  CHECK(verdict(good + good) == "parse_error");
  CHECK(verdict(good + " x") == "parse_error");
  CHECK(verdict(good + "\n}") == "parse_error");
  CHECK(verdict(good + std::string(1, '\0')) == "parse_error");
  CHECK(message(good + " x").find("content after the end of the document") != std::string::npos);
}

TEST_CASE("a leading byte-order mark is skipped and nowhere else accepted") {
  const std::string bom = "\xEF\xBB\xBF";
  CHECK(verdict(bom + good) == "pass");
  CHECK(verdict(bom + bom + good) == "parse_error");
  CHECK(verdict(" " + bom + good) == "parse_error");
  CHECK(verdict(good + bom) == "parse_error");
  CHECK(verdict("\xEF\xBB" + good) == "parse_error");
  // Columns count characters after the mark as usual.
  CHECK(message(bom + "{\"format\": 1}").find("test:1:12:") != std::string::npos);
  CHECK(message("{\"format\": 1}").find("test:1:12:") != std::string::npos);
}

TEST_CASE("invalid UTF-8 in strings is parse_error") {
  for (const char* bytes : {"\x80", "\xC0\xAF", "\xC1\xBF", "\xE0\x80\xAF", "\xED\xA0\x80", "\xF4\x90\x80\x80",
                            "\xF8\x88\x80\x80\x80", "\xC3", "\xE2\x82", "\xFF", "\xFE"}) {
    CAPTURE(bytes);
    const std::string text = R"({"format": "normcheck/1", "description": "a)" + std::string(bytes) +
                             R"(b", "ranks": [{"targets": [1]}]})";
    CHECK(verdict(text) == "parse_error");
  }
  // Well-formed multi-byte characters are fine.
  CHECK(verdict(R"({"format": "normcheck/1", "description": "θ ∑ 𝔼", "ranks": [{"targets": [1]}]})") == "pass");
}

TEST_CASE("invalid UTF-8 outside strings is parse_error") {
  CHECK(verdict("{\"format\": \"normcheck/1\", \xC3\xA9 \"ranks\": [{\"targets\": [1]}]}") == "parse_error");
}

TEST_CASE("lone surrogates are parse_error") {
  for (const char* escape : {"\\ud800", "\\udfff", "\\ud800x", "\\ud800\\u0041", "\\udc00\\ud800", "\\ud83d\\ud83d"}) {
    CAPTURE(escape);
    const std::string text = R"({"format": "normcheck/1", "description": ")" + std::string(escape) +
                             R"(", "ranks": [{"targets": [1]}]})";
    CHECK(verdict(text) == "parse_error");
  }
  CHECK(verdict(R"({"format": "normcheck/1", "description": "\ud83d\ude00", "ranks": [{"targets": [1]}]})") == "pass");
}

TEST_CASE("the depth limit names itself and its option") {
  // The partition schema never nests deeper than five levels and rejects any other nesting where it
  // starts, so the limit guards skipping: finding `format` and `expect_error` in arbitrary documents.
  const std::string deep = "{\"x\": " + std::string(100, '[') + std::string(100, ']') + "}";
  json_reader json(deep, "test");
  try {
    json.skip_value();
    FAIL("no error for 101 levels");
  } catch (const error& e) {
    CHECK(e.code() == error_code::limit_exceeded);
    CHECK(e.message().find("deeper than 64 levels") != std::string::npos);
    CHECK(e.message().find("--max-depth") != std::string::npos);
  }
  reader_limits deeper;
  deeper.max_depth = 200;
  json_reader allowed(deep, "test", deeper);
  CHECK_NOTHROW(allowed.skip_value());
}

TEST_CASE("skipping is iterative: the deepest nesting allowed does not exhaust the stack") {
  reader_limits deepest;
  deepest.max_depth = 100000;  // the largest --max-depth accepts
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  json_reader json(deep, "test", deepest);
  CHECK_NOTHROW(json.skip_value());
  const std::string bomb = "{\"x\": " + std::string(1000000, '[');
  const file_report report = check_text(bomb, "bomb", {deepest});
  REQUIRE(report.rejection.has_value());
  CHECK(report.rejection->code() == error_code::schema_error);  // the unknown key, met first
  CHECK(report.rejection->truncated());                          // and a million brackets never closed
  CHECK_FALSE(declared_format(bomb, deepest).has_value());
  CHECK_FALSE(find_expected_error(bomb, deepest).has_value());
}

TEST_CASE("the digit limit names itself and its option") {
  const std::string many = with_targets(std::string(100001, '7'));
  CHECK(verdict(many) == "number_out_of_range");
  CHECK(message(many).find("100000 digits") != std::string::npos);
  CHECK(message(many).find("--max-digits") != std::string::npos);
  CHECK(verdict(with_targets(std::string(100000, '7'))) == "pass");
  reader_limits more;
  more.numbers.max_digits = 200000;
  CHECK(verdict(many, more) == "pass");
}

TEST_CASE("the exponent limit names itself and its option") {
  for (const std::string& literal :
       {std::string("1e10001"), std::string("\"0x1p-10001\""), std::string("1e999999999")}) {
    CAPTURE(literal);
    CHECK(verdict(with_targets(literal)) == "number_out_of_range");
    CHECK(message(with_targets(literal)).find("±10000") != std::string::npos);
    CHECK(message(with_targets(literal)).find("--max-exponent") != std::string::npos);
  }
  CHECK(verdict(with_targets("1e10000")) == "pass");
  reader_limits wider;
  wider.numbers.max_exponent = 20000;
  CHECK(verdict(with_targets("1e10001"), wider) == "pass");
}

TEST_CASE("a malformed literal is bad_number even when it is also too long") {
  CHECK(verdict(with_targets("\"1e99999x\"")) == "bad_number");
  CHECK(verdict(with_targets("\"0x1p99999q\"")) == "bad_number");
}

TEST_CASE("empty per-rank lists in observed are schema_error, not silently no list") {
  const std::string head =
      R"({"format": "normcheck/1", "ranks": [{"targets": [0]}, {"targets": [2, 2, 2]}], "world_size": 2,)"
      R"( "observed": {"per_rank": ["-0x1.8p+0", "-0x1.8p+0"], "dtype": "float32", "tokens": )";
  CHECK(verdict(head + R"({"global": 4, "per_rank": [1, 3]}}})") == "pass");
  CHECK(verdict(head + R"({"global": 4, "per_rank": []}}})") == "schema_error");
  CHECK(message(head + R"({"global": 4, "per_rank": []}}})").find("tokens.per_rank must list every rank") !=
        std::string::npos);
  CHECK(verdict(head + R"({"divided_by": [4, 4]}}})") == "pass");
  CHECK(verdict(head + R"({"divided_by": []}}})") == "schema_error");
  CHECK(message(head + R"({"divided_by": []}}})").find("divided_by must list every rank") != std::string::npos);
}

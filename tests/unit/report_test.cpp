// Printing results (report.hpp): the JSON document is parsed by an independent JSON library and its
// documented fields are checked; the text report and the summary line are checked as people read them.

#include "normcheck/check/check.hpp"
#include "normcheck/check/json_report.hpp"
#include "normcheck/check/junit_report.hpp"
#include "normcheck/check/text_report.hpp"

#include "normcheck/core/utf8.hpp"

#include <doctest/doctest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

namespace {

using nlohmann::json;

constexpr std::string_view holds_text = R"({
  "format": "normcheck/1",
  "description": "one rank holds one token, the other three",
  "ranks": [{"targets": [0]}, {"targets": [2, 2, 2, null]}],
  "expect": {"global_mean": "-3/2", "local_mean": -1}
})";

constexpr std::string_view wrong_text = R"({
  "format": "normcheck/1",
  "ranks": [{"targets": [0]}, {"targets": [2, 2, 2]}],
  "expect": {"local_mean": "-3/2"}
})";

constexpr std::string_view rejected_text = R"({
  "format": "normcheck/1",
  "ranks": [{"targets": [1, "NaN"]}]
})";

constexpr std::string_view expected_rejection_text = R"({
  "format": "normcheck/1",
  "expect_error": "no_valid_tokens",
  "ranks": [{"targets": []}, {"microbatches": [[null], []]}]
})";

constexpr std::string_view empty_rank_text = R"({
  "format": "normcheck/1",
  "ranks": [{"targets": []}, {"targets": [2, 2]}]
})";

std::vector<normcheck::file_report> sample_reports() {
  return {normcheck::check_text(holds_text, "holds.json"), normcheck::check_text(wrong_text, "wrong.json"),
          normcheck::check_text(rejected_text, "bad.json"),
          normcheck::check_text(expected_rejection_text, "empty.json")};
}

std::string json_text(const std::vector<normcheck::file_report>& reports) {
  std::ostringstream out;
  out << normcheck::json_report(reports);
  return out.str();
}

std::string text_of(const normcheck::file_report& report) {
  std::ostringstream out;
  normcheck::print_text(out, report);
  return out.str();
}

std::string str(const json& value) { return value.get<std::string>(); }

bool contains(const std::string& text, std::string_view part) { return text.find(part) != std::string::npos; }

}  // namespace

TEST_CASE("the JSON report parses and counts the verdicts") {
  const json document = json::parse(json_text(sample_reports()));
  REQUIRE(document.is_object());
  REQUIRE(document["reports"].is_array());
  CHECK(document["reports"].size() == 4);
  CHECK(document["passed"].get<int>() == 2);
  CHECK(document["failed"].get<int>() == 1);
  CHECK(document["errors"].get<int>() == 1);
  CHECK(str(document["reports"][0]["status"]) == "pass");
  CHECK(str(document["reports"][1]["status"]) == "fail");
  CHECK(str(document["reports"][2]["status"]) == "error");
  CHECK(str(document["reports"][3]["status"]) == "pass");
}

TEST_CASE("a JSON report of a read document has its gradients, verdicts, expectations and ranks") {
  const json report = json::parse(json_text(sample_reports()))["reports"][0];
  CHECK(str(report["file"]) == "holds.json");
  const json& gradients = report["gradients"];
  REQUIRE(gradients.is_object());
  CHECK(gradients.size() == 6);
  CHECK(str(gradients["global_mean"]) == "-3/2");
  CHECK(str(gradients["local_mean"]) == "-1");
  CHECK(str(gradients["local_sum"]) == "-3");
  CHECK(str(gradients["scaled_sum"]) == "-3/2");
  CHECK(str(gradients["global_share"]) == "-3/4");
  CHECK(str(gradients["microbatch_mean"]) == "-1");
  const json& equals = report["equals_objective"];
  CHECK(equals["scaled_sum"].get<bool>());
  CHECK_FALSE(equals["local_mean"].get<bool>());
  REQUIRE(report["expectations"].size() == 2);
  CHECK(str(report["expectations"][1]["gradient"]) == "local_mean");
  CHECK(str(report["expectations"][1]["expected"]) == "-1");
  CHECK(str(report["expectations"][1]["actual"]) == "-1");
  CHECK(report["expectations"][1]["held"].get<bool>());
  CHECK(report["failures"].empty());
  CHECK(report["world_size"].get<int>() == 2);
  CHECK(report["valid_tokens"].get<int>() == 4);
  CHECK(str(report["reducer"]) == "mean");
  CHECK(str(report["theta"]) == "0");
  REQUIRE(report["ranks"].size() == 2);
  CHECK(report["ranks"][1]["valid_tokens"].get<int>() == 3);
  CHECK(report["ranks"][1]["padding"].get<int>() == 1);
  CHECK(report["ranks"][1]["microbatches"].get<int>() == 1);
  CHECK(str(report["ranks"][1]["loss_gradient_sum"]) == "-6");
  CHECK_FALSE(report.contains("error"));
}

TEST_CASE("undefined gradients are JSON null") {
  const json report = json::parse(json_text({normcheck::check_text(empty_rank_text, "e.json")}))["reports"][0];
  CHECK(report["gradients"]["local_mean"].is_null());
  CHECK(report["gradients"]["microbatch_mean"].is_null());
  CHECK(str(report["gradients"]["scaled_sum"]) == "-2");
  CHECK_FALSE(report["equals_objective"]["local_mean"].get<bool>());
}

TEST_CASE("a failing JSON report lists its failures") {
  const json report = json::parse(json_text(sample_reports()))["reports"][1];
  REQUIRE(report["failures"].size() == 1);
  CHECK(str(report["failures"][0]) == "expect local_mean = -3/2, but it is -1");
  CHECK_FALSE(report["expectations"][0]["held"].get<bool>());
}

TEST_CASE("a rejected file's JSON report has null gradients and the error with its location") {
  const json report = json::parse(json_text(sample_reports()))["reports"][2];
  CHECK(report["gradients"].is_null());
  REQUIRE(report["error"].is_object());
  CHECK(str(report["error"]["code"]) == "bad_number");
  CHECK(contains(str(report["error"]["message"]), "NaN"));
  CHECK(report["error"]["line"].get<int>() == 3);
  CHECK(report["error"]["column"].get<int>() == 29);
}

TEST_CASE("an expected rejection's JSON report names the expected code") {
  const json report = json::parse(json_text(sample_reports()))["reports"][3];
  CHECK(str(report["expected_error"]) == "no_valid_tokens");
  CHECK(str(report["error"]["code"]) == "no_valid_tokens");
  CHECK(report["error"]["line"].get<int>() == 4);
}

TEST_CASE("an unreadable path has a JSON error without a position") {
  const normcheck::file_report missing =
      normcheck::check_path(std::filesystem::temp_directory_path() / "normcheck_report_test_missing.json");
  const json report = json::parse(json_text({missing}))["reports"][0];
  CHECK(str(report["error"]["code"]) == "io_error");
  CHECK(report["error"]["line"].is_null());
  CHECK(report["error"]["column"].is_null());
}

TEST_CASE("the JSON report of no file is valid") {
  const json document = json::parse(json_text({}));
  CHECK(document["reports"].empty());
  CHECK(document["passed"].get<int>() == 0);
}

TEST_CASE("JSON keeps long fractions whole") {
  const std::string digits = "1234567890123456789012345678901234567890123456789012345678901234567890";
  const std::string text = R"({"format": "normcheck/1", "ranks": [{"targets": [)" + digits + "]}]}";
  const normcheck::file_report checked = normcheck::check_text(text, "long.json");
  const json report = json::parse(json_text({checked}))["reports"][0];
  CHECK(str(report["gradients"]["global_mean"]) == "-" + digits);
  const std::string screen = text_of(checked);
  CHECK(contains(screen, "(70 digits)"));
  CHECK_FALSE(contains(screen, digits));
}

TEST_CASE("file names and messages are escaped in JSON") {
  // The name as the text report spells it, reversibly: its backslash doubled, its controls escaped.
  const std::string name = "we\"ird\\name\t\x01.json";
  const json report = json::parse(json_text({normcheck::check_text(rejected_text, name)}))["reports"][0];
  CHECK(str(report["file"]) == normcheck::escaped_name(name));
  CHECK(str(report["file"]) == "we\"ird\\\\name\\t\\x01.json");
}

TEST_CASE("the JSON report stays valid UTF-8 when a message quotes a long non-ASCII literal") {
  // The message quotes the literal cut to its first 40 bytes; the cut must not split a character.
  std::string literal = "a";
  for (int i = 0; i < 25; ++i) literal += "\xC3\xA9";
  const std::string text = R"({"format": "normcheck/1", "ranks": [{"targets": [")" + literal + R"("]}]})";
  const normcheck::file_report checked = normcheck::check_text(text, "utf8.json");
  REQUIRE(checked.rejection.has_value());
  CHECK(checked.rejection->code() == normcheck::error_code::bad_number);
  json parsed;
  CHECK_NOTHROW(parsed = json::parse(json_text({checked})));
}

TEST_CASE("the text report shows the update, every gradient and each expectation") {
  const std::vector<normcheck::file_report> reports = sample_reports();
  const std::string text = text_of(reports[0]);
  CHECK(text.rfind("PASS  holds.json\n", 0) == 0);
  CHECK(contains(text, "one rank holds one token, the other three"));
  CHECK(contains(text, "W = 2, reducer mean, θ = 0, N = 4"));
  CHECK(contains(text, "rank 0: n = 1, S = 0"));
  CHECK(contains(text, "rank 1: n = 3 (+1 padding), S = -6"));
  for (normcheck::strategy s : normcheck::all_strategies) CHECK(contains(text, normcheck::strategy_name(s)));
  CHECK(contains(text, "≈ -1.5"));
  CHECK(contains(text, "≈ -0.75"));
  CHECK(contains(text, "equals the objective"));
  CHECK(contains(text, "differs from the objective"));
  CHECK(contains(text, "expect local_mean = -1: holds"));
}

TEST_CASE("the text report marks failures, rejections and undefined gradients") {
  const std::vector<normcheck::file_report> reports = sample_reports();
  const std::string wrong = text_of(reports[1]);
  CHECK(wrong.rfind("FAIL  wrong.json\n", 0) == 0);
  CHECK(contains(wrong, "expect local_mean = -3/2: DOES NOT HOLD"));
  const std::string rejected = text_of(reports[2]);
  CHECK(rejected.rfind("ERROR bad.json:3:29: bad_number: ", 0) == 0);
  const std::string expected = text_of(reports[3]);
  CHECK(expected.rfind("PASS  empty.json\n", 0) == 0);
  CHECK(contains(expected, "rejected as expected: empty.json:4:12: no_valid_tokens"));
  const std::string undefined = text_of(normcheck::check_text(empty_rank_text, "e.json"));
  CHECK(contains(undefined, "undefined here"));
  CHECK(contains(undefined, "rank 0: n = 0, S = 0"));
}

TEST_CASE("the summary line counts files and verdicts") {
  const normcheck::run_summary summary = normcheck::summarize(sample_reports());
  CHECK(summary.passed == 2);
  CHECK(summary.failed == 1);
  CHECK(summary.errors == 1);
  std::ostringstream out;
  normcheck::print_summary(out, summary);
  CHECK(out.str() == "4 files: 2 passed, 1 failed, 1 rejected\n");
  std::ostringstream one;
  normcheck::print_summary(one, normcheck::run_summary{1, 0, 0});
  CHECK(one.str() == "1 file: 1 passed, 0 failed, 0 rejected\n");
}

TEST_CASE("a one-token slice of a longer sequence weighs its sequence's factor in a diagnosis's value") {
  // cp 2 under sequence_mean: x is a whole sequence of one token, y a sequence of two tokens split over the
  // ranks, z a sequence of two tokens on rank 1. Each rank divided by its own sequences (local_mean, bᵣ = 2):
  // x weighs 1/4, y's and z's tokens 1/8, so the code's gradient is −(3·2 + 3 + 5 + 2)/8 = −2. Counting y's
  // slice with x's factor (its tokens are x's) would give −19/8.
  constexpr std::string_view text = R"({"format": "normcheck/1", "objective": "sequence_mean",
    "mesh": {"dims": [{"name": "cp", "size": 2, "role": "sequence"}]},
    "ranks": [{"targets": {"sequences": [{"sequence": "x", "targets": [3]}, {"sequence": "y", "targets": [3]}]}},
              {"targets": {"sequences": [{"sequence": "y", "targets": [5]}, {"sequence": "z", "targets": [1, 1]}]}}],
    "observed": {"per_rank": [["-3/4", "-3/8", "-5/8", "-1/4"], ["-3/4", "-3/8", "-5/8", "-1/4"]],
                 "dtype": "exact"}})";
  std::ostringstream out;
  normcheck::print_text(out, normcheck::check_text(text, "slices.json"));
  CAPTURE(out.str());
  CHECK(out.str().find("diagnosis: local_mean = -2 ") != std::string::npos);
}

// Checking documents (check.hpp): the verdict, the failures in words, expected rejections, cut-off input.

#include "normcheck/check/check.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <unistd.h>

namespace {

using normcheck::file_status;
using normcheck::strategy;

std::string status(const normcheck::file_report& report) { return std::string(normcheck::status_name(report.status)); }

std::string joined_failures(const normcheck::file_report& report) {
  std::string out;
  for (const std::string& failure : report.failures) out += failure + "\n";
  return out;
}

constexpr std::string_view unequal_holds = R"({
  "format": "normcheck/1",
  "ranks": [{"targets": [0]}, {"targets": [2, 2, 2]}],
  "expect": {"global_mean": "-3/2", "local_mean": -1, "scaled_sum": "-3/2"}
})";

constexpr std::string_view unequal_wrong = R"({
  "format": "normcheck/1",
  "ranks": [{"targets": [0]}, {"targets": [2, 2, 2]}],
  "expect": {"local_mean": "-3/2", "scaled_sum": "-3/2"}
})";

// A folder of scratch files under the temporary directory, removed at the end of the test.
// CTest runs each test case in a process of its own, two at a time: the folder is this process's alone.
struct scratch_folder {
  std::filesystem::path path =
      std::filesystem::temp_directory_path() / ("normcheck_check_test_" + std::to_string(::getpid()));
  scratch_folder() {
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~scratch_folder() {
    std::error_code ignored;
    std::filesystem::remove_all(path, ignored);
  }
  std::filesystem::path write(const std::string& name, std::string_view content) const {
    const std::filesystem::path file = path / name;
    std::filesystem::create_directories(file.parent_path());
    std::ofstream(file, std::ios::binary) << content;
    return file;
  }
};

}  // namespace

TEST_CASE("a document whose expectations hold passes") {
  const normcheck::file_report report = normcheck::check_text(unequal_holds, "holds.json");
  CHECK(status(report) == "pass");
  CHECK(report.file == "holds.json");
  CHECK(report.failures.empty());
  CHECK_FALSE(report.rejection.has_value());
  REQUIRE(report.document.has_value());
  REQUIRE(report.expectations.size() == 3);
  for (const normcheck::expectation_result& claim : report.expectations) CHECK(claim.held);
  CHECK(normcheck::equals_objective(report.gradients, strategy::scaled_sum));
  CHECK_FALSE(normcheck::equals_objective(report.gradients, strategy::local_mean));
}

TEST_CASE("a wrong expectation fails and says what it is") {
  const normcheck::file_report report = normcheck::check_text(unequal_wrong, "wrong.json");
  CHECK(status(report) == "fail");
  REQUIRE(report.failures.size() == 1);
  CHECK(report.failures[0] == "expect local_mean = -3/2, but it is -1");
  REQUIRE(report.expectations.size() == 2);
  CHECK_FALSE(report.expectations[0].held);
  CHECK(report.expectations[1].held);
}

TEST_CASE("expecting undefined where a gradient is defined fails, and the reverse") {
  const normcheck::file_report null_claimed = normcheck::check_text(R"({
  "format": "normcheck/1",
  "ranks": [{"targets": [1]}, {"targets": [3]}],
  "expect": {"local_mean": null}
})", "a.json");
  CHECK(status(null_claimed) == "fail");
  CHECK(joined_failures(null_claimed).find("expect local_mean = undefined, but it is -2") != std::string::npos);
  const normcheck::file_report value_claimed = normcheck::check_text(R"({
  "format": "normcheck/1",
  "ranks": [{"targets": []}, {"targets": [3]}],
  "expect": {"local_mean": -3, "microbatch_mean": null}
})", "b.json");
  CHECK(status(value_claimed) == "fail");
  CHECK(joined_failures(value_claimed) == "expect local_mean = -3, but it is undefined\n");
}

TEST_CASE("a rejected document without expect_error is an error with its location") {
  const normcheck::file_report report = normcheck::check_text(R"({
  "format": "normcheck/1",
  "ranks": [{"targets": [1, "NaN"]}]
})", "bad.json");
  CHECK(status(report) == "error");
  REQUIRE(report.rejection.has_value());
  CHECK(report.rejection->code() == normcheck::error_code::bad_number);
  REQUIRE(report.rejection->where().has_value());
  CHECK(report.rejection->where()->file == "bad.json");
  CHECK(report.rejection->where()->line == 3);
  CHECK(report.rejection->where()->column == 29);
  CHECK_FALSE(report.document.has_value());
  CHECK(normcheck::describe(*report.rejection).rfind("bad.json:3:29: bad_number: ", 0) == 0);
}

TEST_CASE("a document rejected with the code it expects passes") {
  const normcheck::file_report report = normcheck::check_text(R"({
  "format": "normcheck/1",
  "expect_error": "no_valid_tokens",
  "ranks": [{"targets": [null]}, {"targets": []}]
})", "empty.json");
  CHECK(status(report) == "pass");
  REQUIRE(report.rejection.has_value());
  CHECK(report.rejection->code() == normcheck::error_code::no_valid_tokens);
  CHECK(report.expected_error == normcheck::error_code::no_valid_tokens);
  CHECK(report.failures.empty());
}

TEST_CASE("a document rejected with another code than it expects is an error") {
  const normcheck::file_report report = normcheck::check_text(R"({
  "format": "normcheck/1",
  "expect_error": "no_valid_tokens",
  "ranks": [{"targets": [01]}]
})", "other.json");
  CHECK(status(report) == "error");
  CHECK(joined_failures(report) == "expected rejection with no_valid_tokens, but it was rejected with bad_number\n");
}

TEST_CASE("an expected rejection that does not occur fails") {
  const normcheck::file_report report = normcheck::check_text(R"({
  "format": "normcheck/1",
  "expect_error": "no_valid_tokens",
  "ranks": [{"targets": [1]}, {"targets": []}]
})", "missing.json");
  CHECK(status(report) == "fail");
  CHECK(joined_failures(report) ==
        "expected rejection with no_valid_tokens, but the document was read without error\n");
}

TEST_CASE("a syntax error after expect_error meets the expectation") {
  const normcheck::file_report report = normcheck::check_text(R"({
  "format": "normcheck/1",
  "expect_error": "parse_error",
  "ranks": [{"targets": [1 2]}]
})", "syntax.json");
  CHECK(status(report) == "pass");
}

TEST_CASE("a syntax error before expect_error is an error") {
  const normcheck::file_report report = normcheck::check_text(R"({
  "format": "normcheck/1",
  "ranks": [{"targets": [1 2]}],
  "expect_error": "parse_error"
})", "late.json");
  CHECK(status(report) == "error");
  CHECK_FALSE(report.expected_error.has_value());
}

TEST_CASE("a cut-off document never meets its expect_error") {
  SUBCASE("cut inside the structure") {
    const normcheck::file_report report = normcheck::check_text(
        R"({"format": "normcheck/1", "expect_error": "parse_error", "ranks": [{"targets": [1, 2)", "cut.json");
    CHECK(status(report) == "error");
    CHECK(joined_failures(report).find("cut off") != std::string::npos);
  }
  SUBCASE("cut inside a string") {
    const normcheck::file_report report = normcheck::check_text(
        R"({"format": "normcheck/1", "expect_error": "parse_error", "description": "abc)", "cut.json");
    CHECK(status(report) == "error");
  }
  SUBCASE("cut inside a number") {
    const normcheck::file_report report = normcheck::check_text(
        R"({"format": "normcheck/1", "expect_error": "bad_number", "ranks": [{"targets": [1.)", "cut.json");
    CHECK(status(report) == "error");
  }
  SUBCASE("cut after the problem it expects") {
    const normcheck::file_report report = normcheck::check_text(
        R"({"format": "normcheck/1", "expect_error": "schema_error", "bogus": 1, "ranks": [{"targets": [1)",
        "cut.json");
    CHECK(status(report) == "error");
  }
}

TEST_CASE("gradients of a read document are all computed") {
  const normcheck::file_report report = normcheck::check_text(R"({
  "format": "normcheck/1",
  "ranks": [{"targets": []}, {"targets": [2, 2]}]
})", "empty_rank.json");
  REQUIRE(status(report) == "pass");
  const auto text = [&](strategy s) {
    const std::optional<normcheck::rational>& value =
        report.gradients[static_cast<std::size_t>(std::find(normcheck::all_strategies.begin(),
                                                            normcheck::all_strategies.end(), s) -
                                                  normcheck::all_strategies.begin())];
    return value ? normcheck::to_string(*value) : std::string("undefined");
  };
  CHECK(text(strategy::global_mean) == "-2");
  CHECK(text(strategy::scaled_sum) == "-2");
  CHECK(text(strategy::local_mean) == "undefined");
}

TEST_CASE("equals_objective compares with global_mean and is false where undefined") {
  normcheck::gradient_set gradients;
  gradients[0] = normcheck::rational(1);
  gradients[1] = std::nullopt;
  gradients[2] = normcheck::rational(1);
  gradients[3] = normcheck::rational(2);
  CHECK(normcheck::equals_objective(gradients, strategy::global_mean));
  CHECK_FALSE(normcheck::equals_objective(gradients, strategy::local_mean));
  CHECK(normcheck::equals_objective(gradients, strategy::local_sum));
  CHECK_FALSE(normcheck::equals_objective(gradients, strategy::scaled_sum));
  gradients[0] = std::nullopt;
  CHECK_FALSE(normcheck::equals_objective(gradients, strategy::local_sum));
}

TEST_CASE("status names are stable") {
  CHECK(normcheck::status_name(file_status::pass) == "pass");
  CHECK(normcheck::status_name(file_status::fail) == "fail");
  CHECK(normcheck::status_name(file_status::error) == "error");
}

TEST_CASE("declared_format finds the format among the top-level members") {
  CHECK(normcheck::declared_format(R"({"format": "normcheck/1", "ranks": [1 2]})") == "normcheck/1");
  CHECK(normcheck::declared_format(R"({"ranks": [], "format": "other/2"})") == "other/2");
  CHECK_FALSE(normcheck::declared_format(R"({"format": 1})").has_value());
  CHECK_FALSE(normcheck::declared_format(R"([{"format": "normcheck/1"}])").has_value());
  CHECK_FALSE(normcheck::declared_format("").has_value());
}

TEST_CASE("check_path reports an unreadable path instead of throwing") {
  const std::filesystem::path missing = std::filesystem::temp_directory_path() / "normcheck_check_test_missing.json";
  normcheck::file_report report;
  CHECK_NOTHROW(report = normcheck::check_path(missing));
  CHECK(status(report) == "error");
  REQUIRE(report.rejection.has_value());
  CHECK(report.rejection->code() == normcheck::error_code::io_error);
}

TEST_CASE("check_path reads and checks a file") {
  const scratch_folder folder;
  const std::filesystem::path file = folder.write("holds.json", unequal_holds);
  const normcheck::file_report report = normcheck::check_path(file);
  CHECK(status(report) == "pass");
  CHECK(report.file == file.string());
}

TEST_CASE("collect_inputs walks folders for json files in sorted order") {
  const scratch_folder folder;
  folder.write("b/2.json", "{}");
  folder.write("b/1.json", "{}");
  folder.write("a.json", "{}");
  folder.write("c/deeper/3.json", "{}");
  folder.write("notes.txt", "not a case");
  folder.write("c/readme.md", "not a case");
  const std::filesystem::path missing = folder.path / "missing.json";
  const std::vector<std::filesystem::path> inputs = normcheck::collect_inputs({folder.path, missing});
  const std::vector<std::filesystem::path> expected{folder.path / "a.json", folder.path / "b/1.json",
                                                    folder.path / "b/2.json", folder.path / "c/deeper/3.json",
                                                    missing};
  CHECK(inputs == expected);
}

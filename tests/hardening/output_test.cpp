// Report files are written whole or not at all: a temporary file beside the target, renamed over it.

#include "normcheck/core/errors.hpp"
#include "normcheck/io/files.hpp"

#include "process.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <string>

namespace {

std::size_t entries(const std::string& directory) {
  std::size_t count = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(directory)) ++count;
  return count;
}

}  // namespace

TEST_CASE("write_file_atomically writes and replaces a file, leaving nothing else") {
  hardening::temporary_directory dir;
  normcheck::write_file_atomically(dir / "report.json", "first");
  CHECK(hardening::slurp(dir / "report.json") == "first");
  normcheck::write_file_atomically(dir / "report.json", std::string(1 << 20, 'x'));
  CHECK(hardening::slurp(dir / "report.json") == std::string(1 << 20, 'x'));
  CHECK(entries(dir.path) == 1);
}

TEST_CASE("a report that cannot be written leaves the old file and no temporary") {
  hardening::temporary_directory dir;
  // The target is a directory: the rename fails after the temporary was written.
  std::filesystem::create_directory(dir / "report.json");
  hardening::write_text(dir / "report.json/old", "old");
  CHECK_THROWS_AS(normcheck::write_file_atomically(dir / "report.json", "new"), normcheck::error);
  CHECK(hardening::slurp(dir / "report.json/old") == "old");
  CHECK(entries(dir.path) == 1);
  // The directory does not exist: nothing can be created.
  try {
    normcheck::write_file_atomically(dir / "missing/report.json", "new");
    FAIL("no error for a missing directory");
  } catch (const normcheck::error& e) {
    CHECK(e.code() == normcheck::error_code::io_error);
    CHECK(describe(e).find("missing/report.json") != std::string::npos);
  }
}

TEST_CASE("check --output writes the JSON report whole") {
  hardening::temporary_directory dir;
  const std::string report = dir / "report.json";
  hardening::write_text(report, "the previous report");
  const hardening::process_result result = hardening::run_process(
      {NORMCHECK_EXECUTABLE, "check", "--output", report, std::string(NORMCHECK_CASES_DIR) + "/reference"});
  CHECK(result.status == 0);
  const std::string written = hardening::slurp(report);
  CHECK(written.rfind("{\"format\": \"normcheck-report/1\", \"reports\": [", 0) == 0);
  CHECK(written.find("\"failed\": 0, \"errors\": 0}") != std::string::npos);
  CHECK(entries(dir.path) == 1);
  // The text report still goes to standard output.
  CHECK(result.out.find("files:") != std::string::npos);
}

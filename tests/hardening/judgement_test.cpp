// A run never passes what it did not judge: under --require-gate a document that names its own rejection
// gets no pass (a partition with observed values, a scenario), and the reports of earlier runs found in a
// folder are set aside, said so, instead of rejecting the folder.

#include "process.hpp"

#include <doctest/doctest.h>

#include <string>
#include <vector>

namespace {

using hardening::check;
using hardening::good_case;
using hardening::process_result;

const std::string gate_case = std::string(NORMCHECK_CASES_DIR) + "/gate/correct_scaled_sum_float32.json";

// A dump whose update holds no valid token, which says it expects exactly that rejection, with NaN observed:
// it is rejected before the gate could judge anything.
const std::string rejected_dump =
    R"({"format": "normcheck/1", "ranks": [{"targets": [null]}, {"targets": [null, null]}], "world_size": 2,)"
    R"( "expect_error": "no_valid_tokens", "observed": {"per_rank": ["nan", "nan"], "dtype": "float32"}})";

// A scenario that expects its own rejection (a step without a valid token).
const std::string rejected_scenario =
    R"({"format": "normcheck-scenario/1", "theta": 0, "optimizer": {"lr": 1},)"
    R"( "steps": [{"ranks": [{"targets": [null]}, {"targets": [null]}]}], "expect_error": "no_valid_tokens"})";

}  // namespace

TEST_CASE("under --require-gate a dump that names its own rejection fails, whatever it expects") {
  hardening::temporary_directory dir;
  hardening::write_text(dir / "rejected.json", rejected_dump);
  SUBCASE("without --require-gate the expected rejection holds") {
    const process_result result = check({dir / "rejected.json"});
    CAPTURE(result.out);
    CHECK(result.status == 0);
  }
  SUBCASE("with it, the gate judged nothing: the file fails") {
    const process_result result = check({"--require-gate", dir / "rejected.json"});
    CAPTURE(result.out);
    CHECK(result.status == 1);
    CHECK(result.out.find("the gate judged nothing") != std::string::npos);
    CHECK(result.out.find("1 file: 0 passed, 1 failed") != std::string::npos);
  }
  SUBCASE("a judged gate still passes beside it") {
    const process_result result = check({"--require-gate", "--json", gate_case, dir / "rejected.json"});
    CAPTURE(result.out);
    CHECK(result.status == 1);
    CHECK(result.out.find("\"passed\": 1, \"failed\": 1, \"errors\": 0") != std::string::npos);
  }
}

TEST_CASE("under --require-gate a scenario that names its own rejection fails") {
  hardening::temporary_directory dir;
  hardening::write_text(dir / "scenario.json", rejected_scenario);
  CHECK(check({dir / "scenario.json"}).status == 0);
  const process_result result = check({"--require-gate", dir / "scenario.json"});
  CAPTURE(result.out);
  CHECK(result.status == 1);
  CHECK(result.out.find("the gate judged nothing") != std::string::npos);
}

TEST_CASE("a folder's reports of earlier runs are skipped, said so, and the folder still checks") {
  hardening::temporary_directory dir;
  hardening::write_text(dir / "a.json", hardening::slurp(good_case));
  // The folder as CI leaves it: a check's --json report, and its --output, written beside the dumps.
  const process_result first = check({"--json", "--output", dir / "report-output.json", dir / "a.json"});
  REQUIRE(first.status == 0);
  hardening::write_text(dir / "report.json", first.out);
  const process_result again = check({dir.path});
  CAPTURE(again.out);
  CAPTURE(again.err);
  CHECK(again.status == 0);
  CHECK(again.out.find("1 file: 1 passed") != std::string::npos);
  CHECK(again.err.find("skipped " + (dir / "report.json")) != std::string::npos);
  CHECK(again.err.find("skipped " + (dir / "report-output.json")) != std::string::npos);
  SUBCASE("a report named on the command line is still a file to check, and rejected") {
    const process_result named = check({dir / "report.json"});
    CHECK(named.status == 2);
  }
  SUBCASE("a folder of reports alone has nothing to check") {
    hardening::temporary_directory reports;
    hardening::write_text(reports / "report.json", first.out);
    const process_result nothing = check({reports.path});
    CHECK(nothing.status == 2);
    CHECK(nothing.err.find("usage_error: nothing to check") != std::string::npos);
    CHECK(nothing.err.find("1 report(s) normcheck wrote") != std::string::npos);
  }
}
